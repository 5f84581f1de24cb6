"""Behaviour cloning of an action-chunk policy, flow-matching (`policies.flow.FlowPolicy`) or diffusion
(`policies.diffusion.DiffusionPolicy`), from a dataset of episodes.

The first step of chunk-policy RL fine-tuning (pi_RL, DSRL): each dataset step t becomes a training pair (o_t,
[a_t, ..., a_{t+H-1}]), the chunk of the H actions the policy will execute from o_t; past the episode's end the
last action repeats (LeRobot pads action chunks the same way, with the padded steps flagged). The loss is the
policy's `bc_loss` (flow matching with times t ~ U(0, 1), or DDPM's epsilon regression with steps k ~ U{0..T-1})
on minibatches with explicit noise; the observation normaliser is fitted on the data first.

    policy, losses = train_chunk_bc(load_dataset("data/arm-push-expert-v0"), ChunkBCConfig(chunk=4))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from policies.diffusion import DiffusionPolicy
from policies.flow import FlowPolicy
from robolearn.errors import ConfigError


@dataclasses.dataclass
class ChunkBCConfig:
    policy: str = "flow"             # flow | diffusion
    chunk: int = 4                   # actions per chunk (H)
    hidden: tuple[int, ...] = (256, 256)
    num_steps: int = 10              # denoising steps at sampling (pi0: 10 Euler steps; diffusion: DDIM steps)
    train_steps: int = 100           # diffusion: DDPM's training steps T
    noise_head: bool = False         # Flow-Noise's learned std (trained later, by RL)
    lr: float = 3e-4
    batch_size: int = 256
    steps: int = 10_000
    seed: int = 0


def action_chunks(actions: Any, step_starts: Any, chunk: int) -> torch.Tensor:
    """[N, chunk, A]: for every step t the actions a_t .. a_{t+chunk-1} of its episode, the episode's last action
    repeated past its end. `step_starts` [E + 1]: each episode's first step index and the total (Dataset's)."""
    if chunk < 1:
        raise ConfigError(f"chunk must be >= 1, got {chunk}")
    actions = torch.from_numpy(np.array(np.asarray(actions), dtype=np.float32))  # a copy (data may be a memmap)
    starts = torch.as_tensor(np.asarray(step_starts), dtype=torch.long)
    lengths = starts[1:] - starts[:-1]
    last = torch.repeat_interleave(starts[1:] - 1, lengths)               # [N] each step's episode end
    idx = torch.minimum(torch.arange(len(actions))[:, None] + torch.arange(chunk)[None], last[:, None])
    return actions[idx]


def train_chunk_bc(data: Any, cfg: ChunkBCConfig | None = None, group: str = "policy"
                   ) -> tuple[FlowPolicy | DiffusionPolicy, list[float]]:
    """A chunk policy fitted to the dataset's (observation, action chunk) pairs; returns it and the loss per step."""
    cfg = cfg if cfg is not None else ChunkBCConfig()
    if cfg.policy not in ("flow", "diffusion"):
        raise ConfigError(f"chunk BC policy must be 'flow' or 'diffusion', got {cfg.policy!r}")
    if group not in data.observations:
        raise ConfigError(f"the dataset has observation groups {sorted(data.observations)}, not {group!r}")
    obs_all = torch.from_numpy(np.array(data.observations[group], dtype=np.float32))  # a copy: data may be mmap
    chunks = action_chunks(data.actions, data.step_starts, cfg.chunk)
    obs = obs_all[torch.as_tensor(np.asarray(data.obs_index))]  # each step's observation (T + 1 rows per episode)
    torch.manual_seed(cfg.seed)
    if cfg.policy == "flow":
        policy: FlowPolicy | DiffusionPolicy = FlowPolicy(obs.shape[1], chunks.shape[2], cfg.chunk, tuple(cfg.hidden),
                                                          cfg.num_steps, noise_head=cfg.noise_head)
    else:
        policy = DiffusionPolicy(obs.shape[1], chunks.shape[2], cfg.chunk, tuple(cfg.hidden), cfg.train_steps,
                                 cfg.num_steps)
    policy.fit_normalizer(obs)  # the dataset's mean and std travel with the policy (LeRobot's MEAN_STD)
    return policy, fit_chunk_policy(policy, obs, chunks, cfg)


def fit_chunk_policy(policy: FlowPolicy | DiffusionPolicy, obs: Any, chunks: torch.Tensor, cfg: ChunkBCConfig
                     ) -> list[float]:
    """`cfg.steps` Adam steps of the policy's `bc_loss` on random minibatches of (obs[i], chunks[i]); `obs` is a
    tensor or anything indexed by a tensor of rows (a VLA's packer decodes its frames per batch). Returns the
    losses. The observation normaliser is the caller's to fit, before."""
    generator = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    diffusion = isinstance(policy, DiffusionPolicy)
    losses = []
    for _ in range(cfg.steps):
        i = torch.randint(0, len(chunks), (cfg.batch_size,), generator=generator)
        a = chunks[i]
        noise = torch.randn(a.shape, generator=generator)
        if diffusion:
            loss = policy.bc_loss(obs[i], a, noise, torch.randint(0, cfg.train_steps, (len(i),), generator=generator))
        else:
            loss = policy.bc_loss(obs[i], a, noise, torch.rand(len(i), generator=generator))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
