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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robolearn.errors import ConfigError

#: Std of the Gaussian noise Minari added to the controller's actions.
WAYPOINT_NOISE = 0.5
#: Minari's dataset size per maze.
WAYPOINT_STEPS = 1_000_000


def collection_overrides(task: str, steps: int, num_envs: int) -> dict[str, Any]:
    """The task options of the collection runs: any open cell a goal, a new goal on arrival, one long episode."""
    from sim.tasks import spec
    from sim.tasks.d4rl_maze import D4RLPointMaze

    if not issubclass(spec(task).task_class(), D4RLPointMaze):
        raise ConfigError(f"collect kind=waypoint is D4RL's maze2d recipe, for pointmaze-* (sim/tasks/d4rl_maze.py), "
                          f"not {task}")
    if steps < 1:
        raise ConfigError(f"collect steps must be >= 1, got {steps}")
    return {"any_goal": True, "reset_target": True, "continuing_task": True,
            "episode_length": math.ceil(steps / num_envs)}


def waypoint_actor(env: Any, noise: float, seed: int) -> Callable[[Any], torch.Tensor]:
    """D4RL's waypoint controller on `env`'s layout, plus N(0, noise^2) per action entry (`rollout` clips)."""
    from sim.tasks.reference import d4rl_pointmaze_policy

    policy = d4rl_pointmaze_policy(env.task.cfg.layout)
    gen = torch.Generator().manual_seed(seed + 3)

    def act(obs: Any) -> torch.Tensor:
        actions = policy(obs["policy"].float().cpu())
        return (actions + noise * torch.randn(actions.shape, generator=gen)).to(env.device)

    return act


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
