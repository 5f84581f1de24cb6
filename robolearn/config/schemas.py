"""The schemas of `robolearn train` (`TrainConfig`: the run, `EnvConfig`: the task, `RunnerConfig`: the runner's
settings) and the algorithm table `ALGORITHMS`: algo.name -> (its schema in the `algo` config group, its config
class), built from the algorithm registry (`robolearn.algos.base`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from robolearn.algos.base import AlgoSpec, registry, spec
from robolearn.core.buffers import ReplayConfig
from robolearn.errors import ConfigError
from robolearn.runners.off_policy import OffPolicyRunConfig
from robolearn.runners.offline import OfflineRunConfig

__all__ = ["EnvConfig", "RunnerConfig", "TrainConfig", "ALGORITHMS", "algo_config", "runner_config", "online_config",
           "migrate_run_config"]


@dataclasses.dataclass
class EnvConfig:
    """The simulated task (`configs/env/<task>.yaml` presets these per task)."""

    name: str = "cartpole-swingup"
    num_envs: int = 256             # envs stepped together (the off-policy presets set 8)
    backend: str = "auto"           # auto: MJX when JAX sees a GPU, else the MuJoCo C engine
    iterations: int = 300           # default PPO training length on this task
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)  # task config fields (+env.overrides.x=)


@dataclasses.dataclass
class RunnerConfig:
    """The runner's settings (`runner.*`): how long a run trains, how often it logs and evaluates, what data it mixes
    in. The off-policy runner (online) and the offline runner (`dataset=`) each read their fields; PPO's runner reads
    none (its length is `iterations`)."""

    env_steps: int = 200_000        # online: training length in env steps; `iterations` is derived from it
    steps_per_iteration: int = 50   # online: vec-env steps per logged iteration
    offline_data: str | None = None  # online: a dataset (any format) mixed into every batch at algo.offline_ratio
    gradient_steps: int = 1_000_000  # offline: training length (CORL: 1M); `iterations` = gradient_steps / log_every
    log_every: int = 1000           # offline: gradient steps per logged iteration
    eval_every: int | None = None   # env steps (online) or gradient steps (offline) between evaluations; null: 5000
    #                                 for the offline algorithms (CORL's eval_freq), 0 (none) for the online ones
    eval_episodes: int = 10         # episodes per evaluation, one per env of a separate evaluation VecEnv (CORL: 10)
    normalize_reward: bool = False  # offline: CORL's locomotion normalize_reward (algo.reward_scale times 1000 / the
    #                                 dataset's span of episode returns)
    eval_reference: list[float] | None = None  # online: [random, reference] returns that normalise the evaluations'
    #                                            score (a dataset's, for its episode length); null: the task's
    snapshot_every: int = 0         # online: env steps between policy-only snapshots (<run_dir>/snapshots/, the
    #                                 behaviour checkpoints of `robolearn collect behaviour=`); 0: none

    @staticmethod
    def fields() -> tuple[str, ...]:
        """Its field names (they sat in `algo.*` before; `algo.env_steps=...` is refused with their new place)."""
        return tuple(f.name for f in dataclasses.fields(RunnerConfig))


@dataclasses.dataclass
class TrainConfig:
    """`robolearn train`: the run (the task and algorithm come from the `env` and `algo` groups)."""

    seed: int = 0
    seeds: list[int] | None = None  # train these seeds in one process, one run each in <run_dir>/<seed_dir>
    seed_dir: str = "seed{seed}"    # seeds=: a seed's run folder, relative to run_dir; {seed} is its seed
    device: str = "cpu"             # the learner's torch device; the simulator picks its own (env.backend)
    iterations: int | None = None   # null: env.iterations (PPO), or from runner.env_steps / runner.gradient_steps
    checkpoint_interval: int = 25   # iterations between checkpoints/latest (and the last iteration's)
    checkpoint_minutes: float = 10.0  # also checkpoint at the first iteration ending this long after the last
    #                                 checkpoint (0: off), so a slow run loses at most about this much to a stop;
    #                                 not under torchrun, whose ranks must checkpoint at one iteration
    run_dir: str | None = None      # null: runs/<task>-<algo>-<time>
    resume: str | None = None       # a run directory to continue (its config.yaml; `iterations` may grow)
    video: bool = True              # render the final policy to <run_dir>/video.mp4
    progress: bool = True
    dataset: str | None = None      # offline algos: a dataset path (any format) or a name under data/; env= defaults
    #                                 to its task. Without it an offline algorithm (but BC) learns online
    init: str | None = None         # warm start: a run (or checkpoint) whose actor, critics and temperature the
    #                                 learner starts from, its network sizes taken over (`robolearn finetune`); a
    #                                 {seed} in it is the run's seed (seeds=: each seed's, init=runs/x/seed{seed})
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    algo: Any = None                # filled by the algo group: one of ALGORITHMS' schemas
    runner: RunnerConfig = dataclasses.field(default_factory=lambda: RunnerConfig())


def _schema(algo: AlgoSpec) -> type:
    """The `algo` config group's schema of a registered algorithm: its config's fields plus `name` and `recipe` (a
    preset's label). An offline algorithm that can continue online (`AlgoSpec.online`) also has the replay settings,
    for when it learns online (no `dataset=`: `online_config`)."""
    fields = [("name", str, algo.name)] + ([] if algo.runner == "on_policy" else [("recipe", str, algo.name)])
    bases = (ReplayConfig, algo.config) if algo.runner == "offline" and algo.online else (algo.config,)
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


class _AlgorithmTable(Mapping):
    """algo.name -> (its schema in the `algo` group, the algorithm's config class), for every algorithm in the
    registry (`robolearn.algos.base`), including those registered after import (a plug-in's)."""

    def __init__(self) -> None:
        self._schemas: dict[str, tuple[type, type]] = {}

    def _table(self) -> dict[str, tuple[type, type]]:
        for name, algo in registry().items():
            if name not in self._schemas or self._schemas[name][1] is not algo.config:
                self._schemas[name] = (_schema(algo), algo.config)
        return self._schemas

    def __getitem__(self, name: str) -> tuple[type, type]:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


ALGORITHMS: Mapping[str, tuple[type, type]] = _AlgorithmTable()


def algo_config(algo: dict[str, Any], online: bool = False) -> Any:
    """The algorithm's config (PPOConfig / SACConfig / IQLConfig ...) from a composed `cfg["algo"]`.

    `online`: an offline algorithm's online config (`online_config`: its own fields and the replay settings);
    ignored by the online algorithms."""
    name = algo.get("name")
    found = spec(name)
    schema, algo_class = ALGORITHMS[name]
    if online and found.runner == "offline":
        if not found.online:
            raise ConfigError(f"algo={name} learns from a dataset only: pass dataset=<path or name>")
        algo_class = online_config(algo_class)
    algo_fields = {f.name for f in dataclasses.fields(algo_class)}
    moved = sorted(set(algo) & set(RunnerConfig.fields()))
    if moved:  # a config from before runner.* that `migrate_run_config` did not see
        raise ConfigError(f"algo.{moved[0]} is a runner setting now: runner.{moved[0]}")
    unknown = set(algo) - {f.name for f in dataclasses.fields(schema)} - algo_fields
    if unknown:
        raise ConfigError(f"unknown {name} settings {sorted(unknown)}; valid: {sorted(algo_fields)}")
    built = algo_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in algo.items() if k in algo_fields})
    if online and hasattr(built, "check_online"):  # settings an algorithm cannot learn online with
        built.check_online()
    return built


def runner_config(cfg: dict[str, Any], online: bool) -> OffPolicyRunConfig | OfflineRunConfig | None:
    """The runner's settings of a composed train config: the off-policy runner's when it learns online, the offline
    runner's with a dataset, None for the on-policy runner (PPO)."""
    algo = spec(cfg["algo"]["name"])
    if algo.runner == "on_policy":
        return None
    runner = {k: tuple(v) if isinstance(v, list) else v for k, v in (cfg.get("runner") or {}).items()}
    if runner.get("eval_every") is None:
        runner["eval_every"] = 5000 if algo.runner == "offline" else 0
    run_class = OffPolicyRunConfig if online else OfflineRunConfig
    keys = {f.name for f in dataclasses.fields(run_class)}
    return run_class(**{k: v for k, v in runner.items() if k in keys})


def migrate_run_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A run's saved config in today's layout: from before `runner.*` (its runner settings inside `algo`), from
    before `checkpoint_minutes`."""
    if "runner" not in cfg and isinstance(cfg.get("algo"), dict):
        cfg["runner"] = {k: cfg["algo"].pop(k) for k in RunnerConfig.fields() if k in cfg["algo"]}
    cfg.setdefault("checkpoint_minutes", TrainConfig.checkpoint_minutes)  # a run saved before it: today's default
    return cfg
