"""Checkpoints written before the package layout (robolearn 0.1.0 as of commit 4e2dfc2: `robolearn/policy_io.py`,
policy kinds named after the algorithms) still load, act as they did, and warm-start a learner.

`tests/data/pre_layout/` holds tiny PPO, SAC, TD3, IQL and flow checkpoints made by that code, and the actions its
`load_policy` gave for fixed observations (`expected.json`), on an AMD EPYC machine. They agree to float32 rounding,
not bit for bit: another CPU's matrix kernels sum in another order (an Intel Xeon with AVX-512 differs in the last
bits of the PPO and flow actions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robolearn.checkpoints.policy import load_policy
from robolearn.checkpoints.warm_start import adopt_architecture

DATA = Path(__file__).resolve().parents[2] / "data" / "pre_layout"
EXPECTED = json.loads((DATA / "expected.json").read_text())
#: the old kinds (algorithm names) -> the actor kinds the registry declares
KINDS = {"ppo": "gaussian", "sac": "tanh_gaussian", "td3": "deterministic", "flow": "flow"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_old_checkpoints_load_and_act_as_before(name):
    policy = load_policy(DATA / name)
    assert policy.kind == KINDS[EXPECTED[name]["kind"]]
    obs = torch.linspace(-1, 1, 9).reshape(3, 3)
    torch.testing.assert_close(policy({"policy": obs}).detach(), torch.tensor(EXPECTED[name]["actions"]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sac", "td3", "iql"])
def test_old_checkpoints_warm_start_a_learner_of_the_same_actor(name):
    algo = {"name": "sac" if name != "td3" else "td3", "actor_hidden": [256, 256], "critic_hidden": [256, 256]}
    changed = adopt_architecture(algo, DATA / name)
    assert changed["actor_hidden"] == ([256, 256], [8]) and algo["critic_hidden"] == [8]
