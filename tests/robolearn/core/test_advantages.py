"""GAE against hand-computed references, including time-out bootstrapping and auto-reset rows."""

from __future__ import annotations

import pytest
import torch

from robolearn.core.advantages import compute_advantages, estimators, gae, masked_whiten
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


# --- outcome estimators, against verl's definitions written out per row ------------------------------------------

def _outcome_batch():
    """6 rows of 3 steps, outcome rewards on each row's last valid step; groups 7 (3 rows), 9 (2), 4 (1); row 4
    is padding (all masked: a group removed by dynamic sampling)."""
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    scores = [1.0, 0.0, 2.0, 3.0, 5.0, 4.0]
    rewards = torch.zeros(6, 3)
    for i, s in enumerate(scores):
        last = int(mask[i].sum()) - 1
        rewards[i, max(last, 0)] = s
    groups = torch.tensor([7, 7, 7, 9, 9, 4])
    return rewards, mask, groups


def _expected(per_row, mask):
    return torch.tensor(per_row).unsqueeze(-1) * mask.float()


def test_grpo_family_matches_verl():
    import statistics as st

    rewards, mask, groups = _outcome_batch()
    g7 = [1.0, 0.0, 2.0]  # group 9 has one valid row (row 4 is masked out): a singleton, mean 0 and std 1
    m7, s7 = st.mean(g7), st.stdev(g7)
    eps = 1e-6
    adv, ret = compute_advantages("grpo", rewards=rewards, mask=mask, group_ids=groups)
    want = [(x - m7) / (s7 + eps) for x in g7] + [3.0 / (1 + eps), 0.0, 4.0 / (1 + eps)]
    torch.testing.assert_close(adv, _expected(want, mask))
    assert ret is None
    adv, _ = compute_advantages("dr_grpo", rewards=rewards, mask=mask, group_ids=groups)
    torch.testing.assert_close(adv, _expected([x - m7 for x in g7] + [3.0, 0.0, 4.0], mask))
    torch.testing.assert_close(compute_advantages("grpo", rewards=rewards, mask=mask, group_ids=groups,
                                                  norm_by_std=False)[0], adv)
    # RLOO: s_i - mean of the others = n/(n-1) (s_i - mean_group); singletons keep their score
    adv, _ = compute_advantages("rloo", rewards=rewards, mask=mask, group_ids=groups)
    torch.testing.assert_close(adv, _expected([x * 1.5 - m7 * 1.5 for x in g7] + [3.0, 0.0, 4.0], mask))
    # Lite PPO: group mean, the std of the batch's valid scores
    batch_std = st.stdev([1.0, 0.0, 2.0, 3.0, 4.0])
    adv, _ = compute_advantages("lite_ppo", rewards=rewards, mask=mask, group_ids=groups)
    want = [(x - m7) / (batch_std + eps) for x in g7] + [3.0 / (batch_std + eps), 0.0, 4.0 / (batch_std + eps)]
    torch.testing.assert_close(adv, _expected(want, mask))
    with pytest.raises(ConfigError, match="group_ids"):
        compute_advantages("grpo", rewards=rewards, mask=mask)


def test_reinforce_pp_and_remax():
    rewards = torch.tensor([[0.5, 0.0, 1.0], [2.0, 1.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    dones = torch.tensor([[True, False, False], [False, False, False]])  # row 0: an episode ends after step 0
    adv, ret = compute_advantages("reinforce_pp", rewards=rewards, mask=mask, dones=dones, gamma=0.5)
    want_ret = torch.tensor([[0.5, 0.5, 1.0], [2.5, 1.0, 0.0]])  # G_t = r_t + 0.5 G_{t+1}, cut at the done
    torch.testing.assert_close(ret, want_ret)
    torch.testing.assert_close(adv, masked_whiten(want_ret, mask))
    # REINFORCE++-baseline: s - mean_group on every step, whitened over the batch
    groups = torch.tensor([0, 0])
    adv, _ = compute_advantages("reinforce_pp_baseline", rewards=rewards, mask=mask, group_ids=groups)
    centred = torch.tensor([[-1.5, -1.5, -1.5], [1.5, 1.5, 0.0]])  # scores 1.5 and 3.0, mean 2.25 -> -0.75, +0.75
    torch.testing.assert_close(adv, masked_whiten(centred * 0.5, mask))
    # ReMax: reward-to-go minus the greedy rollout's reward
    adv, ret = compute_advantages("remax", rewards=rewards, mask=mask, reward_baselines=torch.tensor([1.0, 2.5]))
    torch.testing.assert_close(ret, torch.tensor([[1.5, 1.0, 1.0], [3.0, 1.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.0, 0.0], [0.5, -1.5, 0.0]]))
    assert {"grpo", "dr_grpo", "rloo", "lite_ppo", "reinforce_pp", "reinforce_pp_baseline", "remax"} <= set(
        estimators())
