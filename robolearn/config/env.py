"""What a composed `env` config builds: the VecEnv (`make_env`), and the rate a checkpoint's policy acts at.
"""

from __future__ import annotations

from typing import Any

from robolearn.errors import ConfigError


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
        dt = task_cfg.policy_dt
    try:
        return 1.0 / float(dt) if dt else None
    except (TypeError, ValueError, ZeroDivisionError):
        return None
