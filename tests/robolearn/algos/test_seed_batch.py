"""A seed-batch (`robolearn.algos.seeds.SeedBatch`) trains each seed exactly as its solo run would."""

from __future__ import annotations

import copy

import pytest
import torch

from robolearn.algos import base as algos
from robolearn.algos.seeds import SeedBatch, stack_batches
from robolearn.errors import ConfigError

D, A, B, S = 5, 2, 16, 3
SMALL = {"actor_hidden": (16, 16), "critic_hidden": (16, 16)}
# each algorithm with its optional paths switched on where that is cheap (Lagrange alpha', a learned temperature)
VARIANTS = {"bc": {"actor_hidden": (16, 16)}, "iql": {**SMALL, "value_hidden": (16, 16), "actor_lr_decay_steps": 50},
            "td3_bc": {**SMALL, "actor_every": 2}, "rebrac": {**SMALL, "actor_every": 2},
            "cql": {**SMALL, "cql_lagrange": True, "cql_n_actions": 3, "bc_steps": 2},
            "calql": {**SMALL, "cql_n_actions": 3},
            "ro2o": {**SMALL, "num_critics": 3, "sample_size": 3, "ood_reg_decay": 0.01},
            "ro2o:lcb": {**SMALL, "num_critics": 3, "sample_size": 3, "actor_objective": "lcb", "beta_bc": 5.0}}


def batch(g: torch.Generator) -> dict:
    return {"obs": {"policy": torch.randn(B, D, generator=g)}, "next_obs": {"policy": torch.randn(B, D, generator=g)},
            "actions": torch.rand(B, A, generator=g) * 2 - 1, "next_actions": torch.rand(B, A, generator=g) * 2 - 1,
            "rewards": torch.randn(B, generator=g), "discount": torch.full((B,), 0.99), "steps": torch.ones(B),
            "mc_returns": torch.randn(B, generator=g)}


def learners(name: str, compile: bool = False) -> list:
    spec = algos.spec(name.split(":")[0])  # "<algo>:<variant>"
    cfg = spec.config(**VARIANTS[name])
    if compile:
        cfg.compile = True
    out = []
    for k in range(S):
        torch.manual_seed(k)
        out.append(spec.learner_class()(D, A, cfg))
    return out


def max_difference(a, b) -> float:
    sa, sb = a.model_state(), b.model_state()
    return max(float((sa[n] - sb[n]).abs().max()) for n in sa)


def assert_follows_solo(batched: list, updates: int, name: str) -> list:
    """Seed-batch `batched` and run copies of it alone for `updates` updates on the same batches and draws: every
    seed's parameters (1e-5) and statistics (1e-4) equal its solo copy's. Returns the solo learners."""
    solo = [copy.deepcopy(learner) for learner in batched]
    seeds = SeedBatch(batched)
    batch_gens = [torch.Generator().manual_seed(100 + k) for k in range(S)]
    draws_batched = [torch.Generator().manual_seed(200 + k) for k in range(S)]
    draws_solo = [torch.Generator().manual_seed(200 + k) for k in range(S)]
    for _ in range(updates):
        batches = [batch(g) for g in batch_gens]
        stats = seeds.update(stack_batches(batches), draws_batched)
        solo_stats = [solo[k].update(batches[k], draws_solo[k]) for k in range(S)]
    for k in range(S):
        assert max_difference(batched[k], solo[k]) < 1e-5, (name, k)
        for key, value in solo_stats[k].items():
            assert torch.allclose(stats[key][k], value, atol=1e-4, rtol=1e-4), (name, key)
    return solo


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_seed_follows_its_solo_run(name):
    batched = learners(name)
    solo = assert_follows_solo(batched, 12, name)
    for k in range(S):
        assert batched[k].updates == solo[k].updates == 12
    assert max_difference(batched[0], batched[1]) > 1e-3  # the seeds are different learners


def test_learners_stay_live_views_and_restack_after_a_restore():
    batched = learners("td3_bc")
    seeds = SeedBatch(batched)
    before = batched[1].actor(torch.zeros(1, D)).detach()
    gens = [torch.Generator().manual_seed(k) for k in range(S)]
    for _ in range(2):  # the actor steps every second update
        seeds.update(stack_batches([batch(g) for g in gens]), gens)
    assert not torch.equal(before, batched[1].actor(torch.zeros(1, D)).detach())  # acting reads the new row
    # a restore writes new tensors into seed 2; after `restack` the batch trains from them
    other = learners("td3_bc")[0]
    batched[2].load_model_state(other.model_state())
    seeds.restack()
    assert max_difference(batched[2], other) == 0.0
    seeds.update(stack_batches([batch(g) for g in gens]), gens)
    assert max_difference(batched[2], other) > 0.0


def test_refuses_mixed_learners_and_algorithms_without_a_batched_update():
    spec = algos.spec("iql")
    with pytest.raises(ConfigError, match="share one algorithm and config"):
        SeedBatch([spec.learner_class()(D, A, spec.config(actor_lr=1e-3)), spec.learner_class()(D, A, spec.config())])
    from policies.flow import FlowPolicy
    from robolearn.algos.chunk.dsrl import DSRLNA
    from robolearn.algos.online.sac import SACConfig

    with pytest.raises(ConfigError, match="no seed-batched update"):  # DSRL-NA's update is its own
        SeedBatch([DSRLNA(FlowPolicy(D, A, chunk=2, hidden=(8,)), 1.0, D, D, SACConfig(**SMALL))])


ONLINE = {"sac": {**SMALL, "num_critics": 4, "num_min_critics": 2, "actor_every": 2},
          "sac:max_backup": {**SMALL, "num_critics": 4, "num_min_critics": 2, "max_target_backup": True,
                             "backup_samples": 3},
          "td3": {**SMALL, "actor_every": 2}}


@pytest.mark.parametrize("name", sorted(ONLINE))
def test_online_learners_follow_their_solo_runs(name):
    """SAC (random subsets of target critics, a learned temperature) and TD3 (smoothing noise, delayed actor)."""
    spec = algos.spec(name.split(":")[0])
    batched = []
    for k in range(S):
        torch.manual_seed(k)
        batched.append(spec.learner_class()(D, D, A, spec.config(**ONLINE[name])))
    assert_follows_solo(batched, 10, name)
