"""Per-reset domain randomization, action latency and observation noise, on both backends."""

from __future__ import annotations

import copy
import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
import torch

import sim
from sim.randomization import MASS_FIELDS, SOLVER_WEIGHTS, InverseWeights
from sim.tasks.pendulum import PendulumConfig, PendulumSwingup
from sim.vecenv import VecEnv


@dataclasses.dataclass(frozen=True)
class _Cfg(PendulumConfig):
    domain_randomization: bool = True
    episode_length: int = 5


class RandomPendulum(PendulumSwingup):
    """The pendulum with a random ball mass (x0.5..2) and hinge damping (x0.5..2) per episode."""

    config_class = _Cfg

    def randomize(self, key):
        k1, k2 = jax.random.split(key)
        m = self.mj_model
        mass = jnp.asarray(m.body_mass) * jnp.ones(m.nbody).at[2].set(jax.random.uniform(k1, (), minval=0.5, maxval=2))
        damping = jnp.asarray(m.dof_damping) * jax.random.uniform(k2, (m.nv,), minval=0.5, maxval=2)
        return {"body_mass": mass, "dof_damping": damping}


def _env(backend: str, num_envs: int = 4, seed: int = 0, **overrides) -> VecEnv:
    task = RandomPendulum(sim.core.apply_overrides(_Cfg(), overrides))
    return VecEnv(task, sim.make_backend(task, backend), num_envs=num_envs, device=torch.device("cpu"), seed=seed)


def _masses(env: VecEnv) -> torch.Tensor:
    return torch.from_numpy(jax.device_get(env.state.info["dr"]["body_mass"])[:, 2].copy())


def test_parameters_resampled_at_every_reset_and_fixed_within_episodes():
    env = _env("mujoco")
    first = _masses(env)
    assert len(set(first.tolist())) == 4  # each env its own mass
    for _ in range(4):
        env.step(torch.zeros(4, 1))
        assert torch.equal(_masses(env), first)  # unchanged within the episode
    env.step(torch.zeros(4, 1))  # time limit: every env resets
    assert not torch.isclose(_masses(env), first).any()


def test_randomized_physics_changes_the_dynamics(backend="mujoco"):
    """Same initial state and actions, different masses: different trajectories (the model really changed).
    On the C backend only: MJX follows it under randomization (`test_backends_agree_under_randomization`)."""
    plain = sim.make("pendulum-swingup", num_envs=4, backend=backend, seed=0, episode_length=5)
    rand = _env(backend)
    torch.testing.assert_close(plain.get_observations()["policy"], rand.get_observations()["policy"])
    for _ in range(3):
        a, _, _, _ = plain.step(torch.ones(4, 1))
        b, _, _, _ = rand.step(torch.ones(4, 1))
    assert (a["policy"] - b["policy"]).abs().max() > 1e-3


def test_backends_agree_under_randomization():
    a, b = _env("mujoco", seed=3, episode_length=30), _env("mjx", seed=3, episode_length=30)
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):  # crosses a reset: the re-sampled parameters must agree too
        act = torch.rand(4, 1, generator=gen) * 2 - 1
        oa, ra, _, _ = a.step(act)
        ob, rb, _, _ = b.step(act)
        torch.testing.assert_close(oa["policy"], ob["policy"], atol=1e-4, rtol=0)
    torch.testing.assert_close(_masses(a), _masses(b))


def test_restored_state_keeps_randomized_physics():
    env = _env("mujoco", episode_length=50)
    env.step(torch.ones(4, 1))
    saved = env.state_dict()
    expected = [env.step(torch.ones(4, 1))[0]["policy"].clone() for _ in range(3)]
    other = _env("mujoco", seed=99, episode_length=50)
    other.load_state_dict(saved)
    for want in expected:
        torch.testing.assert_close(other.step(torch.ones(4, 1))[0]["policy"], want)


def test_action_latency_delays_actions():
    """With a fixed delay of k steps the env acts on the action chosen k steps earlier."""
    delayed = sim.make("cartpole-balance", num_envs=64, action_latency=2, seed=0)
    delay = torch.from_numpy(jax.device_get(delayed.state.info["action_delay"]).copy())
    assert set(delay.tolist()) == {0, 1, 2}
    pushes = [torch.ones(64, 1), -torch.ones(64, 1), torch.zeros(64, 1)]
    plain = sim.make("cartpole-balance", num_envs=64, seed=0)
    for a in pushes:
        delayed.step(a)
    # Env with delay 0 matches the undelayed env exactly.
    for a in pushes:
        out, _, _, _ = plain.step(a)
    zero = delay == 0
    torch.testing.assert_close(delayed.get_observations()["policy"][zero], out["policy"][zero])
    assert not torch.allclose(delayed.get_observations()["policy"][~zero], out["policy"][~zero])


def test_observation_noise_only_on_policy_group():
    clean = sim.make("point-mass", num_envs=8, seed=0)
    noisy = sim.make("point-mass", num_envs=8, seed=0, obs_noise=0.05)
    diff = noisy.get_observations()["policy"] - clean.get_observations()["policy"]
    assert 0.02 < diff.std() < 0.1
    with pytest.raises(sim.ConfigError):
        sim.make("point-mass", obs_noise=-1.0)


# --- constraint weights of randomized masses (sim/randomization.py) ---------------------------------------------
def _set_const_weights(model, params: dict) -> dict[str, np.ndarray]:
    """What MuJoCo's `mj_setConst` gives on a copy of `model` with the randomized mass fields of `params`."""
    m = copy.copy(model)
    for name in MASS_FIELDS:
        if name in params:
            getattr(m, name)[:] = np.asarray(params[name], np.float64).reshape(getattr(m, name).shape)
    mujoco.mj_setConst(m, mujoco.MjData(m))
    return {name: getattr(m, name) for name in SOLVER_WEIGHTS}


def _assert_weights_match(weights: dict, expected: dict) -> None:
    assert set(weights) == {k for k, v in expected.items() if v.size}
    for name, value in weights.items():
        want = expected[name]
        np.testing.assert_allclose(np.asarray(value).reshape(want.shape), want, rtol=2e-6, atol=1e-30, err_msg=name)


@pytest.mark.parametrize("name", sim.list_tasks())
def test_generic_inverse_weights_match_set_const(name):
    """For every task that randomizes masses: the weights the environment adds are mj_setConst's, to float32
    precision (the MJX-vs-C agreement under randomization rests on this)."""
    task = sim.make_task(name, domain_randomization=True)
    weights = InverseWeights(task.mj_model)
    for seed in range(3):
        params = {k: jnp.asarray(v, jnp.float32) for k, v in task.randomize(jax.random.PRNGKey(seed)).items()}
        if not set(params) & set(MASS_FIELDS):
            pytest.skip(f"{name} does not randomize masses")
        assert not set(params) & set(SOLVER_WEIGHTS), "tasks return physical parameters only"
        full = weights.complete(params)
        _assert_weights_match({k: full[k] for k in SOLVER_WEIGHTS if k in full},
                              _set_const_weights(task.mj_model, params))


BALL_AND_SLIDE_XML = """
<mujoco>
  <worldbody>
    <body name="static" pos="0 0 2"><geom type="sphere" size=".1"/></body>
    <body name="pendulum" pos="0 0 1">
      <joint name="ball" type="ball"/>
      <geom type="capsule" fromto="0 0 0 .3 .1 -.5" size=".05"/>
      <site name="tip" pos=".3 .1 -.5"/>
      <body pos=".3 .1 -.5"><joint type="hinge" axis="0 1 0"/><geom type="box" size=".1 .05 .02"/></body>
    </body>
    <body name="slider" pos="1 0 0">
      <joint name="sx" type="slide" axis="1 0 0"/><joint name="sy" type="slide" axis="0 1 0" armature=".1"/>
      <geom type="sphere" size=".1"/><site name="anchor"/>
    </body>
    <body name="free" pos="0 1 1"><freejoint/><geom type="box" size=".2 .1 .05" euler="10 20 30"/></body>
  </worldbody>
  <tendon><spatial name="rope"><site site="tip"/><site site="anchor"/></spatial>
    <fixed name="sum"><joint joint="sx" coef="1"/><joint joint="sy" coef="-0.5"/></fixed></tendon>
</mujoco>
"""


def test_inverse_weights_of_every_joint_kind():
    """Ball, hinge, slide-only ("simple") and free bodies, a static body and spatial and fixed tendons."""
    model = mujoco.MjModel.from_xml_string(BALL_AND_SLIDE_XML)
    weights = InverseWeights(model)
    key = jax.random.PRNGKey(0)
    for k in jax.random.split(key, 3):
        k1, k2, k3 = jax.random.split(k, 3)
        params = {"body_mass": jnp.asarray(model.body_mass) * jax.random.uniform(k1, (model.nbody,), minval=0.5,
                                                                                  maxval=2.0),
                  "body_inertia": jnp.asarray(model.body_inertia) * jax.random.uniform(k2, (model.nbody, 3),
                                                                                        minval=0.5, maxval=2.0),
                  "dof_armature": jnp.asarray(model.dof_armature) + jax.random.uniform(k3, (model.nv,), maxval=0.1)}
        params = {n: v.astype(jnp.float32) for n, v in params.items()}
        _assert_weights_match(jax.jit(weights)(**params), _set_const_weights(model, params))


def test_task_weights_are_kept_and_unrandomized_masses_add_none():
    model = mujoco.MjModel.from_xml_string(BALL_AND_SLIDE_XML)
    weights = InverseWeights(model)
    assert weights.complete({"dof_damping": jnp.ones(model.nv)}).keys() == {"dof_damping"}
    own = jnp.full(model.nv, 7.0)
    out = weights.complete({"body_mass": jnp.asarray(model.body_mass, jnp.float32), "dof_invweight0": own})
    assert out["dof_invweight0"] is own and set(out) == {"body_mass", *SOLVER_WEIGHTS}
