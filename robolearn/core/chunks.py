"""Executing action chunks in a batched env: one decision = H env steps, the way chunk policies (flow / diffusion
policies, VLAs) act and the way their RL sees the world (pi_RL's chunk-level rewards, DSRL's latent-noise MDP).

`run_chunk` steps the env through a chunk [N, H, A] and reports it as one transition: the sum of each env's rewards
up to the step its episode ended, whether it ended (terminated or timed out) and its true final observation. The
rest of a chunk that outlives its episode acts in the auto-reset next episode and is credited to nobody: choose H
dividing the episode length (then, without early terminations, chunks stay aligned with episodes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass
class ChunkStep:
    obs: Any                    # observations after the chunk (a new episode's where one ended inside it)
    reward: torch.Tensor        # [N] summed over the chunk's steps within the episode
    terminated: torch.Tensor    # [N] bool: an episode reached a terminal state inside the chunk
    truncated: torch.Tensor     # [N] bool: an episode timed out inside the chunk (and did not terminate)
    final_obs: Any              # each env's observation at the end of its episode where one ended, else `obs`
    log: dict[str, float]       # the env's log: per-step means over the chunk; `episode/` metrics over the
    #                             episodes ending in it (NaN if none)

    @property
    def done(self) -> torch.Tensor:
        return self.terminated | self.truncated


def run_chunk(env: Any, actions: torch.Tensor) -> ChunkStep:
    """Step `env` through `actions` [N, H, A], each clamped to the action box [-1, 1]."""
    n, h = actions.shape[0], actions.shape[1]
    reward, alive = torch.zeros(n), torch.ones(n, dtype=torch.bool)
    terminated, truncated = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    final: Any = None
    sums: dict[str, float] = {}
    episode_metrics: dict[str, tuple[float, int]] = {}
    for j in range(h):
        obs, r, d, extras = env.step(actions[:, j].clamp(-1.0, 1.0))
        r = r.detach().cpu().float()
        ended = alive & d.bool().cpu()
        term = extras["terminated"].bool().cpu()
        reward += torch.where(alive, r, torch.zeros_like(r))
        terminated |= ended & term
        truncated |= ended & ~term
        if final is None:
            final = obs.clone()
        if bool(ended.any()):
            idx = ended.nonzero().flatten()
            final[idx] = extras["final_obs"][idx]
        for key, value in extras["log"].items():
            v = float(value)
            if key.startswith("episode/"):  # a mean over the envs whose episode ended at this step
                if v == v and bool(d.any()):
                    total, count = episode_metrics.get(key, (0.0, 0))
                    k = int(d.bool().sum())
                    episode_metrics[key] = (total + v * k, count + k)
                else:
                    episode_metrics.setdefault(key, (0.0, 0))
            else:
                sums[key] = sums.get(key, 0.0) + v / h
        alive &= ~ended
    not_ended = ~(terminated | truncated)
    final[not_ended.nonzero().flatten()] = obs[not_ended.nonzero().flatten()]
    log = {**sums, **{k: (t / c if c else float("nan")) for k, (t, c) in episode_metrics.items()}}
    return ChunkStep(obs, reward, terminated, truncated, final, log)
