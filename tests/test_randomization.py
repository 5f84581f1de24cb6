"""Per-reset domain randomization, action latency and observation noise, on both backends."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
import torch

import sim
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
