"""The ant tasks: termination, commands, domain randomization, the scripted trot (C backend, few envs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import sim
from sim.core import Physics
from sim.tasks.ant import MAZE_CELL, wall_boxes
from sim.tasks.ant_control import ant_velocity_policy
from sim.tasks.maze import bfs_distances, cell_center, start_and_goal

# Slices of the ant-velocity "policy" observation (see the task's docstring).
LIN_VEL, HEIGHT, COMMAND, CLOCK = slice(19, 22), 25, slice(26, 29), slice(29, 31)


def _physics(task, qpos: np.ndarray) -> Physics:
    m = task.mj_model
    return Physics(qpos=jnp.asarray(qpos, jnp.float32), qvel=jnp.zeros(m.nv), sensordata=jnp.zeros(m.nsensordata),
                   ctrl=jnp.zeros(m.nu))


def test_terminates_when_low_or_flipped():
    task = sim.make_task("ant-velocity")
    qpos, _, info = task.init(jax.random.PRNGKey(0))
    qpos = np.asarray(qpos)
    assert not bool(task.terminated(_physics(task, qpos), info))
    low = qpos.copy()
    low[2] = 0.1
    assert bool(task.terminated(_physics(task, low), info))
    flipped = qpos.copy()
    flipped[3:7] = [0.0, 1.0, 0.0, 0.0]  # half a turn about x: the torso's z axis points down
    assert bool(task.terminated(_physics(task, flipped), info))
    tilted = qpos.copy()
    tilted[3:7] = [np.cos(0.5), np.sin(0.5), 0.0, 0.0]  # 57 degrees of roll: still healthy
    assert not bool(task.terminated(_physics(task, tilted), info))
    relaxed = sim.make_task("ant-velocity", terminate_unhealthy=False)
    assert not bool(relaxed.terminated(_physics(relaxed, flipped), info))


def test_command_and_clock_are_observed():
    """Each env draws its own command, holds it for `resample_steps`, and draws anew at resets."""
    env = sim.make("ant-velocity", num_envs=4, seed=1, episode_length=6, resample_steps=4)
    obs = env.get_observations()["policy"]
    first = obs[:, COMMAND].clone()
    assert len({tuple(c.tolist()) for c in first}) == 4
    assert (first.abs() <= torch.tensor(env.task.cfg.command_range)).all()
    torch.testing.assert_close(obs[:, CLOCK], torch.tensor([[1.0, 0.0]] * 4))
    cmds = [first]
    for _ in range(6):
        obs, _, dones, _ = env.step(torch.zeros(4, 8))
        cmds.append(obs["policy"][:, COMMAND].clone())
        if len(cmds) == 2:  # the gait clock advances with the episode time
            phase = 2 * np.pi * 1.5 * env.task.cfg.ctrl_dt
            expected = torch.tensor([[np.cos(phase), np.sin(phase)]] * 4, dtype=torch.float32)
            torch.testing.assert_close(obs["policy"][:, CLOCK], expected, atol=1e-5, rtol=0)
    env.close()
    assert dones.all()  # the sixth step ended the episodes: cmds[6] is a new episode's command
    torch.testing.assert_close(cmds[3], cmds[0])  # steps 0..3: the first command
    assert not torch.isclose(cmds[4], cmds[0]).any()  # steps 4..5: the second
    torch.testing.assert_close(cmds[5], cmds[4])
    assert not torch.isclose(cmds[6], cmds[0]).any() and not torch.isclose(cmds[6], cmds[4]).any()


def test_domain_randomization_reaches_the_critic():
    task = sim.make_task("ant-velocity", domain_randomization=True)
    params = task.randomize(jax.random.PRNGKey(0))
    m = task.mj_model
    for name, value in params.items():
        assert value.shape == getattr(m, name).shape, name
    # The servo stays a servo: kp scales its gain and its -kp bias together.
    np.testing.assert_allclose(params["actuator_gainprm"][:, 0], -params["actuator_biasprm"][:, 1], rtol=1e-6)
    phys = _physics(task, np.asarray(task.init(jax.random.PRNGKey(0))[0]))
    _, _, info = task.init(jax.random.PRNGKey(0))
    info = {**info, "steps": jnp.zeros((), jnp.int32), "dr": params}
    critic = task.observe(phys, info)["critic"]
    assert critic.shape == (42,)
    assert not np.allclose(critic[31:], 1.0) and np.all(np.abs(np.asarray(critic[31:]) - 1.0) < 0.25)
    critic = task.observe(phys, {**info, "dr": {}})["critic"]
    np.testing.assert_allclose(critic[31:], 1.0)


def test_trot_walks_where_commanded():
    """The scripted trot moves the torso at the commanded heading-frame velocity, in any direction."""
    env = sim.make("ant-velocity", num_envs=6, seed=3, resample_steps=0, command_range=(0.5, 0.5, 0.0))
    obs = env.get_observations()["policy"]
    cmd = obs[:, COMMAND][:, :2].clone()
    speeds = []
    for t in range(80):
        obs_td, _, dones, _ = env.step(ant_velocity_policy(obs))
        obs = obs_td["policy"]
        assert not dones.any()
        if t >= 30:
            speeds.append(obs[:, LIN_VEL][:, :2])
    env.close()
    speed = torch.stack(speeds).mean(0)
    assert ((speed - cmd).abs() < 0.15).all(), (speed, cmd)
    assert (cmd.abs() > 0.25).sum() >= 3  # some commands far from standing still


# --- mazes ---------------------------------------------------------------------------------------------
MAZES = ["ant-maze-umaze", "ant-maze-medium", "ant-maze-large"]


@pytest.mark.parametrize("name", MAZES)
def test_maze_walls_start_and_goal(name):
    """Few wall boxes covering exactly the wall cells; start and goal in their cells, per episode noise."""
    task = sim.make_task(name)
    layout = task.layout
    walls = {(r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch == "#"}
    boxes = wall_boxes(layout)
    assert {(r, c) for r0, c0, r1, c1 in boxes for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)} == walls
    assert len(boxes) <= 15 and task.mj_model.ngeom == 18 + len(boxes)
    start, goal = start_and_goal(layout)
    assert bfs_distances(layout, start)[goal] == max(bfs_distances(layout, start).values())
    np.testing.assert_allclose(task.start_xy, MAZE_CELL * np.array(cell_center(*start, layout)))
    np.testing.assert_allclose(task.goal_xy, MAZE_CELL * np.array(cell_center(*goal, layout)))
    goals = []
    for seed in range(4):
        qpos, _, info = task.init(jax.random.PRNGKey(seed))
        assert np.abs(np.asarray(qpos[:2]) - task.start_xy).max() <= 0.25
        assert np.abs(np.asarray(info["goal"]) - task.goal_xy).max() <= 0.25
        goals.append(tuple(np.asarray(info["goal"]).tolist()))
    assert len(set(goals)) == 4


def test_maze_sparse_reward_success_and_termination():
    task = sim.make_task("ant-maze-umaze")
    qpos, _, info = task.init(jax.random.PRNGKey(0))
    info = {**info, "steps": jnp.zeros((), jnp.int32), "dr": {}}
    qpos = np.asarray(qpos)
    far = _physics(task, qpos)
    assert float(task.reward_terms(far, jnp.zeros(8), info)["goal"]) == 0.0
    near = qpos.copy()
    near[:2] = np.asarray(info["goal"]) + [0.3, -0.3]  # 0.42 m from the goal
    near = _physics(task, near)
    assert float(task.reward_terms(near, jnp.zeros(8), info)["goal"]) == 1.0
    assert float(task.metrics(far, info)["episode/success"]) == 0.0
    info = task.update_info(near, jnp.zeros(8), info)  # reached once...
    info = task.update_info(far, jnp.zeros(8), info)  # ... stays a success after leaving
    assert float(task.metrics(far, info)["episode/success"]) == 1.0
    # No termination by default (as D4RL), even flipped; optional termination at the goal.
    flipped = qpos.copy()
    flipped[3:7] = [0.0, 1.0, 0.0, 0.0]
    assert not bool(task.terminated(_physics(task, flipped), info))
    assert not bool(task.terminated(near, info))
    assert bool(sim.make_task("ant-maze-umaze", terminate_at_goal=True).terminated(near, info))


def test_maze_success_is_logged_over_finished_episodes():
    env = sim.make("ant-maze-umaze", num_envs=2, seed=0, episode_length=3)
    logs = []
    obs = env.get_observations()["policy"]
    assert obs.shape == (2, 33)
    for _ in range(3):
        _, _, dones, extras = env.step(torch.zeros(2, 8))
        logs.append(float(extras["log"]["episode/success"]))
    env.close()
    assert dones.all()
    assert np.isnan(logs[0]) and np.isnan(logs[1]) and logs[2] == 0.0  # far from the goal after 3 steps
