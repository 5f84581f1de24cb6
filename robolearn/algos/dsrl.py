"""DSRL (Wagenmaker et al. 2025, "Steering Your Diffusion Policy with Latent Space RL"): keep a behaviour-cloned
diffusion (or flow) chunk policy frozen and run SAC over its initial noise.

`NoiseActionEnv` turns a VecEnv and a frozen chunk policy into the latent-action MDP: the action w in [-1, 1]^(H*A)
(SAC's tanh-squashed output) becomes the sampler's initial noise x_T = `magnitude` * w (DSRL-NA's noise-action
bound, `action_magnitude` 1-2 in the paper's code), the policy denoises it deterministically (DDIM, or the flow's
ODE) into a chunk, and the chunk runs in the env as one transition (`robolearn.chunks.run_chunk`: summed reward,
terminal vs time-out, true final observation). Everything else is robolearn's SAC and off-policy runner unchanged:
replay, UTD, checkpoints, exact resume, evaluation, metrics.

    base, _ = train_chunk_bc(demos, ChunkBCConfig(policy="diffusion", chunk=5))
    runner = dsrl_runner(base, env, eval_env, SACConfig(utd_ratio=4), run_dir="runs/dsrl")
    runner.learn(iterations=200)

The deterministic latent policy (w = tanh(mean)) is what evaluation plays; w = 0 replays the base policy's own
deterministic chunk (its `forward`), so DSRL starts from the base policy's mode, not its average.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from policies.diffusion import DiffusionPolicy
from policies.flow import FlowPolicy
from robolearn.algos.sac import SAC, SACConfig
from robolearn.chunks import run_chunk
from robolearn.errors import ConfigError
from robolearn.runners.base import task_reference
from robolearn.runners.off_policy import OffPolicyRunner


def denoise(base: FlowPolicy | DiffusionPolicy, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The base policy's deterministic chunk [B, H, A] from initial noise [B, H, A]."""
    if isinstance(base, FlowPolicy):
        return base.sample(obs, "ode", noise=noise)[0]
    return base.sample(obs, noise)


class NoiseActionEnv:
    """A VecEnv whose actions are a frozen chunk policy's initial noise (scaled by `magnitude`) and whose steps are
    whole chunks; it has the VecEnv contract the runners use (and delegates state for checkpoints)."""

    def __init__(self, env: Any, base: FlowPolicy | DiffusionPolicy, magnitude: float = 1.0):
        if magnitude <= 0:
            raise ConfigError(f"DSRL's noise magnitude must be > 0, got {magnitude}")
        self.env, self.base, self.magnitude = env, base.eval().requires_grad_(False), magnitude
        self.num_envs, self.device = env.num_envs, env.device
        self.num_actions = base.chunk * base.action_dim
        self.max_episode_length = -(-env.max_episode_length // base.chunk)
        self.observation_shapes = env.observation_shapes
        self.cfg = {**env.cfg, "dsrl": {"magnitude": magnitude, "chunk": base.chunk}}

    def reset(self, seed: int | None = None) -> Any:
        return self.env.reset(seed=seed)

    def get_observations(self) -> Any:
        return self.env.get_observations()

    @torch.no_grad()
    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs = self.env.get_observations()
        noise = self.magnitude * actions.reshape(self.num_envs, self.base.chunk, self.base.action_dim)
        step = run_chunk(self.env, denoise(self.base, obs["policy"], noise))
        extras = {"time_outs": step.truncated, "terminated": step.terminated, "final_obs": step.final_obs,
                  "log": {k: torch.tensor(v) for k, v in step.log.items()}}
        return step.obs, step.reward, step.done.long(), extras

    def state_dict(self) -> dict[str, Any]:
        return self.env.state_dict()

    def load_state_dict(self, arrays: dict[str, Any]) -> None:
        self.env.load_state_dict(arrays)

    def close(self) -> None:
        self.env.close()


@dataclasses.dataclass
class DSRLConfig:
    magnitude: float = 1.0          # |noise| bound: x_T = magnitude * tanh(SAC's pre-activation)
    steps_per_iteration: int = 10   # chunk decisions per env per logged iteration
    eval_every: int = 0             # decisions (all envs) between evaluations; 0: none


def dsrl_runner(base: FlowPolicy | DiffusionPolicy, env: Any, eval_env: Any | None, sac: SACConfig,
                run_dir: str | Path, cfg: DSRLConfig | None = None, seed: int = 0, progress: bool = False
                ) -> OffPolicyRunner:
    """SAC over `base`'s noise in `env` (and `eval_env`), as robolearn's off-policy runner; call `.learn(n)`."""
    cfg = cfg if cfg is not None else DSRLConfig()
    noise_env = NoiseActionEnv(env, base, cfg.magnitude)
    eval_noise_env = NoiseActionEnv(eval_env, base, cfg.magnitude) if eval_env is not None else None
    torch.manual_seed(seed)
    algo = SAC.for_env(noise_env, sac)
    config = {"algo": {"name": "dsrl", **dataclasses.asdict(sac), **dataclasses.asdict(cfg)},
              "env": noise_env.cfg, "seed": seed}
    task = env.cfg.get("task") if isinstance(env.cfg, dict) else None
    return OffPolicyRunner(noise_env, algo, run_dir, config, seed=seed, progress=progress,
                           steps_per_iteration=cfg.steps_per_iteration, eval_env=eval_noise_env,
                           eval_every=cfg.eval_every, reference=task_reference(task) if task else None)
