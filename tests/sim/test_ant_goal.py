"""ant-goal (Minari's GoalReachAnt recipe): its observation, reward and goal draws, on the C backend."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import sim
from sim.env import Env


def _env(**overrides) -> Env:
    task = sim.make_task("ant-goal", **overrides)
    return Env(task, sim.make_backend(task, "mujoco"))


def test_observation_reward_and_goals():
    env = _env(goal_frame="world")
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    state = reset(jax.random.PRNGKey(0))
    obs = np.asarray(state.obs["policy"])
    assert obs.shape == (29,)  # the antmaze ant's 27 + the goal relative to the torso
    goal = np.asarray(state.info["goal"])
    assert np.linalg.norm(goal) <= 10.0
    np.testing.assert_allclose(obs[-2:], goal - np.asarray(state.info["xy_before"]), atol=1e-6)

    # Walking: the forward term is 10x the torso's speed towards the goal over the step; nothing is drawn.
    action = jnp.full((8,), 0.3)
    before = np.asarray(state.info["xy_before"])
    nxt = step(state, action)
    after = np.asarray(nxt.info["xy_before"])
    direction = (goal - before) / np.linalg.norm(goal - before)
    np.testing.assert_allclose(float(nxt.metrics["reward/forward"]), 10 * np.dot(after - before, direction) / 0.05,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(nxt.metrics["reward/ctrl"]), -0.5 * 8 * 0.09, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(nxt.info["goal"]), goal)
    np.testing.assert_allclose(np.asarray(nxt.obs["policy"][-2:]), goal - after, atol=1e-5)

    # A goal under the torso is reached on the next step: counted, and a new one drawn in the disk.
    here = {**nxt.info, "goal": jnp.asarray(after)}
    reached = step(nxt.replace(info=here), action)
    assert float(reached.metrics["episode/goals"]) == 1.0
    new_goal = np.asarray(reached.info["goal"])
    assert not np.allclose(new_goal, after) and np.linalg.norm(new_goal) <= 10.0


def test_goals_cover_the_disk():
    """Goals at angle U(0, 2 pi), distance 10 U(0, 1): mean distance 5, every quadrant."""
    env = _env()
    goals = np.asarray(jax.vmap(lambda k: env.task.init(k)[2]["goal"])(jax.random.split(jax.random.PRNGKey(1), 4000)))
    radius = np.linalg.norm(goals, axis=-1)
    assert radius.max() <= 10.0 and abs(radius.mean() - 5.0) < 0.3
    assert all(np.mean((np.sign(goals[:, 0]) == sx) & (np.sign(goals[:, 1]) == sy)) > 0.2
               for sx in (-1, 1) for sy in (-1, 1))


def test_the_antmaze_observation_is_fixed():
    import pytest

    from sim.errors import ConfigError

    for bad in ({"include_cfrc_ext_in_observation": True}, {"exclude_current_positions_from_observation": False},
                {"goal_threshold": 0.0}):
        with pytest.raises(ConfigError):
            sim.make_task("ant-goal", **bad)


def test_the_goal_is_observed_in_the_torsos_heading():
    """goal_frame="torso" (default): the offset turned by minus the torso's yaw; a torso turned +90 degrees sees a goal
    due east (+x) on its right (-y)."""
    from sim.tasks.ant_goal import goal_offset

    quarter = np.array([np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)])  # yaw +90 degrees about z
    np.testing.assert_allclose(np.asarray(goal_offset(quarter, np.array([1.0, 0.0]), "torso")), [0.0, -1.0],
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(goal_offset(quarter, np.array([1.0, 0.0]), "world")), [1.0, 0.0])
    np.testing.assert_allclose(np.asarray(goal_offset(1.1 * quarter, np.array([1.0, 0.0]), "torso")), [0.0, -1.0],
                               atol=1e-6)  # a reset's quaternion is noisy, not normalised
    env = _env()
    state = jax.jit(env.reset)(jax.random.PRNGKey(3))
    qpos = np.asarray(env.backend.view(state.data).qpos)
    world = np.asarray(state.info["goal"] - state.info["xy_before"])
    np.testing.assert_allclose(np.asarray(state.obs["policy"][-2:]), np.asarray(goal_offset(qpos[3:7], world,
                                                                                          "torso")), atol=1e-5)
