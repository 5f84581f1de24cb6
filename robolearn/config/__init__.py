"""How every `robolearn` command is configured: Hydra composition of `configs/<command>.yaml` over dataclasses.

Each command has a schema, a dataclass whose fields are its options and whose defaults are the only place
those defaults live; `configs/<command>.yaml` names the schema first in its defaults list and holds only
presets (which task, which algorithm, which robot) and comments. Config groups work the same way: a task
preset (`configs/env/<task>.yaml`) fills `EnvConfig`, an algorithm preset (`configs/algo/<name>.yaml`)
fills the schema of its algorithm (`ALGORITHMS`). So every option is a `key=value` override, `--help`
lists them with their defaults, and an unknown key or a value of the wrong type is a `ConfigError` that
names it.

- `compose.py`: composition, `--help` text, where `configs/` is;
- `schemas.py`: `robolearn train`'s schemas and the algorithm table;
- `env.py`: the VecEnv a composed `env` config names, and a checkpoint's control rate.

    cfg = compose("train", ["env=pendulum-swingup", "algo=sac", "algo.batch_size=128"])
    algo_cfg = algo_config(cfg["algo"])                 # SACConfig
    run_cfg = runner_config(cfg, online=True)          # OffPolicyRunConfig (runner.*)
    env = make_env(cfg["env"], seed=cfg["seed"])
"""

from robolearn.config.compose import compose, config_dir, help_text, parse_overrides
from robolearn.config.env import control_rate, make_env
from robolearn.config.schemas import (
    ALGORITHMS,
    EnvConfig,
    RunnerConfig,
    TrainConfig,
    algo_config,
    migrate_run_config,
    online_config,
    runner_config,
)

__all__ = ["config_dir", "compose", "help_text", "parse_overrides", "EnvConfig", "RunnerConfig", "TrainConfig",
           "ALGORITHMS", "algo_config", "runner_config", "online_config", "migrate_run_config", "make_env",
           "control_rate"]
