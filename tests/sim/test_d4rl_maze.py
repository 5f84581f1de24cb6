"""pointmaze-* and antmaze-* (sim/tasks/d4rl_maze.py) equal gymnasium-robotics' D4RL mazes, the environments of
Minari's D4RL datasets: step by step on the C backend, in their start distributions and random-policy returns; and
what of that holds on MJX, with the measured limits."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import mjx_from_c_reset

import sim
from sim.env import Env
from sim.tasks.d4rl_maze import ANTMAZE_MAPS, GOAL_RADIUS, POINTMAZE_MAPS, D4RLPointMaze

gym = pytest.importorskip("gymnasium")
gymnasium_robotics = pytest.importorskip("gymnasium_robotics")  # the dev extra
gym.register_envs(gymnasium_robotics)

POINT_TASKS = [f"pointmaze-{layout}{dense}" for layout in ("umaze", "medium", "large") for dense in ("", "-dense")]
ANT_TASKS = ["antmaze-umaze", "antmaze-medium", "antmaze-large"]
_ID = {"umaze": "UMaze", "medium": "Medium", "large": "Large"}


def gym_maze(task: sim.Task, **kwargs):
    """The original of `task`, as the module docstring's table says: env id, Minari's maze_map and flags."""
    point = isinstance(task, D4RLPointMaze)
    maps = POINTMAZE_MAPS if point else ANTMAZE_MAPS
    rows = maps[task.cfg.layout]
    maze_map = [[1 if c == "#" else 0 if c == "." or task.cfg.any_goal else c for c in row] for row in rows]
    name = _ID[task.cfg.layout.split("-")[0]]
    env_id = f"PointMaze_{name}{'Dense' if task.cfg.reward_type == 'dense' else ''}-v3" if point \
        else f"AntMaze_{name}-v4"
    kwargs = {"continuing_task": task.cfg.continuing_task, "reset_target": task.cfg.reset_target,
              "reward_type": task.cfg.reward_type, **kwargs}
    return gym.make(env_id, maze_map=maze_map, **kwargs)


def inner(env):
    """gymnasium-robotics' inner MuJoCo env (PointEnv or Ant v4)."""
    u = env.unwrapped
    return u.point_env if hasattr(u, "point_env") else u.ant_env


@functools.cache
def c_env(name: str, **overrides) -> tuple[Env, callable, callable]:
    """Our task on the C backend: the Env, its jitted reset and step (one compile per task and overrides)."""
    task = sim.make_task(name, **overrides)
    env = Env(task, sim.make_backend(task, "mujoco", nthread=1))
    return env, jax.jit(env.reset), jax.jit(env.step)


def lockstep(name: str, steps: int, policy=None, start=None, zero_warmstart: bool = False, seed: int = 0,
             **overrides) -> dict[str, np.ndarray]:
    """Run our task and the original side by side from our initial state (gymnasium is set to our float32 qpos, qvel
    and goal) with the same actions: seeded uniform ones, or `policy(our obs)`. `start` puts the agent at that (x, y)
    instead. `zero_warmstart` starts gymnasium's constraint solver from zero at every control step, as our C backend
    does (so that threads never change results); otherwise gymnasium warm-starts from the last step. Returns both
    sides' observations, rewards, terminations and truncations, and gymnasium's goal after each step."""
    env, reset, step = c_env(name, **overrides)
    state = reset(jax.random.PRNGKey(seed))
    if start is not None:
        data = env.backend.init_data(state.data.qpos.at[:2].set(jnp.asarray(start, jnp.float32)), state.data.qvel)
        state = state.replace(data=data, obs=env.task.observe(env.backend.view(data), state.info))
    original = gym_maze(env.task, max_episode_steps=env.cfg.episode_length)
    original.reset(seed=seed)
    agent = inner(original)
    original.unwrapped.goal = np.asarray(state.info["goal"], np.float64)
    agent.set_state(np.asarray(state.data.qpos, np.float64), np.asarray(state.data.qvel, np.float64))
    rng = np.random.default_rng(seed)
    out = {k: [] for k in ("ours", "theirs", "r_ours", "r_theirs", "term", "trunc", "goal", "redrawn")}
    for _ in range(steps):
        obs = np.asarray(state.obs["policy"])
        action = policy(obs) if policy else rng.uniform(-1, 1, env.task.num_actions)
        action = np.asarray(action, np.float32)
        state = step(state, jnp.asarray(action))
        if zero_warmstart:
            agent.data.qacc_warmstart[:] = 0
        before = original.unwrapped.goal.copy()
        theirs, reward, terminated, truncated, _ = original.step(action)
        out["redrawn"].append(not np.array_equal(before, original.unwrapped.goal))
        out["ours"].append(np.asarray(state.obs["policy"]))
        out["theirs"].append(gym.spaces.flatten(original.observation_space, theirs))
        out["r_ours"].append(float(state.reward))
        out["r_theirs"].append(float(reward))
        out["term"].append((bool(state.terminated), terminated))
        out["trunc"].append((bool(state.truncated), truncated))
        out["goal"].append(original.unwrapped.goal.copy())
        if env.task.cfg.reset_target:  # a new goal is a random draw on each side: gymnasium takes ours
            original.unwrapped.goal = np.asarray(state.info["target"], np.float64)
            original.unwrapped.update_target_site_pos()
        if terminated or truncated:
            break
    original.close()
    return {k: np.array(v) for k, v in out.items()}


def assert_equal_steps(out: dict[str, np.ndarray], tol: float = 1e-5) -> None:
    """Observations and rewards to float32 precision, terminations and truncations exactly."""
    np.testing.assert_allclose(out["ours"], out["theirs"], rtol=tol, atol=tol)
    np.testing.assert_allclose(out["r_ours"], out["r_theirs"], rtol=tol, atol=tol)
    assert (out["term"][:, 0] == out["term"][:, 1]).all() and (out["trunc"][:, 0] == out["trunc"][:, 1]).all()


def towards_goal(obs: np.ndarray) -> np.ndarray:
    """A PD push of the ball straight at the goal (enough where nothing is in between)."""
    return np.clip(10.0 * (obs[2:4] - obs[0:2]) - 1.0 * obs[6:8], -1, 1)


# --- 1. the C backend, step by step -----------------------------------------------------------------------------
def test_registry_matches_the_originals():
    """Episode lengths are the originals' registered time limits; observation and action sizes agree."""
    for name in POINT_TASKS + ANT_TASKS:
        task = sim.make_task(name)
        original = gym_maze(task)
        assert task.cfg.episode_length == original.spec.max_episode_steps, name
        assert task.num_actions == original.action_space.shape[0]
        assert sim.task_spec(name).describe()
        original.close()


@pytest.mark.parametrize("name", POINT_TASKS)
def test_pointmaze_equals_gymnasium_robotics(name):
    """Random actions through a whole (shortened) episode, walls hit on the way: equal to float32 precision, the
    time-out at the same step. Gymnasium's own warm start is kept: the ball's frictionless contacts converge."""
    out = lockstep(name, 250, episode_length=250)
    assert_equal_steps(out)
    assert (_wall_gap(c_env(name, episode_length=250)[0].task, out["ours"][:, :2]) < 0.004).any()
    assert len(out["ours"]) == 250 and out["trunc"][-1].all() and not out["trunc"][:-1].any()


@pytest.mark.parametrize("name", ANT_TASKS)
def test_antmaze_equals_gymnasium_robotics(name):
    """Random torques for 250 steps with gymnasium's solver warm start reset each step as our C backend resets it:
    equal to float32 precision (measured max 1e-6 over whole episodes) and the time-out at the same step."""
    out = lockstep(name, 250, zero_warmstart=True, episode_length=250)
    assert_equal_steps(out)
    assert out["trunc"][-1].all() and not out["trunc"][:-1].any()


def test_antmaze_free_running_against_unmodified_gymnasium():
    """With gymnasium's warm start carried over between steps (a 1e-14 difference in the first solve), the tumbling
    ant is chaotic: measured first error > 1e-5 at step 175-191 (seed 0) and O(1) by step 250. The first 150
    steps agree to 1e-5."""
    out = lockstep("antmaze-medium", 150)
    assert_equal_steps(out)


def test_continuing_task_at_the_goal():
    """Started next to the goal and pushed into it: the reward is 1 at every step inside, nothing terminates and
    the goal stays (continuing_task=True, reset_target=False), as in gymnasium-robotics; success is logged."""
    env, _, _ = c_env("pointmaze-umaze")
    goal_cell = env.task.maze.goals[0]
    out = lockstep("pointmaze-umaze", 120, policy=towards_goal, start=goal_cell + [1.0, 0.0])
    assert_equal_steps(out)
    assert out["r_ours"][-60:].min() == 1.0 and not out["term"].any()
    assert (out["goal"] == out["goal"][0]).all() and np.allclose(out["ours"][:, 2:4], out["ours"][0, 2:4])
    dense = lockstep("pointmaze-umaze-dense", 120, policy=towards_goal, start=goal_cell + [1.0, 0.0])
    assert_equal_steps(dense)
    assert dense["r_ours"][-1] > np.exp(-GOAL_RADIUS)
    # The ant, dropped onto its goal: a reward of 1 at every step while it lies there.
    _, reset, _ = c_env("antmaze-umaze")
    goal = np.asarray(reset(jax.random.PRNGKey(0)).info["goal"])
    out = lockstep("antmaze-umaze", 60, policy=lambda obs: np.zeros(8), start=goal + [0.1, 0.0], zero_warmstart=True)
    assert_equal_steps(out)
    assert out["r_ours"].min() == 1.0 and not out["term"].any() and (out["goal"] == out["goal"][0]).all()


def test_reset_target_equals_gymnasium_robotics():
    """reset_target=True in the default (any-goal) map, as Minari collected the pointmaze datasets, driven by D4RL's
    waypoint controller: the arriving step is observed and rewarded with the old goal on both sides, both draw a new
    goal on the same steps (gymnasium is then given ours), away from the ball, in an open cell plus the noise."""
    import torch

    from sim.tasks.reference import d4rl_pointmaze_policy

    controller = d4rl_pointmaze_policy("medium")
    policy = lambda obs: controller(torch.tensor(obs)[None])[0].numpy()  # noqa: E731
    overrides = {"reset_target": True, "any_goal": True}
    out = lockstep("pointmaze-medium", 400, policy=policy, **overrides)
    assert_equal_steps(out)
    goals = out["ours"][:, 2:4]  # the goal each step was observed (and rewarded) with
    changed = np.flatnonzero((np.diff(goals, axis=0) != 0).any(axis=1))
    arrived = np.flatnonzero(out["r_ours"] == 1.0)
    assert len(changed) >= 3 and set(changed) <= set(arrived)  # a new goal after each arrival (400 steps: several)
    assert np.array_equal(changed, [t for t in arrived if t + 1 < len(goals) and (goals[t + 1] != goals[t]).any()])
    assert np.array_equal(np.flatnonzero(out["redrawn"]), changed)  # gymnasium drew its new goals on those steps
    task = c_env("pointmaze-medium", **overrides)[0].task
    assert len(task.maze.goals) == len(task.maze.resets) == sum(row.count(".") + row.count("g")
                                                                for row in POINTMAZE_MAPS["medium"])
    for t in changed:
        new = goals[t + 1]
        assert np.linalg.norm(out["ours"][t, 0:2] - new) > GOAL_RADIUS
        assert np.abs(task.maze.goals - new).max(axis=1).min() <= 0.25
    with pytest.raises(sim.ConfigError, match="continuing_task=True"):
        sim.make_task("pointmaze-umaze", reset_target=True, continuing_task=False)


def test_episodic_task_terminates_at_the_goal():
    """continuing_task=False: terminated on the step that arrives, on both sides."""
    env, _, _ = c_env("pointmaze-umaze", continuing_task=False)
    out = lockstep("pointmaze-umaze", 200, policy=towards_goal, start=env.task.maze.goals[0] + [1.0, 0.0],
                   continuing_task=False)
    assert_equal_steps(out)
    assert out["term"][-1].all() and out["r_ours"][-1] == 1.0 and len(out["ours"]) < 200


def test_success_metric():
    """`episode/success` is 1 once the goal was reached, and stays so when the agent leaves."""
    env, reset, step = c_env("pointmaze-umaze")
    state = reset(jax.random.PRNGKey(0))
    goal = env.task.maze.goals[0]
    state = state.replace(data=env.backend.init_data(state.data.qpos.at[:2].set(goal + [1.0, 0.0]), state.data.qvel))
    seen = []
    for t in range(120):
        obs = np.asarray(state.obs["policy"])
        action = towards_goal(obs) if t < 60 else np.array([1.0, 0.0])  # reach it, then leave it
        state = step(state, jnp.asarray(action, jnp.float32))
        seen.append((float(state.reward), float(state.metrics["episode/success"])))
    seen = np.array(seen)
    assert seen[0, 1] == 0.0 and seen[-1, 1] == 1.0 and seen[-1, 0] == 0.0
    assert (np.diff(seen[:, 1]) >= 0).all()


# --- 3. start distributions and random-policy returns -----------------------------------------------------------
def _ours_initial(name: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    env, _, _ = c_env(name)
    qpos, qvel, info = jax.jit(jax.vmap(env.task.init))(jax.random.split(jax.random.PRNGKey(1), n))
    return np.asarray(qpos, np.float64), np.asarray(qvel, np.float64), np.asarray(info["goal"], np.float64)


def _theirs_initial(name: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    env, _, _ = c_env(name)
    original = gym_maze(env.task)
    agent = inner(original)
    qpos, qvel, goals = [], [], []
    for seed in range(n):
        original.reset(seed=seed)
        qpos.append(agent.data.qpos.copy())
        qvel.append(agent.data.qvel.copy())
        goals.append(original.unwrapped.goal.copy())
    original.close()
    return np.array(qpos), np.array(qvel), np.array(goals)


def _cells(xy: np.ndarray, task: sim.Task) -> tuple[np.ndarray, np.ndarray]:
    """Each point's maze cell (row, column) and its offset from the cell's centre, in cells."""
    rows, s = task.maze.rows, task.scaling
    col = np.floor((xy[:, 0] + len(rows[0]) * s / 2) / s)
    row = np.floor((len(rows) * s / 2 - xy[:, 1]) / s)
    centre = np.stack([(col + 0.5) * s - len(rows[0]) * s / 2, len(rows) * s / 2 - (row + 0.5) * s], axis=1)
    return np.stack([row, col], axis=1), (xy - centre) / s


@pytest.mark.parametrize("name", ["pointmaze-medium", "antmaze-large"])
def test_start_and_goal_distributions_agree(name):
    """Our (start, goal) draws and gymnasium-robotics' resets over many seeds: the same cells with the same
    frequencies (within 5 standard errors), the same U(-0.25, 0.25) x scaling noise (range, mean, std), the same
    rest of the state, and never a start in the goal's cell."""
    n_ours, n_theirs = 4000, 1500
    q_o, v_o, g_o = _ours_initial(name, n_ours)
    q_t, v_t, g_t = _theirs_initial(name, n_theirs)
    task = sim.make_task(name)
    np.testing.assert_array_equal(v_o, 0.0)
    np.testing.assert_array_equal(v_t, 0.0)
    np.testing.assert_allclose(q_o[:, 2:], np.broadcast_to(q_t[0, 2:], q_o[:, 2:].shape))  # ant: z, quat, joints
    for ours, theirs in ((q_o[:, :2], q_t[:, :2]), (g_o, g_t)):
        cell_o, off_o = _cells(ours, task)
        cell_t, off_t = _cells(theirs, task)
        keys_o, count_o = np.unique(cell_o, axis=0, return_counts=True)
        keys_t, count_t = np.unique(cell_t, axis=0, return_counts=True)
        np.testing.assert_array_equal(keys_o, keys_t)
        p_o, p_t = count_o / n_ours, count_t / n_theirs
        se = np.sqrt(p_t * (1 - p_t) / n_theirs + p_o * (1 - p_o) / n_ours) + 1e-12
        assert (np.abs(p_o - p_t) < 5 * se).all(), (p_o, p_t)
        for off, n in ((off_o, n_ours), (off_t, n_theirs)):
            assert np.abs(off).max() <= 0.25 + 1e-6
            assert (np.abs(off.mean(0)) < 5 * 0.25 / np.sqrt(3 * n)).all()
            np.testing.assert_allclose(off.std(0), 0.25 / np.sqrt(3), rtol=0.08)
    for q, g in ((q_o, g_o), (q_t, g_t)):
        assert (np.abs(_cells(q[:, :2], task)[0] - _cells(g, task)[0]).max(1) > 0).all()


def _random_returns(name: str, n: int, **overrides) -> tuple[np.ndarray, np.ndarray]:
    """Returns of uniform random actions over one episode in each of `n` envs: ours (batched, our starts) and the
    original's (its own resets, seeds 0..n-1)."""
    env, _, _ = c_env(name, **overrides)
    state = jax.jit(env.batched_reset)(jax.random.split(jax.random.PRNGKey(0), n))
    step = jax.jit(jax.vmap(env.step))
    rng = np.random.default_rng(0)
    ours = np.zeros(n)
    for _ in range(env.cfg.episode_length):
        state = step(state, jnp.asarray(rng.uniform(-1, 1, (n, env.task.num_actions)), jnp.float32))
        ours += np.asarray(state.reward)
    assert np.asarray(state.truncated).all()
    original = gym_maze(env.task, max_episode_steps=env.cfg.episode_length)
    theirs = []
    for seed in range(n):
        original.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            action = rng.uniform(-1, 1, env.task.num_actions).astype(np.float32)
            _, reward, terminated, truncated, _ = original.step(action)
            total += reward
            done = terminated or truncated
        theirs.append(total)
    original.close()
    return ours, np.array(theirs)


@pytest.mark.parametrize(("name", "n", "overrides"), [("pointmaze-umaze", 96, {}),
                                                      ("antmaze-umaze", 16, {"reward_type": "dense",
                                                                             "episode_length": 300})])
def test_random_policy_returns_agree(name, n, overrides):
    """The mean return of random actions is the same within 4 standard errors, and so is its spread (pointmaze:
    sparse, whose random return depends on the start distribution; antmaze: dense over 300 steps, as its sparse
    random return is 0 on both sides)."""
    ours, theirs = _random_returns(name, n, **overrides)
    se = np.sqrt(ours.var(ddof=1) / n + theirs.var(ddof=1) / n)
    assert abs(ours.mean() - theirs.mean()) < 4 * se, (ours.mean(), theirs.mean(), se)
    assert 0.5 < ours.std() / theirs.std() < 2.0


# --- 2. MJX ----------------------------------------------------------------------------------------------------
def _both_backends(name: str, n: int = 4):
    """Our task on the C backend and on MJX (float32) over `n` envs from the same keys: both initial states and
    jitted batched steps. MJX starts from the C backend's reset (`conftest.mjx_from_c_reset`), so comparisons start at
    step 1."""
    task = sim.make_task(name)
    c = Env(task, sim.make_backend(task, "mujoco", nthread=1))
    phys = sim.make_backend(task, "mjx")
    x = Env(task, phys)
    sc = jax.jit(c.batched_reset)(jax.random.split(jax.random.PRNGKey(7), n))
    return task, sc, mjx_from_c_reset(phys)(sc), jax.jit(jax.vmap(c.step)), jax.jit(jax.vmap(x.step))


def _obs_error(a, b) -> np.ndarray:
    return np.abs(np.asarray(a.obs["policy"]) - np.asarray(b.obs["policy"])).max(axis=1)


def _wall_gap(task: sim.Task, xy: np.ndarray) -> np.ndarray:
    """The ball's distance to the nearest wall box (m, negative inside), per env."""
    walls = np.array([(x, y) for _, _, x, y in task.maze.walls])
    outside = np.maximum(np.abs(xy[:, None, :] - walls[None]) - task.scaling / 2, 0.0)
    return np.sqrt((outside**2).sum(-1)).min(axis=1) - 0.1


def test_pointmaze_on_mjx():
    """pointmaze-umaze on MJX against the C backend, random actions, 4 envs, 150 steps.

    What holds (measured with jax 0.10.2, mujoco 4.0.0, mujoco-mjx 3.17): the ball's steps agree to float32
    precision (one-step error from the C state: median 2e-7, 99th percentile 2e-6) except where the ball starts a
    step inside a wall's contact margin without touching it (0 < gap < 0.004 m: both geoms have margin 0.002). The C
    engine applies that contact; MJX's sphere-box collision reports none until the ball penetrates, so such a step
    differs by up to the ball's speed change (measured 1.46 m/s), and free-running trajectories part there (first
    at step 62 of tests/sim/test_sim_env.py's rollout, hence the registry's equivalence_steps=50)."""
    task, sc, sx, step_c, step_x = _both_backends("pointmaze-umaze")
    resync = jax.jit(lambda x, c: x.replace(data=x.data.replace(qpos=c.data.qpos, qvel=c.data.qvel)))
    rng = np.random.default_rng(0)
    free, one, gap = [], [], []
    for _ in range(150):
        action = jnp.asarray(rng.uniform(-1, 1, (4, 2)), jnp.float32)
        gap.append(_wall_gap(task, np.asarray(sc.data.qpos)))
        from_c = step_x(resync(sx, sc), action)
        sc, sx = step_c(sc, action), step_x(sx, action)
        free.append(_obs_error(sx, sc))
        one.append(_obs_error(from_c, sc))
    free, one, gap = np.array(free), np.array(one), np.array(gap)
    in_margin = (gap > 0) & (gap < 0.004)
    assert (gap <= 0).any(), "the ball should hit walls in this test"
    assert one[~in_margin].max() < 1e-4
    first = int(np.argmax(in_margin.any(axis=1))) if in_margin.any() else len(free)
    assert first >= 20 and free[:first].max() < 1e-4


def test_antmaze_on_mjx():
    """antmaze-umaze on MJX against the C backend, random torques, 4 envs.

    What holds: the first 3 control steps (the ant falls from 0.75 m, nothing touching) agree to 1e-4 (measured
    1.4e-5). At the 4th a foot enters the floor's contact margin (margin 0.01 per geom) and the backends part at
    once (measured error 0.3-0.5, then O(1)): inside the margins MJX's contact forces differ from MuJoCo C's (in
    float64 MJX too; with zero margins they agree to 1e-14, tests/sim/test_mujoco_v5.py). One-step errors from
    re-synchronised C states stay that large whenever feet are in contact (median 0.03, 90th percentile 0.7 over
    200 steps), so nothing longer is claimed; the registry's equivalence_steps is 3. The C backend equals
    gymnasium-robotics (above), which steps with the same C `mj_step`."""
    _, sc, sx, step_c, step_x = _both_backends("antmaze-umaze")
    rng = np.random.default_rng(0)
    for _ in range(3):
        action = jnp.asarray(rng.uniform(-1, 1, (4, 8)), jnp.float32)
        sc, sx = step_c(sc, action), step_x(sx, action)
        assert _obs_error(sx, sc).max() < 1e-4
        np.testing.assert_allclose(np.asarray(sx.reward), np.asarray(sc.reward), atol=1e-4)
