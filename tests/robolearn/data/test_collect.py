"""robolearn collect: whole episodes from the batched sim (T+1 observations ending in the final one), time-outs as
truncations, reference returns in the metadata, written in a chosen format."""

import numpy as np
import pytest

from robolearn.collect.generate import CollectConfig, collect
from robolearn.commands.cli import main
from robolearn.config import EnvConfig
from robolearn.data.formats import load_dataset, save_dataset
from robolearn.errors import ConfigError, RobolearnError

SHORT = {"episode_length": 30}


def test_collect_random_whole_episodes_and_every_format(tmp_path):
    """6 episodes from 4 envs: the 2 extra episodes the second round starts are discarded, none is cut short;
    each holds T+1 observations ending in its final one (before the auto-reset), and ends in a time-out."""
    cfg = CollectConfig(env=EnvConfig("cartpole-balance", num_envs=4, backend="mujoco", overrides=SHORT),
                        episodes=6, ref_episodes=4, progress=False)
    data = collect(cfg)
    assert (data.num_episodes, data.num_steps) == (6, 180) and (data.lengths == 30).all()
    for ep in data.episodes():
        obs = ep.observations["policy"]
        assert obs.shape[0] == 31 and ep.truncations[-1] and not ep.terminations.any()
        assert not np.array_equal(obs[-1], obs[-2])  # the final observation is a real step, not a repeat
    m = data.metadata
    assert m["task"] == "cartpole-balance" and m["kind"] == "random" and m["fps"] > 0
    assert m["ref_min_score"] == pytest.approx(data.episode_returns().mean())
    for fmt in ("minari", "d4rl", "lerobot"):  # every writer takes a collected dataset, and reads it back
        path = save_dataset(data, tmp_path / fmt / "cartpole-balance-random-v0", fmt)  # a Minari-style id
        again = load_dataset(path)
        assert again.num_steps == data.num_steps and np.allclose(again.rewards, data.rewards), fmt


def test_cli_collect_with_pixels(tmp_path, capsys):
    out = tmp_path / "ds"
    code = main(["collect", "env=cartpole-balance", "env.num_envs=2", "env.backend=mujoco",
                 "+env.overrides.episode_length=8", "episodes=2", f"out={out}", "progress=false", "ref_min_score=0",
                 "pixels.enabled=true", "pixels.width=16", "pixels.height=16"])
    assert code == 0 and "wrote 2 episodes, 16 steps (robolearn)" in capsys.readouterr().out
    data = load_dataset(out)
    frames = data.observations["pixels"]
    assert frames.shape == (2 * 9, 16, 16, 3) and frames.dtype == np.uint8 and frames.std() > 0
    assert data.observations["policy"].shape[0] == 18 and data.metadata["task"] == "cartpole-balance"
    assert main(["collect", "env=cartpole-balance", f"out={out}"]) != 0
    assert "never overwritten" in capsys.readouterr().err


def test_collect_config_errors():
    with pytest.raises(ConfigError, match="kind must be one of"):
        CollectConfig(kind="umaze")
    with pytest.raises(ConfigError, match="noise must be"):
        CollectConfig(noise=-1.0)
    with pytest.raises(ConfigError, match="needs policy"):
        CollectConfig(kind="expert")
    with pytest.raises(ConfigError, match="expert_policy"):
        CollectConfig(kind="medium-expert", policy="a")


def test_full_replay_is_the_runs_replay_buffer(tmp_path):
    """kind=full-replay: the replay buffer saved with an off-policy checkpoint, split into episodes per env."""
    run = tmp_path / "run"
    assert main(["train", "env=pendulum-swingup", "algo=sac", f"run_dir={run}", "progress=false", "video=false",
                 "runner.env_steps=300", "algo.learning_starts=200", "algo.batch_size=32", "env.num_envs=2",
                 "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "runner.steps_per_iteration=50",
                 "+env.overrides.episode_length=60"]) == 0
    data = collect(CollectConfig(kind="full-replay", policy=str(run / "checkpoints" / "final")))
    # 2 envs x 150 steps: 2 whole 60-step episodes each, then a 30-step one cut by the end of training
    assert data.num_steps == 300 and sorted(data.lengths.tolist()) == [30, 30, 60, 60, 60, 60]
    assert data.truncations.sum() == 6 and not data.terminations.any()
    assert data.metadata["task"] == "pendulum-swingup" and data.metadata["partial_first"] is False
    with pytest.raises(RobolearnError, match="no config.json"):
        collect(CollectConfig(kind="full-replay", policy=str(tmp_path / "run")))


def test_rollout_records_the_actions_the_env_applies():
    """A behaviour whose raw actions leave the box (a sampled Gaussian policy's) is recorded clipped to [-1, 1]:
    the sim applies exactly that, and offline learners' tanh actors can reproduce nothing else."""
    import dataclasses

    import torch

    from robolearn.collect.generate import rollout
    from robolearn.config import make_env

    env_cfg = EnvConfig("cartpole-balance", num_envs=2, backend="mujoco", overrides={"episode_length": 5})
    env = make_env(dataclasses.asdict(env_cfg), seed=0)
    eps = rollout(env, lambda obs: torch.tensor([[6.0], [-0.5]]), episodes=2)
    actions = np.concatenate([ep["actions"] for ep in eps])
    assert set(np.unique(actions).tolist()) == {-0.5, 1.0}


def test_policy_reference_loads_the_registered_checkpoint_from_anywhere(tmp_path, monkeypatch):
    """policy=reference of a task whose reference is a committed checkpoint (cheetah-run's PPO) loads it by the
    repository's path, whatever the working directory (it once looked under robolearn/)."""
    from types import SimpleNamespace

    import torch

    from robolearn.collect.generate import policy_actor

    monkeypatch.chdir(tmp_path)
    actor = policy_actor("reference", SimpleNamespace(task=SimpleNamespace(name="cheetah-run"), device="cpu"), 0)
    assert actor({"policy": torch.zeros(3, 17)}).shape == (3, 6)


def test_transitions_collect_each_envs_consecutive_episodes_up_to_its_share():
    """transitions=N (D4RL's 1M per dataset): every env runs whole episodes until it holds ceil(N / num_envs)
    transitions; hopper falls within ~20 random steps, so the count lands just past N, in whole episodes."""
    cfg = CollectConfig(env=EnvConfig(name="hopper-v5", num_envs=4), kind="random", transitions=400,
                        ref_min_score=0.0, ref_max_score=1.0, progress=False)
    data = collect(cfg)
    assert 400 <= data.num_steps < 400 + 4 * data.lengths.max()
    assert data.num_episodes > 10 and all(e.terminations[-1] or e.truncations[-1] for e in data.episodes())
    with pytest.raises(ConfigError, match="transitions"):
        CollectConfig(kind="random", transitions=0)
    with pytest.raises(ConfigError, match="not kind=waypoint"):
        CollectConfig(env=EnvConfig(name="pointmaze-umaze"), kind="waypoint", transitions=100)
    assert data.metadata["transitions"] == 400
