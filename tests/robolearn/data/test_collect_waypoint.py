"""`robolearn collect kind=waypoint` (robolearn/collect/waypoint.py): D4RL's maze2d datasets as Minari rebuilt them."""

from __future__ import annotations

import numpy as np
import pytest

from robolearn.collect.generate import CollectConfig, collect
from robolearn.config import EnvConfig
from robolearn.errors import ConfigError
from sim.tasks.d4rl_maze import GOAL_RADIUS


def test_waypoint_runs_are_cut_at_each_goal_and_name_the_evaluation_task():
    """4 runs of 1000 steps: each cut into an episode at every goal reached (the step's next observation within
    0.45 m of the goal it was rewarded against, a truncation) and at its end; the pieces of a run follow on from each
    other, the next one heading for a new goal. The dataset names the evaluation task (the layout's goal cell, the
    goal fixed) and Minari's reference returns, measured there (random actions, the noise-free controller)."""
    cfg = CollectConfig(env=EnvConfig(name="pointmaze-umaze", num_envs=4), kind="waypoint", steps=4000,
                        progress=False)
    data = collect(cfg)
    meta = data.metadata
    assert data.num_steps == 4000 and meta["noise"] == 0.5 and meta["policy"] == "waypoint"
    assert meta["env"]["name"] == "pointmaze-umaze" and meta["env"]["overrides"] == {}
    assert meta["collected_in"]["overrides"] == {"any_goal": True, "reset_target": True, "continuing_task": True,
                                                 "episode_length": 1000}
    # Minari's umaze-v2: 1M steps in about 13k episodes (~76 steps each); the noise-free controller scores ~229
    assert 40 < data.num_steps / data.num_episodes < 150
    assert meta["ref_min_score"] < 30 < 180 < meta["ref_max_score"] < 300

    episodes = list(data.episodes())
    assert not data.terminations.any() and all(e.truncations[-1] and not e.truncations[:-1].any() for e in episodes)
    reached = [np.linalg.norm(e.observations["policy"][1:, 0:2] - e.observations["policy"][1:, 2:4], axis=-1)
               <= GOAL_RADIUS for e in episodes]
    assert not any(r[:-1].any() for r in reached)  # no goal reached inside an episode
    at_goal = np.array([r[-1] for r in reached])
    assert data.num_episodes - at_goal.sum() <= 4  # all but each run's last piece (cut by the run's end)
    follow = [(b, a) for b, a, r in zip(episodes[:-1], episodes[1:], at_goal[:-1], strict=True) if r]
    same_run = [np.array_equal(a.observations["policy"][0, 0:2], b.observations["policy"][-1, 0:2])
                for b, a in follow]
    assert sum(same_run) >= len(follow) - 4  # after an arrival, the run goes on from where it arrived ...
    # ... towards a new goal, observed from its second step (the arriving step's observation shows the old one)
    assert all(np.array_equal(a.observations["policy"][0], b.observations["policy"][-1])
               and (a.observations["policy"][1, 2:4] != a.observations["policy"][0, 2:4]).any()
               for (b, a), same in zip(follow, same_run, strict=True) if same)


def test_waypoint_refuses_other_tasks_and_policies():
    with pytest.raises(ConfigError, match="pointmaze-"):
        collect(CollectConfig(env=EnvConfig(name="point-mass", num_envs=2), kind="waypoint", steps=10,
                              progress=False))
    with pytest.raises(ConfigError, match="waypoint controller"):
        collect(CollectConfig(env=EnvConfig(name="pointmaze-umaze", num_envs=2), kind="waypoint", steps=10,
                              policy="reference", progress=False))
