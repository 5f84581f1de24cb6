"""`robolearn collect kind=waypoint` (robolearn/collect/waypoint.py): D4RL's maze2d datasets as Minari rebuilt them."""

from __future__ import annotations

import numpy as np
import pytest

from robolearn.collect.generate import CollectConfig, collect
from robolearn.collect.suite import _normalized
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
    with pytest.raises(ConfigError, match="pointmaze data is kind=waypoint"):
        collect(CollectConfig(env=EnvConfig(name="pointmaze-umaze", num_envs=2), kind="diverse", progress=False))


@pytest.mark.parametrize("layout", ["umaze", "medium", "large"])
def test_ant_waypoints_lead_a_walker_to_every_goal_without_touching_a_wall(layout):
    """`Waypoints` (Minari's antmaze controller) steering a kinematic agent (0.3 m a step towards its point) in 4 m
    cells: sent from goal to goal (a new open-cell goal on each arrival) and half the agents teleported to other cells
    mid-way, every agent keeps arriving, and a disc of 0.5 m around it never overlaps a wall cell (it passes
    waypoints within 0.45 m, so it turns near cell centres, not across corners; a controller that kept its old path
    after a goal change or a jump would walk into walls)."""
    import torch

    from robolearn.collect.waypoint import Waypoints
    from sim.tasks.d4rl_maze import ANTMAZE_MAPS, Maze

    maze = Maze.parse(ANTMAZE_MAPS[layout], 4.0, any_goal=True)
    n, gen = 64, torch.Generator().manual_seed(0)
    cells = torch.from_numpy(maze.goals)
    draw = lambda: cells[torch.randint(len(cells), (n,), generator=gen)] + torch.rand(n, 2, generator=gen) - 0.5  # noqa: E731
    xy, goal = cells[torch.randint(len(cells), (n,), generator=gen)], draw()
    waypoints = Waypoints(maze.rows, maze.scaling, n, seed=0)
    walls = torch.tensor([(x, y) for _, _, x, y in maze.walls])
    arrivals = torch.zeros(n)
    for t in range(1200):
        if t == 600:  # half the agents jump to another cell (an episode reset)
            jump = torch.arange(n) % 2 == 0
            xy = torch.where(jump[:, None], cells[torch.randint(len(cells), (n,), generator=gen)], xy)
        step = waypoints(xy, goal) - xy
        xy = xy + step * (0.3 / step.norm(dim=-1, keepdim=True).clamp_min(0.3))
        # distance from the agent to the nearest point of each 4 m wall square
        gap = ((xy[:, None] - walls[None]).abs() - 2.0).clamp_min(0).norm(dim=-1)
        assert (gap.min(dim=1).values > 0.5).all()
        arrived = (xy - goal).norm(dim=-1) <= GOAL_RADIUS
        arrivals += arrived
        goal = torch.where(arrived[:, None], draw(), goal)
    assert (arrivals >= 2).all()
    with pytest.raises(ConfigError, match="no open cell"):
        waypoints(xy, torch.from_numpy(np.array([[x, y] for _, _, x, y in maze.walls[:n]], np.float32)))


def test_antmaze_waypoints_feed_the_reacher_the_ant_and_its_waypoint(monkeypatch):
    """The goal reacher sees antmaze's 27 ant entries, then its waypoint minus the torso's x, y (what ant-goal
    observes): a recording stand-in for the checkpoint."""
    import torch

    import robolearn.checkpoints.policy as policy_module
    from robolearn.collect.waypoint import waypoint_actor
    from robolearn.config import make_env

    seen = []

    class Recorder:
        policy_config, run = {"obs_dim": 29}, {"env": {"name": "ant-goal"}}

        def __call__(self, obs):
            seen.append(obs["policy"].clone())
            return torch.zeros(len(obs["policy"]), 8)

    monkeypatch.setattr(policy_module, "load_policy", lambda *a, **k: Recorder())
    env = make_env({"name": "antmaze-umaze", "num_envs": 2, "backend": "mujoco", "overrides": {"any_goal": True}}, 0)
    try:
        act = waypoint_actor(env, 0.0, 0, reacher="stand-in")
        obs = env.get_observations()
        assert act(obs).shape == (2, 8)
    finally:
        env.close()
    policy_obs = obs["policy"].float()
    fed = seen[0]
    assert fed.shape == (2, 29)
    torch.testing.assert_close(fed[:, :27], policy_obs[:, 4:31])
    # the offset in the torso's heading (ant-goal's default frame): turned back by the torso's yaw, a waypoint
    w, x, y, z = policy_obs[:, 5:9].double().unbind(-1)
    yaw = torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    c, s, (u, v) = torch.cos(yaw), torch.sin(yaw), fed[:, 27:].double().unbind(-1)
    world = torch.stack([c * u - s * v, s * u + c * v], dim=-1)
    waypoint = world.float() + policy_obs[:, 0:2]  # a cell centre (minus < 0.1 m of jitter) or the goal itself
    centres = torch.from_numpy(np.asarray(env.task.maze.goals, np.float32))
    near_centre = (waypoint[:, None] - centres[None]).abs().amax(dim=-1).min(dim=1).values <= 0.1 + 1e-4
    at_goal = (waypoint - policy_obs[:, 2:4]).norm(dim=-1) < 1e-4
    assert (near_centre | at_goal).all()


def test_antmaze_datasets_drive_a_goal_reacher_through_d4rls_episodes(tmp_path):
    """D4RL's antmaze recipe: the goal reacher checkpoint (trained on ant-goal; here a few updates) steered through
    whole episodes (D4RL's 1000 steps; 50 here), `steps` transitions, with Minari's noise 0.2: kind=waypoint from the
    layout's start to its goal, diverse from any cell to any cell (play, any cell to the layout's goal, is the task
    option any_start: `test_play_starts_anywhere_and_goes_to_the_layouts_goal`). The data names the evaluation task;
    without policy= the registered reacher drives; other policies are refused."""
    from robolearn.commands.cli import main

    run = tmp_path / "reacher"
    assert main(["train", "env=ant-goal", "algo=sac", f"run_dir={run}", "progress=false", "video=false",
                 "runner.env_steps=100", "algo.learning_starts=50", "algo.batch_size=16", "env.num_envs=2",
                 "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "runner.steps_per_iteration=25"]) == 0
    reacher = str(run / "checkpoints" / "final")
    starts, goals = {}, {}
    for kind in ("waypoint", "diverse"):
        cfg = CollectConfig(env=EnvConfig(name="antmaze-umaze", num_envs=4, overrides={"episode_length": 50}),
                            kind=kind, steps=400, policy=reacher, progress=False)
        data = collect(cfg)
        meta = data.metadata
        assert data.num_steps == 400 and data.num_episodes == 8 and (data.lengths == 50).all()
        assert meta["noise"] == 0.2 and meta["env"]["name"] == "antmaze-umaze"
        assert meta["collected_in"]["overrides"] == {"episode_length": 50, "continuing_task": True,
                                                     **({"any_goal": True} if kind == "diverse" else {})}
        # D4RL's evaluation: the episode ends at the goal, scored 0 / 1 (100 x the success rate)
        assert meta["env"]["overrides"] == {"episode_length": 50, "continuing_task": False}
        assert (meta["ref_min_score"], meta["ref_max_score"]) == (0.0, 1.0)
        assert np.abs(data.actions).max() <= 1.0 and data.actions.std() > 0.1
        first = np.stack([e.observations["policy"][0] for e in data.episodes()])
        starts[kind], goals[kind] = first[:, 0:2], first[:, 2:4]
    # the layout's start cell (bottom left, +-1 m of noise) and goal cell (top left); anywhere for diverse
    assert (np.abs(starts["waypoint"] - [-4.0, -4.0]).max(1) <= 1.0).all()
    assert (np.abs(goals["waypoint"] - [-4.0, 4.0]).max(1) <= 1.0).all()
    assert (np.abs(goals["diverse"] - [-4.0, 4.0]).max(1) > 1.0).any()
    # without policy=, ant-goal's registered reacher (benchmarks/references/ant-goal-sac): it reaches the umaze goal
    # from the start cell in 92 % of 50 episodes of 700 steps (benchmarks/results/antmaze_reacher_cpu.json)
    data = collect(CollectConfig(env=EnvConfig(name="antmaze-umaze", num_envs=4, overrides={"episode_length": 700}),
                                 kind="waypoint", steps=2800, progress=False))
    reached = [float(e.rewards.sum()) > 0 for e in data.episodes()]
    assert data.num_episodes == 4 and sum(reached) >= 3
    assert _normalized(data) == 100 * np.mean(reached)  # the suite's score of the data: the share that arrived
    # training on it evaluates in that task: the dataset's recorded options reach the run's env
    from robolearn.data.formats import save_dataset
    from robolearn.runners.train import load_train_config

    path = save_dataset(data, tmp_path / "antmaze-umaze-v0", "robolearn")
    env = load_train_config(["algo=iql", f"dataset={path}"])["env"]
    assert env["name"] == "antmaze-umaze" and env["overrides"]["continuing_task"] is False
    pendulum = tmp_path / "pendulum"
    assert main(["train", "env=pendulum-swingup", "algo=sac", f"run_dir={pendulum}", "progress=false",
                 "video=false", "runner.env_steps=50", "algo.learning_starts=25", "algo.batch_size=8",
                 "env.num_envs=1", "algo.actor_hidden=[8]", "algo.critic_hidden=[8]",
                 "runner.steps_per_iteration=25"]) == 0
    with pytest.raises(ConfigError, match="ant-goal"):
        collect(CollectConfig(env=EnvConfig(name="antmaze-umaze", num_envs=2), kind="waypoint", steps=10,
                              policy=str(pendulum / "checkpoints" / "final"), progress=False))


def test_play_starts_anywhere_and_goes_to_the_layouts_goal():
    """any_start (D4RL's antmaze-play collection, kind=play): episodes begin in every open cell but the goal's, the
    goal stays the layout's."""
    import jax

    import sim
    from robolearn.collect.waypoint import collection_overrides

    overrides = collection_overrides("antmaze-medium", 1000, 1, "play")
    assert overrides == {"any_start": True, "continuing_task": True, "episode_length": 1000}
    task = sim.make_task("antmaze-medium", **overrides)
    qpos, _, info = jax.vmap(task.init)(jax.random.split(jax.random.PRNGKey(0), 2000))
    cells = {tuple(np.round((np.asarray(xy) + 16) / 4 - 0.5).astype(int)) for xy in np.asarray(qpos[:, :2])}
    open_cells = sum(row.count(".") + row.count("r") + row.count("g") for row in task.maze.rows)
    assert len(cells) == open_cells - 1  # all but the goal's cell (starts are drawn away from the goal)
    assert np.abs(np.asarray(info["goal"]) - [10.0, -10.0]).max() <= 1.0  # the layout's goal, bottom right
