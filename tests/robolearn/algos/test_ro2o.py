"""RO2O's regularisers and CQL's ensemble subset (WSRL's pre-training) against computations by hand (numpy, from the
networks' weights): Q smoothness, policy smoothness (symmetric KL), the OOD penalty with its decaying lambda, the
SAC-N TD target and actor loss. RO2O end to end (offline, then online): tests/robolearn/runners/test_finetune.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_offline_algos import (
    A,
    D,
    close,
    make_cql,
    np_batch,
    np_mlp,
    np_q,
    np_tanh_gaussian,
    randomize_targets,
    tiny_batch,
)

from robolearn.algos.offline.ro2o import RO2O, RO2OConfig
from robolearn.errors import ConfigError


def np_actor_stats(actor, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mu and log sigma (squashed into [-5, 2]) of a tanh-Gaussian actor at obs [N, D]."""
    mean, raw = np.split(np_mlp(actor.net, obs)[0], 2, -1)
    return mean, -5.0 + 3.5 * (np.tanh(raw) + 1.0)


def np_kl(m1, s1, m2, s2):
    return np.log(s2 / s1) + (s1**2 + (m1 - m2) ** 2) / (2 * s2**2) - 0.5


def make_ro2o(**kw) -> RO2O:
    torch.manual_seed(0)
    cfg = dict(actor_hidden=(8,), critic_hidden=(8, 8), num_critics=3, sample_size=5, q_smooth_eps=0.3,
               policy_smooth_eps=0.2, ood_smooth_eps=0.25, beta_q_smooth=0.5, beta_ood=0.7, beta_policy=0.9)
    cfg.update(kw)
    algo = RO2O(D, A, RO2OConfig(**cfg))
    randomize_targets(algo)
    return algo


def test_ro2o_losses_by_hand():
    algo = make_ro2o(ood_reg=0.5)
    batch, b = tiny_batch(), np_batch(tiny_batch())
    draws = algo.draw(4, torch.Generator().manual_seed(3))
    dr = {k: v.double().numpy() for k, v in draws.items()}
    s, a, n = b["s"], b["a"], algo.cfg.sample_size
    assert draws["q_delta"].shape == (n, D) and float(draws["q_delta"].abs().max()) <= 0.3

    def perturbed(delta):  # [B * n, D], state-major
        return (s[:, None, :] + delta[None]).reshape(-1, D)

    # Q smoothness: 0.8 max(d, 0)^2 + 0.2 min(d, 0)^2, mean over critics, max over the perturbations, mean, x beta
    q_p = np_q(algo.critic, perturbed(dr["q_delta"]), np.repeat(a, n, 0)).reshape(-1, 4, n)
    diff = q_p - np_q(algo.critic, s, a)[..., None]
    pen = 0.8 * np.maximum(diff, 0) ** 2 + 0.2 * np.minimum(diff, 0) ** 2
    assert close(algo.q_smoothness(batch["obs"]["policy"], batch["actions"], draws["q_delta"]),
                 0.5 * pen.mean(0).max(-1).mean())

    # policy smoothness: the symmetric KL of the pre-tanh Gaussians, max over the perturbations, mean, x beta
    m, ls = np_actor_stats(algo.actor, s)
    mp, lsp = np_actor_stats(algo.actor, perturbed(dr["policy_delta"]))
    m, ls = np.repeat(m, n, 0), np.repeat(ls, n, 0)
    kl = (np_kl(m, np.exp(ls), mp, np.exp(lsp)) + np_kl(mp, np.exp(lsp), m, np.exp(ls))).sum(-1).reshape(4, n)
    smooth = 0.9 * kl.max(-1).mean()
    assert close(algo.policy_smoothness(batch["obs"]["policy"], draws["policy_delta"]), smooth)

    # OOD penalty: (Q - [Q - lambda std_i Q])^2 = (lambda std_i Q)^2 at a~ ~ pi(s + delta), x beta
    sp = perturbed(dr["ood_delta"])
    mo, lso = np_actor_stats(algo.actor, sp)
    ao, _ = np_tanh_gaussian(mo, lso, dr["ood"].reshape(-1, A))
    qo = np_q(algo.critic, sp, ao)
    std = qo.std(0, ddof=1)
    assert algo.ood_reg == 0.5
    assert close(algo.ood_penalty(batch["obs"]["policy"], draws["ood_delta"], draws["ood"]),
                 0.7 * np.mean(np.broadcast_to((0.5 * std) ** 2, qo.shape)))

    # TD target: min over all target critics minus alpha log pi (entropy in the backup), then the critic loss
    alpha = torch.tensor(0.4)
    m2, ls2 = np_actor_stats(algo.actor, b["s2"])
    a2, logp2 = np_tanh_gaussian(m2, ls2, dr["target"])
    y = b["r"] + b["d"] * (np_q(algo.critic_target, b["s2"], a2).min(0) - 0.4 * logp2)
    td = ((np_q(algo.critic, s, a) - y) ** 2).mean(-1).sum()
    loss, stats = algo.critic_loss(batch, draws, alpha)
    assert close(stats["td_loss"], td)
    assert close(loss, td + float(stats["q_smooth_loss"]) + float(stats["ood_loss"]))

    # actor: mean(alpha log pi - min_i Q_i(s, a)) + the policy smoothness term
    m0, ls0 = np_actor_stats(algo.actor, s)
    a0, logp0 = np_tanh_gaussian(m0, ls0, dr["actor"])
    actor_loss, _ = algo.actor_loss(batch["obs"]["policy"], draws["actor"], draws["policy_delta"], alpha)
    assert close(actor_loss, (0.4 * logp0 - np_q(algo.critic, s, a0).min(0)).mean() + smooth)


def test_ro2o_antmaze_lcb_variant_by_hand():
    """actor_objective=lcb (ro2o_antmaze_LCB.py): the actor maximises mean_i V_i + beta std_i V_i (V_i = Q_i -
    alpha log pi, unbiased std) with a BC term on the batch's actions; each critic regresses its own backup."""
    algo = make_ro2o(actor_objective="lcb", lcb_beta=-4.0, beta_bc=5.0, beta_policy=0.0)
    batch, b = tiny_batch(), np_batch(tiny_batch())
    draws = algo.draw(4, torch.Generator().manual_seed(5))
    dr = {k: v.double().numpy() for k, v in draws.items()}
    alpha = torch.tensor(0.3)
    m0, ls0 = np_actor_stats(algo.actor, b["s"])
    a0, logp0 = np_tanh_gaussian(m0, ls0, dr["actor"])
    v = np_q(algo.critic, b["s"], a0) - 0.3 * logp0
    expected = -(v.mean(0) - 4.0 * v.std(0, ddof=1)).mean() + 5.0 * ((a0 - b["a"]) ** 2).mean()
    actor_loss, stats = algo.actor_loss(batch["obs"]["policy"], draws["actor"], draws["policy_delta"], alpha,
                                        batch["actions"])
    assert close(actor_loss, expected) and float(stats["bc_loss"]) > 0
    m2, ls2 = np_actor_stats(algo.actor, b["s2"])
    a2, logp2 = np_tanh_gaussian(m2, ls2, dr["target"])
    y = b["r"] + b["d"] * (np_q(algo.critic_target, b["s2"], a2) - 0.3 * logp2)  # [E, B]: no min
    assert y.shape == (3, 4)
    _, stats = algo.critic_loss(batch, draws, alpha)
    assert close(stats["td_loss"], ((np_q(algo.critic, b["s"], b["a"]) - y) ** 2).mean(-1).sum())
    assert algo.update(batch)["bc_loss"] > 0 and all(torch.isfinite(p).all() for p in algo.critic.parameters())
    with pytest.raises(ConfigError, match="actor_objective"):
        RO2OConfig(actor_objective="mean").validate()


def test_ro2o_ood_weight_decays_and_the_update_runs():
    algo = make_ro2o(ood_reg=1.0, ood_reg_min=0.4, ood_reg_decay=0.25)
    batch = tiny_batch()
    seen = [float(algo.update(batch, torch.Generator().manual_seed(i))["ood_reg"]) for i in range(4)]
    assert seen == pytest.approx([1.0, 0.75, 0.5, 0.4]) and algo.updates == 4  # floored at the minimum
    assert all(torch.isfinite(p).all() for p in algo.critic.parameters())
    with pytest.raises(ConfigError, match="num_critics"):
        RO2OConfig(num_critics=1).validate()
    with pytest.raises(ConfigError, match="sample_size"):
        RO2OConfig(sample_size=0).validate()


def test_cql_target_over_a_random_subset_of_critics():
    """WSRL's pre-training: Cal-QL / CQL with 10 critics whose TD target is the min over 2 drawn each step."""
    algo = make_cql(num_critics=4, num_min_critics=2)
    batch, b = tiny_batch(), np_batch(tiny_batch())
    draws = algo.draw(4, torch.Generator().manual_seed(5))
    assert draws["subset"].shape == (2,)
    mu, log_std = algo._test_actor
    a2, _ = np_tanh_gaussian(mu, log_std, draws["target"].double().numpy())
    q2 = np_q(algo.critic_target, b["s2"], a2)[draws["subset"].numpy()].min(0)
    assert np.allclose(algo.target(batch, draws["target"], draws["subset"]).numpy(), b["r"] + b["d"] * q2, atol=1e-5)
    full = make_cql(num_critics=4)  # 0: all of them, and no random draw for it
    assert full.draw(4, torch.Generator().manual_seed(5))["subset"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="num_min_critics"):
        make_cql(num_critics=2, num_min_critics=3, subset_replace=False)
    assert math.isfinite(float(algo.update(batch, torch.Generator().manual_seed(0))["critic_loss"]))


def test_perturbations_are_in_normalised_units():
    """The eps are in the units the networks see (the official code normalises states, then perturbs them): with
    states of std 100 a perturbation of 0.01 moves a normalised state by 0.01, not by 1e-4."""
    from policies.normalizer import FixedNorm

    algo = make_ro2o()
    assert algo.cfg.normalize_states
    states = torch.randn(500, D) * 100.0 + 5.0
    algo.fit_state_normalizer(states)
    norm = next(m for m in algo.actor.modules() if isinstance(m, FixedNorm))
    obs, delta = states[:4], torch.full((3, D), 0.01)
    moved = norm(algo.perturbed(obs, delta)).view(4, 3, D) - norm(obs).unsqueeze(1)
    assert torch.allclose(moved, torch.full_like(moved, 0.01), atol=1e-4)
