"""robolearn collect: whole episodes from the batched sim (T+1 observations ending in the final one), time-outs as
truncations, reference returns in the metadata, written in a chosen format."""

import numpy as np
import pytest
import torch

from robolearn.cli import main
from robolearn.collect import CollectConfig, PixelsConfig, collect, rollout
from robolearn.config import EnvConfig, make_env
from robolearn.data.formats import load_dataset, save_dataset
from robolearn.errors import ConfigError, RobolearnError

SHORT = {"episode_length": 30}


def test_rollout_keeps_whole_episodes_with_their_final_observation():
    env = make_env({"name": "cartpole-balance", "num_envs": 4, "backend": "mujoco", "overrides": SHORT}, seed=0)
    try:
        gen = torch.Generator().manual_seed(0)
        episodes = rollout(env, lambda _obs: torch.rand((4, env.num_actions), generator=gen) * 2 - 1, 6)
    finally:
        env.close()
    assert len(episodes) == 6  # the 2 extra episodes the 4 envs started in the second round are discarded
    for ep in episodes:
        obs = ep["observations"]["policy"]
        assert obs.shape[0] == 31 and ep["actions"].shape == (30, env.num_actions)
        assert ep["truncations"][-1] and not ep["truncations"][:-1].any() and not ep["terminations"].any()
        assert np.isfinite(obs).all() and not np.array_equal(obs[-1], obs[-2])  # the final obs is a real step


def test_collect_random_and_cli_formats(tmp_path, capsys):
    cfg = CollectConfig(env=EnvConfig("cartpole-balance", num_envs=4, backend="mujoco", overrides=SHORT),
                        episodes=5, ref_episodes=4, progress=False)
    data = collect(cfg)
    assert (data.num_episodes, data.num_steps) == (5, 150)
    m = data.metadata
    assert m["task"] == "cartpole-balance" and m["kind"] == "random" and m["ref_min_score"] == pytest.approx(
        data.episode_returns().mean())
    code = main(["collect", "env=cartpole-balance", "env.num_envs=4", "env.backend=mujoco",
                 "+env.overrides.episode_length=30", "episodes=3", f"out={tmp_path / 'ds'}", "progress=false"])
    assert code == 0
    loaded = load_dataset(tmp_path / "ds")
    assert loaded.num_episodes == 3 and loaded.metadata["task"] == "cartpole-balance"
    for fmt in ("minari", "d4rl", "lerobot"):  # every writer takes a collected dataset, and reads it back
        path = save_dataset(data, tmp_path / fmt / "cartpole-balance-random-v0", fmt)  # a Minari-style id
        again = load_dataset(path)
        assert again.num_steps == data.num_steps and np.allclose(again.rewards, data.rewards), fmt
    assert main(["collect", "env=cartpole-balance", f"out={tmp_path / 'ds'}"]) != 0
    assert "never overwritten" in capsys.readouterr().err


def test_collect_config_errors():
    with pytest.raises(ConfigError, match="kind must be one of"):
        CollectConfig(kind="diverse")
    with pytest.raises(ConfigError, match="needs policy"):
        CollectConfig(kind="expert")
    with pytest.raises(ConfigError, match="expert_policy"):
        CollectConfig(kind="medium-expert", policy="a")


def test_collect_with_pixels():
    env = EnvConfig("cartpole-balance", num_envs=2, backend="mujoco", overrides={"episode_length": 8})
    pixels = PixelsConfig(True, width=16, height=16)
    cfg = CollectConfig(env=env, episodes=2, ref_min_score=0.0, progress=False, pixels=pixels)
    data = collect(cfg)
    frames = data.observations["pixels"]
    assert frames.shape == (2 * 9, 16, 16, 3) and frames.dtype == np.uint8 and frames.std() > 0
    assert data.observations["policy"].shape[0] == 18


def test_full_replay_is_the_runs_replay_buffer(tmp_path):
    """kind=full-replay: the replay buffer saved with an off-policy checkpoint, split into episodes per env."""
    from robolearn.train import train

    run = train(["env=pendulum-swingup", "algo=sac", f"run_dir={tmp_path / 'run'}", "progress=false", "video=false",
                 "algo.env_steps=300", "algo.learning_starts=200", "algo.batch_size=32", "env.num_envs=2",
                 "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "algo.steps_per_iteration=50",
                 "+env.overrides.episode_length=60"])
    data = collect(CollectConfig(kind="full-replay", policy=str(run / "checkpoints" / "final")))
    # 2 envs x 150 steps: 2 whole 60-step episodes each, then a 30-step one cut by the end of training
    assert data.num_steps == 300 and sorted(data.lengths.tolist()) == [30, 30, 60, 60, 60, 60]
    assert data.truncations.sum() == 6 and not data.terminations.any()
    assert data.metadata["task"] == "pendulum-swingup" and data.metadata["partial_first"] is False
    with pytest.raises(RobolearnError, match="no config.json"):
        collect(CollectConfig(kind="full-replay", policy=str(tmp_path / "run")))
