"""The one learner protocol and the algorithm registry.

Every algorithm that `robolearn train` runs is one file under `robolearn/algos/` that defines its config
dataclass and its learner class, and registers them with `register(AlgoSpec(...))`; one YAML preset in
`configs/algo/` names it. Runners, config composition, warm starts and `load_policy` look an algorithm up
here (`spec(name)`) and read what they need from its `AlgoSpec`: none of them switches on an algorithm's name.

What a learner implements (`Learner`):

- `for_env(env, cfg, device)`: the learner sized for a VecEnv's observation groups and actions;
- `act(obs, deterministic)`: actions in [-1, 1] for a TensorDict of observation groups;
- `update(...)`: one update, returning its statistics: on a rollout for the on-policy runner
  (`update(storage, last_obs, generator)`), on a minibatch for the off-policy and offline runners
  (`update(batch, generator)`: the critics, and the actor and temperature when their turn comes), counted in
  `updates`;
- its state for checkpoints: `model_state()` / `load_model_state(state)` (every learned tensor by name),
  `optimizers` (by name), `config` (what `load_policy` rebuilds the actor from: the `policy` entry of a
  checkpoint's config.json).

    from robolearn.algos.base import spec
    learner = spec("iql").learner_class().for_env(env, cfg, device)
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import torch

from robolearn.errors import ConfigError

#: The loop an algorithm runs in: rollouts and PPO-style updates, a replay buffer fed by envs, or a fixed dataset.
RunnerKind = Literal["on_policy", "off_policy", "offline"]

#: The actor networks `load_policy` builds (`robolearn.checkpoints.policy`): PPO's Gaussian `ActorCritic`, the
#: tanh-Gaussian actor (SAC, IQL, CQL, ...), the deterministic actor (TD3, TD3+BC, ReBRAC).
ActorKind = Literal["gaussian", "tanh_gaussian", "deterministic"]


class Learner(Protocol):
    """What every registered algorithm's learner provides (see the module docstring)."""

    cfg: Any
    device: torch.device
    config: dict[str, Any]

    @classmethod
    def for_env(cls, env: Any, cfg: Any, device: str | torch.device = "cpu") -> Learner: ...

    def act(self, obs: Any, deterministic: bool = False) -> torch.Tensor: ...

    def model_state(self) -> dict[str, torch.Tensor]: ...

    def load_model_state(self, state: Mapping[str, torch.Tensor]) -> None: ...

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]: ...


@dataclasses.dataclass(frozen=True)
class AlgoSpec:
    """An algorithm as the rest of robolearn sees it.

    Attributes:
        name: `algo.name`, the key of the registry and of `configs/algo/<name>.yaml`.
        config: the algorithm's config dataclass (its defaults are the only place they live).
        learner: "module:Class" of the learner (imported on use).
        runner: the loop it trains in (`RunnerKind`).
        actor: the actor network its checkpoints hold (`ActorKind`).
        online: an offline algorithm that can go on learning online (it has a critic); ignored by the others.
        needs_dataset: learns from a dataset only (BC).
    """

    name: str
    config: type
    learner: str
    runner: RunnerKind
    actor: ActorKind
    online: bool = True
    needs_dataset: bool = False

    def learner_class(self) -> Any:
        module, _, attr = self.learner.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def deterministic(self) -> bool:
        """Whether its actor is deterministic (a warm start must match the checkpoint's actor)."""
        return self.actor == "deterministic"


_REGISTRY: dict[str, AlgoSpec] = {}
#: The folders whose modules are imported to fill the registry.
_PACKAGES = ("robolearn.algos.online", "robolearn.algos.offline")
_DISCOVERED = False


def register(algo: AlgoSpec) -> AlgoSpec:
    """Add an algorithm to the registry (each algorithm's module calls this once, at import)."""
    known = _REGISTRY.get(algo.name)
    if known is not None and known != algo:
        raise ConfigError(f"algorithm {algo.name!r} is registered twice ({known.learner} and {algo.learner})")
    _REGISTRY[algo.name] = algo
    return algo


def _discover() -> None:
    """Import every algorithm module once, so that each registers itself (later lookups only read the registry)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    for package in _PACKAGES:
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__, package + "."):
            importlib.import_module(info.name)


def registry() -> dict[str, AlgoSpec]:
    """Every registered algorithm by name (in registration order)."""
    _discover()
    return dict(_REGISTRY)


def spec(name: str | None) -> AlgoSpec:
    """The registered algorithm `name`; a `ConfigError` that lists the others when there is none."""
    algos = registry()
    if name not in algos:
        raise ConfigError(f"algo name {name!r} is not available; use one of {sorted(algos)}")
    return algos[name]


def for_actor(actor: str) -> AlgoSpec | None:
    """The first registered algorithm whose checkpoints hold an `actor` network (None if none)."""
    return next((a for a in registry().values() if a.actor == actor), None)
