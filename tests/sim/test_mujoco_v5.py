"""Our Gymnasium MuJoCo v5 tasks (sim/tasks/mujoco_v5.py) against Gymnasium's own environments.

On the C backend the physics is the same MuJoCo code as Gymnasium's, so from the same initial state and actions
everything must agree to float32 precision: observations (ours are float32), rewards and their named terms,
terminations at the same step. Two measured differences set the terms of the comparison:

- Rewards: the forward speed is a difference of positions that we hold in float32, so it carries up to
  2 ulp(x) / dt of rounding (the reward tolerance adds exactly that; over an episode it telescopes away). Measured
  without it: up to 1.4e-5 (hopper at x = 1.6 m).
- Warm start: `mujoco.rollout` starts each control step's constraint solver from zero accelerations, Gymnasium from
  the previous step's. Both converge to the solver tolerance (1e-8), but the half-cheetah's and the ant's contacts
  amplify that difference: with uniform random actions, unmodified Gymnasium and our C backend part by more than
  1e-5 after 79-111 steps (half-cheetah) and 94-127 steps (ant; 68-219 with actions in [-0.3, 0.3]), measured over
  4 seeds, and never within 400 steps for the hopper and walker. With Gymnasium's warm start zeroed before each
  step (what our backend computes) they agree over the whole run; so the long comparisons zero it, and one test
  checks unmodified Gymnasium over the steps where the warm start does not matter yet.

On MJX (float32, different contact code) trajectories only agree for a while; see `test_mjx_ant`.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from scipy import stats  # noqa: E402

import sim  # noqa: E402
from sim.env import Env  # noqa: E402

GYM_ID = {"halfcheetah-v5": "HalfCheetah-v5", "hopper-v5": "Hopper-v5", "walker2d-v5": "Walker2d-v5",
          "ant-v5": "Ant-v5"}
TASKS = list(GYM_ID)
TERMS = {"halfcheetah-v5": ("forward", "ctrl"), "hopper-v5": ("forward", "ctrl", "survive"),
         "walker2d-v5": ("forward", "ctrl", "survive"), "ant-v5": ("forward", "ctrl", "contact", "survive")}
#: float32 observations and rewards against Gymnasium's float64 (measured worst: 0.5% of this, i.e. ~5e-8 relative).
RTOL = ATOL = 1e-5


@functools.cache
def _env(name: str, backend: str = "mujoco", overrides: tuple = ()):
    """Our task on a backend with its jitted reset and step (shared by the tests: one compile per variant)."""
    task = sim.make_task(name, **dict(overrides))
    phys = sim.make_backend(task, backend)
    if backend == "mjx":  # no mjx.forward at reset (as tests/sim/test_sim_env.py): its compile costs as much as
        # the step's. The first observation needs none (qpos, qvel and a zero cfrc_ext), nor does the step.
        def init_data(qpos, qvel, active=None, params=None, env_id=None):
            data = phys.mjx.make_data(phys.model)
            return data.replace(qpos=qpos.astype(data.qpos.dtype), qvel=qvel.astype(data.qvel.dtype))

        phys.init_data = init_data
    env = Env(task, phys)
    return env, jax.jit(env.reset), jax.jit(env.step)


def _gym(name: str, **kwargs):
    return gym.make(GYM_ID[name], **kwargs).unwrapped


def _x(g, name: str) -> float:
    """The x position Gymnasium's forward speed is measured with (the ant: its torso's xpos, as mj_step left it)."""
    return float(g.data.xpos[1, 0] if name == "ant-v5" else g.data.qpos[0])


def _start(name: str, seed: int, overrides: dict, backend: str = "mujoco", sync: bool = True):
    """Our initial state and Gymnasium's env set to it (Gymnasium's own reset when `sync` is False)."""
    env, reset, step = _env(name, backend, tuple(sorted(overrides.items())))
    state = reset(jax.random.PRNGKey(seed))
    g = _gym(name, **overrides)
    obs, _ = g.reset(seed=seed)
    if sync:  # our state is float32; Gymnasium takes the same numbers in float64
        g.set_state(np.asarray(state.data.qpos, np.float64), np.asarray(state.data.qvel, np.float64))
        obs = g._get_obs()
    np.testing.assert_allclose(np.asarray(state.obs["policy"]), obs, rtol=RTOL, atol=ATOL, err_msg="first observation")
    return env, step, state, g


def _compare(name: str, steps: int, amp: float = 1.0, seed: int = 0, zero_warmstart: bool = True,
             overrides: dict | None = None, sync: bool = True) -> list[bool]:
    """Step ours (C backend) and Gymnasium with the same actions, uniform in [-amp, amp], for `steps` steps (past
    terminations: neither env resets); check observations, rewards, reward terms and terminations at every step.
    Returns Gymnasium's terminations."""
    overrides = overrides or {}
    env, step, state, g = _start(name, seed, overrides, sync=sync)
    weight = env.task.cfg.forward_reward_weight
    rng = np.random.default_rng(seed)
    gym_terminated, ours_terminated = [], []
    for t in range(steps):
        action = (amp * rng.uniform(-1, 1, env.task.num_actions)).astype(np.float32)
        if zero_warmstart:
            g.data.qacc_warmstart[:] = 0
        x_before = _x(g, name)
        obs, reward, terminated, _, info = g.step(action)
        state = step(state, jnp.asarray(action))
        np.testing.assert_allclose(np.asarray(state.obs["policy"]), obs, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{name} step {t}: observation")
        # our x positions are float32: the forward speed carries their rounding, up to ulp(x) / dt
        ulps = np.spacing(np.float32(abs(x_before))) + np.spacing(np.float32(abs(_x(g, name))))
        slack = abs(weight) * float(ulps) / g.dt
        for term in TERMS[name]:
            ours, theirs = float(state.metrics[f"reward/{term}"]), info[f"reward_{term}"]
            tol = ATOL + RTOL * abs(theirs) + (slack if term == "forward" else 0.0)
            assert abs(ours - theirs) <= tol, f"{name} step {t}: reward term {term}: {ours} vs {theirs}"
        assert abs(float(state.reward) - reward) <= ATOL + RTOL * abs(reward) + slack, f"{name} step {t}: reward"
        gym_terminated.append(bool(terminated))
        ours_terminated.append(bool(state.terminated))
    assert ours_terminated == gym_terminated, f"{name}: terminations differ"
    return gym_terminated


@pytest.mark.parametrize("name", TASKS)
def test_c_backend_equals_gymnasium(name):
    """Default options, uniform random actions, 300 steps from the same initial state (Gymnasium's warm start zeroed,
    see the module docstring): equal at every step. The robots that can fall do (here the hopper at step 14, the
    walker at 27, the ant at 145), and the steps after it are compared too, terminations included."""
    terminated = _compare(name, steps=300, amp=1.0, seed=3)
    if name != "halfcheetah-v5":
        assert any(terminated), "the run should include unhealthy states"
        assert not terminated[0]


@pytest.mark.parametrize("name", ["hopper-v5", "walker2d-v5"])
def test_c_backend_equals_gymnasium_while_healthy(name):
    """Small actions keep the hopper and walker up longer: equal at every step, and the fall at the same step
    (here the hopper's at step 187, the walker's at 99: it falls forward after ~90 steps with any actions this
    small)."""
    terminated = _compare(name, steps=250, amp=0.05, seed=0)
    first = terminated.index(True) if any(terminated) else len(terminated)
    assert first > 90


@pytest.mark.parametrize("name", TASKS)
def test_unmodified_gymnasium_while_the_warm_start_does_not_matter(name):
    """Gymnasium as it is (its own warm start): equal over 60 steps for the half-cheetah and the ant (they part after
    79-127 steps, see the module docstring), over 300 for the hopper and walker (the warm start never mattered)."""
    steps = 60 if name in ("halfcheetah-v5", "ant-v5") else 300
    _compare(name, steps=steps, amp=1.0, seed=3, zero_warmstart=False)


OPTIONS = [
    ("halfcheetah-v5", {"forward_reward_weight": 2.0, "ctrl_cost_weight": 0.2, "reset_noise_scale": 0.0,
                        "exclude_current_positions_from_observation": False}),
    ("hopper-v5", {"terminate_when_unhealthy": False, "healthy_reward": 0.5, "ctrl_cost_weight": 0.2,
                   "healthy_z_range": (1.0, 1.5), "healthy_angle_range": (-0.1, 0.1),
                   "healthy_state_range": (-20.0, 20.0), "exclude_current_positions_from_observation": False}),
    ("walker2d-v5", {"reset_noise_scale": 0.1, "forward_reward_weight": 0.5, "healthy_z_range": (0.9, 1.5),
                     "healthy_angle_range": (-0.5, 0.5)}),
    ("ant-v5", {"include_cfrc_ext_in_observation": False, "exclude_current_positions_from_observation": False,
                "reset_noise_scale": 0.0, "contact_cost_weight": 1e-2, "contact_force_range": (-0.5, 0.5),
                "healthy_z_range": (0.3, 0.9), "healthy_reward": 2.0, "ctrl_cost_weight": 0.1}),
]


@pytest.mark.parametrize(("name", "overrides"), OPTIONS, ids=[name for name, _ in OPTIONS])
def test_options_equal_gymnasium_with_the_same_keywords(name, overrides):
    """Every v5 keyword option is a config field: ours with the overrides equals gymnasium.make(..., **overrides)
    over 150 steps. Without reset noise both start at the model's reference pose, unsynchronised."""
    sync = overrides.get("reset_noise_scale", 1.0) != 0.0
    default = _env(name)[0].task
    task = _env(name, "mujoco", tuple(sorted(overrides.items())))[0].task
    for key, value in overrides.items():
        assert getattr(task.cfg, key) == value != getattr(default.cfg, key)
    terminated = _compare(name, steps=150, amp=1.0, seed=1, overrides=overrides, sync=sync)
    if name == "hopper-v5":  # it falls, but the episode goes on with no survive reward
        assert not any(terminated)


def test_overrides_are_checked_and_ranges_are_tuples():
    """Ranges given as lists (as from Hydra) become tuples of floats; a bad one names the field."""
    task = sim.make_task("hopper-v5", healthy_z_range=[0.5, 2], reset_noise_scale=0.01)
    assert task.cfg.healthy_z_range == (0.5, 2.0) and task.cfg.reset_noise_scale == 0.01
    assert sim.make_task("walker2d-v5").cfg.healthy_z_range == (0.8, 2.0)
    with pytest.raises(sim.ConfigError, match="healthy_angle_range"):
        sim.make_task("walker2d-v5", healthy_angle_range=(1.0, -1.0))
    with pytest.raises(sim.ConfigError, match="contact_force_range"):
        sim.make_task("ant-v5", contact_force_range=(1.0,))
    with pytest.raises(sim.ConfigError, match="reset_noise_scale"):
        sim.make_task("ant-v5", reset_noise_scale=-0.1)
    with pytest.raises(sim.ConfigError, match="unknown override"):
        sim.make_task("halfcheetah-v5", healthy_reward=1.0)  # the cheetah cannot fall


@pytest.mark.parametrize("name", TASKS)
def test_reset_noise_distribution_equals_gymnasium(name):
    """1000 initial states of ours and of Gymnasium: each qpos and qvel coordinate has the same distribution
    (two-sample KS test), uniform qpos noise within +-reset_noise_scale around the reference pose, and
    velocity noise normal (cheetah, ant) or uniform (hopper, walker) as in each v5 file."""
    n = 1000
    task = sim.make_task(name)
    m, scale = task.mj_model, task.cfg.reset_noise_scale
    qpos, qvel, _ = jax.jit(jax.vmap(task.init))(jax.random.split(jax.random.PRNGKey(0), n))  # what reset sets
    ours = np.concatenate([np.asarray(qpos), np.asarray(qvel)], axis=1)
    g = _gym(name)
    g.reset(seed=0)
    theirs = []
    for _ in range(n):
        g.reset()
        theirs.append(np.concatenate([g.data.qpos, g.data.qvel]))
    theirs = np.array(theirs)
    assert np.all(np.abs(ours[:, :m.nq] - m.qpos0) <= scale * (1 + 1e-6))
    p_values = [stats.ks_2samp(ours[:, i], theirs[:, i]).pvalue for i in range(m.nq + m.nv)]
    assert min(p_values) > 1e-3 / len(p_values), p_values  # 0.1% family-wise
    velocity_std = scale if name in ("halfcheetah-v5", "ant-v5") else scale / np.sqrt(3)
    np.testing.assert_allclose(ours[:, m.nq:].std(0), velocity_std, rtol=0.1)


#: Episode length of the return comparison: the half-cheetah and the ant rarely fall, 200 and 150 steps keep them cheap.
RETURN_STEPS = {"halfcheetah-v5": 200, "hopper-v5": 1000, "walker2d-v5": 1000, "ant-v5": 150}


@pytest.mark.parametrize("name", TASKS)
def test_random_policy_returns_equal_gymnasium(name):
    """Uniform random actions, reset noise on: the first-episode returns of 64 batched envs of ours (the torch
    VecEnv, C backend) and of 64 Gymnasium episodes come from the same distribution (two-sample KS test, and the
    means within 4 standard errors)."""
    n, length = 64, RETURN_STEPS[name]
    import torch

    env = sim.make(name, num_envs=n, backend="mujoco", seed=0, episode_length=length)
    gen = torch.Generator().manual_seed(0)
    ours = torch.zeros(n, dtype=torch.float64)
    running = torch.ones(n, dtype=torch.bool)
    for _ in range(length):
        _, reward, done, _ = env.step(torch.rand(n, env.num_actions, generator=gen) * 2 - 1)
        ours += torch.where(running, reward.double(), 0.0)
        running &= ~done.bool()
        if not running.any():
            break
    env.close()
    g = gym.make(GYM_ID[name], max_episode_steps=length)
    rng = np.random.default_rng(0)
    theirs = []
    for episode in range(n):
        g.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = g.step(rng.uniform(-1, 1, g.action_space.shape).astype(np.float32))
            total += reward
            done = terminated or truncated
        theirs.append(total)
    ours, theirs = ours.numpy(), np.array(theirs)
    assert stats.ks_2samp(ours, theirs).pvalue > 0.01, (ours.mean(), theirs.mean())
    se = np.sqrt(ours.var(ddof=1) / n + theirs.var(ddof=1) / n)
    assert abs(ours.mean() - theirs.mean()) < 4 * se, (ours.mean(), theirs.mean(), se)


def test_mjx_ant():
    """MJX (float32, CPU) against Gymnasium, on the ant, whose contacts all lie within its geoms' 0.01 margins.

    There MJX's contact forces differ from MuJoCo C's (measured on one forward pass: qacc off by 0.2% at the median,
    up to 38%; the same in float64 MJX, while with the margins set to zero the median agrees to 1e-14), with
    jax 0.10.2 / mujoco 4.0.0. So from the same initial state our MJX ant leaves Gymnasium's as soon as the legs
    touch the ground (measured: the first 2-3 steps agree to 1e-5; the test checks 2). One step at a time from
    Gymnasium's state, re-synchronised every step (100 steps, seeds 0 and 1): positions and velocities are off by
    1e-3 and 6e-5 at the median (relative to 1 + |value|), 0.2 at the 90th percentile, 0.8 at worst; the clipped
    contact forces by 0 at the median and up to their full range of 1; rewards by 3e-5 and 3e-6 at the median, 0.15
    at worst; the health test (the torso height) agrees at every step. The test checks the medians with a 10x margin.

    The other three tasks' MJX trajectories are compared with the C backend's (which equals Gymnasium's) by
    tests/sim/test_sim_env.py::test_backends_agree; measured against Gymnasium with uniform random actions they
    stay within 1e-4 (relative + absolute) for 6-22 steps (half-cheetah), 103-181 (hopper), 47-124 (walker), and
    one step from Gymnasium's state is within 1.5e-4 (half-cheetah), 2.3e-5 (hopper), 3.5e-5 (walker).
    """
    name = "ant-v5"
    env, step, state, g = _start(name, seed=0, overrides={}, backend="mjx")
    rng = np.random.default_rng(0)
    for t in range(2):
        action = rng.uniform(-1, 1, 8).astype(np.float32)
        obs, reward, *_ = g.step(action)
        state = step(state, jnp.asarray(action))
        np.testing.assert_allclose(np.asarray(state.obs["policy"]), obs, rtol=RTOL, atol=ATOL, err_msg=f"step {t}")
        assert abs(float(state.reward) - reward) <= ATOL + RTOL * abs(reward)

    # One step at a time from Gymnasium's state: the same jitted step, our state rebuilt around Gymnasium's. The
    # rebuild is jitted too: eagerly built arrays are committed to the device, and a step called on them compiles
    # again (as long as the first compile, 20 s).
    first = state
    init_data = jax.jit(env.backend.init_data)
    state_errors, reward_errors = [], []
    for _ in range(40):
        qpos, qvel = jnp.asarray(g.data.qpos, jnp.float32), jnp.asarray(g.data.qvel, jnp.float32)
        start = first.replace(data=init_data(qpos, qvel), info={**first.info, "x_before": jnp.float32(_x(g, name))})
        action = rng.uniform(-1, 1, 8).astype(np.float32)
        obs, reward, terminated, _, _ = g.step(action)
        ours = step(start, jnp.asarray(action))
        assert bool(ours.terminated) == terminated
        error = np.abs(np.asarray(ours.obs["policy"]) - obs) / (1 + np.abs(obs))
        state_errors.append(error[:27].max())  # qpos[2:] and qvel; the contact forces follow
        reward_errors.append(abs(float(ours.reward) - reward) / (1 + abs(reward)))
    assert np.median(state_errors) < 1e-2, np.median(state_errors)
    assert np.median(reward_errors) < 1e-3, np.median(reward_errors)


def _assert_bits_equal(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_c_engine_vecenv_computes_what_plain_jit_computes_bit_for_bit(monkeypatch):
    """The committed datasets' bits depend on how the C engine's VecEnv compiles its JAX side: with LLVM's passes
    off (`sim.vecenv.FAST_C_ENGINE_COMPILE`, which the other tests use for speed) every hopper-v5 reset landed one
    ulp from the default's, and the suite then regenerated other trajectories. The VecEnv keeps XLA's defaults: its
    resets and steps are plain jit's."""
    import subprocess
    import sys

    import sim.vecenv

    users = subprocess.run([sys.executable, "-c", "import sim.vecenv; print(sim.vecenv.C_ENGINE_COMPILE)"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert users == ["None"]  # what a user's process compiles with (tests/conftest.py sets the fast options here)
    monkeypatch.setattr(sim.vecenv, "C_ENGINE_COMPILE", None)
    env = sim.make("hopper-v5", num_envs=8, backend="mujoco", device="cpu", seed=3)
    plain = jax.jit(env.env.batched_reset)(env._keys())
    _assert_bits_equal((env.state.data, env.state.obs), (plain.data, plain.obs))
    actions = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (8, env.num_actions)), jnp.float32)
    stepped, _ = jax.jit(env.env.batched_step)(plain, actions)
    env.step(sim.vecenv.to_torch(actions, env.device))
    _assert_bits_equal((env.state.data, env.state.obs), (stepped.data, stepped.obs))
