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
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        w = n / total
        self.mean += delta * w.to(self.mean.dtype)
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.var.copy_((m2 / total).to(self.var.dtype))
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - self.mean) / torch.sqrt(self.var + self.eps), -self.clip, self.clip)
