"""The offline algorithms (BC, TD3+BC, IQL, CQL, Cal-QL, ReBRAC): each loss equals a computation by hand (numpy, from
the networks' weights), each learns a small point-mass problem from a fixed dataset, bad configs are ConfigErrors,
and their checkpoints load as policies."""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import pytest
import torch
from torch import nn

from policies.ensemble import EnsembleLinear, EnsembleMLP, MemberLayerNorm
from policies.normalizer import FixedNorm
from robolearn.algos.offline.bc import BC, BCConfig
from robolearn.algos.offline.calql import CalQL, CalQLConfig, return_to_go
from robolearn.algos.offline.cql import CQL, CQLConfig
from robolearn.algos.offline.iql import IQL, IQLConfig
from robolearn.algos.offline.rebrac import ReBRAC, ReBRACConfig
from robolearn.algos.offline.ro2o import RO2O, RO2OConfig
from robolearn.algos.offline.td3_bc import TD3BC, TD3BCConfig
from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.policy import load_policy
from robolearn.core.losses import expectile_loss
from robolearn.errors import ConfigError

D, A = 3, 2  # observation and action sizes of the hand-computed batches


# --- numpy references ------------------------------------------------------------------------------------------

def np_mlp(module: EnsembleMLP, x: np.ndarray) -> np.ndarray:
    """[E, B, out] the ensemble MLP evaluated in float64 numpy from its weights (an independent forward pass)."""
    h = np.broadcast_to(x, (module.num_members, *x.shape)).astype(np.float64)
    for layer in module.net:
        if isinstance(layer, EnsembleLinear):
            h = h @ layer.weight.detach().double().numpy() + layer.bias.detach().double().numpy()
        elif isinstance(layer, MemberLayerNorm):
            h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + layer.eps)
            h = h * layer.weight.detach().double().numpy() + layer.bias.detach().double().numpy()
        elif isinstance(layer, nn.ReLU):
            h = np.maximum(h, 0.0)
        else:
            raise AssertionError(f"unexpected layer {layer}")
    return h


def np_q(critic, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """[E, B] every critic at (obs, actions)."""
    return np_mlp(critic.net, np.concatenate([obs, actions], -1))[..., 0]


def np_q_many(critic, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """[E, B, n] every critic at (obs[b], actions[b, k])."""
    return np.stack([np_q(critic, obs, actions[:, k]) for k in range(actions.shape[1])], -1)


def np_det_actor(actor, obs: np.ndarray) -> np.ndarray:
    return np.tanh(np_mlp(actor.net, obs)[0])


def fix_gaussian_actor(actor, mean: list[float], raw_log_std: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Make a tanh-Gaussian actor's mu and log sigma the same for every state (output layer weights 0);
    returns mu and log sigma as the actor squashes it into [-5, 2] (a shared log-std is clipped, not squashed)."""
    last = actor.net.net[-1]
    with torch.no_grad():
        last.weight.zero_()
        if actor.log_std is not None:
            last.bias.copy_(torch.tensor(mean).view(1, 1, -1))
            actor.log_std.copy_(torch.tensor(raw_log_std))
            return np.array(mean), np.clip(np.array(raw_log_std), -5.0, 2.0)
        last.bias.copy_(torch.tensor(mean + raw_log_std).view(1, 1, -1))
    log_std = -5.0 + 0.5 * 7.0 * (np.tanh(np.array(raw_log_std)) + 1.0)
    return np.array(mean), log_std


def np_tanh_gaussian(mean: np.ndarray, log_std: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tanh(mu + sigma eps) and its log-density (change of variables), per leading index."""
    pre = mean + np.exp(log_std) * eps
    a = np.tanh(pre)
    logp = (-0.5 * eps**2 - log_std - 0.5 * np.log(2 * np.pi) - np.log(1 - a**2)).sum(-1)
    return a, logp


def tiny_batch(seed: int = 0) -> dict:
    """4 transitions with D=3, A=2; one termination (discount 0)."""
    g = torch.Generator().manual_seed(seed)
    return {"obs": {"policy": torch.randn(4, D, generator=g)}, "actions": torch.rand(4, A, generator=g) * 2 - 1,
            "rewards": torch.tensor([1.0, -0.5, 0.25, 2.0]), "next_obs": {"policy": torch.randn(4, D, generator=g)},
            "discount": torch.tensor([0.9, 0.9, 0.0, 0.9]), "steps": torch.ones(4),
            "next_actions": torch.rand(4, A, generator=g) * 2 - 1, "mc_returns": torch.tensor([3.0, -2.0, 0.5, -9.0])}


def np_batch(batch: dict) -> dict:
    return {"s": batch["obs"]["policy"].double().numpy(), "a": batch["actions"].double().numpy(),
            "r": batch["rewards"].double().numpy(), "s2": batch["next_obs"]["policy"].double().numpy(),
            "d": batch["discount"].double().numpy(), "a2": batch["next_actions"].double().numpy(),
            "g": batch["mc_returns"].double().numpy()}


def close(x: torch.Tensor | float, expected: float) -> bool:
    x = x.detach() if isinstance(x, torch.Tensor) else x
    return math.isclose(float(x), float(expected), rel_tol=1e-4, abs_tol=1e-5)


def randomize_targets(algo) -> None:
    """Give the target networks their own weights, so a test notices a target / online mix-up."""
    torch.manual_seed(123)
    for name in ("critic_target", "actor_target"):
        if hasattr(algo, name):
            with torch.no_grad():
                for p in getattr(algo, name).parameters():
                    p.add_(0.3 * torch.randn_like(p))


# --- losses by hand --------------------------------------------------------------------------------------------

def test_expectile_loss_and_log_prob():
    u = torch.tensor([-2.0, -0.5, 0.5, 3.0])
    assert close(expectile_loss(u, 0.7), (0.3 * 4 + 0.3 * 0.25 + 0.7 * 0.25 + 0.7 * 9) / 4)
    assert close(expectile_loss(u, 0.5), 0.5 * float((u**2).mean()))
    with pytest.raises(ConfigError):
        expectile_loss(u, 1.0)
    # BC with a tanh-Gaussian: -mean log pi(a|s) with atanh of the actions clipped to +-(1 - 1e-6)
    torch.manual_seed(0)
    algo = BC(D, A, BCConfig(actor="tanh_gaussian", actor_hidden=(8,)))
    mu, log_std = fix_gaussian_actor(algo.actor, [0.2, -0.4], [0.1, -0.3])
    batch = tiny_batch()
    a = batch["actions"].double().numpy()
    z = (np.arctanh(a) - mu) / np.exp(log_std)
    logp = (-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi) - np.log(1 - a**2)).sum(-1)
    assert close(algo.actor_loss(batch), -logp.mean())
    batch["actions"][0] = torch.tensor([1.0, -1.0])  # on the bounds: finite, with finite gradients
    loss = algo.actor_loss(batch)
    grads = torch.autograd.grad(loss, list(algo.actor.parameters()))
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)


def test_bc_loss():
    torch.manual_seed(0)
    algo = BC(D, A, BCConfig(actor_hidden=(8, 8)))
    batch = tiny_batch()
    b = np_batch(batch)
    assert close(algo.actor_loss(batch), ((np_det_actor(algo.actor, b["s"]) - b["a"]) ** 2).mean())
    stats = algo.update(batch)
    assert algo.updates == 1 and stats["actor_loss"].ndim == 0 and not stats["actor_loss"].requires_grad


def test_td3_bc_losses():
    torch.manual_seed(0)
    algo = TD3BC(D, A, TD3BCConfig(actor_hidden=(8,), critic_hidden=(8, 8), alpha=2.5))
    randomize_targets(algo)
    batch, noise = tiny_batch(), torch.tensor([[0.1, -0.5], [0.3, 0.0], [-0.2, 0.2], [0.5, 0.5]])
    b = np_batch(batch)
    a2 = np.clip(np_det_actor(algo.actor_target, b["s2"]) + noise.double().numpy(), -1, 1)
    y = b["r"] + b["d"] * np_q(algo.critic_target, b["s2"], a2).min(0)
    expected = ((np_q(algo.critic, b["s"], b["a"]) - y) ** 2).mean(-1).sum()
    assert close(algo.critic_loss(batch, noise)[0], expected)
    pi = np_det_actor(algo.actor, b["s"])
    q1 = np_q(algo.critic, b["s"], pi)[0]
    lmbda = 2.5 / np.abs(q1).mean()
    loss, stats = algo.actor_loss(batch)
    assert close(loss, -lmbda * q1.mean() + ((pi - b["a"]) ** 2).mean()) and close(stats["lambda"], lmbda)
    # the smoothing noise is N(0, 0.2^2) clipped to +-0.5; the actor and targets move every 2nd update only
    assert algo.draw(10_000, torch.Generator().manual_seed(0)).abs().max() <= 0.5
    actor_before = [p.clone() for p in algo.actor.parameters()]
    target_before = [p.clone() for p in algo.critic_target.parameters()]
    assert "actor_loss" not in algo.update(batch)
    assert all(torch.equal(p, q) for p, q in zip(actor_before, algo.actor.parameters(), strict=True))
    assert all(torch.equal(p, q) for p, q in zip(target_before, algo.critic_target.parameters(), strict=True))
    assert "actor_loss" in algo.update(batch) and algo.updates == 2
    assert not all(torch.equal(p, q) for p, q in zip(actor_before, algo.actor.parameters(), strict=True))


def test_rebrac_losses():
    torch.manual_seed(0)
    cfg = ReBRACConfig(actor_hidden=(8,), critic_hidden=(8, 8), beta_actor=0.3, beta_critic=0.7)
    algo = ReBRAC(D, A, cfg)
    assert isinstance(algo.critic.net.net[1], MemberLayerNorm)  # LayerNorm critics by default
    randomize_targets(algo)
    batch, noise = tiny_batch(), torch.tensor([[0.1, -0.5], [0.3, 0.0], [-0.2, 0.2], [0.5, 0.5]])
    b = np_batch(batch)
    a2 = np.clip(np_det_actor(algo.actor_target, b["s2"]) + noise.double().numpy(), -1, 1)
    next_q = np_q(algo.critic_target, b["s2"], a2).min(0) - 0.7 * ((a2 - b["a2"]) ** 2).sum(-1)
    y = b["r"] + b["d"] * next_q
    assert close(algo.critic_loss(batch, noise)[0], ((np_q(algo.critic, b["s"], b["a"]) - y) ** 2).mean(-1).sum())
    pi = np_det_actor(algo.actor, b["s"])
    q = np_q(algo.critic, b["s"], pi).min(0)
    expected = (0.3 * ((pi - b["a"]) ** 2).sum(-1) - q / np.abs(q).mean()).mean()
    assert close(algo.actor_loss(batch)[0], expected)
    del batch["next_actions"]
    with pytest.raises(ConfigError, match="next_actions"):
        algo.update(batch)


@pytest.mark.parametrize("actor, shared_std", [("tanh_gaussian", True), ("tanh_gaussian", False),
                                               ("deterministic", False)])
def test_iql_losses(actor, shared_std):
    torch.manual_seed(0)
    cfg = IQLConfig(actor=actor, actor_hidden=(8,), critic_hidden=(8, 8), value_hidden=(8,), expectile=0.8, beta=3.0,
                    max_weight=100.0, reward_scale=2.0, reward_bias=-1.0, shared_std=shared_std)
    algo = IQL(D, A, cfg)
    randomize_targets(algo)
    batch = tiny_batch()
    b = np_batch(batch)
    v = np_mlp(algo.value, b["s"])[0, :, 0]
    u = np_q(algo.critic_target, b["s"], b["a"]).min(0) - v
    loss, adv = algo.value_loss(batch)
    assert close(loss, (np.where(u < 0, 0.2, 0.8) * u**2).mean()) and np.allclose(adv.numpy(), u, atol=1e-5)
    next_v = torch.tensor([0.5, -1.0, 7.0, 2.0])
    y = 2.0 * b["r"] - 1.0 + b["d"] * next_v.double().numpy()
    assert close(algo.critic_loss(batch, next_v), ((np_q(algo.critic, b["s"], b["a"]) - y) ** 2).mean())
    adv = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    w = np.minimum(np.exp(3.0 * adv.double().numpy()), 100.0)  # exp(6) = 403 is clipped to 100
    if actor == "deterministic":
        per_sample = ((np_det_actor(algo.actor, b["s"]) - b["a"]) ** 2).sum(-1)
    else:  # log-likelihood under N(tanh(mu), sigma) (CORL's Gaussian policy with a tanh'd mean)
        mu, log_std = fix_gaussian_actor(algo.actor, [0.3, -0.2], [0.5, -6.0])  # -6: a shared one clips at -5
        assert (algo.actor.log_std is not None) == shared_std
        z = (b["a"] - np.tanh(mu)) / np.exp(log_std)
        per_sample = -(-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    assert close(algo.actor_loss(batch, adv)[0], (w * per_sample).mean())
    # the actor's learning rate decays along a cosine over actor_lr_decay_steps, from `updates`
    algo.cfg.actor_lr_decay_steps = 10
    algo.updates = 5
    assert math.isclose(algo.actor_lr(), 0.5 * cfg.actor_lr)
    algo.updates = 20
    assert algo.actor_lr() == 0.0


def draws_for(algo, seed=0) -> dict:
    return algo.draw(4, torch.Generator().manual_seed(seed))


def np_cql_critic_loss(algo, batch, draws, bound=None):
    """The CQL critic loss (TD + conservative term) and alpha' loss by hand, the actor fixed by `fix_gaussian_actor`."""
    cfg, b = algo.cfg, np_batch(batch)
    mu, log_std = algo._test_actor
    dr = {k: v.double().numpy() for k, v in draws.items()}
    a2, _ = np_tanh_gaussian(mu, log_std, dr["target"])
    y = b["r"] + b["d"] * np_q(algo.critic_target, b["s2"], a2).min(0)
    q = np_q(algo.critic, b["s"], b["a"])
    td = ((q - y) ** 2).mean(-1).sum()
    cur, logp_cur = np_tanh_gaussian(mu, log_std, dr["current"])
    nxt, logp_nxt = np_tanh_gaussian(mu, log_std, dr["next"])
    q_rand, q_cur, q_nxt = (np_q_many(algo.critic, b["s"], x) for x in (dr["random"], cur, nxt))  # all at s
    if bound is not None:
        q_cur, q_nxt = np.maximum(q_cur, bound[None, :, None]), np.maximum(q_nxt, bound[None, :, None])
    if cfg.cql_importance_sample:
        cat = np.concatenate([q_rand - A * np.log(0.5), q_nxt - logp_nxt, q_cur - logp_cur], -1)
    else:
        cat = np.concatenate([q_rand, q[..., None], q_nxt, q_cur], -1)
    t = cfg.cql_temp
    lse = t * np.log(np.exp(cat / t).sum(-1))
    diff = lse - q
    if cfg.cql_clip_diff_min is not None:
        diff = np.maximum(diff, cfg.cql_clip_diff_min)
    gap = diff.mean(-1)
    if cfg.cql_lagrange:
        alpha_prime = np.exp(1.0)
        return td + (alpha_prime * cfg.cql_alpha * (gap - cfg.cql_target_action_gap)).sum(), \
            -(alpha_prime * cfg.cql_alpha * (gap - cfg.cql_target_action_gap)).mean()
    return td + cfg.cql_alpha * gap.sum(), 0.0


def make_cql(cls=CQL, cfg_cls=CQLConfig, **kw):
    torch.manual_seed(0)
    algo = cls(D, A, cfg_cls(actor_hidden=(8,), critic_hidden=(8, 8), cql_n_actions=3, **kw))
    randomize_targets(algo)
    algo._test_actor = fix_gaussian_actor(algo.actor, [0.3, -0.6], [-0.2, 0.4])
    return algo


@pytest.mark.parametrize("kw", [{}, {"cql_lagrange": True, "cql_target_action_gap": 0.8, "cql_importance_sample": False,
                                      "cql_temp": 2.0, "cql_clip_diff_min": -0.5, "cql_alpha": 5.0}])
def test_cql_losses(kw):
    algo = make_cql(**kw)
    batch, draws = tiny_batch(), draws_for(algo)
    loss, gap, _ = algo.critic_loss(batch, draws)
    expected, expected_ap = np_cql_critic_loss(algo, batch, draws)
    alpha_prime_loss = algo.alpha_prime_loss(gap) if algo.cfg.cql_lagrange else torch.zeros(())
    assert close(loss, expected) and close(alpha_prime_loss, expected_ap)
    # actor: mean(alpha log pi - min_i Q_i(s, a)), a = tanh(mu + sigma eps); temperature: -log alpha (log pi - |A|)
    b, (mu, log_std) = np_batch(batch), algo._test_actor
    a, logp = np_tanh_gaussian(mu, log_std, draws["actor"].double().numpy())
    actor_loss, logp_t = algo.actor_loss(batch, draws["actor"], torch.tensor(0.3))
    assert close(actor_loss, (0.3 * logp - np_q(algo.critic, b["s"], a).min(0)).mean())
    with torch.no_grad():
        algo.log_alpha.fill_(math.log(0.3))
    assert close(algo.temperature_loss(logp_t), -(math.log(0.3) * (logp - A)).mean())
    stats = algo.update(batch, torch.Generator().manual_seed(1))
    assert all(v.ndim == 0 and not v.requires_grad for v in stats.values())
    assert (float(stats["alpha_prime"]) > 0) == algo.cfg.cql_lagrange


def test_cql_max_target_backup_and_bc_steps():
    algo = make_cql(cql_max_target_backup=True, backup_entropy=True, bc_steps=1)
    batch, draws = tiny_batch(), draws_for(algo)
    b, (mu, log_std) = np_batch(batch), algo._test_actor
    a2, logp2 = np_tanh_gaussian(mu, log_std, draws["target"].double().numpy())  # [B, n, A], [B, n]
    q2 = np_q_many(algo.critic_target, b["s2"], a2).min(0)
    best = q2.argmax(-1)
    rows = np.arange(4)
    y = b["r"] + b["d"] * (q2[rows, best] - algo.alpha.item() * logp2[rows, best])
    assert np.allclose(algo.target(batch, draws["target"]).numpy(), y, atol=1e-5)
    # within bc_steps (`update` passes bc_phase = updates < bc_steps) the actor maximises log pi(a_data|s), not Q
    a, logp = np_tanh_gaussian(mu, log_std, draws["actor"].double().numpy())
    a_data = np.clip(b["a"], -1 + 1e-6, 1 - 1e-6)
    z = (np.arctanh(a_data) - mu) / np.exp(log_std)
    logp_data = (-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi) - np.log(1 - a_data**2)).sum(-1)
    assert close(algo.actor_loss(batch, draws["actor"], torch.tensor(1.0), bc_phase=True)[0],
                 (logp - logp_data).mean())


def test_calql_bounds_policy_values_by_mc_returns():
    algo = make_cql(CalQL, CalQLConfig)
    batch, draws = tiny_batch(), draws_for(algo)
    loss, _, stats = algo.critic_loss(batch, draws)
    bound = batch["mc_returns"].double().numpy()
    assert close(loss, np_cql_critic_loss(algo, batch, draws, bound)[0])
    assert not close(loss, np_cql_critic_loss(algo, batch, draws)[0])  # the bound of 3.0 is active
    assert 0.0 < float(stats["bound_rate"]) < 1.0
    algo.cfg.calibrate = False  # CORL's online phase: plain CQL, also on online batches (no Monte-Carlo returns)
    plain = np_cql_critic_loss(algo, batch, draws)[0]
    assert close(algo.critic_loss(batch, draws)[0], plain)
    del batch["mc_returns"]
    assert close(algo.critic_loss(batch, draws)[0], plain)
    algo.cfg.calibrate = True
    with pytest.raises(ConfigError, match="mc_returns"):
        algo.critic_loss(batch, draws)


def test_return_to_go():
    r = torch.tensor([1.0, 0.0, 2.0])
    assert torch.allclose(return_to_go(r, 0.5), torch.tensor([1.5, 1.0, 2.0]))
    assert torch.allclose(return_to_go(r, 0.5, reward_scale=2.0, reward_bias=-1.0), torch.tensor([1.25, 0.5, 3.0]))
    # a sparse task never solved: every step is worth failing forever, r_fail / (1 - gamma)
    fail = torch.zeros(4)
    assert torch.allclose(return_to_go(fail, 0.9, reward_scale=10.0, reward_bias=-5.0, failure_reward=0.0),
                          torch.full((4,), -50.0))
    # a dataset's episodes (rewards [N], step_starts [E + 1]) as the runner hands them over
    calql = CalQL(D, A, CalQLConfig(gamma=0.5, critic_hidden=(8,), actor_hidden=(8,)))
    got = calql.dataset_returns(np.array([1.0, 0.0, 2.0, 4.0, 2.0]), np.array([0, 3, 5]))
    assert torch.allclose(got, torch.tensor([1.5, 1.0, 2.0, 5.0, 2.0]))
    actions = np.arange(10.0).reshape(5, 2)
    following = ReBRAC.dataset_next_actions(actions, np.array([0, 3, 5]))
    assert following.tolist() == [[2, 3], [4, 5], [4, 5], [8, 9], [8, 9]]  # an episode's last step repeats its own


# --- learning ----------------------------------------------------------------------------------------------------

GAMMA, SPEED, T = 0.9, 0.25, 10


def expert(x: np.ndarray) -> np.ndarray:
    """The optimal action of the point problem: straight to the origin at full speed."""
    return np.clip(-x / SPEED, -1.0, 1.0)


def point_dataset(episodes: int = 400, random_fraction: float = 0.5, noise: float = 0.2, seed: int = 0) -> dict:
    """Episodes of a 2-D point x' = x + 0.25 a, r = -|x'|, 10 steps each (then a time-out, which bootstraps).

    Each episode is either the expert's (plus N(0, noise^2)) or uniformly random: BC on the mix is poor, an offline
    RL algorithm must pick the good actions out. Carries `next_actions` (ReBRAC) and `mc_returns` (Cal-QL)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("s", "a", "r", "s2", "a2", "g")}
    for _ in range(episodes):
        x, rand = rng.uniform(-1, 1, 2), rng.random() < random_fraction
        s, a, r, s2 = [], [], [], []
        for _ in range(T):
            act = rng.uniform(-1, 1, 2) if rand else np.clip(expert(x) + noise * rng.normal(size=2), -1, 1)
            x2 = x + SPEED * act
            s.append(x), a.append(act), r.append(-np.linalg.norm(x2)), s2.append(x2)
            x = x2
        cols["s"] += s
        cols["a"] += a
        cols["r"] += r
        cols["s2"] += s2
        cols["a2"] += a[1:] + a[-1:]
        cols["g"] += return_to_go(torch.tensor(r), GAMMA).tolist()
    f = {k: torch.tensor(np.array(v), dtype=torch.float32) for k, v in cols.items()}
    n = len(cols["r"])
    return {"obs": {"policy": f["s"]}, "actions": f["a"], "rewards": f["r"], "next_obs": {"policy": f["s2"]},
            "discount": torch.full((n,), GAMMA), "steps": torch.ones(n), "next_actions": f["a2"],
            "mc_returns": f["g"]}


def sample(data: dict, batch_size: int, gen: torch.Generator) -> dict:
    i = torch.randint(0, len(data["rewards"]), (batch_size,), generator=gen)
    return {k: {"policy": v["policy"][i]} if isinstance(v, dict) else v[i] for k, v in data.items()}


def action_error(algo) -> float:
    """Mean |pi(x) - expert(x)| of the deterministic policy on 500 held-out states (random actions: about 0.7)."""
    x = np.random.default_rng(123).uniform(-1, 1, (500, 2))
    actions = algo.act({"policy": torch.tensor(x, dtype=torch.float32)}, deterministic=True).numpy()
    return float(np.abs(actions - expert(x)).mean())


def train(algo, data: dict, steps: int, batch_size: int) -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        algo.update(sample(data, batch_size, gen), gen)


H = (64, 64)
FAST = {"gamma": GAMMA, "tau": 0.02, "actor_lr": 1e-3, "critic_lr": 1e-3}
CQL_FAST = {**FAST, "temperature_lr": 1e-3, "cql_n_actions": 4, "cql_alpha": 5.0, "init_temperature": 0.05,
            "actor_hidden": H, "critic_hidden": H}
LEARNERS = {  # name: (algorithm, updates, batch size, threshold on the action error)
    "td3_bc": (lambda: TD3BC(2, 2, TD3BCConfig(actor_hidden=H, critic_hidden=H, **FAST)), 500, 256, 0.25),
    "iql": (lambda: IQL(2, 2, IQLConfig(actor_hidden=H, critic_hidden=H, value_hidden=H, value_lr=1e-3,
                                        actor_lr_decay_steps=0, expectile=0.9, beta=10.0, **FAST)), 500, 256, 0.25),
    "rebrac": (lambda: ReBRAC(2, 2, ReBRACConfig(actor_hidden=H, critic_hidden=H, gamma=GAMMA, tau=0.02)),
               300, 256, 0.15),
    "cql": (lambda: CQL(2, 2, CQLConfig(**CQL_FAST)), 400, 128, 0.2),
    "calql": (lambda: CalQL(2, 2, CalQLConfig(**CQL_FAST)), 400, 128, 0.2),
}


@pytest.fixture(scope="module")
def mixed_data() -> dict:
    return point_dataset()


def test_bc_clones_the_expert_but_not_a_mixture(mixed_data):
    torch.manual_seed(0)
    algo = BC(2, 2, BCConfig(actor_hidden=H, actor_lr=1e-3))
    train(algo, point_dataset(100, random_fraction=0.0, seed=1), 400, 256)
    assert action_error(algo) < 0.15
    torch.manual_seed(0)
    algo = BC(2, 2, BCConfig(actor_hidden=H, actor_lr=1e-3))
    train(algo, mixed_data, 400, 256)
    assert action_error(algo) > 0.4  # the reason for the algorithms below


@pytest.mark.parametrize("name", list(LEARNERS))
def test_offline_rl_recovers_the_expert_from_mixed_data(name, mixed_data):
    make, steps, batch_size, threshold = LEARNERS[name]
    torch.manual_seed(0)
    algo = make()
    start = time.perf_counter()
    train(algo, mixed_data, steps, batch_size)
    err = action_error(algo)
    assert err < threshold, f"{name}: action error {err:.3f} after {steps} updates ({time.perf_counter() - start:.1f}s)"
    assert algo.updates == steps


def test_calql_values_sit_above_cql_values(mixed_data):
    """Same seeds, same draws: the calibration only removes pessimism, so Cal-QL's Q on the data ends higher."""
    q = {}
    for name in ("cql", "calql"):
        make, steps, batch_size, _ = LEARNERS[name]
        torch.manual_seed(0)
        algo = make()
        train(algo, mixed_data, steps // 2, batch_size)
        with torch.no_grad():
            q[name] = float(algo.critic(mixed_data["obs"]["policy"], mixed_data["actions"]).min(0).values.mean())
    assert q["calql"] > q["cql"] + 0.2, q


# --- configs and checkpoints ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, match", [
    (BCConfig(actor="gaussian"), "bc.actor"),
    (BCConfig(actor_lr=0.0), "bc.actor_lr"),
    (TD3BCConfig(alpha=-1.0), "td3_bc.alpha"),
    (TD3BCConfig(actor_every=0), "td3_bc.actor_every"),
    (TD3BCConfig(gamma=1.5), "td3_bc.gamma"),
    (IQLConfig(expectile=1.0), "iql.expectile"),
    (IQLConfig(activation="relu6"), "iql.activation"),
    (IQLConfig(critic_hidden=()), "iql.critic_hidden"),
    (CQLConfig(cql_n_actions=0), "cql.cql_n_actions"),
    (CQLConfig(cql_clip_diff_min=1.0, cql_clip_diff_max=-1.0), "cql.cql_clip_diff_min"),
    (CalQLConfig(tau=0.0), "calql.tau"),
    (ReBRACConfig(beta_critic=-0.1), "rebrac.beta"),
    (ReBRACConfig(batch_size=0), "rebrac.batch_size"),
])
def test_bad_configs_are_config_errors(cfg, match):
    with pytest.raises(ConfigError, match=match):
        cfg.validate()


def test_fixed_norm_is_corls_state_normalisation():
    """mean and population std + 1e-3 of the states (CORL `compute_mean_std`); a critic's [obs, action] input keeps
    its actions as they are."""
    x = torch.randn(1000, 3, dtype=torch.float64) * torch.tensor([1.0, 10.0, 0.01]) + torch.tensor([5.0, -2.0, 0.0])
    norm = FixedNorm(5)
    norm.fit(x)
    ref = x.numpy()
    assert np.allclose(norm.mean[:3].numpy(), ref.mean(0), atol=1e-5)
    assert np.allclose(norm.std[:3].numpy(), ref.std(0) + 1e-3, rtol=1e-5)
    assert norm.mean[3:].tolist() == [0.0, 0.0] and norm.std[3:].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="6 features"):
        norm.fit(torch.zeros(2, 6))


@pytest.mark.parametrize("name", ["td3_bc", "iql", "cql"])
def test_normalising_inside_the_networks_equals_normalising_the_dataset(name, mixed_data):
    """`normalize_states` fits a normaliser in every network on the dataset; training on raw states with it is
    CORL's recipe (normalise the dataset's states once, and the evaluation env's by the same statistics): the same
    updates from the same draws, the same actions on raw states."""
    scale, shift = torch.tensor([30.0, 0.5]), torch.tensor([100.0, -3.0])
    raw = {k: ({"policy": v["policy"] * scale + shift} if isinstance(v, dict) else v) for k, v in mixed_data.items()}
    make, _, batch_size, _ = LEARNERS[name]
    torch.manual_seed(0)
    ours = make()
    assert ours.cfg.normalize_states  # CORL's default for TD3+BC, IQL and CQL
    ours.fit_state_normalizer(raw["obs"]["policy"])
    mean, std = raw["obs"]["policy"].mean(0), raw["obs"]["policy"].std(0, unbiased=False) + 1e-3
    corl_data = {k: ({"policy": (v["policy"] - mean) / std} if isinstance(v, dict) else v) for k, v in raw.items()}
    torch.manual_seed(0)
    corl = make()  # the same initial weights; its normalisers stay the identity (CORL's nets see normalised states)
    train(ours, raw, 30, batch_size)
    train(corl, corl_data, 30, batch_size)
    states = raw["obs"]["policy"][:64]
    assert torch.allclose(ours.act({"policy": states}, deterministic=True),
                          corl.act({"policy": (states - mean) / std}, deterministic=True), atol=1e-4)
    with torch.no_grad():
        assert torch.allclose(ours.critic(states, raw["actions"][:64]),
                              corl.critic((states - mean) / std, raw["actions"][:64]), atol=1e-3)


@pytest.mark.parametrize("cls, cfg", [(IQL, IQLConfig(actor_hidden=(16,), critic_hidden=(16,), value_hidden=(16,))),
                                      (TD3BC, TD3BCConfig(actor_hidden=(16, 16), critic_hidden=(16,),
                                                          actor_layer_norm=True)),
                                      (CQL, CQLConfig(actor_hidden=(16,), critic_hidden=(16,))),
                                      (BC, BCConfig(actor_hidden=(16,)))])
def test_checkpoints_load_as_policies(tmp_path, cls, cfg):
    torch.manual_seed(0)
    algo = cls(D, A, cfg)
    algo.fit_state_normalizer(torch.randn(100, D) * 5.0 + 2.0)  # the loaded policy normalises raw states itself
    algo.update(tiny_batch())
    algo.update(tiny_batch(1))
    checkpoint.save(tmp_path / "ckpt", {"policy": algo.config, "run": {}}, algo.model_state())
    policy = load_policy(tmp_path / "ckpt")
    assert policy.kind == algo.config["actor"]  # the actor kind: tanh_gaussian or deterministic
    obs = {"policy": torch.randn(5, D)}
    assert torch.allclose(policy(obs), algo.act(obs, deterministic=True))
    assert "actor.net.obs_norm.std" in algo.model_state()  # BC, TD3+BC, IQL, CQL normalise by default (CORL)
    # and the whole learner restores: same actions, same next update
    clone = cls(D, A, cfg)
    config, state = checkpoint.load(tmp_path / "ckpt")
    assert config["policy"]["algo"] == cls.name and config["policy"][cls.name]["actor_hidden"] == list(cfg.actor_hidden)
    clone.load_model_state(state)
    clone.updates = algo.updates
    for opt_name, opt in algo.optimizers.items():
        clone.optimizers[opt_name].load_state_dict(copy.deepcopy(opt.state_dict()))  # not the same tensors
    a = algo.update(tiny_batch(2), torch.Generator().manual_seed(3))
    b = clone.update(tiny_batch(2), torch.Generator().manual_seed(3))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("actor", ["tanh_gaussian", "deterministic"])
def test_compiled_iql_update_matches_eager(actor):
    """`compile: true` runs IQL's update (three fits, Adam written out, Polyak) as one graph: the same losses and
    parameters as the eager update through the cosine actor schedule (its rate a graph input: no recompiles)."""
    learners = []
    for compiled in (False, True):
        torch.manual_seed(0)
        cfg = IQLConfig(actor=actor, actor_hidden=(16,), critic_hidden=(16,), value_hidden=(16,),
                        actor_lr_decay_steps=6, reward_scale=0.5, reward_bias=0.3, compile=compiled)
        learners.append(IQL(3, 2, cfg))
    stats = [[{k: float(v) for k, v in learner.update(tiny_batch(seed)).items()} for seed in range(6)]
             for learner in learners]
    for eager, compiled in zip(*stats, strict=True):
        assert eager.keys() == compiled.keys()
        for k in eager:
            assert compiled[k] == pytest.approx(eager[k], rel=1e-4, abs=1e-5), k
    for name in ("actor", "critic", "value"):
        for p, q in zip(getattr(learners[0], name).parameters(), getattr(learners[1], name).parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    last = 3e-4 * 0.5 * (1 + math.cos(math.pi * 5 / 6))  # the last update's rate, on the cosine to 0 at step 6
    assert [learner.optimizers["actor"].param_groups[0]["lr"] for learner in learners] == pytest.approx([last] * 2)


@pytest.mark.parametrize("cls, cfg_cls, kw", [(ReBRAC, ReBRACConfig, {"actor_every": 2}),
                                                (CQL, CQLConfig, {"bc_steps": 2, "cql_lagrange": True}),
                                                (RO2O, RO2OConfig, {"num_critics": 2, "sample_size": 2,
                                                                    "ood_reg_decay": 0.1})])
def test_compiled_offline_updates_match_eager(cls, cfg_cls, kw):
    """`compile: true` (ReBRAC, and so TD3+BC whose update it runs: a critic and an actor graph; CQL, and so Cal-QL:
    one graph with the Lagrange and temperature steps, across the BC warm-up; RO2O: one graph, its decaying lambda a
    graph input): the same draws and math as eager."""
    learners = []
    for compiled in (False, True):
        torch.manual_seed(0)
        cfg = cfg_cls(actor_hidden=(16,), critic_hidden=(16,), reward_scale=0.5, compile=compiled, **kw)
        learners.append(cls(3, 2, cfg))
    stats = []
    for learner in learners:
        g = torch.Generator().manual_seed(1)
        stats.append([{k: float(v) for k, v in learner.update(tiny_batch(seed), g).items()} for seed in range(4)])
    for eager, compiled in zip(*stats, strict=True):
        assert eager.keys() == compiled.keys()
        for k in eager:
            assert compiled[k] == pytest.approx(eager[k], rel=1e-4, abs=1e-5), k
    for a, b in zip(learners[0].model_state().values(), learners[1].model_state().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
