"""Losses shared by every trainer: policy-gradient losses (robot, VLA, language model) and value losses.

Tensors are `[B, T]` per-step quantities with a `mask` (see `robolearn.core.advantages`); for plain PPO
on flat minibatches pass `[N]` tensors and no mask. Each loss returns the aggregated scalar plus a
dict of diagnostics (clip fractions, approximate KL) for logging.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robolearn.errors import ConfigError

Tensor = torch.Tensor

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def agg_loss(loss: Tensor, mask: Tensor | None = None, mode: str = "token-mean", norm: float | None = None) -> Tensor:
    """Aggregate a per-step loss.

    - "token-mean": mean over every unmasked step of the batch (DAPO; what PPO on env steps uses);
    - "seq-mean-token-mean": mean over each row's steps, then over rows (GRPO's original form);
    - "seq-mean-token-sum": sum over each row's steps, mean over rows;
    - "seq-mean-token-sum-norm": sum over steps divided by a constant `norm` (Dr. GRPO; default T).
    """
    if mask is None:
        mask = torch.ones_like(loss, dtype=torch.bool)
    m = mask.to(loss.dtype)
    if mode == "token-mean":
        return (loss * m).sum() / m.sum().clamp_min(1.0)
    if loss.ndim != 2:
        raise ConfigError(f"loss aggregation {mode!r} needs [B, T] tensors, got shape {tuple(loss.shape)}")
    per_row = (loss * m).sum(-1)
    if mode == "seq-mean-token-mean":
        rows = m.sum(-1) > 0
        return (per_row[rows] / m.sum(-1)[rows]).mean() if rows.any() else loss.sum() * 0.0
    if mode == "seq-mean-token-sum":
        return per_row.mean()
    if mode == "seq-mean-token-sum-norm":
        return per_row.sum() / (loss.shape[0] * (norm if norm is not None else loss.shape[-1]))
    raise ConfigError(f"unknown loss aggregation {mode!r}; use one of {AGG_MODES}")


def ppo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor | None = None,
                  clip_low: float = 0.2, clip_high: float | None = None, dual_clip: float | None = None,
                  agg: str = "token-mean") -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate: -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A).

    `clip_high` > `clip_low` is DAPO's clip-higher (defaults to `clip_low`). `dual_clip` = c > 1
    bounds the loss of negative-advantage steps by -c A (Ye et al. 2020), so a huge ratio on a bad
    action cannot blow up the update.
    """
    clip_high = clip_low if clip_high is None else clip_high
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ConfigError(f"dual_clip must be > 1, got {dual_clip}")
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    with torch.no_grad():
        info = {
            "clip_fraction": agg_loss((clipped > unclipped).to(logp.dtype), mask),
            "approx_kl": agg_loss((ratio - 1.0) - log_ratio, mask),  # k3 estimator, >= 0
        }
    return agg_loss(loss, mask, agg), info


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor | None = None,
               clip: float | None = 0.2, agg: str = "token-mean") -> Tensor:
    """Squared error to the returns; with `clip`, the max of the clipped and unclipped errors (PPO2)."""
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * agg_loss(err, mask, agg)


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-step estimate of KL(pi || ref) from samples of pi (Schulman's k1 / k2 / k3).

    k1 = log(pi/ref) (unbiased, high variance, can be negative); k2 = 0.5 log(pi/ref)^2 (biased,
    low variance); k3 = (ref/pi - 1) - log(ref/pi) (unbiased, low variance, always >= 0).
    """
    log_ratio = logp - ref_logp
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise ConfigError(f"unknown KL estimator {kind!r}; use 'k1', 'k2' or 'k3'")


class HLGauss(nn.Module):
    """Histogram loss with Gaussian targets ("Stop Regressing", Farebrother et al. 2024) for value learning.

    A value is represented by logits over `num_bins` equal bins on [v_min, v_max]; the predicted
    value is the expectation over bin centres. A scalar target t becomes the probability mass that
    N(t, sigma^2) puts in each bin (renormalised to the support), with sigma = `sigma_ratio` bin
    widths (0.75 by default, spreading mass over about six bins); the loss is the cross-entropy
    between that histogram and the predicted softmax. Targets outside the support are clamped.
    """

    def __init__(self, v_min: float, v_max: float, num_bins: int = 101, sigma_ratio: float = 0.75):
        super().__init__()
        if not v_max > v_min or num_bins < 2 or sigma_ratio <= 0:
            raise ConfigError(f"HL-Gauss needs v_max > v_min, num_bins >= 2, sigma_ratio > 0; got "
                              f"[{v_min}, {v_max}], {num_bins}, {sigma_ratio}")
        self.v_min, self.v_max, self.num_bins = float(v_min), float(v_max), int(num_bins)
        width = (self.v_max - self.v_min) / num_bins
        self.sigma = sigma_ratio * width
        self.register_buffer("edges", torch.linspace(self.v_min, self.v_max, num_bins + 1), persistent=False)
        self.register_buffer("centers", (self.edges[:-1] + self.edges[1:]) / 2, persistent=False)

    def target_probs(self, target: Tensor) -> Tensor:
        """[..., num_bins] histogram of N(target, sigma^2) restricted to the support."""
        t = target.clamp(self.v_min, self.v_max).unsqueeze(-1)
        cdf = torch.special.erf((self.edges - t) / (math.sqrt(2.0) * self.sigma))
        mass = cdf[..., 1:] - cdf[..., :-1]
        return mass / (cdf[..., -1:] - cdf[..., :1]).clamp_min(1e-12)

    def value(self, logits: Tensor) -> Tensor:
        """Expected value under softmax(logits)."""
        return torch.softmax(logits, -1) @ self.centers

    def loss(self, logits: Tensor, target: Tensor) -> Tensor:
        """Per-element cross-entropy between the target histogram (no gradient) and softmax(logits)."""
        probs = self.target_probs(target.detach())
        return -(probs * torch.log_softmax(logits, -1)).sum(-1)


def expectile_loss(diff: Tensor, expectile: float) -> Tensor:
    """Asymmetric squared error mean(|tau - 1(diff < 0)| diff^2): IQL's value loss (Kostrikov et al. 2022).

    With diff = Q - V, minimising it over V fits the tau-expectile of Q: tau = 0.5 is the mean (plain squared
    error, halved), tau -> 1 approaches the maximum over the data's actions.
    """
    if not 0.0 < expectile < 1.0:
        raise ConfigError(f"the expectile must be in (0, 1), got {expectile}")
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff**2).mean()
