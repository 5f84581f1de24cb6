"""The `robolearn` command: `robolearn <subcommand> key=value ...` (Hydra-style overrides).

Subcommands so far: `tasks` (list tasks and their documentation), `render` (a video of a task
under a random policy). `train`, `eval`, `bench`, `collect` and `deploy` arrive with their issues.
"""

from __future__ import annotations

import sys

from robolearn.errors import ConfigError


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

    env = opts.pop("env", "cartpole-swingup")
    out = opts.pop("out", f"{env}.mp4")
    steps = int(opts.pop("steps", "0")) or None
    seed = int(opts.pop("seed", "0"))
    if opts:
        raise ConfigError(f"unknown render options {sorted(opts)}; valid: env, out, steps, seed")
    path = sim.render(env, path=out, num_steps=steps, seed=seed)
    print(f"wrote {path}")
    return 0


def cmd_train(opts: dict[str, str]) -> int:
    print("robolearn train: PPO training arrives with the PPO issue. It will train PPO on "
          "cartpole-swingup with the CPU (MuJoCo C) backend and write config, metrics.jsonl, "
          "TensorBoard events, checkpoints, a learning curve and a video to runs/<name>/.\n"
          "Available now: `robolearn tasks`, `robolearn render env=<task>`, and the simulator "
          "API (`import sim; env = sim.make('cartpole-swingup', num_envs=1024)`).")
    return 0


COMMANDS = {"tasks": cmd_tasks, "render": cmd_render, "train": cmd_train}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        print(f"\nusage: robolearn {{{','.join(COMMANDS)}}} [key=value ...]")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](_parse(argv[1:]))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
