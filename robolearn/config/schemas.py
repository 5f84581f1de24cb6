"""The schemas of `robolearn train` (`TrainConfig`, `EnvConfig`) and the algorithm table `ALGORITHMS`:
algo.name -> (its schema in the `algo` config group, the algorithm's config class, the runner's config class).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from robolearn.algos.base import AlgoSpec, registry, spec
from robolearn.core.buffers import ReplayConfig
from robolearn.errors import ConfigError
from robolearn.runners.off_policy import OffPolicyRunConfig
from robolearn.runners.offline import OfflineRunConfig

__all__ = ["EnvConfig", "TrainConfig", "OffPolicyRunConfig", "ALGORITHMS", "algo_config", "online_config"]


@dataclasses.dataclass
class EnvConfig:
    """The simulated task (`configs/env/<task>.yaml` presets these per task)."""

    name: str = "cartpole-swingup"
    num_envs: int = 256             # envs stepped together (the off-policy presets set 8)
    backend: str = "auto"           # auto: MJX when JAX sees a GPU, else the MuJoCo C engine
    iterations: int = 300           # default PPO training length on this task
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)  # task config fields (+env.overrides.x=)


@dataclasses.dataclass
class TrainConfig:
    """`robolearn train`: the run (the task and algorithm come from the `env` and `algo` groups)."""

    seed: int = 0
    device: str = "cpu"             # the learner's torch device; the simulator picks its own (env.backend)
    iterations: int | None = None   # null: env.iterations (PPO), or from algo.env_steps (off-policy)
    checkpoint_interval: int = 25
    run_dir: str | None = None      # null: runs/<task>-<algo>-<time>
    resume: str | None = None       # a run directory to continue (its config.yaml; `iterations` may grow)
    video: bool = True              # render the final policy to <run_dir>/video.mp4
    progress: bool = True
    dataset: str | None = None      # offline algos: a dataset path (any format) or a name under data/; env= defaults
    #                                 to its task. Without it an offline algorithm (but BC) learns online
    init: str | None = None         # warm start: a run (or checkpoint) whose actor, critics and temperature the
    #                                 learner starts from, its network sizes taken over (`robolearn finetune`)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    algo: Any = None                # filled by the algo group: one of ALGORITHMS' schemas


def _schema(algo: AlgoSpec) -> type:
    """The `algo` config group's schema of a registered algorithm: its runner's fields and its own, plus `name` and
    `recipe` (a preset's label). An offline algorithm that can continue online (`AlgoSpec.online`) also has the
    off-policy runner's fields and the replay settings, for when it learns online (no `dataset=`: `online_config`);
    the evaluation fields are shared: gradient steps offline, env steps online."""
    fields = [("name", str, algo.name)]
    if algo.runner == "on_policy":
        bases: tuple[type, ...] = (algo.config,)
    elif algo.runner == "off_policy":
        bases, fields = (OffPolicyRunConfig, algo.config), [*fields, ("recipe", str, algo.name)]
    else:
        bases = (OfflineRunConfig, OffPolicyRunConfig, ReplayConfig, algo.config) if algo.online else (
            OfflineRunConfig, algo.config)
        fields = [*fields, ("recipe", str, algo.name)]
    return dataclasses.make_dataclass(f"{algo.config.__name__[:-6]}Schema", fields, bases=bases)


_ONLINE_CONFIGS: dict[type, type] = {}


def online_config(algo_config: type) -> type:
    """An offline algorithm's config with the replay settings (`ReplayConfig`) the off-policy learner reads, for
    when it learns online (fine-tuning: `robolearn finetune`, or `robolearn train algo=<offline algo>` without a
    dataset)."""
    if algo_config not in _ONLINE_CONFIGS:
        _ONLINE_CONFIGS[algo_config] = dataclasses.make_dataclass(
            f"Online{algo_config.__name__}", [], bases=(algo_config, ReplayConfig))
    return _ONLINE_CONFIGS[algo_config]


_RUNNER_CONFIGS: dict[str, type | None] = {"on_policy": None, "off_policy": OffPolicyRunConfig,
                                           "offline": OfflineRunConfig}

#: algo.name -> (its schema in the `algo` group, the algorithm's config class, the runner's config class or None),
#: for every algorithm in the registry (`robolearn.algos.base`).
ALGORITHMS: dict[str, tuple[type, type, type | None]] = {
    name: (_schema(algo), algo.config, _RUNNER_CONFIGS[algo.runner]) for name, algo in registry().items()}


def algo_config(algo: dict[str, Any], online: bool = False) -> tuple[Any, Any]:
    """The algorithm's config (PPOConfig / SACConfig / TD3Config ...) and its runner's (or None) from `cfg["algo"]`.

    `online`: an offline algorithm's online configs (`online_config`, `OffPolicyRunConfig`); ignored by the online
    algorithms."""
    name = algo.get("name")
    found = spec(name)
    schema, algo_class, run_class = ALGORITHMS[name]
    if online and run_class is OfflineRunConfig:
        if not found.online:
            raise ConfigError(f"algo={name} learns from a dataset only: pass dataset=<path or name>")
        algo_class, run_class = online_config(algo_class), OffPolicyRunConfig
    algo_fields = {f.name for f in dataclasses.fields(algo_class)}
    run_fields = {f.name for f in dataclasses.fields(run_class)} if run_class else set()
    unknown = set(algo) - {f.name for f in dataclasses.fields(schema)} - algo_fields - run_fields - {"name"}
    if unknown:
        raise ConfigError(f"unknown {name} settings {sorted(unknown)}; valid: {sorted(algo_fields | run_fields)}")

    def build(cls: type, keys: set[str]) -> Any:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in algo.items() if k in keys})

    return build(algo_class, algo_fields), (build(run_class, run_fields) if run_class else None)
