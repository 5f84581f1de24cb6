"""An algorithm plugs in through one protocol and the registry (`robolearn.algos.base`): runners, config
composition, checkpoints, policy loading and warm starts look it up, so a new algorithm needs its file (config +
learner + `register`) and its YAML preset, nothing else (docs/writing-an-algorithm.md)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from robolearn.algos import base
from robolearn.algos.base import AlgoSpec, register, registry, spec
from robolearn.algos.offline.bc import BC, BCConfig
from robolearn.errors import ConfigError


@dataclasses.dataclass
class HalfBCConfig(BCConfig):
    """BC with half the learning rate: a stand-in for a new algorithm's config."""

    actor_lr: float = 1.5e-4


class HalfBC(BC):
    name = "half_bc"


@pytest.fixture
def half_bc():
    algo = register(AlgoSpec("half_bc", HalfBCConfig, f"{__name__}:HalfBC", runner="offline", actor="deterministic",
                             online=False, needs_dataset=True))
    yield algo
    base._REGISTRY.pop("half_bc", None)


def test_every_algorithm_is_registered_with_its_loop_and_actor():
    algos = registry()
    assert {"ppo", "sac", "td3", "bc", "td3_bc", "iql", "cql", "calql", "rebrac", "ro2o"} <= set(algos)
    assert {a.runner for a in algos.values()} == {"on_policy", "off_policy", "offline"}
    assert spec("td3").deterministic and not spec("sac").deterministic and spec("ppo").actor == "gaussian"
    assert not spec("bc").online and spec("iql").online
    with pytest.raises(ConfigError, match="use one of"):
        spec("nope")
    with pytest.raises(ConfigError, match="registered twice"):
        register(dataclasses.replace(spec("sac"), learner="somewhere:Else"))


def test_a_new_algorithm_trains_saves_loads_and_warm_starts_through_the_registry(half_bc, tmp_path):
    from robolearn.checkpoints.policy import load_policy
    from robolearn.checkpoints.warm_start import adopt_architecture
    from robolearn.collect.generate import CollectConfig, collect
    from robolearn.config import EnvConfig
    from robolearn.runners.train import load_train_config, run_training

    data = tmp_path / "data"
    collect(CollectConfig(env=EnvConfig(name="pendulum-swingup", num_envs=2), kind="random", episodes=2,
                          progress=False)).save(data)
    cfg = load_train_config(["algo=half_bc_schema", f"dataset={data}", "runner.gradient_steps=20",
                             "runner.log_every=10", "runner.eval_every=10", "runner.eval_episodes=1",
                             "algo.actor_hidden=[8]",
                             f"run_dir={tmp_path / 'run'}", "video=false", "progress=false"])
    assert cfg["algo"]["name"] == "half_bc"  # composed from the registry's schema (a preset YAML names it too)
    run = run_training(cfg)
    policy = load_policy(run / "checkpoints" / "final")
    assert policy.kind == "deterministic" and policy.policy_config["algo"] == "half_bc"
    assert policy.policy_config["half_bc"]["actor_lr"] == 1.5e-4
    assert policy({"policy": torch.zeros(2, 3)}).shape == (2, 1)
    td3_bc = {"name": "td3_bc", "actor_hidden": [256, 256]}
    assert adopt_architecture(td3_bc, run)["actor_hidden"] == ([256, 256], [8])  # a deterministic actor's warm start
