"""The arm tasks: observation sizes, success logging, scripted controllers, grasping physics, randomization."""

from __future__ import annotations

import math

import jax
import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.env import Env
from sim.tasks import arm_control
from sim.tasks.arm import CUBE_REST_Z, HOME, MAX_SPEED

CONTROLLERS = {"arm-reach": arm_control.reach_policy, "arm-push": arm_control.push_policy,
               "arm-pick-place": arm_control.pick_place_policy}


@pytest.mark.parametrize(("name", "policy_size", "critic_size"),
                         [("arm-reach", 21, 25), ("arm-push", 36, 46), ("arm-pick-place", 36, 46)])
def test_observation_and_action_sizes(name, policy_size, critic_size):
    task = sim.make_task(name)
    state = jax.eval_shape(Env(task, sim.make_backend(task, "mujoco")).reset, jax.random.PRNGKey(0))
    assert state.obs["policy"].shape == (policy_size,) and state.obs["critic"].shape == (critic_size,)
    assert task.num_actions == 6


@pytest.mark.parametrize("name", list(CONTROLLERS))
def test_scripted_controller_succeeds_and_success_is_logged(name):
    """The reference controller achieves the task in most episodes; the success rate is logged at the end."""
    env = sim.make(name, num_envs=4, seed=1, nthread=1)
    obs = env.get_observations()["policy"]
    for t in range(env.max_episode_length):
        obs_td, _, dones, extras = env.step(CONTROLLERS[name](obs))
        obs = obs_td["policy"]
        rate = extras["log"]["episode/success"]
        if t < env.max_episode_length - 1:
            assert not dones.any() and torch.isnan(rate)  # no episode finished: nothing to average
    assert dones.all()
    assert rate >= 0.75


def test_sparse_reward_and_terminate_on_success():
    """`shaped=False` pays only success; `terminate_on_success` ends the episode there (reward 1 once)."""
    env = sim.make("arm-reach", num_envs=3, seed=2, nthread=1, shaped=False, terminate_on_success=True)
    obs = env.get_observations()["policy"]
    ended = torch.zeros(3, dtype=torch.bool)
    for _ in range(40):
        obs_td, rewards, _, extras = env.step(arm_control.reach_policy(obs))
        obs = obs_td["policy"]
        first = extras["terminated"] & ~ended
        assert torch.equal(rewards[~ended], first[~ended].float())  # 0 until success, 1 at the terminal step
        ended |= extras["terminated"]
    assert ended.all()


def _grasp_and_lift(close: bool) -> tuple[np.ndarray, np.ndarray]:
    """C engine: fingers around a cube on the table, (optionally) close, lift 18 cm; cube and grasp point."""
    model = sim.make_task("arm-pick-place").mj_model
    data = mujoco.MjData(model)
    cube = np.array([0.33, 0.05, CUBE_REST_Z])
    cube_yaw = 0.2
    data.joint("cube").qpos = [*cube, math.cos(cube_yaw / 2), 0, 0, math.sin(cube_yaw / 2)]
    # The closing axis along a face normal of the cube (as the pick-place controller turns the wrist).
    roll = torch.tensor([(math.atan2(cube[1], cube[0]) + math.pi / 2 - cube_yaw + math.pi / 4) % (math.pi / 2)
                         - math.pi / 4])

    def ik(z: float) -> np.ndarray:
        return arm_control.inverse_kinematics(torch.tensor([[cube[0], cube[1], z]]), roll)[0].double().numpy()

    arm = [model.joint(n).qposadr[0] for n in ("yaw", "shoulder", "elbow", "wrist", "roll")]
    start = ik(cube[2] + arm_control.GRASP_HEIGHT)
    data.qpos[arm] = start
    data.act[:] = start - np.array(HOME)  # servo targets at the start pose
    data.joint("finger_l").qpos = data.joint("finger_r").qpos = 0.04
    mujoco.mj_forward(model, data)
    steps = 8  # physics steps per control step

    def run(control_steps: int, target: np.ndarray, gripper: float) -> None:
        for _ in range(control_steps):
            data.ctrl[:5] = np.clip(arm_control.JOINT_GAIN * (target - data.qpos[arm]), -np.array(MAX_SPEED),
                                    MAX_SPEED)
            data.ctrl[5] = gripper
            mujoco.mj_step(model, data, steps)

    run(15, start, 0.0 if close else 0.04)
    run(50, ik(0.2), 0.0 if close else 0.04)
    return data.joint("cube").qpos[:3].copy(), data.site("grasp").xpos.copy()


def test_grasped_cube_lifts_with_the_gripper():
    cube, grasp = _grasp_and_lift(close=True)
    assert cube[2] > 0.17 and np.linalg.norm(cube - grasp) < 0.02
    cube, grasp = _grasp_and_lift(close=False)  # open fingers: the cube stays on the table
    assert cube[2] < 0.03 and grasp[2] > 0.17


def test_domain_randomization_changes_the_physics():
    task = sim.make_task("arm-pick-place", domain_randomization=True)
    m = task.mj_model
    a, b = task.randomize(jax.random.PRNGKey(0)), task.randomize(jax.random.PRNGKey(1))
    for name, value in a.items():
        assert value.shape == getattr(m, name).shape
        assert not np.allclose(value, b[name])
    np.testing.assert_allclose(a["actuator_biasprm"][:, 1], -a["actuator_gainprm"][:, 0], rtol=1e-6)  # still servos
    # Same seed and actions, randomized physics: the critic sees it and the arm moves differently.
    obs = {}
    for dr in (False, True):
        env = sim.make("arm-reach", num_envs=2, seed=0, nthread=1, domain_randomization=dr, episode_length=5)
        for _ in range(4):
            obs[dr], _, _, _ = env.step(torch.ones(2, 6))
        _, _, dones, extras = env.step(torch.ones(2, 6))
        assert dones.all() and extras["log"]["episode/success"] == 0.0  # a failed episode logs 0
    assert not torch.allclose(obs[False]["policy"][:, :5], obs[True]["policy"][:, :5])
    assert torch.equal(obs[False]["critic"][:, -4:], torch.tensor([[1.0, 0.8, 1.0, 1.0]] * 2))
    assert not torch.allclose(obs[True]["critic"][:, -2:], torch.ones(2, 2))
