"""The `robolearn` command: `robolearn <subcommand> key=value ...` (Hydra-style overrides).

    robolearn train env=cartpole-swingup algo=ppo seed=1 env.num_envs=256 iterations=200
    robolearn train resume=runs/<run>               # continue where it stopped
    robolearn eval checkpoint=runs/<run>/checkpoints/final episodes=10
    robolearn render checkpoint=runs/<run>/checkpoints/final out=policy.mp4
    robolearn render env=pendulum-swingup           # a random policy
    robolearn tasks verbose=true

The ROS 2 bridge (`real/`) adds:

    robolearn deploy checkpoint=runs/<run>/checkpoints/final robot=rc_car transport=dds
    robolearn fake-robot robot=rc_car transport=dds
    robolearn record out=run.mcap topics=/odom,/imu,/ackermann_cmd
    robolearn bag2dataset bag=run.mcap out=episodes
    robolearn learner ...      robolearn actor ...

`bench` and `collect` arrive with their issues.
"""

from __future__ import annotations

import sys

from robolearn.errors import ConfigError, RobolearnError


def _parse(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        if "=" not in a:
            raise ConfigError(f"arguments are key=value overrides, got {a!r}")
        k, v = a.split("=", 1)
        out[k] = v
    return out


def cmd_tasks(opts: dict[str, str]) -> int:
    import sim
    from sim.tasks import TASKS

    verbose = opts.get("verbose", "false").lower() in ("1", "true", "yes")
    for name in sim.list_tasks():
        cls = TASKS[name]
        print(f"{name:20s} random return {cls.random_return:8.1f}   reference {cls.reference_return:8.1f}")
        if verbose:
            print("    " + cls.describe().replace("\n", "\n    ") + "\n")
    return 0


def cmd_render(opts: dict[str, str]) -> int:
    import sim

    out = opts.pop("out", None)
    seed = int(opts.pop("seed", "0"))
    if "checkpoint" in opts:
        from robolearn.train import render_checkpoint

        ckpt = opts.pop("checkpoint")
        _no_more(opts, "render", "checkpoint, out, seed")
        path = render_checkpoint(ckpt, out or "policy.mp4", seed=seed)
    else:
        env = opts.pop("env", "cartpole-swingup")
        steps = int(opts.pop("steps", "0")) or None
        _no_more(opts, "render", "env, checkpoint, out, steps, seed")
        path = sim.render(env, path=out or f"{env}.mp4", num_steps=steps, seed=seed)
    print(f"wrote {path}")
    return 0


def cmd_eval(opts: dict[str, str]) -> int:
    from robolearn.train import evaluate

    if "checkpoint" not in opts:
        raise ConfigError("eval needs checkpoint=<run_dir>/checkpoints/final")
    ckpt = opts.pop("checkpoint")
    episodes = int(opts.pop("episodes", "10"))
    seed = int(opts.pop("seed", "1000"))
    _no_more(opts, "eval", "checkpoint, episodes, seed")
    print(f"mean return over {episodes} episodes: {evaluate(ckpt, episodes=episodes, seed=seed):.2f}")
    return 0


def cmd_train(args: list[str]) -> int:
    from robolearn.train import train

    train(args)
    return 0


def _no_more(opts: dict[str, str], cmd: str, valid: str) -> None:
    if opts:
        raise ConfigError(f"unknown {cmd} options {sorted(opts)}; valid: {valid}")


# Subcommands of the ROS 2 bridge live next to their code in `real/` (imported only when used).
REAL_COMMANDS = {
    "deploy": "real.deploy:cmd_deploy",
    "fake-robot": "real.fake_robot:cmd_fake_robot",
    "record": "real.recorder:cmd_record",
    "bag2dataset": "real.recorder:cmd_bag2dataset",
    "actor": "real.rl.actor:cmd_actor",
    "learner": "real.rl.learner:cmd_learner",
}


def _real_command(name: str):
    def run(opts: dict[str, str]) -> int:
        import importlib

        module, func = REAL_COMMANDS[name].split(":")
        try:
            target = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"`robolearn {name}` is not available in this installation: {e}") from e
        return int(target(opts) or 0)

    return run


COMMANDS = {"tasks": cmd_tasks, "render": cmd_render, "eval": cmd_eval, "train": cmd_train,
            **{name: _real_command(name) for name in REAL_COMMANDS}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        print(f"\nusage: robolearn {{{','.join(COMMANDS)}}} [key=value ...]")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        if argv[0] == "train":  # Hydra parses train's overrides itself (env=..., env.num_envs=...)
            return cmd_train(argv[1:])
        return COMMANDS[argv[0]](_parse(argv[1:]))
    except RobolearnError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
