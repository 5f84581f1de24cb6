"""Warm starts: a learner initialised from another run's checkpoint (actor, critics, targets, temperature by
name), with the network sizes taken over from it (`robolearn train init=`, the online phase of `robolearn finetune`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robolearn.algos.base import registry, spec
from robolearn.checkpoints import checkpoint
from robolearn.errors import CheckpointError

#: The network settings a warm start takes from the checkpoint (the learner's must match to load its weights).
ARCHITECTURE = ("actor_hidden", "critic_hidden", "num_critics", "activation", "actor_layer_norm", "critic_layer_norm",
                "normalize_states", "hl_gauss", "hl_bins")

#: The reward shaping and discount a warm start takes from the checkpoint: its critics' values are in those units
#: (a checkpoint trained at reward_scale 20 fine-tuned at 1 would start from values 20x too large).
SHAPING = ("reward_scale", "reward_bias", "gamma")


def seed_path(path: str, seed: int) -> str:
    """`path` with each `{seed}` in it replaced by `seed`: one seed's folder of a seed-batched run (`init=` of
    `robolearn train seeds=[...]`, a seed's run folder `seed_dir`)."""
    return path.replace("{seed}", str(int(seed)))


def checkpoint_dir(path: str | Path) -> Path:
    """A checkpoint folder from a run directory (its checkpoints/final, else latest) or a checkpoint folder."""
    path = Path(path)
    if (path / checkpoint.CONFIG).is_file():
        return path
    for name in ("final", "latest"):
        if (path / "checkpoints" / name / checkpoint.CONFIG).is_file():
            return path / "checkpoints" / name
    raise CheckpointError(f"{path} is neither a checkpoint folder nor a run directory with checkpoints/final or "
                          "checkpoints/latest")


def source_settings(policy: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the algorithm's name, its settings) from a checkpoint's `policy` config: an offline algorithm's (`algo` names
    its key), or SAC's / TD3's (their settings sit under a registered algorithm's name)."""
    if policy.get("algo") and isinstance(policy.get(policy["algo"]), dict):
        return policy["algo"], policy[policy["algo"]]
    for name in registry():
        if isinstance(policy.get(name), dict):
            return name, policy[name]
    raise CheckpointError("the checkpoint holds no actor-critic learner (PPO and scripted policies cannot be "
                          "fine-tuned off-policy)")


def adopt_architecture(algo: dict[str, Any], path: str | Path) -> dict[str, tuple[Any, Any]]:
    """Set the network fields of a composed `algo` config to the checkpoint's (they must match to load its weights),
    and its reward shaping and discount (`SHAPING`: the critics' values are in those units); returns
    {field: (was, now)} for those that changed. Raises CheckpointError for an actor the learner lacks."""
    config, _ = checkpoint.load(checkpoint_dir(path))
    name, settings = source_settings(config.get("policy") or {})
    deterministic = (config["policy"].get("actor") or spec(name).actor) == "deterministic"
    # IQL and BC name their actor in their config; the others have the one their registration declares
    wants = (algo.get("actor") or spec(algo.get("name")).actor) == "deterministic"
    if deterministic != wants:
        others = sorted(a.name for a in registry().values() if a.deterministic == deterministic and a.online)
        raise CheckpointError(f"the checkpoint's actor ({name}) is {'deterministic' if deterministic else 'stochastic'}"
                              f"; algo={algo.get('name')} needs a {'stochastic' if deterministic else 'deterministic'}"
                              f" one: fine-tune it with one of algo={'|'.join(others)}")
    changed = {}
    for key in (*ARCHITECTURE, *SHAPING):
        if key in settings and key in algo:
            now = list(settings[key]) if isinstance(settings[key], (list, tuple)) else settings[key]
            was = list(algo[key]) if isinstance(algo[key], (list, tuple)) else algo[key]
            if was != now:
                if key in SHAPING and was != _default(algo.get("name"), key):
                    raise CheckpointError(f"algo.{key}={was} differs from the checkpoint's {now}: its critics' values "
                                          f"are in the checkpoint's units; drop the override (or set {now})")
                changed[key] = (was, now)
                algo[key] = now
    if "num_min_critics" in algo and not algo.get("subset_replace", False):
        algo["num_min_critics"] = min(algo["num_min_critics"], algo.get("num_critics", algo["num_min_critics"]))
    return changed


def warm_start(algo: Any, path: str | Path) -> list[str]:
    """Load a checkpoint's learned tensors into a learner by name: every tensor the learner has and the checkpoint
    holds with the same shape (a missing `critic_target.*` / `actor_target.*` from the online network), the rest keep
    their initialisation; the temperature (`log_alpha`) too unless the learner's `warm_start_temperature` is false.
    Returns the names of the networks (and scalars) loaded; the actor and critics must be."""
    _, source = checkpoint.load(checkpoint_dir(path))
    target = algo.model_state()
    if not getattr(algo.cfg, "warm_start_temperature", True):  # the method starts online from its own temperature
        source = {k: v for k, v in source.items() if k != "log_alpha"}
    state, loaded = {}, set()
    for key, value in target.items():
        name = key
        if key not in source:
            for copy, of in (("critic_target.", "critic."), ("actor_target.", "actor.")):
                if key.startswith(copy) and of + key[len(copy):] in source:
                    name = of + key[len(copy):]
        if name in source:
            if tuple(source[name].shape) != tuple(value.shape):
                raise CheckpointError(f"{path}: {name} has shape {tuple(source[name].shape)}, the learner's "
                                      f"{key} {tuple(value.shape)}: the networks differ (see `adopt_architecture`)")
            state[key] = source[name].to(value.dtype)
            loaded.add(key.split(".")[0])
        else:
            state[key] = value
    missing = [n for n in ("actor", "critic") if n not in loaded and any(k.startswith(n + ".") for k in target)]
    if missing:
        raise CheckpointError(f"{path} holds no {' and '.join(missing)} weights for this learner")
    algo.load_model_state(state)
    return sorted(loaded)


def _default(name: str | None, key: str) -> object:
    """The default of `key` in algorithm `name`'s schema (a value that differs was set by a preset or the user)."""
    import dataclasses

    from robolearn.algos.base import spec

    field = next((f for f in dataclasses.fields(spec(name).config) if f.name == key), None)
    return None if field is None else field.default
