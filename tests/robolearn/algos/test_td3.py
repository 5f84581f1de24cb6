"""TD3: the actor's gradient comes from the first critic only (Q1); the `actor_q` options and the td3 preset."""

from __future__ import annotations

import pytest
import torch

from robolearn.algos.online.sac import SACConfig
from robolearn.algos.online.td3 import TD3, TD3Config
from robolearn.config import algo_config, compose
from robolearn.errors import ConfigError


def _td3(seed: int = 0, **overrides) -> TD3:
    torch.manual_seed(seed)
    return TD3(3, 3, 2, TD3Config(actor_hidden=(16,), critic_hidden=(16,), **overrides))


def _actor_batch() -> dict:
    g = torch.Generator().manual_seed(5)
    return {"obs": {"policy": torch.randn(32, 3, generator=g)}}


def test_td3_actor_gradient_comes_from_the_first_critic_only():
    learner = _td3()
    assert learner.cfg.actor_q == "first"
    losses: list[torch.Tensor] = []
    learner._step = lambda opt, loss_fn: losses.append(loss_fn()) or losses[-1]
    learner.update_actor(_actor_batch())
    critic_grads = torch.autograd.grad(losses[0], list(learner.critic.parameters()))
    assert all(g[1].abs().max() == 0 for g in critic_grads)  # member 1 takes no part
    assert any(g[0].abs().max() > 0 for g in critic_grads)

    # so the actor's step does not depend on critic 1 at all
    a, b = _td3(), _td3()
    with torch.no_grad():
        for p in b.critic.parameters():
            p[1].normal_()
    a.update_actor(_actor_batch())
    b.update_actor(_actor_batch())
    for p, q in zip(a.actor.parameters(), b.actor.parameters(), strict=True):
        assert torch.equal(p, q)
    # while the SAC-style "min" does
    a, b = _td3(actor_q="min"), _td3(actor_q="min")
    with torch.no_grad():
        for p in b.critic.parameters():
            p[1].normal_()
    a.update_actor(_actor_batch())
    b.update_actor(_actor_batch())
    assert not all(torch.equal(p, q) for p, q in zip(a.actor.parameters(), b.actor.parameters(), strict=True))


def test_actor_q_options_and_the_td3_preset():
    algo = compose("train", ["algo=td3"])["algo"]
    assert algo["actor_q"] == "first" and algo_config(algo).actor_q == "first"
    SACConfig(actor_q="first").validate()  # one list of options for SAC and TD3
    with pytest.raises(ConfigError, match="'first'"):
        TD3Config(actor_q="q1").validate()
