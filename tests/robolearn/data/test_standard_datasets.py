"""Standard offline datasets end to end (robolearn.data.sources, robolearn.data.standard, eval backend=gymnasium):
datasets that minari's own DataCollector records in the Gymnasium envs, and a D4RL-layout HDF5 file, are found by
their Minari or D4RL id (nothing downloaded), pick the matching task, train, report scores normalised with the
dataset's reference returns, and score in Gymnasium beside our sim; `robolearn collect format=minari` into a Minari
root gives a dataset minari lists and loads by its full id."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest

from robolearn.checkpoints.policy import load_policy
from robolearn.commands.cli import main
from robolearn.data.sources import dataset_task, load_source, resolve_dataset
from robolearn.data.standard import GYMNASIUM, gymnasium_spec, make_gymnasium
from robolearn.data.standard import dataset_task as choose
from robolearn.errors import ConfigError
from robolearn.eval.evaluate import score_checkpoint
from robolearn.eval.gymnasium_check import gymnasium_returns

pytestmark = pytest.mark.filterwarnings("ignore:.*is set to None:UserWarning", "ignore:.*eval_env.*:UserWarning")

#: pointmaze-umaze's map (the Minari D4RL/pointmaze datasets' evaluation map: one goal cell) as gymnasium-robotics'
UMAZE_EVAL = [[1, 1, 1, 1, 1], [1, "g", 0, 0, 1], [1, 1, 1, 0, 1], [1, 0, 0, 0, 1], [1, 1, 1, 1, 1]]
SHORT = ["runner.gradient_steps=20", "runner.log_every=20", "runner.eval_every=20", "runner.eval_episodes=2",
         "algo.batch_size=32", "video=false", "progress=false"]


def _record(env: gym.Env, dataset_id: str, episodes: int, **metadata) -> None:
    """`episodes` episodes of uniform random actions through minari's own DataCollector, saved as `dataset_id`."""
    collector = minari.DataCollector(env)
    for i in range(episodes):
        collector.reset(seed=i)
        collector.action_space.seed(i)
        done = False
        while not done:
            *_, terminated, truncated, _ = collector.step(collector.action_space.sample())
            done = terminated or truncated
    collector.create_dataset(dataset_id=dataset_id, algorithm_name="random", **metadata)
    collector.close()


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory):
    """A Minari root holding HalfCheetah-v5 (50-step episodes, Box observations) and PointMaze_UMaze-v3 (30 steps,
    Dict observations, continuing_task=True, reset_target=False, the evaluation map) datasets, with reference
    scores."""
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        _record(gym.make("HalfCheetah-v5", max_episode_steps=50), "mujoco/halfcheetah/random-v0", 4,
                ref_min_score=-40.0, ref_max_score=60.0)
        _record(gym.make("PointMaze_UMaze-v3", maze_map=UMAZE_EVAL, continuing_task=True, reset_target=False,
                         max_episode_steps=30), "test/pointmaze/umaze-v0", 4, ref_min_score=0.0, ref_max_score=20.0)
    return root


def _run(path):
    config = json.loads((path / "config.yaml").read_text())
    metrics = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return config, metrics[-1]


def _scored(row, lo, hi):
    assert row["eval/normalized_score"] == pytest.approx(100 * (row["eval/return"] - lo) / (hi - lo))


def test_minari_halfcheetah_trains_and_cross_checks_in_gymnasium(minari_root, tmp_path, monkeypatch, capsys):
    """dataset=<Minari id>: task halfcheetah-v5 with the recorded time limit, scores normalised with the dataset's
    reference returns; eval backend=gymnasium scores in HalfCheetah-v5 beside the sim."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(minari_root))
    run = tmp_path / "bc"
    assert main(["train", "algo=bc", "dataset=mujoco/halfcheetah/random-v0", f"run_dir={run}", *SHORT]) == 0
    out = capsys.readouterr().out
    assert "task halfcheetah-v5 (episode_length=50) from Minari env_spec HalfCheetah-v5" in out
    config, last = _run(run)
    assert config["env"]["name"] == "halfcheetah-v5" and config["env"]["overrides"] == {"episode_length": 50}
    source = config["dataset_source"]
    assert source["reference"] == [-40.0, 60.0] and source["reference_source"] == "dataset"
    assert source["gymnasium"] == {"id": "HalfCheetah-v5", "kwargs": {}, "max_episode_steps": 50}
    _scored(last, -40.0, 60.0)

    # episodes=2 as the run's evaluation: the same compiled sim step (a new shape would compile again)
    assert main(["eval", f"checkpoint={run / 'checkpoints' / 'final'}", "backend=gymnasium", "episodes=2"]) == 0
    table = capsys.readouterr().out
    assert "reset(seed=1000 + i)" in table and "reference returns of the dataset" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.startswith(("sim ", "gymnasium "))}
    assert rows["sim"][1] == "halfcheetah-v5" and rows["gymnasium"][1] == "HalfCheetah-v5"
    for row in rows.values():  # backend, env, mean, +-, std, normalised, success, seeds...
        assert float(row[5]) == pytest.approx(100 * (float(row[2]) + 40.0) / 100.0, abs=0.02)
    assert main(["eval", f"checkpoint={run / 'checkpoints' / 'final'}", "backend=mujoco"]) == 2
    assert "backend must be one of sim, gymnasium" in capsys.readouterr().err


def test_minari_pointmaze_flattens_like_gymnasium_and_trains_iql(minari_root, tmp_path, monkeypatch, capsys):
    """A Dict-observation dataset reads as gymnasium.spaces.flatten's vector (float32, keys sorted), maps to
    pointmaze-umaze, and a value-based learner trains on it and is scored in both backends."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(minari_root))
    path, data = load_source("test/pointmaze/umaze-v0")
    theirs = minari.load_dataset("test/pointmaze/umaze-v0")
    space = theirs.spec.observation_space
    first = next(iter(theirs.iterate_episodes()))
    flat = np.stack([gym.spaces.flatten(space, {k: v[t] for k, v in first.observations.items()}) for t in range(31)])
    assert list(data.observations) == ["policy"] and data.observations["policy"].dtype == np.float32
    np.testing.assert_allclose(data.observations["policy"][:31], flat.astype(np.float32))
    choice = dataset_task("test/pointmaze/umaze-v0")
    assert (choice.task, choice.overrides) == ("pointmaze-umaze", {"episode_length": 30})

    run = tmp_path / "iql"
    assert main(["train", "algo=iql", "dataset=test/pointmaze/umaze-v0", f"run_dir={run}", *SHORT,
                 "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "algo.value_hidden=[32,32]"]) == 0
    config, last = _run(run)
    assert config["env"]["name"] == "pointmaze-umaze"
    _scored(last, 0.0, 20.0)
    capsys.readouterr()
    scores = score_checkpoint(run / "checkpoints" / "final", episodes=2, backend="gymnasium")
    sim, gymnasium = scores.rows
    assert (sim.env, gymnasium.env) == ("pointmaze-umaze", "PointMaze_UMaze-v3 (+4 kwargs)")
    assert sim.success is not None and gymnasium.success is not None  # both report the maze's success


def test_d4rl_file_by_name_trains_with_d4rl_reference_scores(tmp_path, monkeypatch, capsys):
    """dataset=halfcheetah-medium-v2 finds <D4RL_DATASET_DIR>/halfcheetah-medium-v2.hdf5 (a D4RL-layout file),
    trains on halfcheetah-v5 and normalises with D4RL's table; an explicit +env.overrides wins."""
    env = gym.make("HalfCheetah-v5")
    rows = {k: [] for k in ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")}
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        for t in range(50):
            action = env.action_space.sample()
            nxt, reward, terminated, _, _ = env.step(action)
            for key, value in zip(rows, (obs, action, reward, terminated, t == 49, nxt), strict=True):
                rows[key].append(value)
            obs = nxt
    d4rl_dir = tmp_path / "d4rl"
    d4rl_dir.mkdir()
    with h5py.File(d4rl_dir / "halfcheetah-medium-v2.hdf5", "w") as f:
        for key, value in rows.items():
            f[key] = np.asarray(value, np.float32 if key not in ("terminals", "timeouts") else bool)
    monkeypatch.setenv("D4RL_DATASET_DIR", str(d4rl_dir))
    assert resolve_dataset("halfcheetah-medium-v2") == d4rl_dir / "halfcheetah-medium-v2.hdf5"

    run = tmp_path / "bc"
    assert main(["train", "algo=bc", "dataset=halfcheetah-medium-v2", "+env.overrides.episode_length=50",
                 f"run_dir={run}", *SHORT]) == 0
    assert "task halfcheetah-v5 from D4RL halfcheetah-medium-v2" in capsys.readouterr().out
    config, last = _run(run)
    assert config["env"]["name"] == "halfcheetah-v5" and config["env"]["overrides"] == {"episode_length": 50}
    assert config["dataset_source"]["reference"] == [-280.178953, 12135.0]
    assert config["dataset_source"]["reference_source"] == "D4RL halfcheetah-medium-v2"
    _scored(last, -280.178953, 12135.0)
    # the run changed the task (50-step episodes), so eval's cross-check is the Gymnasium env the task equals
    assert config["dataset_source"]["gymnasium"] is None
    spec = gymnasium_spec(config["env"]["name"], config["env"]["overrides"])
    assert spec == {"id": "HalfCheetah-v5", "kwargs": {}, "max_episode_steps": 50}
    returns, success = gymnasium_returns(spec, load_policy(run / "checkpoints" / "final"), 2, 1000)
    assert returns.shape == (2,) and np.isfinite(returns).all() and success is None


def test_names_resolve_where_minari_and_d4rl_keep_them(minari_root, tmp_path, monkeypatch):
    """Minari ids under MINARI_DATASETS_PATH, D4RL ids under D4RL_DATASET_DIR by the name D4RL downloads them to;
    a missing one says where it looked and how to get it."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(minari_root))
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path))
    assert resolve_dataset("mujoco/halfcheetah/random-v0") == minari_root / "mujoco" / "halfcheetah" / "random-v0"
    (tmp_path / "hopper_medium-v2.hdf5").write_bytes(b"")  # D4RL's own file name for hopper-medium-v2
    assert resolve_dataset("hopper-medium-v2") == tmp_path / "hopper_medium-v2.hdf5"
    with pytest.raises(ConfigError) as missing:
        resolve_dataset("mujoco/halfcheetah/random-v1")
    assert str(minari_root / "mujoco" / "halfcheetah" / "random-v1") in str(missing.value)
    assert "minari download mujoco/halfcheetah/random-v1" in str(missing.value) and "here: random-v0" in str(
        missing.value)
    with pytest.raises(ConfigError) as missing:
        resolve_dataset("walker2d-medium-replay-v2")
    text = str(missing.value)
    assert str(tmp_path / "walker2d_medium_replay-v2.hdf5") in text
    assert "gym_mujoco_v2/walker2d_medium_replay-v2.hdf5" in text and "Nothing is downloaded" in text


def _spec(gym_id, max_episode_steps=None, **kwargs):
    return json.dumps({"id": gym_id, "kwargs": kwargs, "max_episode_steps": max_episode_steps})


def test_task_mapping_table():
    """Minari env specs (eval_env_spec first) and D4RL ids pick their task; kwargs become task options, rendering
    ones are ignored, others that change the env are refused; D4RL layouts no task reproduces are refused by name;
    every task in the table round-trips through the Gymnasium spec it equals."""
    meta = {"minari": {"env_spec": _spec("PointMaze_UMaze-v3", 1_000_000, maze_map=UMAZE_EVAL, reset_target=True),
                       "eval_env_spec": _spec("PointMaze_UMazeDense-v3", 300, maze_map=UMAZE_EVAL,
                                              reward_type="dense", continuing_task=True, reset_target=False)}}
    choice = choose(meta, 8, "d")
    assert (choice.task, choice.overrides, choice.gymnasium["id"]) == ("pointmaze-umaze-dense", {},
                                                                       "PointMaze_UMazeDense-v3")
    rotated = [[1, 1, 1, 1, 1], [1, 0, 0, "r", 1], [1, 0, 1, 1, 1], [1, 0, 0, "g", 1], [1, 1, 1, 1, 1]]
    choice = choose({"minari": {"env_spec": _spec("AntMaze_UMaze-v4", 700, maze_map=rotated)}}, 31, "d")
    assert (choice.task, choice.overrides) == ("antmaze-umaze", {"layout": "umaze-rotated"})
    choice = choose({"minari": {"env_spec": _spec("Hopper-v5", 1000, reset_noise_scale=0.01, render_mode="human",
                                                  frame_skip=4)}}, 11, "d")
    assert (choice.task, choice.overrides) == ("hopper-v5", {"reset_noise_scale": 0.01})
    with pytest.raises(ConfigError, match="frame_skip=2, which changes the env, and hopper-v5 has no option"):
        choose({"minari": {"env_spec": _spec("Hopper-v5", 1000, frame_skip=2)}}, 11, "d")
    with pytest.raises(ConfigError, match="Swimmer-v5, which no robolearn task equals"):
        choose({"minari": {"env_spec": _spec("Swimmer-v5")}}, 8, "d")
    with pytest.raises(ConfigError, match="maze_map"):
        choose({"minari": {"env_spec": _spec("PointMaze_UMaze-v3", 300, maze_map=rotated)}}, 8, "d")
    assert choose({"task": "cheetah-run"}, 17, "d").task == "cheetah-run"  # a robolearn dataset's own task
    assert choose({}, 4, "d") is None

    assert choose({"d4rl_dataset": "walker2d-medium-replay-v2"}, 17, "d").task == "walker2d-v5"
    assert choose({"d4rl_dataset": "ant-medium-v2"}, 27, "d").overrides == {"include_cfrc_ext_in_observation": False}
    with pytest.raises(ConfigError, match="111.*105"):
        choose({"d4rl_dataset": "ant-medium-v2"}, 111, "d")
    with pytest.raises(ConfigError, match=r"observations of 4 numbers.*8 numbers.*D4RL/pointmaze"):
        choose({"d4rl_dataset": "maze2d-umaze-v1"}, 4, "d")
    with pytest.raises(ConfigError, match=r"29 numbers.*31 numbers"):
        choose({"d4rl_dataset": "antmaze-umaze-v2"}, 29, "d")

    for gym_id, task in GYMNASIUM.items():
        spec = gymnasium_spec(task, {})
        back = choose({"minari": {"env_spec": json.dumps(spec)}}, None, "d")
        assert (back.task, back.overrides) == (task, {}), gym_id
    spec = gymnasium_spec("pointmaze-medium", {"episode_length": 50, "continuing_task": False})
    assert spec["kwargs"]["continuing_task"] is False and spec["max_episode_steps"] == 50
    assert gym.spaces.flatdim(make_gymnasium(spec).observation_space) == 8
    with pytest.raises(ConfigError, match="action_repeat"):
        gymnasium_spec("halfcheetah-v5", {"action_repeat": 2})
    with pytest.raises(ConfigError, match="equals no Gymnasium env"):
        gymnasium_spec("cheetah-run", {})


def test_collect_into_a_minari_root_gives_the_full_id(tmp_path, monkeypatch, capsys):
    """`robolearn collect format=minari out=<root>/point-mass/random-v0` writes id point-mass/random-v0: minari
    lists it (no "misconfigured" warning) and loads it by that id, and dataset= finds it by the id too."""
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    assert main(["collect", "env=point-mass", "env.num_envs=2", "env.backend=mujoco",
                 "+env.overrides.episode_length=10", "episodes=2", "format=minari",
                 f"out={root / 'point-mass' / 'random-v0'}", "progress=false", "ref_min_score=0"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # minari warns "Misconfigured dataset" for a folder whose id does not match
        assert list(minari.list_local_datasets()) == ["point-mass/random-v0"]
    loaded = minari.load_dataset("point-mass/random-v0")
    assert loaded.spec.dataset_id == "point-mass/random-v0" and loaded.total_episodes == 2
    assert resolve_dataset("point-mass/random-v0") == root / "point-mass" / "random-v0"
    assert dataset_task("point-mass/random-v0").task == "point-mass"
