"""GAE against hand-computed references, including time-out bootstrapping and auto-reset rows."""

from __future__ import annotations

import pytest
import torch

from robolearn.advantages import compute_advantages, estimators, gae, masked_whiten
from robolearn.errors import ConfigError


def _reference_gae(r, v, done, trunc, boot, gamma, lam):
    """Plain-Python GAE for one row, written from the definition."""
    t_len = len(r)
    adv = [0.0] * t_len
    running = 0.0
    for t in reversed(range(t_len)):
        if done[t]:
            next_v, cut = 0.0, True
        elif trunc[t]:
            next_v, cut = boot[t], True
        else:
            next_v, cut = v[t + 1], False
        delta = r[t] + gamma * next_v - v[t]
        running = delta + (0.0 if cut else gamma * lam * running)
        adv[t] = running
    return adv


def test_gae_matches_reference_with_dones_and_time_outs():
    gen = torch.Generator().manual_seed(0)
    b, t_len, gamma, lam = 3, 7, 0.9, 0.8
    rewards = torch.randn(b, t_len, generator=gen, dtype=torch.float64)
    values = torch.randn(b, t_len + 1, generator=gen, dtype=torch.float64)
    boot = torch.randn(b, t_len, generator=gen, dtype=torch.float64)
    dones = torch.zeros(b, t_len, dtype=torch.bool)
    truncs = torch.zeros(b, t_len, dtype=torch.bool)
    dones[0, 2] = True          # row 0: terminal, then a new episode
    truncs[1, 3] = True         # row 1: time-out in the middle (auto-reset), bootstrap from final_obs
    truncs[2, 6] = dones[2, 6] = True  # row 2: both on the last step -> terminal wins
    adv, ret = gae(rewards, values, dones=dones, truncs=truncs, bootstrap_values=boot, gamma=gamma, lam=lam)
    for i in range(b):
        ref = _reference_gae(rewards[i].tolist(), values[i].tolist(), dones[i].tolist(),
                             (truncs[i] & ~dones[i]).tolist(), boot[i].tolist(), gamma, lam)
        torch.testing.assert_close(adv[i], torch.tensor(ref, dtype=torch.float64))
    torch.testing.assert_close(ret, adv + values[:, :t_len])


def test_time_out_bootstraps_from_final_obs_value_not_reset_state():
    """One step, truncated: the advantage uses V(final_obs), not values[:, 1] (the reset state)."""
    rewards = torch.tensor([[1.0]])
    values = torch.tensor([[0.5, 100.0]])  # 100 = value of the reset state: must not leak in
    adv, _ = gae(rewards, values, truncs=torch.tensor([[True]]), bootstrap_values=torch.tensor([[2.0]]),
                 gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[1.0 + 0.5 * 2.0 - 0.5]]))
    adv, _ = gae(rewards, values, dones=torch.tensor([[True]]), gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.5]]))


def test_masked_steps_carry_through():
    rewards = torch.tensor([[1.0, 5.0, 1.0]])
    values = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, False, True]])
    adv, _ = gae(rewards, values, mask=mask, gamma=1.0, lam=1.0)
    # The masked middle step contributes nothing and is skipped by the recursion.
    torch.testing.assert_close(adv, torch.tensor([[2.0, 0.0, 1.0]]))


def test_normalize_and_registry():
    adv, _ = compute_advantages("gae", rewards=torch.randn(4, 5), values=torch.randn(4, 6), normalize=True)
    assert abs(adv.mean().item()) < 1e-5 and abs(adv.std().item() - 1.0) < 1e-4
    assert "gae" in estimators()
    with pytest.raises(ConfigError, match="available"):
        compute_advantages("gea", rewards=torch.zeros(1, 1))
    with pytest.raises(ConfigError, match=r"values must have shape \(2, 4\)"):
        gae(torch.zeros(2, 3), torch.zeros(2, 3))
    w = masked_whiten(torch.tensor([[1.0, 2.0, 3.0, 99.0]]), torch.tensor([[True, True, True, False]]))
    torch.testing.assert_close(w, torch.tensor([[-1.0, 0.0, 1.0, 0.0]]), atol=1e-4, rtol=0)
