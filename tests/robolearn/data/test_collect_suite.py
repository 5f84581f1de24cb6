"""Maze goal datasets (diverse / play) and `robolearn collect suite=`: a whole suite from one command, resumable."""

import json

import numpy as np
import pytest

from robolearn.collect.generate import CollectConfig, collect
from robolearn.collect.suite import load_suite
from robolearn.commands.cli import main
from robolearn.config import EnvConfig
from robolearn.data.formats import load_dataset
from robolearn.errors import ConfigError
from sim.tasks.maze import LAYOUTS, cell_center, open_cells, play_cells, start_and_goal


def test_play_cells_are_the_decision_points():
    """umaze: its two dead ends and two turns; the medium maze's straight corridor cells are left out."""
    assert play_cells(LAYOUTS["umaze"]) == [(1, 1), (1, 3), (3, 1), (3, 3)]
    medium = LAYOUTS["medium"]
    assert set(play_cells(medium)) < set(open_cells(medium)) and len(play_cells(medium)) >= 10


def test_diverse_and_play_cover_the_maze_and_keep_the_tasks_goal():
    """Goal data: episodes start all over the maze (diverse) or at decision points (play), the commanded goals take
    the ball far from the start, and the observed goal and the reward stay the task's own (relabelled)."""
    layout = LAYOUTS["medium"]
    env = EnvConfig("point-maze-medium", num_envs=16, backend="mujoco", overrides={"episode_length": 200})
    diverse = collect(CollectConfig(env=env, kind="diverse", episodes=16, noise=0.1, progress=False))
    play = collect(CollectConfig(env=env, kind="play", episodes=16, progress=False))
    for data, cells in ((diverse, open_cells(layout)), (play, play_cells(layout))):
        starts = np.stack([ep.observations["policy"][0, :2] for ep in data.episodes()])
        centers = np.array([cell_center(*c, layout) for c in cells])
        nearest = np.abs(starts[:, None] - centers[None]).max(-1).min(1)
        assert (nearest <= 0.25 + 1e-5).all()  # every start is a cell of the kind's set, plus the start noise
        assert len({tuple(np.round(s)) for s in starts}) >= 5  # and they differ
        goals = data.observations["policy"][:, 4:6]
        goal_cell = np.array(cell_center(*start_and_goal(layout)[1], layout))
        assert np.abs(goals - goal_cell).max() <= 0.25 + 1e-5  # the task's goal cell, not the commanded
        xy = data.observations["policy"][:, :2]
        assert np.ptp(xy[:, 0]) > 4 and np.ptp(xy[:, 1]) > 4  # the data spans the maze
        at_goal = np.linalg.norm(xy[:-1] - goals[:-1], axis=1) <= 0.5
        # the reference return is measured (noise-free reference controller) for these 200-step episodes
        assert data.metadata["kind"] in ("diverse", "play") and 5 < data.metadata["ref_max_score"] < 190.2
        assert data.rewards.sum() <= at_goal.sum()  # reward only at the task's goal
    with pytest.raises(ConfigError, match="for the mazes"):
        collect(CollectConfig(env=EnvConfig("point-mass", num_envs=2), kind="diverse", episodes=1, progress=False))


SUITE = """
seed: 3
tasks:
  point-maze-umaze:
    kinds: [expert, play]
    episodes: 4
    num_envs: 4
    noise: 0.2
  pendulum-swingup:
    kinds: [random, medium, medium-replay, full-replay]
    episodes: 2
    num_envs: 2
    train:
      overrides: [algo=sac, env.num_envs=2, runner.steps_per_iteration=25, algo.learning_starts=50, algo.batch_size=32,
                  "algo.actor_hidden=[16]", "algo.critic_hidden=[16]"]
      iterations: 2
      chunk: 1
      eval_episodes: 2
      medium_score: -100   # any policy qualifies: the test checks the mechanics, not the level
      prior_data: random   # mixed into the training batches: made before the training run
"""


def test_suite_generates_every_dataset_and_resumes(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(SUITE)
    out = tmp_path / "data"
    assert main(["collect", f"suite={path}", f"out={out}", "progress=false"]) == 0
    record = json.loads((out / "suite.json").read_text())
    names = {"point-maze-umaze-expert-v0", "point-maze-umaze-play-v0", "pendulum-swingup-random-v0",
             "pendulum-swingup-medium-v0", "pendulum-swingup-medium-replay-v0", "pendulum-swingup-full-replay-v0"}
    assert set(record["datasets"]) == names
    for name in names:
        data = load_dataset(out / name)
        d = record["datasets"][name]
        assert d["steps"] == data.num_steps and d["bytes"] > 0 and d["seconds"] >= 0 and data.metadata["seed"] == 3
        assert data.metadata["ref_max_score"] is not None  # every dataset normalises
    train = record["training"]["pendulum-swingup"]
    assert train["iterations"] == 2 and train["medium"]["iterations"] == 1 and len(train["evaluations"]) == 2
    run_cfg = json.loads((out / "_train" / "pendulum-swingup" / "config.yaml").read_text())  # JSON is YAML
    assert run_cfg["runner"]["offline_data"] == str(out / "pendulum-swingup-random-v0")
    # medium-replay is the buffer at the medium checkpoint (1 iteration x 25 steps x 2 envs), full-replay at the end
    assert record["datasets"]["pendulum-swingup-medium-replay-v0"]["steps"] == 50
    assert record["datasets"]["pendulum-swingup-full-replay-v0"]["steps"] == 100
    assert "| point-maze-umaze-play-v0 | 4 |" in (out / "README.md").read_text()
    # resume: a deleted dataset is made again, the others (and the training) are kept
    import shutil

    kept = (out / "pendulum-swingup-medium-v0").stat().st_mtime
    shutil.rmtree(out / "point-maze-umaze-play-v0")
    capsys.readouterr()
    assert main(["collect", f"suite={path}", f"out={out}", "progress=false"]) == 0
    printed = capsys.readouterr().out
    assert "point-maze-umaze-play-v0: 1200 steps" in printed and "medium-v0:" not in printed
    assert (out / "pendulum-swingup-medium-v0").stat().st_mtime == kept


def test_suite_errors(tmp_path):
    with pytest.raises(ConfigError, match="no dataset suite"):
        load_suite("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  cheetah-run:\n    kinds: [medium]\n")
    with pytest.raises(ConfigError, match="need a `train:` section"):
        load_suite(str(bad))
    for prior, kinds in (("medium", "[medium]"), ("expert", "[random, medium]")):  # trained, or not in the suite
        bad.write_text(f"tasks:\n  cheetah-run:\n    kinds: {kinds}\n    train: {{prior_data: {prior}}}\n")
        with pytest.raises(ConfigError, match="prior_data"):
            load_suite(str(bad))
    bad.write_text("tasks:\n  cheetah-run:\n    kinds: [umaze]\n")
    with pytest.raises(ConfigError, match="unknown kinds"):
        load_suite(str(bad))
    name, settings, tasks = load_suite("d4rl-like")
    assert name == "d4rl-like" and {t.task for t in tasks} >= {"cheetah-run", "walker-walk", "ant-velocity",
                                                                "arm-pick-place", "point-maze-large", "ant-maze-large"}
    name, settings, tasks = load_suite("antmaze")  # D4RL's six antmaze datasets
    assert sorted(f"{t.task}-{k}" for t in tasks for k in t.kinds) == [
        "antmaze-large-diverse", "antmaze-large-play", "antmaze-medium-diverse", "antmaze-medium-play",
        "antmaze-umaze-diverse", "antmaze-umaze-waypoint"]


def test_tasks_picks_part_of_a_suite_and_names_unknown_ones(tmp_path, capsys):
    """`tasks=[...]` collects only those tasks of the suite (no training run for the others); an unknown task is an
    error that lists the suite's tasks."""
    path = tmp_path / "tiny.yaml"
    path.write_text(SUITE)
    out = tmp_path / "data"
    assert main(["collect", f"suite={path}", f"out={out}", "tasks=[point-maze-umaze]", "progress=false"]) == 0
    record = json.loads((out / "suite.json").read_text())
    assert set(record["datasets"]) == {"point-maze-umaze-expert-v0", "point-maze-umaze-play-v0"}
    assert not (out / "_train").exists()
    assert main(["collect", f"suite={path}", f"out={out}", "tasks=[walker]", "progress=false"]) != 0
    assert "collect tasks=['walker'] are not in suite tiny (its tasks: point-maze-umaze, " in capsys.readouterr().err
