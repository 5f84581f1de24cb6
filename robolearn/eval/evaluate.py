"""A checkpoint's policy scored on, or filmed in, its own task (`robolearn eval`, `robolearn render`).
"""

from __future__ import annotations

from pathlib import Path

from robolearn.checkpoints.policy import Mode, load_policy
from robolearn.config import make_env
from robolearn.eval.episodes import run_episodes


def evaluate(path: str | Path, episodes: int = 10, seed: int = 1000, mode: Mode = "deterministic",
             device: str = "auto") -> float:
    """Mean undiscounted return of the checkpoint's policy over `episodes` full episodes (one per env of an env
    made with `seed`, played from its first observations: `robolearn.eval.episodes.run_episodes`)."""
    policy = load_policy(path, mode=mode, seed=seed)
    env = make_env(policy.run["env"], seed, num_envs=episodes, device=device)
    policy.to(env.device)
    try:
        returns = run_episodes(env, policy).returns
    finally:
        env.close()
    return float(returns.mean())


def render_checkpoint(path: str | Path, out: str | Path, seed: int = 0, num_steps: int | None = None) -> Path:
    """A video of one episode of the checkpoint's deterministic policy (rendered on the CPU backend)."""
    import sim

    policy = load_policy(path)
    env_cfg = policy.run["env"]
    return sim.render(env_cfg["name"], policy=policy, path=out, seed=seed, num_steps=num_steps,
                      **(env_cfg.get("overrides") or {}))
