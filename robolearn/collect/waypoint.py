"""`robolearn collect env=pointmaze-umaze kind=waypoint`: D4RL's maze2d datasets, rebuilt as Minari rebuilt them.

Minari's `D4RL/pointmaze/{umaze,medium,large}[-dense]-v2` (Farama's minari-dataset-generation-scripts, after D4RL's
maze2d) were collected in gymnasium-robotics' PointMaze with its default map, where every open cell is a goal and a
start, `continuing_task=True` and `reset_target=True` (a new goal on each arrival); D4RL's waypoint controller
(shortest cell paths, PD gains 10 and 1: `sim.tasks.reference.d4rl_pointmaze_policy`) drives the ball, with
N(0, 0.5^2) added to every action and clipped; 1M steps in one run, cut into an episode at every step that reaches
the goal (a truncation: the next episode goes on from there, towards the new goal).

Here `env.num_envs` such runs go together, each `ceil(steps / num_envs)` steps long (so the dataset holds at
least `steps` transitions), and each is cut the same way; the last piece of a run ends in its time-out. The
dataset records the evaluation task, the layout's goal cell with the goal fixed (Minari's `eval_env_spec`), so
offline training evaluates where D4RL does, and D4RL's maze2d reference returns (the registry's anchors).

The antmaze-* tasks take Minari's antmaze controller (its minari-dataset-generation-scripts, after D4RL's
`create_navigation_policy`): a goal-reaching ant policy (`policy=`, a checkpoint trained on `ant-goal`) fed the next
waypoint of a shortest cell path (`Waypoints`: each waypoint a cell centre moved by -U(0, 0.1) m per coordinate,
passed within 0.45 m; the goal itself once its cell is next), its sampled actions plus N(0, 0.2^2). The episodes are
D4RL's antmaze ones (its scripts/generation/generate_ant_maze_datasets.py): 1000 steps each, nothing cut at the goal,
`steps` transitions in all, and the kind says where they start and what they are sent to (D4RL's multi_start /
multigoal flags): ``waypoint`` the layout's start to its goal (antmaze-umaze-v0's data), ``diverse`` any open cell
to any open cell (*-diverse), ``play`` any open cell to the layout's goal (*-play). Observations and rewards are
those of the commanded goal; the dataset names the evaluation task.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robolearn.errors import ConfigError

#: Std of the Gaussian noise Minari added to the controller's actions: the point's PD, the ant's goal reacher.
WAYPOINT_NOISE = 0.5
ANT_WAYPOINT_NOISE = 0.2
#: Minari's antmaze waypoints: passed within this distance (m); each a cell centre minus U(0, jitter) per coordinate.
WAYPOINT_THRESHOLD = 0.45
WAYPOINT_JITTER = 0.1
#: Minari's dataset size per maze.
WAYPOINT_STEPS = 1_000_000


def is_ant(task: str) -> bool:
    """Whether `task` is one of the D4RL ant mazes (antmaze-*), else a point maze; other tasks raise."""
    from sim.tasks import spec
    from sim.tasks.d4rl_maze import D4RLAntMaze, D4RLPointMaze

    cls = spec(task).task_class()
    if not issubclass(cls, D4RLPointMaze | D4RLAntMaze):
        raise ConfigError(f"collect kind=waypoint is D4RL's maze recipe, for pointmaze-* and antmaze-* "
                          f"(sim/tasks/d4rl_maze.py), not {task}")
    return issubclass(cls, D4RLAntMaze)


def is_antmaze_recipe(task: str, kind: str) -> bool:
    """Whether (`task`, `kind`) is D4RL's antmaze recipe (by name: config validation imports no task)."""
    return task.startswith("antmaze-") and kind in ANTMAZE_KINDS


def default_noise(task: str) -> float:
    """Minari's action noise for the task's controller (by name)."""
    return ANT_WAYPOINT_NOISE if task.startswith("antmaze-") else WAYPOINT_NOISE


#: D4RL's antmaze collection episodes (max_episode_steps).
ANTMAZE_EPISODE = 1000
#: The kinds of D4RL's antmaze recipe: where episodes start and what the ant is sent to.
ANTMAZE_KINDS = {"waypoint": {}, "diverse": {"any_goal": True}, "play": {"any_start": True}}


def collection_overrides(task: str, steps: int, num_envs: int, kind: str = "waypoint") -> dict[str, Any]:
    """The task options of the collection runs. Point mazes (maze2d): any open cell a goal, a new goal on arrival,
    one long episode per env. Ant mazes: D4RL's 1000-step episodes, started and sent as `kind` says."""
    ant = is_ant(task)  # raises for other tasks
    if steps < 1:
        raise ConfigError(f"collect steps must be >= 1, got {steps}")
    if ant:
        if kind not in ANTMAZE_KINDS:
            raise ConfigError(f"antmaze datasets are kind {', '.join(ANTMAZE_KINDS)}, not {kind}")
        return {**ANTMAZE_KINDS[kind], "continuing_task": True, "episode_length": ANTMAZE_EPISODE}
    if kind != "waypoint":
        raise ConfigError(f"pointmaze datasets are kind=waypoint (Minari's maze2d recipe), not {kind}")
    return {"any_goal": True, "reset_target": True, "continuing_task": True,
            "episode_length": math.ceil(steps / num_envs)}


def waypoint_actor(env: Any, noise: float, seed: int, reacher: str | None = None) -> Callable[[Any], torch.Tensor]:
    """D4RL's waypoint controller on `env`'s layout, plus N(0, noise^2) per action entry (`rollout` clips): the
    point's PD controller, or on antmaze-* the goal reacher checkpoint `reacher` sent from waypoint to waypoint."""
    gen = torch.Generator().manual_seed(seed + 3)
    if is_ant(env.task.name):
        policy = _ant_controller(env, reacher, seed)
    else:
        from sim.tasks.reference import d4rl_pointmaze_policy

        policy = d4rl_pointmaze_policy(env.task.cfg.layout)

    def act(obs: Any) -> torch.Tensor:
        actions = policy(obs["policy"].float().cpu())
        return (actions + noise * torch.randn(actions.shape, generator=gen)).to(env.device)

    return act


#: The goal reacher's observation: the antmaze ant's 27 entries, then the waypoint minus the torso's x, y (ant-goal).
REACHER_OBS = 29


def _ant_controller(env: Any, reacher: Any, seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The goal reacher (sampled, as Minari's SB3 `predict`) fed the next waypoint: antmaze's observation is the
    achieved goal (x, y), the desired goal, then the ant's 27 entries."""
    from robolearn.checkpoints.policy import load_policy

    if reacher in (None, "waypoint", "reference"):  # the registered goal reacher, once there is one
        from sim.tasks import spec

        reacher = spec("ant-goal").checkpoint_path()
    if not reacher:
        raise ConfigError("antmaze-* datasets (kind=waypoint, diverse, play) need policy=<goal reacher checkpoint>: a "
                          "policy trained on ant-goal (`robolearn train env=ant-goal algo=sac`), which the waypoints "
                          "steer (ant-goal has no registered reacher yet)")
    policy = load_policy(reacher, mode="sample", seed=seed)
    obs_dim, trained_on = policy.policy_config.get("obs_dim"), (policy.run.get("env") or {}).get("name")
    if (obs_dim is not None and obs_dim != REACHER_OBS) or (trained_on is not None and trained_on != "ant-goal"):
        raise ConfigError(f"policy={reacher} was trained on {trained_on} ({obs_dim} observation entries): the "
                          f"waypoints steer a goal reacher trained on ant-goal ({REACHER_OBS})")
    from sim.tasks.ant_goal import AntGoalConfig, goal_offset

    frame = ((policy.run.get("env") or {}).get("overrides") or {}).get("goal_frame", AntGoalConfig.goal_frame)
    maze = env.task.maze
    waypoints = Waypoints(maze.rows, maze.scaling, env.num_envs, seed + 4)

    def control(obs: torch.Tensor) -> torch.Tensor:
        xy = obs[:, 0:2]
        target = waypoints(xy, obs[:, 2:4])
        # the ant's 27 entries start with torso z, then its quaternion; the offset as ant-goal observes it
        offset = torch.tensor(np.asarray(goal_offset(obs[:, 5:9].numpy(), (target - xy).numpy(), frame)))
        return policy({"policy": torch.cat([obs[:, 4:], offset.float()], dim=-1)}).cpu()

    return control


class Waypoints:
    """Minari's antmaze waypoint controller, batched over envs: per env, the next cell on a shortest path to the
    commanded goal, moved by -U(0, jitter) m per coordinate, until the agent passes within `threshold` m of it; then
    the cell after; the goal itself once the goal's cell is next. A new goal, or a jump of the agent (a reset),
    plans again from the agent's cell."""

    def __init__(self, rows: tuple[str, ...], scaling: float, num_envs: int, seed: int,
                 threshold: float = WAYPOINT_THRESHOLD, jitter: float = WAYPOINT_JITTER):
        from sim.tasks.maze import cell_center, next_hops

        layout = ["".join("#" if ch == "#" else "." for ch in row) for row in rows]
        index, hop = next_hops(layout)
        self.index, self.hop = torch.from_numpy(index), torch.from_numpy(hop)  # [R, C], [G, R, C, 2]
        self.shape, self.scaling = (len(layout), len(layout[0])), scaling
        self.centers = scaling * torch.tensor([[cell_center(r, c, layout) for c in range(self.shape[1])]
                                               for r in range(self.shape[0])])  # [R, C, 2]
        self.threshold, self.jitter = threshold, jitter
        self.cell = torch.zeros(num_envs, 2, dtype=torch.long)  # the waypoint's cell (row, col)
        self.point = torch.zeros(num_envs, 2)                   # its jittered centre
        self.goal = torch.full((num_envs, 2), float("nan"))     # the goal and position it was planned for
        self.xy = torch.full((num_envs, 2), float("nan"))
        self.gen = torch.Generator().manual_seed(seed)

    def cell_of(self, xy: torch.Tensor) -> torch.Tensor:
        """(row, col) of the cell under each (x, y): columns along x, rows along -y, the maze centred at 0."""
        (rows, cols), s = self.shape, self.scaling
        col = torch.floor((xy[:, 0] + cols * s / 2) / s).long().clamp(0, cols - 1)
        row = torch.floor((rows * s / 2 - xy[:, 1]) / s).long().clamp(0, rows - 1)
        return torch.stack([row, col], dim=-1)

    def _next(self, goal_index: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        return self.hop[goal_index, cell[:, 0], cell[:, 1]]

    def _move(self, which: torch.Tensor, cell: torch.Tensor) -> None:
        jitter = self.jitter * torch.rand(cell.shape, generator=self.gen)
        self.cell = torch.where(which[:, None], cell, self.cell)
        self.point = torch.where(which[:, None], self.centers[cell[:, 0], cell[:, 1]] - jitter, self.point)

    def __call__(self, xy: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """The point each env's agent at `xy` (N, 2) heads for to reach `goal` (N, 2). A goal outside the open cells
        raises; an agent whose centre is over no open cell (pressed into a wall's margin) keeps its waypoint."""
        goal_cell, cell = self.cell_of(goal), self.cell_of(xy)
        g = self.index[goal_cell[:, 0], goal_cell[:, 1]]
        if bool((g < 0).any()):
            raise ConfigError(f"waypoint goals {goal[g < 0].tolist()} lie in no open cell of the maze")
        on_open = self.index[cell[:, 0], cell[:, 1]] >= 0
        replan = ((goal - self.goal).norm(dim=-1) > 1e-3) | ((xy - self.xy).norm(dim=-1) > self.scaling / 2)
        replan = (replan | torch.isnan(self.goal).any(dim=-1)) & on_open
        self._move(replan, self._next(g, cell))
        at_goal_cell = (self.cell == goal_cell).all(dim=-1)
        passed = ~at_goal_cell & ((xy - self.point).norm(dim=-1) <= self.threshold)
        self._move(passed, self._next(g, self.cell))
        self.goal, self.xy = goal.clone(), xy.clone()
        return torch.where((self.cell == goal_cell).all(dim=-1)[:, None], goal, self.point)


def split_at_goals(episodes: list[dict[str, Any]], goal_obs: slice, radius: float) -> list[dict[str, Any]]:
    """Each episode cut after every step whose next observation has the agent within `radius` of that step's
    goal (the observation's achieved goal, its first two entries, against `goal_obs`): Minari's truncation at
    success. Pieces share their boundary observation, as consecutive episodes of one run do."""
    out = []
    for ep in episodes:
        policy_obs = ep["observations"]["policy"]
        reached = np.linalg.norm(policy_obs[1:, 0:2] - policy_obs[1:, goal_obs], axis=-1) <= radius
        ends = [*np.flatnonzero(reached[:-1]), len(reached) - 1]  # the run's last step ends its last piece anyway
        start = 0
        for end in ends:
            piece = slice(start, end + 1)
            truncations = ep["truncations"][piece].copy()
            truncations[-1] = truncations[-1] or not ep["terminations"][end]
            out.append({"observations": {g: o[start:end + 2] for g, o in ep["observations"].items()},
                        "actions": ep["actions"][piece], "rewards": ep["rewards"][piece],
                        "terminations": ep["terminations"][piece], "truncations": truncations})
            start = end + 1
    return out
