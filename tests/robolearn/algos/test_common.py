"""The shared actor-critic pieces (`robolearn.algos.common`): reward_bias on every step of an n-step window, the
shaped rewards in closed form."""

from __future__ import annotations

import pytest
import torch

from robolearn.algos.common import adam_update_, compile_update, fresh_graphs, shaped_rewards
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.algos.online.td3 import TD3, TD3Config
from robolearn.core.buffers import ReplayBuffer

GAMMA, SCALE, BIAS, NEXT_V = 0.9, 2.0, 0.5, 10.0


REWARDS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]


TERMINATED = [False, False, True, False, False, False, False]


def _hand_target(start: int) -> float:
    """sum_{i<k} gamma^i (scale r_i + bias) + gamma^k V', written out: up to 3 steps, stopping after a
    termination (no bootstrap) or at the newest step."""
    total, k = 0.0, 0
    while k < 3 and start + k < len(REWARDS):
        total += GAMMA**k * (SCALE * REWARDS[start + k] + BIAS)
        k += 1
        if TERMINATED[start + k - 1]:
            return total
    return total + GAMMA**k * NEXT_V


@pytest.mark.parametrize("cls, config", [(SAC, SACConfig), (TD3, TD3Config)])
def test_n_step_target_biases_every_step(cls, config):
    buf = ReplayBuffer(16, 1, {"policy": 1}, 1, n_step=3, gamma=GAMMA)
    for t, (r, term) in enumerate(zip(REWARDS, TERMINATED, strict=True)):
        buf.add({"policy": torch.tensor([[float(t)]])}, torch.zeros(1, 1), torch.tensor([r]),
                {"policy": torch.tensor([[t + 0.5]])}, torch.tensor([term]), torch.tensor([False]))
    batch = buf.sample(256, torch.Generator().manual_seed(0))
    assert sorted(set(zip(batch["obs"]["policy"][:, 0].tolist(), batch["steps"].tolist(), strict=True))) == [
        (0.0, 3.0), (1.0, 2.0), (2.0, 1.0), (3.0, 3.0), (4.0, 3.0), (5.0, 2.0), (6.0, 1.0)]

    learner = cls(1, 1, 1, config(gamma=GAMMA, n_step=3, reward_scale=SCALE, reward_bias=BIAS, backup_entropy=False,
                                  actor_hidden=(8,), critic_hidden=(8,)))
    learner._target_min = lambda next_obs_c, next_actions, idx: torch.full((next_obs_c.shape[0],), NEXT_V)
    targets: list[torch.Tensor] = []
    learner._critic_step = lambda obs_c, actions, target: targets.append(target) or {}
    learner.update(batch)
    for o, got in zip(batch["obs"]["policy"][:, 0].tolist(), targets[0].tolist(), strict=True):
        assert got == pytest.approx(_hand_target(int(o)), rel=1e-6), o


def test_shaped_rewards_closed_form_and_edge_cases():
    steps, sums = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 1.5, 2.0])
    torch.testing.assert_close(shaped_rewards(sums, steps, 0.5, 3.0, 1.0), 3.0 * sums + torch.tensor([1.0, 1.5, 1.75]))
    torch.testing.assert_close(shaped_rewards(sums, steps, 1.0, 1.0, 2.0), sums + 2.0 * steps)  # gamma = 1: k steps
    assert torch.equal(shaped_rewards(sums, steps, 0.9, 2.0, 0.0), 2.0 * sums)  # no bias: the scaled sums exactly


def test_each_learner_compiles_fresh_graphs():
    """One code object compiled for several learners in one process (a bench worker's packs, a finetune's phases)
    with different learning rates: after `fresh_graphs` each compiles its own graph with its rate a constant (without
    it Dynamo made the rate symbolic at the second learner, and Inductor failed on the vmapped Adam step: "x must be
    Tensor or scalar, got SymFloat"). Each graph steps with its own rate."""
    def make(lr: float):
        def one(p, m, v, s, g):
            p, m, v, s = p.clone(), m.clone(), v.clone(), s.clone()
            adam_update_(p, g, m, v, s, lr, (0.9, 0.999), 1e-8)
            return p

        return compile_update(lambda *tensors: torch.func.vmap(one)(*tensors))

    for lr in (3e-4, 1e-4, 1e-3):
        fresh_graphs()
        zeros = [torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3)]
        new = make(lr)(*zeros, torch.ones(3, 4))
        assert torch.allclose(new, torch.full((3, 4), -lr), rtol=1e-4)  # Adam's first step: -lr * sign(g)
