"""`robolearn finetune`: offline-to-online (O2O) fine-tuning, one method per `algo=`, as `configs/finetune.yaml`
defines them (WSRL, RO2O, Cal-QL, RLPD with prior data, SAC from scratch).

    robolearn finetune algo=wsrl dataset=point-maze-umaze-diverse offline_steps=50000 online_steps=100000
    robolearn finetune algo=ro2o checkpoint=runs/<offline ro2o run> online_steps=250000
    robolearn train algo=wsrl init=runs/<offline run> env=cheetah-run       # the online phase alone

A method is two `robolearn train` runs in one folder: `<run_dir>/offline` (the offline algorithm on the dataset;
skipped with `checkpoint=`, and for the methods without pre-training) and `<run_dir>/online` (the online learner
initialised from the offline checkpoint with `init=`, `train`'s warm start: actor, critics, targets and temperature
by name, the networks' sizes taken from the checkpoint). Data the method keeps (`retain_data`: Cal-QL's and RLPD's
50/50 batches) is the dataset as `algo.offline_data`; WSRL and RO2O start online with an empty buffer that the
pre-trained policy fills first (`algo.learning_starts` with `algo.random_warmup=false`: no update, no random action).

The online phase evaluates the deterministic policy every `eval_every` env steps and once before its first step, so
`<run_dir>/o2o.json` holds the O2O metrics (`o2o_metrics`): the starting score, the initial dip, steps to 90% of
the final score, the cumulative regret and the final score. Re-running the same command resumes: a finished phase is
not run again, an interrupted one continues from its last checkpoint (exactly, as `train resume=`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robolearn import checkpoint
from robolearn.errors import CheckpointError, ConfigError

#: The network settings a warm start takes from the checkpoint (the learner's must match to load its weights).
ARCHITECTURE = ("actor_hidden", "critic_hidden", "num_critics", "activation", "actor_layer_norm", "critic_layer_norm",
                "normalize_states", "hl_gauss", "hl_bins")

#: The share of the online steps in which the initial dip is measured.
DIP_WINDOW = 0.1


@dataclasses.dataclass
class MethodConfig:
    """One O2O method: its offline phase (train overrides, or null for none), its online phase, what it keeps."""

    description: str = ""
    offline: list[str] | None = None  # `robolearn train` overrides of the pre-training (algo=...); null: none
    offline_steps: int = 100_000      # its gradient steps, unless finetune's offline_steps says otherwise
    online: list[str] = dataclasses.field(default_factory=list)  # the online phase's train overrides (algo=...)
    retain_data: bool = False         # the dataset is mixed into online batches (algo.offline_data)


@dataclasses.dataclass
class FinetuneConfig:
    """`robolearn finetune`: pre-train offline (or start from `checkpoint`), then fine-tune online."""

    algo: str = "wsrl"                # the method: a key of `methods`
    checkpoint: str | None = None     # an offline run (or checkpoint folder) to start from; null: pre-train here
    dataset: str | None = None        # the prior data (pre-training, retained data); null: the checkpoint run's
    env: str | None = None            # the task; null: the dataset's (or the checkpoint run's)
    offline_steps: int | None = None  # gradient steps offline; null: the method's
    online_steps: int = 100_000       # env steps online
    eval_every: int = 5000            # online env steps between evaluations
    eval_episodes: int = 10
    seed: int = 0
    device: str = "cpu"
    run_dir: str | None = None        # null: runs/<task>-<algo>-finetune-<time>
    progress: bool = True
    video: bool = False
    offline: list[str] = dataclasses.field(default_factory=list)  # more train overrides for the offline phase
    online: list[str] = dataclasses.field(default_factory=list)   # ... and for the online phase
    methods: dict[str, MethodConfig] = dataclasses.field(default_factory=dict)  # configs/finetune.yaml


# --- warm start (train init=) ------------------------------------------------------------------------------------

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
    its key), SAC's or TD3's."""
    if policy.get("algo") and isinstance(policy.get(policy["algo"]), dict):
        return policy["algo"], policy[policy["algo"]]
    for name in ("sac", "td3"):
        if isinstance(policy.get(name), dict):
            return name, policy[name]
    raise CheckpointError("the checkpoint holds no actor-critic learner (PPO and scripted policies cannot be "
                          "fine-tuned off-policy)")


def adopt_architecture(algo: dict[str, Any], path: str | Path) -> dict[str, tuple[Any, Any]]:
    """Set the network fields of a composed `algo` config to the checkpoint's (they must match to load its weights);
    returns {field: (was, now)} for those that changed. Raises CheckpointError for an actor the learner lacks."""
    config, _ = checkpoint.load(checkpoint_dir(path))
    name, settings = source_settings(config.get("policy") or {})
    deterministic = name == "td3" or (config["policy"].get("actor") == "deterministic")
    kind = algo.get("actor")  # IQL and BC name their actor; TD3, TD3+BC and ReBRAC have a deterministic one
    wants = kind == "deterministic" if kind else algo.get("name") in ("td3", "td3_bc", "rebrac")
    if deterministic != wants:
        raise CheckpointError(f"the checkpoint's actor ({name}) is {'deterministic' if deterministic else 'stochastic'}"
                              f"; algo={algo.get('name')} needs a {'stochastic' if deterministic else 'deterministic'}"
                              " one: fine-tune it with " + ("algo=td3" if deterministic else "a SAC-family algo"))
    changed = {}
    for key in ARCHITECTURE:
        if key in settings and key in algo:
            now = list(settings[key]) if isinstance(settings[key], (list, tuple)) else settings[key]
            was = list(algo[key]) if isinstance(algo[key], (list, tuple)) else algo[key]
            if was != now:
                changed[key] = (was, now)
                algo[key] = now
    if "num_min_critics" in algo and not algo.get("subset_replace", False):
        algo["num_min_critics"] = min(algo["num_min_critics"], algo.get("num_critics", algo["num_min_critics"]))
    return changed


def warm_start(algo: Any, path: str | Path) -> list[str]:
    """Load a checkpoint's learned tensors into a learner by name: every tensor the learner has and the checkpoint
    holds with the same shape (a missing `critic_target.*` / `actor_target.*` from the online network), the rest keep
    their initialisation. Returns the names of the networks (and scalars) loaded; the actor and critics must be."""
    _, source = checkpoint.load(checkpoint_dir(path))
    target = algo.model_state()
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


# --- O2O metrics -------------------------------------------------------------------------------------------------

def o2o_metrics(curve: Sequence[tuple[float, float]], online_steps: int, offline_score: float | None = None,
                learning_starts: int = 0) -> dict[str, Any]:
    """The offline-to-online metrics of an online run's evaluation curve [(env step, normalised score)], whose first
    point is the score before any online step (the pre-trained policy's, or a fresh one's):

    - `start_score`: that first score; `offline_score`: the offline run's own final evaluation, if given;
    - `initial_dip`: the worst score in the first 10% of the online steps that learn (those after the
      `learning_starts` steps of warm-up, which update nothing; at least one evaluation) minus the start score
      (<= 0: a drop);
    - `steps_to_90`: the first env step at which the score reaches 90% of the final score (None if final <= 0);
    - `cumulative_regret`: the mean over the online evaluations of 1 - score / 100 (the area between the curve
      and the reference's level, as a fraction; CORL's regret with the normalised score in place of success);
    - `final_score`: the last evaluation's score.
    """
    if not curve:
        raise ConfigError("no evaluation in the online run: set eval_every > 0")
    points = sorted((float(s), float(v)) for s, v in curve)
    start = points[0][1] if points[0][0] == 0 else None
    online = [(s, v) for s, v in points if s > 0]
    final = points[-1][1]
    # the evaluations in the first 10% of the learning steps, or the first one after the warm-up when none falls
    # inside (evaluations land on whole collection iterations: eval_every=1000 in 400-step iterations gives 1200)
    end = learning_starts + DIP_WINDOW * max(online_steps - learning_starts, 0)
    after = [s for s, _ in online if s > learning_starts]
    window = [v for s, v in online if s <= max(end, after[0] if after else 0.0)]
    dip = min(window) - start if window and start is not None else None
    reach = next((s for s, v in points if v >= 0.9 * final), None) if final > 0 else None
    regret = sum(1.0 - v / 100.0 for _, v in online) / len(online) if online else None
    return {"start_score": start, "offline_score": offline_score, "initial_dip": dip, "steps_to_90": reach,
            "cumulative_regret": regret, "final_score": final, "online_steps": online_steps,
            "learning_starts": learning_starts}


def refresh_o2o(o2o: dict[str, Any], curve: Sequence[tuple[float, float]], run_dir: str | Path | None = None
                ) -> dict[str, Any]:
    """A record's O2O metrics recomputed from its online curve by this version's `o2o_metrics` (the warm-up length
    from the record, else from the run's online config), so a report never mixes definitions."""
    starts = o2o.get("learning_starts")
    if starts is None:  # written before o2o.json recorded it
        starts = learning_starts(run_dir) if run_dir else 0
    o2o.update(o2o_metrics(curve, int(o2o["online_steps"]), o2o.get("offline_score"), int(starts)))
    return o2o


def learning_starts(run_dir: str | Path) -> int:
    """The env steps before the first update of a finetune run's online phase (its `algo.learning_starts`)."""
    config = Path(run_dir) / "online" / "config.yaml"
    return int(json.loads(config.read_text())["algo"].get("learning_starts", 0)) if config.is_file() else 0


def read_curve(run_dir: str | Path, key: str = "eval/normalized_score") -> list[tuple[float, float]]:
    """[(env step, score)] of a run's evaluations (its metrics.jsonl rows that carry `key`)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        return []
    curve: dict[float, float] = {}  # by step: a resumed run may have logged a step twice; the last one counts
    for line in metrics.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a half-written last line
            continue
        if isinstance(row.get(key), (int, float)):
            curve[float(row.get("gradient_steps") or row.get("env_steps") or 0)] = float(row[key])
    return sorted(curve.items())


#: The O2O metrics of the bench report: (o2o.json key, column title, format).
O2O_COLUMNS = (("start_score", "start", ".1f"), ("initial_dip", "initial dip", ".1f"),
               ("steps_to_90", "steps to 90% of final", ",.0f"), ("cumulative_regret", "regret", ".3f"),
               ("final_score", "final", ".1f"))


def o2o_table(cells: Sequence[dict[str, Any]], algos: Sequence[str], datasets: Sequence[str]) -> list[str]:
    """The bench report's O2O section: per algorithm and dataset the mean ± std over seeds of each metric."""
    import numpy as np

    lines = ["## Offline-to-online metrics (mean ± std over seeds; `o2o_metrics` in robolearn/finetune.py)", "",
             "start: the score before the first online step; initial dip: the worst score in the first 10% of the "
             "online steps after the warm-up (`learning_starts`) minus the start (negative: a drop); steps to 90% of "
             "the final score (over the seeds that reach it); regret: the mean of 1 - score/100 over the online "
             "evaluations; final: the last evaluation.",
             "", "| algo | dataset | " + " | ".join(title for _, title, _ in O2O_COLUMNS) + " |",
             "|---|---|" + "---|" * len(O2O_COLUMNS)]
    for algo in algos:
        for data in datasets:
            records = [c["o2o"] for c in cells if c["algo"] == algo and c["dataset"] == data and c.get("o2o")
                       and not c.get("error")]
            if not records:
                continue
            cols = []
            for key, _, spec in O2O_COLUMNS:
                values = [float(r[key]) for r in records if r.get(key) is not None]
                cols.append(f"{np.mean(values):{spec}} ± {np.std(values):{spec}}"
                            + (f" ({len(values)}/{len(records)})" if len(values) < len(records) else "")
                            if values else "-")
            lines.append(f"| {algo} | {data} | " + " | ".join(cols) + " |")
    return lines


# --- the command -------------------------------------------------------------------------------------------------

def _take(overrides: Sequence[str], keys: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split `key=value` overrides whose key names a config group (algo, env) or a folder (dataset) from the rest:
    Hydra would read them as group choices."""
    rest, taken = [], {}
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+")
        if "=" in o and key in keys:
            taken[key] = o.split("=", 1)[1]
        else:
            rest.append(o)
    return rest, taken


def load_config(overrides: Sequence[str]) -> FinetuneConfig:
    """The composed `configs/finetune.yaml` with its overrides, checked."""
    from omegaconf import OmegaConf

    from robolearn.config import compose

    rest, taken = _take(overrides, ("algo", "dataset", "env"))
    raw = compose("finetune", rest, FinetuneConfig)
    raw.update(taken)
    cfg: FinetuneConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(FinetuneConfig), raw))
    if cfg.algo not in cfg.methods:
        raise ConfigError(f"algo={cfg.algo!r} is not an O2O method; use one of {sorted(cfg.methods)} "
                          "(configs/finetune.yaml)")
    if cfg.online_steps < 1 or cfg.eval_every < 1 or cfg.eval_episodes < 1:
        raise ConfigError("online_steps, eval_every and eval_episodes must be >= 1")
    method = cfg.methods[cfg.algo]
    if cfg.eval_every > DIP_WINDOW * cfg.online_steps:
        print(f"note: eval_every={cfg.eval_every} > {DIP_WINDOW:.0%} of online_steps={cfg.online_steps}: the initial "
              "dip is measured at the first online evaluation alone (evaluate more often to see inside the window)")
    if cfg.checkpoint is None and cfg.dataset is None:
        raise ConfigError("give dataset=<path or name> (pre-trained here) or checkpoint=<offline run>")
    if cfg.checkpoint is not None and method.offline is None:
        raise ConfigError(f"algo={cfg.algo} has no offline phase to start from a checkpoint: give dataset= only")
    return cfg


def _checkpoint_run(path: str) -> dict[str, Any]:
    config, _ = checkpoint.load(checkpoint_dir(path))
    return config.get("run") or {}


def finetune(overrides: Sequence[str]) -> Path:
    """Run (or resume) one O2O method as `key=value` overrides of configs/finetune.yaml say; returns the run folder."""
    import time

    from robolearn.train import resolve_dataset, train

    cfg = load_config(overrides)
    method = cfg.methods[cfg.algo]
    dataset, task = cfg.dataset, cfg.env
    if cfg.checkpoint is not None:
        run = _checkpoint_run(cfg.checkpoint)
        dataset = dataset or run.get("dataset")
        task = task or (run.get("env") or {}).get("name")
    reference = None
    if dataset is not None:  # its task, and its reference returns (measured at its episode length)
        from robolearn.data.formats import load_dataset

        meta = load_dataset(resolve_dataset(dataset)).metadata
        task = task or meta.get("task")
        lo, hi = meta.get("ref_min_score"), meta.get("ref_max_score")
        reference = [float(lo), float(hi)] if lo is not None and hi is not None and lo != hi else None
    if task is None:
        raise ConfigError(f"dataset {dataset} names no task: pass env=<task>")
    from robolearn.runners.base import task_reference

    if reference is None and task_reference(task) is None:
        raise ConfigError(f"no reference returns to score {task} by (the dataset has no ref_min_score/ref_max_score "
                          "and the task none): the O2O metrics need normalised scores")
    out = Path(cfg.run_dir or f"runs/{task}-{cfg.algo}-finetune-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    common = [f"seed={cfg.seed}", f"device={cfg.device}", f"progress={str(cfg.progress).lower()}"]

    init = cfg.checkpoint
    offline_score = None
    if init is None and method.offline is not None:
        steps = cfg.offline_steps if cfg.offline_steps is not None else method.offline_steps
        _phase(train, out / "offline", [*method.offline, f"dataset={dataset}", f"env={task}", *common,
                                         f"algo.gradient_steps={steps}", f"algo.log_every={math.gcd(steps, 1000)}",
                                         "video=false", *cfg.offline])  # logs every 1000 steps when it divides them
        init = str(out / "offline")
    if init is not None:  # the offline run's own last evaluation (a checkpoint's run folder is two levels up)
        offline_curve = read_curve(checkpoint_dir(init).parent.parent)
        offline_score = offline_curve[-1][1] if offline_curve else None
    online = [*method.online, f"env={task}", *common, f"algo.env_steps={cfg.online_steps}",
              f"algo.eval_every={cfg.eval_every}", f"algo.eval_episodes={cfg.eval_episodes}",
              f"video={str(cfg.video).lower()}"]
    if reference is not None:
        online.append(f"algo.eval_reference=[{reference[0]!r},{reference[1]!r}]")
    if init is not None:
        online.append(f"init={init}")
    if method.retain_data:
        online.append(f"algo.offline_data={resolve_dataset(dataset)}")
    _phase(train, out / "online", [*online, *cfg.online])
    metrics = o2o_metrics(read_curve(out / "online"), cfg.online_steps, offline_score, learning_starts(out))
    metrics.update({"algo": cfg.algo, "task": task, "dataset": dataset, "seed": cfg.seed, "init": init})
    from robolearn.data.dataset import write_json

    write_json(out / "o2o.json", metrics)
    print(json.dumps(metrics, indent=2))
    print(f"run directory: {out}")
    return out


def _phase(train: Any, run_dir: Path, overrides: list[str]) -> None:
    """One `robolearn train` run in `run_dir`: skipped when finished (checkpoints/final), resumed when interrupted."""
    if (run_dir / "checkpoints" / "final" / checkpoint.CONFIG).is_file():
        print(f"{run_dir}: finished before, not run again")
        return
    if (run_dir / "checkpoints" / "latest" / checkpoint.CONFIG).is_file():
        print(f"{run_dir}: resuming")
        train([f"resume={run_dir}"])
        return
    if run_dir.exists():  # started but never checkpointed: start over
        import shutil

        shutil.rmtree(run_dir)
    train([*overrides, f"run_dir={run_dir}"])

