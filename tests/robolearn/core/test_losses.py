"""PPO surrogate, dual clip, clip-higher, value clipping, aggregation modes, KL estimators."""

from __future__ import annotations

import math

import pytest
import torch

from robolearn.core.losses import agg_loss, kl_estimate, ppo_clip_loss, value_loss
from robolearn.errors import ConfigError


def _lp(ratio: float) -> torch.Tensor:
    return torch.tensor([math.log(ratio)])


def test_ppo_clip_by_hand():
    zero = torch.zeros(1)
    # Positive advantage, ratio above 1 + eps: clipped at 1.2.
    loss, info = ppo_clip_loss(_lp(1.5), zero, torch.tensor([2.0]))
    assert loss.item() == pytest.approx(-2.0 * 1.2) and info["clip_fraction"].item() == 1.0
    # Negative advantage, ratio below 1 - eps: the pessimistic (unclipped-vs-clipped max) branch.
    loss, _ = ppo_clip_loss(_lp(0.5), zero, torch.tensor([-1.0]))
    assert loss.item() == pytest.approx(1.0 * 0.8)
    # Clip-higher: a wider upper bound only.
    loss, _ = ppo_clip_loss(_lp(1.5), zero, torch.tensor([1.0]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.28)
    # Dual clip bounds a negative-advantage step with a huge ratio at c * |A|.
    loss, _ = ppo_clip_loss(_lp(10.0), zero, torch.tensor([-1.0]))
    assert loss.item() == pytest.approx(10.0)
    loss, _ = ppo_clip_loss(_lp(10.0), zero, torch.tensor([-1.0]), dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    with pytest.raises(ConfigError):
        ppo_clip_loss(_lp(1.0), zero, torch.tensor([1.0]), dual_clip=0.5)


def test_value_loss_clipping():
    v, old, ret = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([3.0])
    assert value_loss(v, old, ret, clip=None).item() == pytest.approx(0.5)
    # Clipped prediction 0.2 is farther from the return: the max takes it.
    assert value_loss(v, old, ret, clip=0.2).item() == pytest.approx(0.5 * 2.8**2)


def test_aggregation_modes():
    loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(8.0 / 5)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((1.0 + 4.0) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((4.0 + 4.0) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(8.0 / (2 * 4))
    with pytest.raises(ConfigError, match="token-mean"):
        agg_loss(loss, mask, "mean")


def test_kl_estimators_agree_in_expectation():
    gen = torch.Generator().manual_seed(0)
    p, q = torch.distributions.Normal(0.0, 1.0), torch.distributions.Normal(0.3, 1.2)
    x = torch.randn(200_000, generator=gen)  # samples of p
    true_kl = torch.distributions.kl_divergence(p, q).item()
    for kind in ("k1", "k3"):
        est = kl_estimate(p.log_prob(x), q.log_prob(x), kind).mean().item()
        assert est == pytest.approx(true_kl, abs=0.01), kind
    assert (kl_estimate(p.log_prob(x), q.log_prob(x), "k3") >= 0).all()
    assert kl_estimate(p.log_prob(x), q.log_prob(x), "k2").mean().item() == pytest.approx(true_kl, abs=0.05)
    with pytest.raises(ConfigError):
        kl_estimate(x, x, "k4")
