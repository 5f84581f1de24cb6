"""Running observation normalisation, stored as module buffers so it travels with the checkpoint."""

from __future__ import annotations

import torch
from torch import nn


class RunningNorm(nn.Module):
    """(x - mean) / std with mean and variance tracked over everything seen in training.

    Statistics update only in `update` (called by the trainer on rollout data), never in `forward`,
    so evaluation and deployment use frozen statistics. Parallel-variance merge (Chan et al.).
    """

    def __init__(self, shape: int | tuple[int, ...], eps: float = 1e-8, clip: float = 10.0):
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.eps, self.clip = eps, clip

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, *self.mean.shape).to(self.mean.dtype)
        n = x.shape[0]
        if n == 0:
            return
        self.merge(x.mean(0), x.var(0, unbiased=False), n)

    @torch.no_grad()
    def merge(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, n: float) -> None:
        """Fold in the statistics of `n` samples with mean `batch_mean` and population variance `batch_var` (the
        samples themselves may live elsewhere: several processes' rollouts merged first)."""
        total = self.count + n
        delta = batch_mean - self.mean
        w = n / total
        self.mean += delta * w.to(self.mean.dtype)
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.var.copy_((m2 / total).to(self.var.dtype))
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - self.mean) / torch.sqrt(self.var + self.eps), -self.clip, self.clip)


class FixedNorm(nn.Module):
    """(x - mean) / std with statistics fitted once on a dataset (CORL's `normalize: true` states).

    The identity until `fit`; the buffers travel in the checkpoint, so the policy a checkpoint loads normalises
    raw observations itself. `fit(x)` with fewer features than the module's input fits the leading ones only
    (a critic's input is [state, action]: its actions stay as they are).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    @torch.no_grad()
    def fit(self, x: torch.Tensor, eps: float = 1e-3) -> None:
        """mean and population std + `eps` of `x` [N, D] (CORL `compute_mean_std(states, eps=1e-3)`)."""
        x = x.reshape(-1, x.shape[-1]).to(self.mean.device, torch.float64)
        d = x.shape[1]
        if d > self.mean.shape[0]:
            raise ValueError(f"cannot fit a {self.mean.shape[0]}-feature normaliser on {d} features")
        self.mean[:d] = x.mean(0).to(self.mean.dtype)
        self.std[:d] = (x.std(0, unbiased=False) + eps).to(self.std.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std
