"""The flow-matching action-chunk policy (policies/flow.py): ODE, Flow-SDE and Flow-Noise sampling against the
formulas written out by hand, log-likelihoods re-evaluated from the stored chain equal those of the sample, and
behaviour cloning that fits a state-dependent action chunk."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import bc_fit_error

from policies.flow import FlowPolicy, gaussian_log_prob


def constant_field(policy: FlowPolicy, value: float) -> None:
    """Make v(x, t, obs) = value everywhere (last layer weights 0)."""
    last = policy.velocity_net[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(value)


def test_ode_is_euler_and_sde_is_pi_rl():
    torch.manual_seed(0)
    policy = FlowPolicy(3, 2, chunk=2, hidden=(16,), num_steps=4, noise_level=0.5)
    obs, x1 = torch.randn(5, 3), torch.randn(5, 2, 2)
    constant_field(policy, 0.3)
    actions, chain, logp = policy.sample(obs, "ode", noise=x1)
    torch.testing.assert_close(actions, x1 - 0.3)  # four Euler steps of 1/4 with v = 0.3
    assert chain.shape == (5, 5, 2, 2) and torch.equal(logp, torch.zeros_like(logp))
    # Flow-SDE with its stochastic step at k = 0 (t = 1, delta = 1/4): sigma = a sqrt(1 / (1 - t_1)) = 2a = 1
    eps = torch.randn(4, 5, 2, 2)
    _, chain, logp = policy.sample(obs, "sde", noise=x1, step_noise=eps, sde_step=0)
    t, delta, sigma, v = 1.0, 0.25, 1.0, 0.3
    x0_hat, x1_hat = x1 - t * v, x1 + (1 - t) * v
    mean = (1 - (t - delta)) * x0_hat + ((t - delta) - sigma**2 * delta / (2 * t)) * x1_hat
    std = math.sqrt(delta) * sigma
    torch.testing.assert_close(chain[1], mean + std * eps[0])
    torch.testing.assert_close(chain[2], chain[1] - delta * v)  # the other steps are ODE
    torch.testing.assert_close(logp, gaussian_log_prob(chain[1], mean, torch.full_like(mean, std)))
    torch.testing.assert_close(policy.log_prob(obs, chain, "sde", 0), logp)
    # at k = 2 (t = 1/2): sigma = a sqrt(t / (1 - t)) = 0.5
    _, chain, logp = policy.sample(obs, "sde", noise=x1, step_noise=eps, sde_step=2)
    assert torch.allclose(policy.step_stats(obs, chain[2], 2, "sde")[1], torch.full_like(x1, math.sqrt(0.25) * 0.5))
    torch.testing.assert_close(policy.log_prob(obs, chain, "sde", 2), logp)
    # one stochastic step per row (a minibatch mixing decisions): each row as its own step would score it
    _, chain0, logp0 = policy.sample(obs, "sde", noise=x1, step_noise=eps, sde_step=0)
    rows = torch.tensor([0, 2, 2, 0, 2])
    mixed = torch.where((rows == 0)[None, :, None, None], chain0, chain)  # [K + 1, B, chunk, A]
    expected = torch.where((rows == 0)[:, None, None], logp0, logp)
    torch.testing.assert_close(policy.log_prob(obs, mixed, "sde", rows), expected)


def test_flow_noise_likelihood_is_the_mean_over_prior_and_steps():
    torch.manual_seed(1)
    policy = FlowPolicy(3, 2, chunk=3, hidden=(16,), num_steps=3, noise_head=True)
    obs, x1, eps = torch.randn(4, 3), torch.randn(4, 3, 2), torch.randn(3, 4, 3, 2)
    actions, chain, logp = policy.sample(obs, "noise", noise=x1, step_noise=eps)
    terms = [gaussian_log_prob(x1, torch.zeros_like(x1), torch.ones_like(x1))]
    for k in range(3):
        t, t_next = float(policy.times[k]), float(policy.times[k + 1])
        mean = chain[k] - (t - t_next) * policy.velocity(obs, chain[k], t)
        std = policy.noise_std(obs, chain[k], t)
        assert float(std.detach().min()) >= 0.08 - 1e-6 and float(std.detach().max()) <= 0.16 + 1e-6
        torch.testing.assert_close(chain[k + 1], mean + std * eps[k])
        terms.append(gaussian_log_prob(chain[k + 1], mean, std))
    torch.testing.assert_close(logp, torch.stack(terms).mean(0))
    torch.testing.assert_close(policy.log_prob(obs, chain, "noise"), logp)
    assert torch.equal(actions, chain[-1]) and policy.entropy(obs, chain).shape == (4, 3, 2)
    # gradients reach the velocity field and the noise head through the re-evaluated likelihood
    policy.log_prob(obs, chain, "noise").sum().backward()
    assert policy.velocity_net[0].weight.grad is not None and policy.noise_net[0].weight.grad is not None
    with pytest.raises(ValueError, match="noise head"):
        FlowPolicy(3, 2).sample(obs, "noise")


def test_behaviour_cloning_fits_a_chunk():
    """Flow matching on a state-dependent chunk: the ODE policy reproduces it."""
    torch.manual_seed(2)
    policy = FlowPolicy(2, 1, chunk=2, hidden=(64, 64), num_steps=8)
    err = bc_fit_error(policy, lambda n, gen: torch.rand(n, generator=gen), 600)
    assert err < 0.1, err


def test_action_chunks_pad_with_the_episodes_last_action():
    from robolearn.algos.chunk.chunk_bc import action_chunks

    chunks = action_chunks(torch.arange(5.0).view(5, 1), [0, 3, 5], 3)
    assert chunks[..., 0].tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4]]


def test_flow_bc_from_a_dataset():
    """Episodes where o_{t+1} = o_t + 0.1 and a_t = sin(3 o_t): the chunk [a_t, a_{t+1}] is a function of o_t."""
    import numpy as np

    from robolearn.algos.chunk.chunk_bc import ChunkBCConfig, train_chunk_bc
    from robolearn.data.dataset import Dataset

    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(20):
        o = rng.uniform(-1, 0, 1) + 0.1 * np.arange(11)[:, None]                  # [T + 1, 1], T = 10
        a = np.sin(3 * o[:-1])
        episodes.append({"observations": {"policy": o.astype(np.float32)}, "actions": a.astype(np.float32),
                         "rewards": np.zeros(10, np.float32), "terminations": np.zeros(10, bool),
                         "truncations": np.eye(10, dtype=bool)[-1]})
    data = Dataset.from_episodes(episodes)
    policy, losses = train_chunk_bc(data, ChunkBCConfig(chunk=2, hidden=(64, 64), num_steps=8, lr=3e-3, steps=500,
                                                      batch_size=64))
    assert np.mean(losses[-50:]) < 0.5 * np.mean(losses[:50])
    obs = torch.linspace(-1, 0, 32).view(-1, 1)
    with torch.no_grad():
        chunk = policy(obs)
    want = torch.stack([torch.sin(3 * obs), torch.sin(3 * (obs + 0.1))], 1)
    assert (chunk - want).abs().mean() < 0.1
