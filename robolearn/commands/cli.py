"""The `robolearn` command: `robolearn <command> key=value ...`; `robolearn <command> --help` lists the options.

    robolearn train env=cartpole-swingup algo=ppo seed=1 env.num_envs=256 iterations=200
    robolearn train resume=runs/<run>               # continue where it stopped
    robolearn eval checkpoint=runs/<run>/checkpoints/final episodes=10
    robolearn render checkpoint=runs/<run>/checkpoints/final out=policy.mp4
    robolearn render env=pendulum-swingup           # a random policy
    robolearn tasks verbose=true
    robolearn bench suite=smoke                     # algorithms x datasets x seeds -> bench/smoke/report.md
    robolearn finetune algo=wsrl dataset=<name>     # offline pre-training, then online fine-tuning (O2O)
    robolearn chunk-bc dataset=<dataset> out=runs/bc   # a flow / diffusion action-chunk policy by behaviour cloning
    robolearn flow-rl checkpoint=runs/bc            # its PPO / GRPO fine-tuning in the batched sim (pi_RL)
    robolearn dsrl checkpoint=runs/bc               # or SAC over its initial noise, the policy frozen (DSRL)

The ROS 2 bridge (`real/`) adds:

    robolearn deploy checkpoint=runs/<run>/checkpoints/final robot=rc_car transport=dds
    robolearn fake-robot transport=dds
    robolearn record out=run.mcap topics=/odom,/imu,/ackermann_cmd
    robolearn bag2dataset bag=run.mcap out=episodes
    robolearn learner run_dir=runs/car algo=serl      robolearn actor learner=host:50051 robot=rc_car
    robolearn tls-cert out=certs host=gpu-box         # the learner's TLS key + certificate (tls_cert=, tls_ca=)

Every command composes `configs/<command>.yaml` over its schema (a dataclass; `robolearn.config`), so
options are Hydra `key=value` overrides and an unknown key is an error that names it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from robolearn.core.cpu import tune_allocator
from robolearn.errors import ConfigError, RobolearnError

#: command -> (its function, its schema); the function takes the schema's instance, except `train` and `finetune`,
#: which take the overrides (a resumed run reads its own config). Functions import only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("robolearn.commands.train:cmd_train", "robolearn.config:TrainConfig"),
    "eval": ("robolearn.commands.eval:cmd_eval", "robolearn.commands.eval:EvalConfig"),
    "render": ("robolearn.commands.eval:cmd_render", "robolearn.commands.eval:RenderConfig"),
    "tasks": ("robolearn.commands.tasks:cmd_tasks", "robolearn.commands.tasks:TasksConfig"),
    "collect": ("robolearn.commands.collect:cmd_collect", "robolearn.collect.generate:CollectConfig"),
    "bench": ("robolearn.commands.bench:cmd_bench", "robolearn.bench.suite:BenchConfig"),
    "finetune": ("robolearn.commands.finetune:cmd_finetune", "robolearn.runners.o2o:FinetuneConfig"),
    "chunk-bc": ("robolearn.commands.chunk:cmd_chunk_bc", "robolearn.runners.chunk:ChunkBCJob"),
    "flow-rl": ("robolearn.commands.chunk:cmd_flow_rl", "robolearn.runners.chunk:FlowRLJob"),
    "dsrl": ("robolearn.commands.chunk:cmd_dsrl", "robolearn.runners.chunk:DSRLJob"),
    "deploy": ("real.deploy:cmd_deploy", "real.deploy:DeployConfig"),
    "fake-robot": ("real.fake_robot:cmd_fake_robot", "real.fake_robot:FakeRobotConfig"),
    "record": ("real.recorder:cmd_record", "real.recorder:RecordConfig"),
    "bag2dataset": ("real.bag2dataset:cmd_bag2dataset", "real.bag2dataset:Bag2DatasetConfig"),
    "actor": ("real.rl.actor:cmd_actor", "real.rl.actor:ActorConfig"),
    "learner": ("real.rl.learner:cmd_learner", "real.rl.learner:LearnerConfig"),
    "tls-cert": ("real.rl.tls:cmd_tls_cert", "real.rl.tls:TLSCertConfig"),
}


#: Bare words a command takes as a shorthand for an option (`robolearn bench report out=...`).
ALIASES: dict[str, dict[str, str]] = {"bench": {"report": "report_only=true"}}


def _load(name: str, target: str) -> Any:
    module, attr = target.split(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"`robolearn {name}` is not available in this installation: {e}") from e


def run(name: str, overrides: list[str]) -> int:
    """Compose `configs/<name>.yaml` with `overrides` and run the command."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from robolearn.config import compose

    func, schema = _load(name, COMMANDS[name][0]), _load(name, COMMANDS[name][1])
    if name in ("train", "finetune"):
        func(overrides)
        return 0
    overrides = [ALIASES.get(name, {}).get(o, o) for o in overrides]
    cfg = compose(name.replace("-", "_"), overrides, schema)
    try:
        options = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))
    except OmegaConfBaseException as e:  # the schema's own checks (__post_init__) failed
        cause = e.__cause__ if isinstance(e.__cause__, RobolearnError) else None
        raise (cause or ConfigError(f"bad {name} option: {e}")) from e
    return int(func(options) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        print(f"\nusage: robolearn {{{','.join(COMMANDS)}}} [key=value ...]   (robolearn <command> --help)")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name, args = argv[0], argv[1:]
    tune_allocator()
    try:
        if any(a in ("-h", "--help") for a in args):
            from robolearn.config import help_text

            func, schema = _load(name, COMMANDS[name][0]), _load(name, COMMANDS[name][1])
            chosen = [a for a in args if a not in ("-h", "--help")]  # `algo=sac --help`: SAC's fields
            print(help_text(name.replace("-", "_"), schema, func.__doc__ or schema.__doc__ or "", chosen))
            return 0
        return run(name, args)
    except RobolearnError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
