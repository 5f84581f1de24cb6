"""Replay buffers for off-policy learning from batched environments.

`ReplayBuffer` is a ring buffer on the learner's device, laid out time-major `[T, N]` for N envs so
that each env's transitions stay in order (n-step returns walk along time). What it gets right,
and the anchors' buffers often do not:

- the next observation of a finished env is its true final observation (`extras["final_obs"]`),
  not the first observation of the next episode;
- a time-out (truncation) bootstraps from that final observation; only a termination cuts the
  bootstrap (`discount = 0`);
- n-step returns stop at the end of an episode and at the newest transition, and the discount of
  the bootstrap is gamma^k for the k steps actually summed; k comes with the batch (`steps`), so a
  learner can shape every summed reward (a per-step reward bias), not just the sum.

`sample_mixed` draws one batch from an online and an offline buffer at a fixed ratio (RLPD's
symmetric 50/50 sampling; ratio 0 reproduces WSRL's no-retention fine-tuning).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict

from robolearn.errors import ConfigError


@dataclasses.dataclass
class ReplayConfig:
    """How an off-policy learner fills and samples its replay: the online buffer, the offline data mixed into each
    batch, when updates start and how many per collected transition. SAC's and TD3's configs include it; an offline
    algorithm (IQL, CQL, Cal-QL, RO2O ...) gains it when it continues online (`robolearn.config`)."""

    utd_ratio: float = 1.0        # critic updates per environment transition collected
    buffer_size: int = 1_000_000
    n_step: int = 1
    offline_ratio: float = 0.0    # fraction of each batch drawn from an offline buffer (RLPD: 0.5)
    learning_starts: int = 5000   # env transitions collected before the first update
    random_warmup: bool = True    # uniform random actions until learning_starts (off: the actor's, as WSRL)
    warmup_whole_episodes: bool = False  # the warm-up goes on past learning_starts until every env has ended an
    #                                      episode, so the buffer starts with whole episodes (WSRL's one env)


def check_replay(cfg: ReplayConfig) -> None:
    """Raise ConfigError for replay settings no learner can run with."""
    if cfg.utd_ratio <= 0 or cfg.buffer_size < 1 or cfg.n_step < 1 or cfg.learning_starts < 0:
        raise ConfigError("need utd_ratio > 0, buffer_size >= 1, n_step >= 1 and learning_starts >= 0")
    if not 0.0 <= cfg.offline_ratio <= 1.0:
        raise ConfigError(f"offline_ratio must be in [0, 1], got {cfg.offline_ratio}")


class ReplayBuffer:
    """Transitions (o, a, r, o', terminated, done) of `num_envs` envs, `capacity` in total, FIFO."""

    def __init__(self, capacity: int, num_envs: int, obs_dims: dict[str, int], num_actions: int,
                 device: str | torch.device = "cpu", n_step: int = 1, gamma: float = 0.99):
        if capacity < num_envs or num_envs < 1:
            raise ConfigError(f"replay capacity ({capacity}) must be >= num_envs ({num_envs}) >= 1")
        if n_step < 1 or not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"need n_step >= 1 and 0 <= gamma <= 1, got {n_step}, {gamma}")
        self.num_envs, self.obs_dims, self.num_actions = num_envs, dict(obs_dims), num_actions
        self.device, self.n_step, self.gamma = torch.device(device), n_step, gamma
        self.steps = capacity // num_envs  # time slots per env
        t, n = self.steps, num_envs
        self.obs = {k: torch.zeros(t, n, d, device=self.device) for k, d in self.obs_dims.items()}
        self.next_obs = {k: torch.zeros(t, n, d, device=self.device) for k, d in self.obs_dims.items()}
        self.actions = torch.zeros(t, n, num_actions, device=self.device)
        self.rewards = torch.zeros(t, n, device=self.device)
        self.terminated = torch.zeros(t, n, dtype=torch.bool, device=self.device)
        self.dones = torch.zeros(t, n, dtype=torch.bool, device=self.device)
        self.ptr = 0  # next time slot to write
        self.filled = 0  # time slots written (<= steps)
        self.extras: dict[str, torch.Tensor] = {}  # per-transition extras of `from_transitions`

    def __len__(self) -> int:
        return self.filled * self.num_envs

    @property
    def capacity(self) -> int:
        return self.steps * self.num_envs

    def add(self, obs: TensorDict | dict[str, torch.Tensor], actions: torch.Tensor, rewards: torch.Tensor,
            next_obs: TensorDict | dict[str, torch.Tensor], terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Store one step of every env; `next_obs` must be the true next (final, for finished envs) observation."""
        if actions.shape != (self.num_envs, self.num_actions):
            raise ConfigError(f"expected actions of shape {(self.num_envs, self.num_actions)}, "
                              f"got {tuple(actions.shape)}")
        i = self.ptr
        for k in self.obs_dims:
            self.obs[k][i] = obs[k]
            self.next_obs[k][i] = next_obs[k]
        self.actions[i] = actions
        self.rewards[i] = rewards
        self.terminated[i] = terminated.bool()
        self.dones[i] = terminated.bool() | truncated.bool()
        self.ptr = (i + 1) % self.steps
        self.filled = min(self.filled + 1, self.steps)

    def extend(self, obs: dict[str, torch.Tensor], actions: torch.Tensor, rewards: torch.Tensor,
               next_obs: dict[str, torch.Tensor], terminated: torch.Tensor, truncated: torch.Tensor,
               after_gap: bool = False) -> None:
        """Store T consecutive steps of every env at once (leading dims `[T, num_envs]`), as T calls of `add`.

        For a lane fed in chunks (a robot's transition batches in a one-env buffer). `after_gap`: these steps do
        not continue the newest stored ones (data was lost in between), so those are closed as truncated first
        and no n-step return spans the gap. Of more than `steps` steps only the newest `steps` stay.
        """
        t = actions.shape[0]
        if actions.shape[1:] != (self.num_envs, self.num_actions):
            raise ConfigError(f"expected actions of shape [T, {self.num_envs}, {self.num_actions}], "
                              f"got {list(actions.shape)}")
        if after_gap and self.filled:
            self.dones[(self.ptr - 1) % self.steps] = True
        skip = max(0, t - self.steps)  # overwritten within this call anyway
        slots = (self.ptr + skip + torch.arange(t - skip, device=self.device)) % self.steps
        for k in self.obs_dims:
            self.obs[k][slots] = obs[k][skip:].to(self.device)
            self.next_obs[k][slots] = next_obs[k][skip:].to(self.device)
        self.actions[slots] = actions[skip:].to(self.device)
        self.rewards[slots] = rewards[skip:].to(self.device)
        self.terminated[slots] = terminated[skip:].to(self.device).bool()
        self.dones[slots] = (terminated[skip:].bool() | truncated[skip:].bool()).to(self.device)
        self.ptr = (self.ptr + t) % self.steps
        self.filled = min(self.filled + t, self.steps)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
        """A uniform batch: `obs`, `actions`, `rewards` (n-step sums), `next_obs`, `discount` (gamma^k or 0)
        and `steps` (k, the number of rewards summed, as floats)."""
        if self.filled == 0:
            raise ConfigError("cannot sample from an empty replay buffer")
        flat = torch.randint(0, self.filled * self.num_envs, (batch_size,), generator=generator,
                             device=self.device if generator is None else generator.device).to(self.device)
        age, env = flat // self.num_envs, flat % self.num_envs  # age 0 = oldest slot
        oldest = self.ptr if self.filled == self.steps else 0
        slot = (oldest + age) % self.steps
        if self.n_step == 1:
            last, rewards = slot, self.rewards[slot, env]
            discount = self.gamma * (~self.terminated[slot, env]).float()
            steps = torch.ones_like(rewards)
        else:
            rewards, last, discount, steps = self._n_step(slot, age, env)
        batch = {"obs": {k: v[slot, env] for k, v in self.obs.items()}, "actions": self.actions[slot, env],
                 "rewards": rewards, "next_obs": {k: v[last, env] for k, v in self.next_obs.items()},
                 "discount": discount, "steps": steps}
        batch.update({k: v[slot, env] for k, v in self.extras.items()})
        return batch

    def _n_step(self, slot: torch.Tensor, age: torch.Tensor, env: torch.Tensor):
        """Sum up to n rewards along each env's timeline, stopping after a done or at the newest slot.

        Returns the sums, the slot of the last summed step, the bootstrap discount and the count k.
        """
        rewards = torch.zeros(slot.shape, device=self.device)
        steps = torch.zeros(slot.shape, device=self.device)
        scale = torch.ones(slot.shape, device=self.device)
        last = slot.clone()
        active = torch.ones(slot.shape, dtype=torch.bool, device=self.device)
        terminated = torch.zeros(slot.shape, dtype=torch.bool, device=self.device)
        for k in range(self.n_step):
            s = (slot + k) % self.steps
            active = active & (age + k < self.filled)
            rewards = rewards + torch.where(active, scale * self.rewards[s, env], 0.0)
            steps = steps + active.float()
            last = torch.where(active, s, last)
            terminated = torch.where(active, self.terminated[s, env], terminated)
            scale = torch.where(active, scale * self.gamma, scale)
            active = active & ~self.dones[s, env]
        return rewards, last, scale * (~terminated).float(), steps

    # --- persistence (travels in the trainer state of a checkpoint: safetensors, never pickle) -----
    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Tensors (only the filled slots, oldest first) and JSON-able metadata."""
        oldest = self.ptr if self.filled == self.steps else 0
        order = (torch.arange(self.filled, device=self.device) + oldest) % self.steps
        tensors = {"actions": self.actions[order], "rewards": self.rewards[order],
                   "terminated": self.terminated[order], "dones": self.dones[order]}
        for k in self.obs_dims:
            tensors[f"obs/{k}"] = self.obs[k][order]
            tensors[f"next_obs/{k}"] = self.next_obs[k][order]
        meta = {"steps": self.steps, "num_envs": self.num_envs, "obs_dims": self.obs_dims,
                "num_actions": self.num_actions, "filled": self.filled}
        return {k: v.contiguous() for k, v in tensors.items()}, meta

    def load_state_dict(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        expected = {"steps": self.steps, "num_envs": self.num_envs, "obs_dims": self.obs_dims,
                    "num_actions": self.num_actions}
        got = {k: meta.get(k) for k in expected}
        if got != expected:
            raise ConfigError(f"replay buffer layout {got} does not match this buffer's {expected}")
        n = int(meta["filled"])
        self.actions[:n] = tensors["actions"].to(self.device)
        self.rewards[:n] = tensors["rewards"].to(self.device)
        self.terminated[:n] = tensors["terminated"].to(self.device)
        self.dones[:n] = tensors["dones"].to(self.device)
        for k in self.obs_dims:
            self.obs[k][:n] = tensors[f"obs/{k}"].to(self.device)
            self.next_obs[k][:n] = tensors[f"next_obs/{k}"].to(self.device)
        self.filled, self.ptr = n, n % self.steps

    @classmethod
    def from_transitions(cls, obs: dict[str, torch.Tensor], actions: torch.Tensor, rewards: torch.Tensor,
                         next_obs: dict[str, torch.Tensor], terminated: torch.Tensor, truncated: torch.Tensor,
                         device: str | torch.device = "cpu", n_step: int = 1, gamma: float = 0.99,
                         extras: dict[str, torch.Tensor] | None = None) -> ReplayBuffer:
        """A buffer holding a flat dataset of M transitions in order (e.g. an offline dataset).

        `extras`: more per-transition values ([M, ...], e.g. Cal-QL's Monte-Carlo returns) that every sample carries
        under their names. They are not part of `state_dict`: a dataset's buffer is rebuilt from the dataset."""
        m = actions.shape[0]
        buf = cls(m, 1, {k: v.shape[-1] for k, v in obs.items()}, actions.shape[-1], device, n_step, gamma)
        buf.extras = {k: v.to(buf.device)[:, None] for k, v in (extras or {}).items()}
        tensors = {"actions": actions[:, None], "rewards": rewards[:, None], "terminated": terminated[:, None].bool(),
                   "dones": (terminated.bool() | truncated.bool())[:, None]}
        tensors.update({f"obs/{k}": v[:, None] for k, v in obs.items()})
        tensors.update({f"next_obs/{k}": v[:, None] for k, v in next_obs.items()})
        buf.load_state_dict(tensors, {"steps": m, "num_envs": 1, "obs_dims": buf.obs_dims,
                                      "num_actions": buf.num_actions, "filled": m})
        return buf


def sample_mixed(online: ReplayBuffer, offline: ReplayBuffer | None, batch_size: int, offline_ratio: float,
                 generator: torch.Generator | None = None) -> dict[str, Any]:
    """One batch with round(batch_size * offline_ratio) offline transitions and the rest online."""
    if not 0.0 <= offline_ratio <= 1.0:
        raise ConfigError(f"offline_ratio must be in [0, 1], got {offline_ratio}")
    n_off = round(batch_size * offline_ratio) if offline is not None else 0
    if n_off == 0:
        return online.sample(batch_size, generator)
    if n_off == batch_size or len(online) == 0:
        return offline.sample(batch_size, generator)
    a, b = online.sample(batch_size - n_off, generator), offline.sample(n_off, generator)
    return _cat(a, b)


def _cat(a: Any, b: Any) -> Any:
    if isinstance(a, dict):
        return {k: _cat(a[k], b[k]) for k in a}
    return torch.cat([a, b.to(a.device)], 0)
