"""Replay buffer bootstrapping, batched ensembles, ensemble subsets and HL-Gauss: the off-policy building blocks."""

from __future__ import annotations

import pytest
import torch

from policies.ensemble import EnsembleMLP, QEnsemble, TanhGaussianActor
from robolearn.algos.common import adam_step_, init_adam_state, subset_indices
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.algos.online.td3 import TD3, TD3Config
from robolearn.core.buffers import ReplayBuffer, sample_mixed
from robolearn.core.losses import HLGauss
from robolearn.errors import ConfigError


def _fill(buf: ReplayBuffer, rewards: list[float], terminated: list[bool], truncated: list[bool]) -> None:
    """One env; obs at step t is t, the true next obs is t + 0.5 (so final observations are recognisable)."""
    for t, (r, term, trunc) in enumerate(zip(rewards, terminated, truncated, strict=True)):
        obs = {"policy": torch.tensor([[float(t)]])}
        nxt = {"policy": torch.tensor([[t + 0.5]])}
        buf.add(obs, torch.zeros(1, 1), torch.tensor([r]), nxt, torch.tensor([term]), torch.tensor([trunc]))


def _batch_by_obs(buf: ReplayBuffer) -> dict[float, tuple[float, float, float]]:
    b = buf.sample(4096, torch.Generator().manual_seed(0))
    out = {}
    for o, r, nxt, d in zip(b["obs"]["policy"][:, 0].tolist(), b["rewards"].tolist(),
                            b["next_obs"]["policy"][:, 0].tolist(), b["discount"].tolist(), strict=True):
        out[o] = (r, nxt, d)
    return out


def test_time_outs_bootstrap_and_terminations_do_not():
    buf = ReplayBuffer(16, 1, {"policy": 1}, 1, gamma=0.9)
    _fill(buf, [1.0, 2.0, 3.0], terminated=[False, True, False], truncated=[False, False, True])
    by_obs = _batch_by_obs(buf)
    assert by_obs[0.0] == (1.0, 0.5, pytest.approx(0.9))
    assert by_obs[1.0] == (2.0, 1.5, 0.0)                       # terminated: no bootstrap
    assert by_obs[2.0] == (3.0, 2.5, pytest.approx(0.9))        # time-out: bootstrap from the final obs


def test_n_step_returns_stop_at_episode_ends_and_the_newest_step():
    buf = ReplayBuffer(16, 1, {"policy": 1}, 1, n_step=3, gamma=0.5)
    _fill(buf, [1.0, 2.0, 4.0, 8.0, 16.0], terminated=[False, False, True, False, False],
          truncated=[False] * 5)
    by_obs = _batch_by_obs(buf)
    assert by_obs[0.0] == (1 + 0.5 * 2 + 0.25 * 4, 2.5, 0.0)     # three steps, ends in a termination
    assert by_obs[1.0] == (2 + 0.5 * 4, 2.5, 0.0)                # stops at the termination
    assert by_obs[3.0] == (8 + 0.5 * 16, 4.5, pytest.approx(0.25))  # only two steps exist yet


def test_ring_buffer_overwrites_oldest_and_round_trips():
    buf = ReplayBuffer(4, 1, {"policy": 1}, 1)
    _fill(buf, [float(i) for i in range(6)], [False] * 6, [False] * 6)
    assert len(buf) == 4 and set(_batch_by_obs(buf)) == {2.0, 3.0, 4.0, 5.0}
    tensors, meta = buf.state_dict()
    again = ReplayBuffer(4, 1, {"policy": 1}, 1)
    again.load_state_dict(tensors, meta)
    assert _batch_by_obs(again) == _batch_by_obs(buf)
    with pytest.raises(ConfigError, match="layout"):
        ReplayBuffer(8, 1, {"policy": 1}, 1).load_state_dict(tensors, meta)


def test_mixed_sampling_ratio():
    online = ReplayBuffer(16, 1, {"policy": 1}, 1)
    _fill(online, [0.0] * 8, [False] * 8, [False] * 8)
    offline = ReplayBuffer.from_transitions({"policy": torch.full((10, 1), 100.0)}, torch.zeros(10, 1),
                                            torch.ones(10), {"policy": torch.full((10, 1), 100.5)},
                                            torch.zeros(10, dtype=torch.bool), torch.zeros(10, dtype=torch.bool))
    batch = sample_mixed(online, offline, 256, 0.5, torch.Generator().manual_seed(0))
    assert int((batch["obs"]["policy"] == 100.0).sum()) == 128
    assert (sample_mixed(online, offline, 64, 0.0)["obs"]["policy"] < 100).all()


def test_ensemble_is_one_batched_network_equal_to_separate_members():
    torch.manual_seed(0)
    net = EnsembleMLP(5, 3, (8, 8), 2, layer_norm=True)
    x = torch.randn(7, 3)
    out = net(x)
    assert out.shape == (5, 7, 2)
    # member i alone equals slice i of the batched output
    for i in range(5):
        h = x
        for layer in net.net:
            if hasattr(layer, "weight") and layer.weight.ndim == 3 and layer.weight.shape[1] != 1:
                h = h @ layer.weight[i] + layer.bias[i]
            elif hasattr(layer, "weight"):  # member LayerNorm
                h = torch.nn.functional.layer_norm(h, h.shape[-1:]) * layer.weight[i] + layer.bias[i]
            else:
                h = layer(h)
        torch.testing.assert_close(out[i], h)
    assert QEnsemble(3, 2, num_critics=10)(torch.randn(4, 3), torch.randn(4, 2)).shape == (10, 4)


def test_tanh_gaussian_log_prob_matches_change_of_variables():
    torch.manual_seed(0)
    actor = TanhGaussianActor(3, 2, (16,))
    obs = torch.randn(1000, 3)
    actions, logp = actor.sample(obs)
    assert actions.abs().max() < 1
    mean, log_std = actor._stats(obs)
    pre = torch.atanh(actions.clamp(-1 + 1e-6, 1 - 1e-6))
    ref = torch.distributions.Normal(mean, log_std.exp()).log_prob(pre).sum(-1) - torch.log1p(-actions**2).sum(-1)
    torch.testing.assert_close(logp, ref, atol=2e-3, rtol=1e-3)


def test_sample_many_equals_sampling_each_repeated_observation():
    torch.manual_seed(0)
    actor = TanhGaussianActor(5, 3, hidden=(16,))
    obs, noise = torch.randn(4, 5), torch.randn(4, 7, 3)
    many, logp_many = actor.sample_many(obs, noise)
    each, logp_each = actor.sample(obs.repeat_interleave(7, 0), noise=noise.reshape(28, 3))
    assert many.shape == (4, 7, 3) and logp_many.shape == (4, 7)
    torch.testing.assert_close(many, each.view(4, 7, 3))
    torch.testing.assert_close(logp_many, logp_each.view(4, 7))


def test_tune_allocator_sets_glibc_thresholds_once_and_can_be_turned_off():
    import os
    import subprocess
    import sys

    code = "from robolearn.core.cpu import tune_allocator as t; print(t(), t())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ROBOLEARN_MALLOC": "default"}).stdout.split()
    assert on == (["True", "True"] if sys.platform.startswith("linux") else ["False", "False"])
    assert off == ["False", "False"]


def test_target_subset_with_and_without_replacement():
    gen = torch.Generator().manual_seed(0)
    draws = [subset_indices(10, 2, False, gen, torch.device("cpu")) for _ in range(500)]
    assert all(d[0] != d[1] for d in draws)
    draws = [subset_indices(10, 2, True, gen, torch.device("cpu")) for _ in range(500)]
    assert any(d[0] == d[1] for d in draws)  # about 10 % of draws repeat a critic
    with pytest.raises(ConfigError):
        SACConfig(num_critics=2, num_min_critics=3).validate()
    SACConfig(num_critics=2, num_min_critics=3, subset_replace=True).validate()


def test_hl_gauss_expectation_recovers_scalar_within_half_a_bin():
    hl = HLGauss(-10.0, 10.0, num_bins=51)
    targets = torch.linspace(-9.0, 9.0, 181)
    probs = hl.target_probs(targets)
    torch.testing.assert_close(probs.sum(-1), torch.ones(181))
    half_bin = 0.5 * 20.0 / 51
    assert (probs @ hl.centers - targets).abs().max() < half_bin
    # minimising the loss over free logits recovers the target too
    logits = torch.zeros(181, 51, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=0.1)
    for _ in range(300):
        opt.zero_grad()
        hl.loss(logits, targets).mean().backward()
        opt.step()
    assert (hl.value(logits) - targets).abs().max() < half_bin


def test_sac_update_runs_with_hl_gauss_and_asymmetric_critic():
    algo = SAC(3, 5, 2, SACConfig(hl_gauss=True, hl_bins=21, v_min=-5, v_max=5, num_critics=4, num_min_critics=2,
                                  actor_q="mean", critic_layer_norm=True, actor_hidden=(16,), critic_hidden=(16,)))
    batch = {"obs": {"policy": torch.randn(32, 3), "critic": torch.randn(32, 5)}, "actions": torch.rand(32, 2) * 2 - 1,
             "rewards": torch.randn(32), "next_obs": {"policy": torch.randn(32, 3), "critic": torch.randn(32, 5)},
             "discount": torch.full((32,), 0.99)}
    before = algo.critic_target.state_dict()["net.net.0.weight"].clone()
    stats = algo.update(batch)
    assert {"critic_loss", "q_mean", "actor_loss", "alpha", "entropy"} <= set(stats)
    assert not torch.equal(before, algo.critic_target.state_dict()["net.net.0.weight"])  # Polyak moved the target


def test_written_out_adam_matches_torch_adam():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = torch.optim.Adam(a.parameters(), lr=1e-2, fused=True), torch.optim.Adam(b.parameters(), lr=1e-2)
    init_adam_state(opt_b)
    for _ in range(5):
        x = torch.randn(8, 4)
        opt_a.zero_grad()
        a(x).square().sum().backward()
        opt_a.step()
        adam_step_(opt_b, torch.autograd.grad(b(x).square().sum(), list(b.parameters())))
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert float(opt_b.state[b.weight]["step"]) == 5


def _updates(learner: SAC, steps: int) -> dict[str, float]:
    g, data = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    for _ in range(steps):
        batch = {"obs": {"policy": torch.randn(16, 5, generator=data)},
                 "next_obs": {"policy": torch.randn(16, 5, generator=data)},
                 "actions": torch.rand(16, 2, generator=data) * 2 - 1, "rewards": torch.randn(16, generator=data),
                 "steps": torch.randint(1, 4, (16,), generator=data).float(), "discount": torch.full((16,), 0.99)}
        stats = learner.update(batch, g)
    return {k: float(v) for k, v in stats.items()}


@pytest.mark.parametrize("cls, config", [(SAC, SACConfig), (TD3, TD3Config)])
def test_compiled_update_matches_eager(cls, config):
    """`compile=True` runs the same update (same draws, same math) as one traced graph per step kind,
    n-step reward shaping (`steps`, `reward_bias`) and each class's default `actor_q` included."""
    learners = []
    for compiled in (False, True):
        torch.manual_seed(0)
        cfg = config(actor_hidden=(16,), critic_hidden=(16,), num_critics=3, critic_layer_norm=True,
                     actor_every=2, n_step=3, reward_scale=0.5, reward_bias=0.3, compile=compiled)
        learners.append(cls(5, 5, 2, cfg))
    eager, compiled = (_updates(learner, 4) for learner in learners)
    assert eager.keys() == compiled.keys() and "actor_loss" in eager
    for k in eager:
        assert compiled[k] == pytest.approx(eager[k], rel=1e-4, abs=1e-5), k
    for p, q in zip(learners[0].actor.parameters(), learners[1].actor.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    if cls is SAC:  # a restored optimizer without state (saved before any update) still steps
        fresh = torch.optim.Adam(learners[1].critic.parameters(), fused=True)
        learners[1].critic_opt.load_state_dict(fresh.state_dict())
        assert _updates(learners[1], 1)["critic_loss"] > 0
