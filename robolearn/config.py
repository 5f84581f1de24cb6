"""How every `robolearn` command is configured: Hydra composition of `configs/<command>.yaml` over dataclasses.

Each command has a schema, a dataclass whose fields are its options and whose defaults are the only place
those defaults live; `configs/<command>.yaml` names the schema first in its defaults list and holds only
presets (which task, which algorithm, which robot) and comments. Config groups work the same way: a task
preset (`configs/env/<task>.yaml`) fills `EnvConfig`, an algorithm preset (`configs/algo/<name>.yaml`)
fills the schema of its algorithm (`ALGORITHMS`). So every option is a `key=value` override, `--help`
lists them with their defaults, and an unknown key or a value of the wrong type is a `ConfigError` that
names it.

    cfg = compose("train", ["env=pendulum-swingup", "algo=sac", "algo.batch_size=128"])
    algo_cfg, run_cfg = algo_config(cfg["algo"])       # SACConfig, OffPolicyRunConfig
    env = make_env(cfg["env"], seed=cfg["seed"])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robolearn.algos.bc import BCConfig
from robolearn.algos.calql import CalQLConfig
from robolearn.algos.cql import CQLConfig
from robolearn.algos.iql import IQLConfig
from robolearn.algos.ppo import PPOConfig
from robolearn.algos.rebrac import ReBRACConfig
from robolearn.algos.ro2o import RO2OConfig
from robolearn.algos.sac import SACConfig
from robolearn.algos.td3 import TD3Config
from robolearn.algos.td3_bc import TD3BCConfig
from robolearn.buffers import ReplayConfig
from robolearn.errors import ConfigError
from robolearn.runners.off_policy import OffPolicyRunConfig
from robolearn.runners.offline import OfflineRunConfig

__all__ = ["config_dir", "compose", "help_text", "EnvConfig", "TrainConfig", "OffPolicyRunConfig", "ALGORITHMS",
           "algo_config", "make_env", "control_rate"]


# --- schemas of `robolearn train` ------------------------------------------------------------------------------

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


@dataclasses.dataclass
class PPOSchema(PPOConfig):
    name: str = "ppo"


@dataclasses.dataclass
class SACSchema(OffPolicyRunConfig, SACConfig):
    name: str = "sac"


@dataclasses.dataclass
class TD3Schema(OffPolicyRunConfig, TD3Config):
    name: str = "td3"
    recipe: str = "td3"


def _offline_schema(name: str, algo_config: type) -> type:
    """The `algo` group schema of an offline algorithm: the offline runner's fields and the algorithm's, and (but BC)
    the off-policy runner's and the replay settings, for when it continues online (no `dataset=`: `online_config`).
    The evaluation fields are shared: gradient steps offline, env steps online."""
    fields = [("name", str, name), ("recipe", str, name)]
    bases = (OfflineRunConfig, algo_config) if name in OFFLINE_ONLY else (
        OfflineRunConfig, OffPolicyRunConfig, ReplayConfig, algo_config)
    return dataclasses.make_dataclass(f"{algo_config.__name__[:-6]}Schema", fields, bases=bases)


#: The offline algorithms: algo.name -> (its config class, "module:Class" of the learner).
OFFLINE_ALGORITHMS: dict[str, tuple[type, str]] = {
    "bc": (BCConfig, "robolearn.algos.bc:BC"),
    "td3_bc": (TD3BCConfig, "robolearn.algos.td3_bc:TD3BC"),
    "iql": (IQLConfig, "robolearn.algos.iql:IQL"),
    "cql": (CQLConfig, "robolearn.algos.cql:CQL"),
    "calql": (CalQLConfig, "robolearn.algos.calql:CalQL"),
    "rebrac": (ReBRACConfig, "robolearn.algos.rebrac:ReBRAC"),
    "ro2o": (RO2OConfig, "robolearn.algos.ro2o:RO2O"),
}

#: Offline algorithms that cannot continue online: no critic to learn from new data.
OFFLINE_ONLY = ("bc",)

_ONLINE_CONFIGS: dict[type, type] = {}


def online_config(algo_config: type) -> type:
    """An offline algorithm's config with the replay settings (`ReplayConfig`) the off-policy learner reads, for
    when it learns online (fine-tuning: `robolearn finetune`, or `robolearn train algo=<offline algo>` without a
    dataset)."""
    if algo_config not in _ONLINE_CONFIGS:
        _ONLINE_CONFIGS[algo_config] = dataclasses.make_dataclass(
            f"Online{algo_config.__name__}", [], bases=(algo_config, ReplayConfig))
    return _ONLINE_CONFIGS[algo_config]

#: algo.name -> (its schema in the `algo` group, the algorithm's config class, the runner's config class or None)
ALGORITHMS: dict[str, tuple[type, type, type | None]] = {
    "ppo": (PPOSchema, PPOConfig, None),
    "sac": (SACSchema, SACConfig, OffPolicyRunConfig),
    "td3": (TD3Schema, TD3Config, OffPolicyRunConfig),
    **{name: (_offline_schema(name, cfg), cfg, OfflineRunConfig) for name, (cfg, _) in OFFLINE_ALGORITHMS.items()},
}


# --- composition -------------------------------------------------------------------------------------------------

def config_dir() -> Path:
    """The `configs/` folder: beside the packages in a checkout, inside `robolearn` in a wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs", here / "configs"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError("robolearn's configs/ folder was not found next to the package; reinstall robolearn")


def _register(command: str, schema: type | None) -> None:
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    if schema is not None:
        store.store(name=f"{command}_schema", node=schema)
    for name, (algo_schema, _, _) in ALGORITHMS.items():  # any command may compose the algo presets (learner)
        store.store(group="algo", name=f"{name}_schema", node=algo_schema)


def _quoted(arg: str) -> str:
    """`key=value` as Hydra should read it: a value its grammar would take for a sweep (`a,b`) or reject
    (`~/x`, `x=y`) is quoted, so `topics=/odom,/imu` or `out=~/bags/run.mcap` stay plain strings."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    if "=" not in arg:
        raise ConfigError(f"arguments are key=value overrides, got {arg!r}")
    key, value = arg.split("=", 1)
    if value[:1] in ("[", "{", "'", '"'):
        return arg
    try:
        if OverridesParser.create().parse_override(arg).value_type == ValueType.ELEMENT:
            return arg
    except HydraException:
        pass
    return f"{key}='" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def compose(command: str, overrides: Sequence[str] = (), schema: type | None = None) -> dict[str, Any]:
    """`configs/<command>.yaml` over its `schema` with `key=value` overrides, resolved into a plain dict.

    `schema` is the command's dataclass; it is registered as `<command>_schema`, the first entry of the
    YAML's defaults list (`train` registers its own, `TrainConfig`); the algorithm schemas are always registered.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if command == "train" and schema is None:
        schema = TrainConfig
    _register(command, schema)
    if not (config_dir() / f"{command}.yaml").is_file():
        raise ConfigError(f"no configs/{command}.yaml in {config_dir()}")
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose(config_name=command, overrides=[_quoted(o) for o in overrides])
        return OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"bad {command} option: {_first_lines(e)}") from e


def _first_lines(e: Exception) -> str:
    """Hydra's message without the hint lines it adds for its own CLI."""
    import re

    text = str(e) if not e.__cause__ else f"{e} ({e.__cause__})"
    text = re.sub(r"To append to your config use \S+ ", "", text)  # a schema has no room for new keys
    lines = [line.strip() for line in text.splitlines()]
    return " ".join(line for line in lines if line and "HYDRA_FULL_ERROR" not in line
                    and not line.startswith(("Config search path", "provider=")))


def help_text(command: str, schema: type | None = None, doc: str = "") -> str:
    """What `robolearn <command> --help` prints: the usage, every option with its default, the groups."""
    import yaml

    cfg = compose(command, (), schema)
    lines = [doc.strip(), "", f"options of `robolearn {command}` (key=value; defaults shown):", ""] if doc else []
    lines += ["  " + line for line in yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None).splitlines()]
    groups = sorted(p for p in config_dir().iterdir() if p.is_dir())
    used = [g for g in groups if g.name in cfg or (command == "train" and g.name in ("env", "algo"))
            or (command in ("deploy", "actor") and g.name == "deploy")]
    for group in used:
        names = sorted(p.stem for p in group.glob("*.yaml"))
        lines.append(f"\n  {group.name}=<{'|'.join(names)}>")
    return "\n".join(lines)


# --- what the composed config builds ---------------------------------------------------------------------------

def algo_config(algo: dict[str, Any], online: bool = False) -> tuple[Any, Any]:
    """The algorithm's config (PPOConfig / SACConfig / TD3Config ...) and its runner's (or None) from `cfg["algo"]`.

    `online`: an offline algorithm's online configs (`online_config`, `OffPolicyRunConfig`); ignored by the online
    algorithms."""
    name = algo.get("name")
    if name not in ALGORITHMS:
        raise ConfigError(f"algo name {name!r} is not available; use one of {sorted(ALGORITHMS)}")
    schema, algo_class, run_class = ALGORITHMS[name]
    if online and run_class is OfflineRunConfig:
        if name in OFFLINE_ONLY:
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


def make_env(env: dict[str, Any], seed: int, num_envs: int | None = None, device: str = "auto",
             pixels: dict[str, Any] | None = None):
    """The VecEnv of a composed `env` config (`sim.make` with the task's overrides; ``pixels`` adds camera
    frames as a "pixels" observation group; default: the run's own `env.pixels`, which a VLA's run records)."""
    import sim

    pixels = pixels if pixels is not None else env.get("pixels")
    return sim.make(env["name"], num_envs=num_envs or env["num_envs"], backend=env.get("backend", "auto"),
                    seed=seed, device=device, pixels=pixels, **(env.get("overrides") or {}))


def control_rate(run: dict[str, Any]) -> float | None:
    """The rate (Hz) at which a checkpoint's policy acted in training; None when unknown.

    Runs record `env.policy_dt` (the task's ctrl_dt x action_repeat); for older checkpoints the task's own
    config is looked up, which imports the simulator (so a robot deploying a new checkpoint never does).
    """
    env = run.get("env") or {}
    dt = env.get("policy_dt")
    if dt is None and env.get("name"):
        import sim

        try:
            task_cfg = sim.make_task(env["name"], **(env.get("overrides") or {})).cfg
        except ConfigError:
            return None
        dt = task_cfg.ctrl_dt * task_cfg.action_repeat
    try:
        return 1.0 / float(dt) if dt else None
    except (TypeError, ValueError, ZeroDivisionError):
        return None
