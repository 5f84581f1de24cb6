"""quadruped-joystick: observation groups, termination, standing, commands, randomized constants, leg IK."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.core import Physics
from sim.randomization import InverseWeights
from sim.tasks import quadruped as q
from sim.tasks.quadruped_control import _leg_ik

STEPS = 150  # 3 s at 50 Hz: the episode length of the shared rollout


@pytest.fixture(scope="module")
def rollout():
    """One C-backend rollout of 8 envs under zero actions (the default pose), through a time-out reset."""
    env = sim.make("quadruped-joystick", num_envs=8, seed=0, backend="mujoco", episode_length=STEPS)
    first = env.get_observations()
    first = {k: first[k].clone() for k in ("policy", "critic")}
    done_early, heights, up = False, [], []
    for _ in range(STEPS - 1):
        obs, _, dones, _ = env.step(torch.zeros(8, 12))
        done_early |= bool(dones.any())
        heights.append(obs["critic"][:, q.OBS_SIZE + 7].clone())
        up.append(-obs["policy"][:, 5].clone())
    obs, _, dones, extras = env.step(torch.zeros(8, 12))
    env.close()
    return {"first": first, "done_early": done_early, "heights": torch.stack(heights), "up": torch.stack(up),
            "final_dones": dones.clone(), "time_outs": extras["time_outs"].clone(),
            "after_reset": obs["policy"].clone()}


def test_critic_has_privileged_extras_policy_does_not(rollout):
    pol, critic = rollout["first"]["policy"], rollout["first"]["critic"]
    assert pol.shape == (8, q.OBS_SIZE) and critic.shape == (8, q.OBS_SIZE + q.CRITIC_EXTRA)
    torch.testing.assert_close(critic[:, :q.OBS_SIZE], pol)  # the critic sees everything the policy sees...
    extras = critic[:, q.OBS_SIZE:]
    contacts, height, params = extras[:, 3:7], extras[:, 7], extras[:, 8:]
    assert set(contacts.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(height, torch.full((8,), q.INIT_HEIGHT))
    # ... plus this episode's randomized physics: friction U(0.4, 1), payload U(-1, 1) kg, scales near 1.
    assert ((params[:, 0] >= 0.4) & (params[:, 0] <= 1.0)).all() and (params[:, 1].abs() <= 1.0).all()
    assert ((params[:, 2:] > 0.79) & (params[:, 2:] < 1.21)).all()
    assert len(set(params[:, 0].tolist())) == 8  # each env its own
    # The policy group ends with the gait clock (cos, sin): nothing privileged follows it.
    torch.testing.assert_close(pol[:, -2:].norm(dim=-1), torch.ones(8))


def test_default_pose_stands_under_zero_actions(rollout):
    assert not rollout["done_early"]
    assert (rollout["heights"] > 0.2).all()
    assert (rollout["up"] > 0.9).all()  # trunk z axis within ~25 degrees of vertical


def test_commands_change_across_resets(rollout):
    assert rollout["final_dones"].all() and rollout["time_outs"].all()
    before, after = rollout["first"]["policy"][:, 6:9], rollout["after_reset"][:, 6:9]
    assert not torch.allclose(before, after)
    assert (before.abs() <= torch.tensor([1.0, 0.6, 1.0])).all()


def _physics(task: q.QuadrupedJoystick, quat, height: float) -> Physics:
    m = task.mj_model
    qpos = jnp.concatenate([jnp.array([0.0, 0.0, height]), jnp.asarray(quat, jnp.float32),
                            jnp.asarray(q.DEFAULT_POSE)])
    return Physics(qpos=qpos, qvel=jnp.zeros(m.nv), sensordata=jnp.zeros(m.nsensordata), ctrl=jnp.zeros(m.nu))


def test_terminates_when_flipped_or_too_low():
    task = sim.make_task("quadruped-joystick")
    info: dict = {}
    assert not bool(task.terminated(_physics(task, [1, 0, 0, 0], 0.28), info))
    tilted = [np.cos(0.6), np.sin(0.6), 0, 0]  # rolled 69 degrees: still upright enough
    assert not bool(task.terminated(_physics(task, tilted, 0.28), info))
    assert bool(task.terminated(_physics(task, [0, 1, 0, 0], 0.28), info))  # upside down
    assert bool(task.terminated(_physics(task, [0, 0, 1, 0], 0.28), info))  # flipped about y
    assert bool(task.terminated(_physics(task, [1, 0, 0, 0], 0.1), info))   # trunk on the floor


def test_randomized_inverse_weights_match_mj_setconst():
    """The body/dof inverse weights the environment adds equal what the C engine derives from the randomized
    masses (for every task: tests/sim/test_randomization.py)."""
    task = sim.make_task("quadruped-joystick")
    params = jax.jit(lambda key: InverseWeights(task.mj_model).complete(task.randomize(key)))(jax.random.PRNGKey(3))
    m = copy.copy(task.mj_model)
    for name in ("body_mass", "body_inertia", "dof_armature"):
        getattr(m, name)[:] = np.asarray(params[name])
    mujoco.mj_setConst(m, mujoco.MjData(m))
    assert not np.allclose(m.body_invweight0, task.mj_model.body_invweight0, rtol=1e-3)  # they did change
    np.testing.assert_allclose(np.asarray(params["body_invweight0"]), m.body_invweight0, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(np.asarray(params["dof_invweight0"]), m.dof_invweight0, rtol=1e-5)


def test_leg_inverse_kinematics_reaches_the_targets():
    task = sim.make_task("quadruped-joystick")
    m = task.mj_model
    d = mujoco.MjData(m)
    signs = torch.tensor(q.LEG_SIGNS, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    foot = torch.rand(1, 4, 3, generator=gen, dtype=torch.float64) * torch.tensor([0.2, 0.1, 0.1]) \
        - torch.tensor([0.1, 0.05, 0.3])
    foot[..., 1] += signs[:, 1] * q.THIGH_OFFSET
    d.qpos[3] = 1.0
    d.qpos[7:] = _leg_ik(foot, signs[:, 1]).reshape(-1).numpy()
    mujoco.mj_kinematics(m, d)
    for i, leg in enumerate(q.LEGS):
        reached = d.geom_xpos[m.geom(f"{leg}_foot").id] - d.xpos[m.body(f"{leg}_hip").id]
        np.testing.assert_allclose(reached, foot[0, i].numpy(), atol=1e-6)
