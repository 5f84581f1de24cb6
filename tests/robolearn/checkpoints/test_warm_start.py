"""Warm starts (`init=`, the online phase of `robolearn finetune`): the learner takes the checkpoint's network sizes
and its reward shaping and discount, the units its critics' values are in."""

from __future__ import annotations

from robolearn.algos.offline.calql import CalQL, CalQLConfig
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.warm_start import adopt_architecture, warm_start
from robolearn.config import algo_config, compose


def test_a_warm_start_carries_the_reward_shaping_and_discount(tmp_path):
    offline = CalQL(3, 1, CalQLConfig(actor_hidden=(8,), critic_hidden=(8,), reward_scale=20.0, reward_bias=-1.0,
                                      gamma=0.95))  # WSRL's pre-training
    checkpoint.save(tmp_path / "ckpt", {"policy": offline.config, "run": {}}, offline.model_state())
    algo = compose("train", ["algo=wsrl"])["algo"]  # the online learner's preset: reward_scale 1, gamma 0.99
    changed = adopt_architecture(algo, tmp_path / "ckpt")
    assert changed["reward_scale"] == (1.0, 20.0) and changed["reward_bias"] == (0.0, -1.0)
    assert changed["gamma"] == (0.99, 0.95) and algo["critic_hidden"] == [8]
    online = SAC(3, 3, 1, algo_config(algo))
    assert online.cfg.reward_scale == 20.0 and online.cfg.gamma == 0.95
    assert "actor" in warm_start(online, tmp_path / "ckpt")


def test_a_matching_checkpoint_changes_nothing_but_the_sizes(tmp_path):
    source = SAC(3, 3, 1, SACConfig(actor_hidden=(8,), critic_hidden=(8,)))
    checkpoint.save(tmp_path / "ckpt", {"policy": source.config, "run": {}}, source.model_state())
    algo = compose("train", ["algo=sac"])["algo"]
    assert set(adopt_architecture(algo, tmp_path / "ckpt")) == {"actor_hidden", "critic_hidden"}


def test_the_online_temperature_is_each_methods_explicit_choice(tmp_path):
    """WSRL starts online from a fresh temperature, not Cal-QL's conservative-phase alpha (0.57-0.68 here, which the
    online critic cannot carry); the methods that continue their own learner keep theirs (configs/finetune.yaml)."""
    import math

    import torch

    from robolearn.runners.o2o import load_config

    offline = CalQL(3, 1, CalQLConfig(actor_hidden=(8,), critic_hidden=(8,)))
    with torch.no_grad():
        offline.log_alpha.fill_(math.log(0.6))
    checkpoint.save(tmp_path / "ckpt", {"policy": offline.config, "run": {}}, offline.model_state())
    methods = load_config(["algo=wsrl", "dataset=x"]).methods
    wsrl = compose("train", methods["wsrl"].online)["algo"]
    adopt_architecture(wsrl, tmp_path / "ckpt")
    online = SAC(3, 3, 1, algo_config(wsrl))
    assert "log_alpha" not in warm_start(online, tmp_path / "ckpt") and abs(float(online.alpha) - 0.05) < 1e-8
    inherit = SAC(3, 3, 1, algo_config({**wsrl, "warm_start_temperature": True}))
    assert "log_alpha" in warm_start(inherit, tmp_path / "ckpt") and abs(float(inherit.alpha) - 0.6) < 1e-6
    calql = compose("train", methods["calql"].online)["algo"]
    assert algo_config(calql, online=True).__dict__.get("warm_start_temperature", True)  # continues its own


def test_an_explicit_shaping_that_differs_from_the_checkpoints_is_refused_by_name(tmp_path):
    import pytest

    from robolearn.errors import CheckpointError

    offline = CalQL(3, 1, CalQLConfig(actor_hidden=(8,), critic_hidden=(8,), reward_scale=20.0))
    checkpoint.save(tmp_path / "ckpt", {"policy": offline.config, "run": {}}, offline.model_state())
    algo = compose("train", ["algo=wsrl", "algo.reward_scale=5"])["algo"]
    with pytest.raises(CheckpointError, match="algo.reward_scale=5.0 differs from the checkpoint's 20.0"):
        adopt_architecture(algo, tmp_path / "ckpt")
    same = compose("train", ["algo=wsrl", "algo.reward_scale=20"])["algo"]
    assert "reward_scale" not in adopt_architecture(same, tmp_path / "ckpt")
