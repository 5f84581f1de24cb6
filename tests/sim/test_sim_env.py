"""The VecEnv contract: backends agree, final_obs and time-outs, determinism, errors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import mjx_from_c_reset

import sim

TASKS = sim.list_tasks()


def _rollout(env, steps: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    obs, rews = [env.get_observations()["policy"].clone()], []
    for _ in range(steps):
        act = torch.rand(env.num_envs, env.num_actions, generator=gen) * 2 - 1
        o, r, _, _ = env.step(act)
        obs.append(o["policy"].clone())
        rews.append(r.clone())
    return torch.stack(obs), torch.stack(rews)


def _pure_rollouts(name: str, steps: int):
    """Unbatched Env.reset/step on both backends, vmapped and jitted, without auto-reset: the physics and task math
    only (compiles much faster on MJX than the full VecEnv step, which also carries the reset path). Returns the
    observations and rewards of the C backend's rollout and of MJX's.

    Both start from the C backend's reset (4 envs; `conftest.mjx_from_c_reset`, which saves compiling MJX's reset, 1-5
    s a task), so the comparison starts at the first step's observation (the MJX reset path itself is covered by the
    VecEnv tests below)."""
    import jax

    from sim.env import Env

    task = sim.make_task(name)
    c = Env(task, sim.make_backend(task, "mujoco"))
    phys = sim.make_backend(task, "mjx")
    x = Env(task, phys)

    start = jax.jit(c.batched_reset)(jax.random.split(jax.random.PRNGKey(7), 4))
    out = []
    for env, state in ((c, start), (x, mjx_from_c_reset(phys)(start))):
        step = jax.jit(jax.vmap(env.step))
        gen = torch.Generator().manual_seed(0)
        obs, rews = [], []
        for _ in range(steps):
            act = (torch.rand(4, task.num_actions, generator=gen) * 2 - 1).numpy()
            state = step(state, jnp.asarray(act))
            obs.append(np.asarray(state.obs["policy"]))
            rews.append(np.asarray(state.reward))
        out.append((torch.from_numpy(np.stack(obs)), torch.from_numpy(np.stack(rews))))
    return out


# Tasks that run another task's model and physics with other JAX reward / observation / reset code (which runs
# unchanged on both backends) are checked through that one, so the MJX compile is paid once per physics: arm-push
# and arm-reach (arm-pick-place's arm; reach's model is the same arm without the cube), the umaze and medium mazes
# (the large layout's walls and body), cartpole-balance (swing-up's model), quadrotor-hover (track's).
SAME_PHYSICS = {"arm-push", "arm-reach", "ant-maze-umaze", "ant-maze-medium", "point-maze-umaze", "point-maze-medium",
                "cartpole-balance", "quadrotor-hover",
                # the D4RL mazes: one layout per model here (the others differ in walls only); the dense variants
                # differ in reward only; ant-v5 and antmaze-umaze part from C within 2-3 steps (contacts inside the
                # geom margins) and are tested re-synchronised in test_mujoco_v5 / test_d4rl_maze
                "pointmaze-medium", "pointmaze-large", "pointmaze-umaze-dense", "pointmaze-medium-dense",
                "pointmaze-large-dense", "antmaze-umaze", "antmaze-medium", "antmaze-large", "ant-v5",
                # ant-v5's model and physics with another observation, reward and reset
                "ant-goal"}


@pytest.mark.parametrize("name", [t for t in TASKS if t not in SAME_PHYSICS])
def test_backends_agree(name):
    """Same task, seed and actions: MJX (float32) and MuJoCo C (float64) trajectories agree to 1e-4
    (plus 1e-3 relative: a crashed quadrotor keeps tumbling here, and float32 drifts on large rates),
    over the task's `equivalence_steps` (fewer on chaotic tasks, where float32 round-off alone diverges)."""
    steps = sim.task_spec(name).equivalence_steps
    (oa, ra), (ob, rb) = _pure_rollouts(name, steps)
    torch.testing.assert_close(oa, ob, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(ra, rb, atol=1e-4, rtol=1e-3)


def _check_final_obs_and_time_outs(env):
    """(pendulum-swingup, 3 envs, 5-step episodes) At the time limit: dones and time_outs set,
    final_obs is the pre-reset state, obs is a fresh start (at rest)."""
    zero = torch.zeros(3, 1)
    for _t in range(4):
        obs, _, dones, extras = env.step(zero)
        assert not dones.any() and not extras["time_outs"].any()
        torch.testing.assert_close(extras["final_obs"]["policy"], obs["policy"])
        before = obs["policy"].clone()
    obs, rew, dones, extras = env.step(zero)
    assert dones.tolist() == [1, 1, 1]
    assert extras["time_outs"].all() and not extras["terminated"].any()
    final = extras["final_obs"]["policy"]
    # final_obs continues the trajectory (small step from `before`); obs restarts near hanging-down.
    assert (final - before).abs().max() < 0.5
    assert not torch.allclose(final, obs["policy"])
    assert torch.equal(obs["policy"][:, 2], torch.zeros(3)) and (before[:, 2] != 0).all()  # at rest again
    assert env.episode_length_buf.tolist() == [0, 0, 0]
    # The episode after the reset runs its full length again.
    for _ in range(4):
        _, _, dones, _ = env.step(zero)
        assert not dones.any()


def test_envs_finish_independently():
    """Envs at different episode clocks reset one by one; the others keep stepping untouched."""
    env = sim.make("pendulum-swingup", num_envs=3, episode_length=10)
    env.episode_length_buf = torch.tensor([0, 5, 9])
    obs, _, dones, extras = env.step(torch.zeros(3, 1))
    assert dones.tolist() == [0, 0, 1]
    assert extras["time_outs"].tolist() == [False, False, True]
    assert env.episode_length_buf.tolist() == [1, 6, 0]
    torch.testing.assert_close(extras["final_obs"]["policy"][:2], obs["policy"][:2])


def test_get_observations_never_resets():
    env = sim.make("cartpole-balance", num_envs=2)
    env.step(torch.ones(2, 1))
    a = env.get_observations()["policy"].clone()
    b = env.get_observations()["policy"].clone()
    torch.testing.assert_close(a, b)
    assert env.episode_length_buf.tolist() == [1, 1]


def _check_determinism_by_seed(env):
    """Same seed, same numbers, through auto-resets; a new seed, new numbers (one instance re-seeded)."""
    env.reset(seed=3)
    o1, r1 = _rollout(env, 30)
    env.reset(seed=3)
    o2, r2 = _rollout(env, 30)
    env.reset(seed=4)
    o3, _ = _rollout(env, 30)
    assert torch.equal(o1, o2) and torch.equal(r1, r2)
    assert not torch.equal(o1, o3)


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_final_obs_time_outs_and_determinism(backend):
    """Both checks on one env: on MJX a second instance would only pay its compile again (pendulum: the smallest
    model, so the cheapest MJX compile, 11 s against cartpole's 29)."""
    env = sim.make("pendulum-swingup", num_envs=3, backend=backend, seed=3, episode_length=5)
    _check_final_obs_and_time_outs(env)
    _check_determinism_by_seed(env)


def test_env_i_depends_only_on_seed_and_index():
    """Env 0 starts the same whatever the batch size, so results do not depend on num_envs."""
    small = sim.make("cartpole-swingup", num_envs=2, seed=11).get_observations()["policy"]
    big = sim.make("cartpole-swingup", num_envs=5, seed=11).get_observations()["policy"]
    torch.testing.assert_close(small[0], big[0])
    env = sim.make("cartpole-swingup", num_envs=2, seed=11)
    env.step(torch.zeros(2, 1))
    torch.testing.assert_close(env.reset(seed=11)["policy"], small)


def test_grouped_reset_shares_initial_states():
    """`reset(seed, group_size=G)`: each block of G envs starts alike (GRPO's groups), blocks differ."""
    env = sim.make("pendulum-swingup", num_envs=6, seed=0)
    obs = env.reset(seed=4, group_size=3)["policy"]
    assert torch.equal(obs[0], obs[2]) and torch.equal(obs[3], obs[5]) and not torch.equal(obs[0], obs[3])
    with pytest.raises(sim.ConfigError, match="group_size"):
        env.reset(group_size=4)


def test_thread_count_does_not_change_results():
    o1, _ = _rollout(sim.make("cartpole-swingup", num_envs=16, backend="mujoco", nthread=1), 20)
    o2, _ = _rollout(sim.make("cartpole-swingup", num_envs=16, backend="mujoco", nthread=2), 20)
    assert torch.equal(o1, o2)


def test_action_repeat_sums_rewards():
    env = sim.make("cartpole-balance", num_envs=2, action_repeat=4, episode_length=3)
    _, rew, _, extras = env.step(torch.zeros(2, 1))
    assert (rew > 1.0).all() and (rew <= 4.0).all()  # four sub-rewards, each in (0, 1]
    env.step(torch.zeros(2, 1))
    _, _, dones, extras = env.step(torch.zeros(2, 1))
    assert dones.all() and extras["time_outs"].all()


def test_log_has_reward_terms():
    env = sim.make("cartpole-swingup", num_envs=2)
    _, _, _, extras = env.step(torch.zeros(2, 1))
    assert set(extras["log"]) == {"reward/upright", "reward/centered", "reward/small_control", "reward/small_velocity"}
    assert all(v.ndim == 0 for v in extras["log"].values())


def test_contract_attributes():
    env = sim.make("cartpole-swingup", num_envs=3)
    assert env.num_envs == 3 and env.num_actions == 1 and env.max_episode_length == 1000
    assert env.device == torch.device("cpu")
    assert env.cfg["task"] == "cartpole-swingup" and env.cfg["backend"] == "mujoco"
    obs = env.get_observations()
    assert obs.batch_size == torch.Size([3]) and obs["policy"].shape == (3, 5) and obs["policy"].dtype == torch.float32


def test_clear_errors():
    with pytest.raises(sim.UnknownTaskError, match="available tasks"):
        sim.make("cartpole-swingdown")
    with pytest.raises(sim.ConfigError, match="episode_lenght"):
        sim.make("cartpole-swingup", episode_lenght=10)
    with pytest.raises(sim.ConfigError, match="must be >= 1"):
        sim.make("cartpole-swingup", episode_length=0)
    with pytest.raises(sim.ConfigError, match="integer"):
        sim.make("cartpole-swingup", episode_length=2.5)
    with pytest.raises(sim.ConfigError, match="backend"):
        sim.make("cartpole-swingup", backend="physx")
    with pytest.raises(sim.BackendError, match="impl"):
        sim.make("cartpole-swingup", backend="mjx", impl="physx")
    env = sim.make("cartpole-swingup", num_envs=2)
    with pytest.raises(sim.ActionError, match=r"shape .*\(2, 1\)"):
        env.step(torch.zeros(2, 3))
    with pytest.raises(sim.ActionError, match="NaN"):
        env.step(torch.tensor([[0.0], [float("nan")]]))
    with pytest.raises(sim.ConfigError, match="shape"):
        env.episode_length_buf = torch.zeros(5)


def test_unbatched_contract_is_pure_jax():
    """Task functions are pure and unbatched: reset(key) and step(state, action) with no env axis."""
    import jax
    import jax.numpy as jnp

    from sim.backends.mjx_backend import MjxBackend
    from sim.env import Env

    task = sim.make_task("pendulum-swingup")  # the smallest model: the cheapest MJX compile
    env = Env(task, MjxBackend(task.mj_model))
    s0 = jax.jit(env.reset)(jax.random.PRNGKey(0))
    s1 = jax.jit(env.step)(s0, jnp.zeros(1))
    assert s0.obs["policy"].shape == (3,) and s1.reward.shape == ()
    assert int(s1.info["steps"]) == 1 and float(s1.reward) in (0.0, 1.0)  # the sparse upright reward
    assert np.asarray(s1.data.qpos).shape == (1,)


def test_few_and_many_resets_agree():
    """A few finished envs reset in one round, many in several rounds: same numbers either way."""
    few = sim.make("cartpole-swingup", num_envs=64, seed=5, episode_length=50)
    many = sim.make("cartpole-swingup", num_envs=64, seed=5, episode_length=50)
    lengths = torch.zeros(64, dtype=torch.int32)
    lengths[[3, 40]] = 49
    few.episode_length_buf = lengths
    lengths[:20] = 49  # 21 finish at once: several reset rounds of 4
    many.episode_length_buf = lengths
    act = torch.rand(64, 1)
    of, _, df, ef = few.step(act)
    om, _, dm, em = many.step(act)
    assert df.sum() == 2 and dm.sum() == 21
    torch.testing.assert_close(of["policy"][[3, 40]], om["policy"][[3, 40]])
    torch.testing.assert_close(ef["final_obs"]["policy"], em["final_obs"]["policy"])
    assert few.episode_length_buf[[3, 40]].tolist() == [0, 0]
    # Untouched envs are untouched in both.
    torch.testing.assert_close(of["policy"][41:], om["policy"][41:])


def test_reward_scales_override():
    base = sim.make("cartpole-swingup", num_envs=2, seed=1)
    scaled = sim.make("cartpole-swingup", num_envs=2, seed=1, reward_scales={"upright": 2.0})
    assert scaled.task.cfg.reward_scales["upright"] == 2.0 and scaled.task.cfg.reward_scales["centered"] == 1.0
    _, r1, _, _ = base.step(torch.zeros(2, 1))
    _, r2, _, _ = scaled.step(torch.zeros(2, 1))
    # A product reward: the scale is the term's exponent.
    torch.testing.assert_close(r2, r1 * _upright(base), rtol=1e-4, atol=1e-9)
    with pytest.raises(sim.ConfigError, match="uprite"):
        sim.make("cartpole-swingup", reward_scales={"uprite": 2.0})


def _upright(env):
    """Per-env upright term of the current state (cartpole: (cos + 1) / 2)."""
    return (env.get_observations()["policy"][:, 1] + 1) / 2


def test_reset_without_seed_draws_new_starts():
    env = sim.make("pendulum-swingup", num_envs=3, seed=2)
    first = env.get_observations()["policy"]
    again = env.reset()["policy"]
    assert not torch.allclose(first, again)
    torch.testing.assert_close(env.reset(seed=2)["policy"], first)


def test_action_repeat_freezes_at_termination():
    """A task that terminates on its first sub-step: the terminal state is the final observation."""
    from sim.backends.mujoco_backend import MujocoBackend
    from sim.tasks.pendulum import PendulumSwingup
    from sim.vecenv import VecEnv

    class AlwaysTerminal(PendulumSwingup):
        def terminated(self, phys, info):
            return jnp.ones((), bool)

    def env(repeat):
        task = AlwaysTerminal(sim.make_task("pendulum-swingup", action_repeat=repeat).cfg)
        return VecEnv(task, MujocoBackend(task.mj_model), num_envs=2, device=torch.device("cpu"), seed=0)

    act = torch.ones(2, 1)
    _, r1, d1, e1 = env(1).step(act)
    _, r3, d3, e3 = env(3).step(act)
    assert d3.all() and e3["terminated"].all() and not e3["time_outs"].any()
    torch.testing.assert_close(e3["final_obs"]["policy"], e1["final_obs"]["policy"])
    torch.testing.assert_close(r3, r1)


def test_episode_metrics_average_over_finished_episodes():
    """`episode/` metrics are logged over the envs that finished at the step, NaN when none did."""
    import jax.numpy as jnp

    from sim.vecenv import _log_value

    value = jnp.array([1.0, 0.0, 1.0, 0.0])
    assert float(_log_value(value, jnp.array([1.0, 1.0, 1.0, 0.0]), "episode/success")) == pytest.approx(2 / 3)
    assert bool(jnp.isnan(_log_value(value, jnp.zeros(4), "episode/success")))
    assert float(_log_value(value, jnp.zeros(4), "height")) == 0.5


def test_maze_success_rate_is_logged():
    """point-maze logs `episode/success` over finished episodes: the scripted planner succeeds."""
    from sim.tasks.reference import scripted_policy

    env = sim.make("point-maze-umaze", num_envs=8, seed=0)
    policy = scripted_policy("point-maze-umaze")
    obs = env.get_observations()["policy"]
    rates = []
    for _ in range(env.max_episode_length):
        obs_td, _, _, extras = env.step(policy(obs))
        obs = obs_td["policy"]
        rate = float(extras["log"]["episode/success"])
        if rate == rate:
            rates.append(rate)
    env.close()
    assert rates and min(rates) == 1.0
