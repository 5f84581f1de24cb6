"""`robolearn eval` and `robolearn render`: a checkpoint's policy scored on, or filmed in, its own task.

    robolearn eval checkpoint=runs/<run>/checkpoints/final episodes=10
    robolearn render checkpoint=runs/<run>/checkpoints/final out=policy.mp4
    robolearn render env=pendulum-swingup                     # a random policy

The task, its overrides and the backend come from the run config stored in the checkpoint. The policy is
moved to the env's device (a GPU env gets a GPU policy), so observations never cross devices.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from robolearn.config import EnvConfig, make_env
from robolearn.policy_io import Mode, load_policy


@dataclasses.dataclass
class EvalConfig:
    """`robolearn eval`: mean return of a checkpoint over full episodes (one env per episode)."""

    checkpoint: str | None = None   # a checkpoint folder, e.g. runs/<run>/checkpoints/final (required)
    episodes: int = 10
    seed: int = 1000                # evaluation seeds differ from training's (0)
    mode: str = "deterministic"     # deterministic | sample
    device: str = "auto"            # the env's device (auto: where its physics runs); the policy follows


@dataclasses.dataclass
class RenderConfig:
    """`robolearn render`: a video of one episode of a checkpoint's policy, or of random actions in `env`."""

    checkpoint: str | None = None   # a checkpoint folder; without one, random actions in `env`
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)  # env=<task>: a random-policy video's task
    out: str | None = None          # default: policy.mp4 (checkpoint) or <env>.mp4
    steps: int | None = None        # null: one episode
    seed: int = 0


@torch.no_grad()
def evaluate(path: str | Path, episodes: int = 10, seed: int = 1000, mode: Mode = "deterministic",
             device: str = "auto") -> float:
    """Mean undiscounted return of the checkpoint's policy over `episodes` full episodes (one per env)."""
    policy = load_policy(path, mode=mode, seed=seed)
    env = make_env(policy.run["env"], seed, num_envs=episodes, device=device)
    policy.to(env.device)
    total = torch.zeros(episodes, dtype=torch.float64, device=env.device)
    finished = torch.zeros(episodes, dtype=torch.bool, device=env.device)
    obs = env.get_observations()
    try:
        while not bool(finished.all()):
            obs, rewards, dones, _ = env.step(policy(obs))
            total += rewards.double() * (~finished)
            finished |= dones.bool()
    finally:
        env.close()
    return float(total.mean())


def render_checkpoint(path: str | Path, out: str | Path, seed: int = 0, num_steps: int | None = None) -> Path:
    """A video of one episode of the checkpoint's deterministic policy (rendered on the CPU backend)."""
    import sim

    policy = load_policy(path)
    env_cfg = policy.run["env"]
    return sim.render(env_cfg["name"], policy=policy, path=out, seed=seed, num_steps=num_steps,
                      **(env_cfg.get("overrides") or {}))


def cmd_eval(cfg: EvalConfig) -> int:
    from robolearn.errors import ConfigError

    if not cfg.checkpoint:
        raise ConfigError("eval needs checkpoint=<run_dir>/checkpoints/final")
    ret = evaluate(cfg.checkpoint, cfg.episodes, cfg.seed, cfg.mode, cfg.device)  # type: ignore[arg-type]
    print(f"mean return over {cfg.episodes} episodes: {ret:.2f}")
    return 0


def cmd_render(cfg: RenderConfig) -> int:
    import sim

    if cfg.checkpoint:
        path = render_checkpoint(cfg.checkpoint, cfg.out or "policy.mp4", seed=cfg.seed, num_steps=cfg.steps)
    else:
        name = cfg.env.name
        path = sim.render(name, path=cfg.out or f"{name}.mp4", num_steps=cfg.steps, seed=cfg.seed,
                          **(cfg.env.overrides or {}))
    print(f"wrote {path}")
    return 0
