"""Behaviour cloning of a flow-matching action-chunk policy (`policies.flow.FlowPolicy`) from a dataset of episodes.

The first step of flow-policy RL fine-tuning (pi_RL, DSRL): each dataset step t becomes a training pair (o_t,
[a_t, ..., a_{t+H-1}]), the chunk of the H actions the policy will execute from o_t; past the episode's end the
last action repeats (LeRobot pads action chunks the same way, with the padded steps flagged). The loss is
`FlowPolicy.bc_loss` (flow matching) on minibatches with explicit noise and times.

    policy, losses = train_flow_bc(load_dataset("data/arm-push-expert-v0"), FlowBCConfig(chunk=4))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from policies.flow import FlowPolicy
from robolearn.errors import ConfigError


@dataclasses.dataclass
class FlowBCConfig:
    chunk: int = 4                   # actions per chunk (H)
    hidden: tuple[int, ...] = (256, 256)
    num_steps: int = 10              # denoising steps (pi0: 10)
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
    actions = torch.as_tensor(np.asarray(actions), dtype=torch.float32)
    starts = torch.as_tensor(np.asarray(step_starts), dtype=torch.long)
    lengths = starts[1:] - starts[:-1]
    last = torch.repeat_interleave(starts[1:] - 1, lengths)               # [N] each step's episode end
    idx = torch.minimum(torch.arange(len(actions))[:, None] + torch.arange(chunk)[None], last[:, None])
    return actions[idx]


def train_flow_bc(data: Any, cfg: FlowBCConfig | None = None, group: str = "policy"
                  ) -> tuple[FlowPolicy, list[float]]:
    """A FlowPolicy fitted to the dataset's (observation, action chunk) pairs; returns it and the loss per step."""
    cfg = cfg if cfg is not None else FlowBCConfig()
    if group not in data.observations:
        raise ConfigError(f"the dataset has observation groups {sorted(data.observations)}, not {group!r}")
    obs_all = torch.as_tensor(np.asarray(data.observations[group]), dtype=torch.float32)
    chunks = action_chunks(data.actions, data.step_starts, cfg.chunk)
    obs = obs_all[torch.as_tensor(np.asarray(data.obs_index))]  # each step's observation (T + 1 rows per episode)
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    policy = FlowPolicy(obs.shape[1], chunks.shape[2], cfg.chunk, tuple(cfg.hidden), cfg.num_steps,
                        noise_head=cfg.noise_head)
    policy.obs_norm.update(obs)  # the dataset's mean and std travel with the policy (LeRobot's MEAN_STD)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    losses = []
    for _ in range(cfg.steps):
        i = torch.randint(0, len(chunks), (cfg.batch_size,), generator=generator)
        a = chunks[i]
        loss = policy.bc_loss(obs[i], a, torch.randn(a.shape, generator=generator),
                              torch.rand(len(i), generator=generator))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return policy, losses
