"""Point-mass mazes with a sparse goal reward, D4RL maze2d-style: `point-maze-{umaze,medium,large}`.

Model: a 0.1 m ball (1 kg) on two slide joints (damping 1) pushed by two motors (gear 2, so at
most about 2 m/s), among 1 m wall blocks laid out from D4RL's maps. Contacts with the walls only.
Physics step 0.01 s, control at 50 Hz; episodes of 300 (umaze), 600 (medium) or 800 (large) steps.

Observation `"policy"` (6): position (x, y), velocity (x, y), goal position (x, y).
Action (2): forces in [-1, 1].
Reward term `goal`: 1 while within 0.5 m of the goal, else 0 (sparse). No termination (as maze2d);
`terminate_at_goal=True` ends the episode on arrival instead.
Initial state: the start cell (the top-left open cell) plus U(-0.25, 0.25) in x and y; the goal
is the open cell farthest from it (by path length), plus U(-0.25, 0.25) noise per episode.
Success metric: `episode/success`, 1 if the ball came within 0.5 m of the goal at any point of the
episode (logged over finished episodes, a success rate).
"""

from __future__ import annotations

import dataclasses
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig
from sim.errors import ConfigError
from sim.tasks._scene import scene_assets

LAYOUTS = {
    "umaze": ["#####",
              "#...#",
              "###.#",
              "#...#",
              "#####"],
    "medium": ["########",
               "#..##..#",
               "#..#...#",
               "##...###",
               "#..#...#",
               "#.#..#.#",
               "#...#..#",
               "########"],
    "large": ["############",
              "#....#.....#",
              "#.##.#.#.#.#",
              "#......#...#",
              "#.####.###.#",
              "#..#.#.....#",
              "##.#.#.#.###",
              "#..#...#...#",
              "############"],
}
GOAL_RADIUS = 0.5


def cell_center(row: int, col: int, layout: list[str]) -> tuple[float, float]:
    """World (x, y) of a cell's centre: columns run along x, rows along -y, the maze centred at 0."""
    rows, cols = len(layout), len(layout[0])
    return col - (cols - 1) / 2, (rows - 1) / 2 - row


def bfs_distances(layout: list[str], start: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Path length (in cells) from `start` to every reachable open cell."""
    dist = {start: 0}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nxt = (r + dr, c + dc)
            if layout[nxt[0]][nxt[1]] != "#" and nxt not in dist:
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def start_and_goal(layout: list[str]) -> tuple[tuple[int, int], tuple[int, int]]:
    start = next((r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch != "#")
    dist = bfs_distances(layout, start)
    goal = max(dist, key=lambda cell: (dist[cell], cell))
    return start, goal


def maze_xml(layout: list[str]) -> str:
    walls = []
    for r, row in enumerate(layout):
        for c, ch in enumerate(row):
            if ch == "#":
                x, y = cell_center(r, c, layout)
                walls.append(f'<geom name="wall_{r}_{c}" type="box" pos="{x} {y} 0.2" size="0.5 0.5 0.2" '
                             f'material="wall"/>')
    span = max(len(layout), len(layout[0])) / 2 + 1
    return f"""
<mujoco model="point_maze">
  <option timestep="0.01"/>
  {scene_assets("8 8")}
    <material name="wall" rgba=".7 .5 .3 1"/>
  </asset>
  <worldbody>
    <light name="light" pos="0 0 {span * 2}"/>
    <camera name="top" pos="0 0 {span * 2.2}" xyaxes="1 0 0 0 1 0"/>
    <geom name="floor" type="plane" size="{span} {span} .1" material="grid" contype="0" conaffinity="0"/>
    {"".join(walls)}
    <body name="ball" pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0" damping="1"/>
      <joint name="y" type="slide" axis="0 1 0" damping="1"/>
      <geom name="ball" type="sphere" size="0.1" mass="1" rgba=".2 .6 .9 1" contype="2" conaffinity="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="fx" joint="x" gear="2" ctrllimited="true" ctrlrange="-1 1"/>
    <motor name="fy" joint="y" gear="2" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


@dataclasses.dataclass(frozen=True)
class MazeConfig(TaskConfig):
    #: One of `LAYOUTS`.
    layout: str = "umaze"
    episode_length: int = 300
    ctrl_dt: float = 0.02
    sim_dt: float = 0.01
    terminate_at_goal: bool = False

    def validate(self) -> None:
        super().validate()
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {sorted(LAYOUTS)}, got {self.layout!r}")


class PointMaze(Task):
    __doc__ = __doc__
    config_class = MazeConfig

    def __init__(self, config: MazeConfig | None = None, name: str | None = None):
        super().__init__(config, name)
        self.layout = LAYOUTS[self.cfg.layout]
        start, goal = start_and_goal(self.layout)
        self.start_xy = np.array(cell_center(*start, self.layout), np.float32)
        self.goal_xy = np.array(cell_center(*goal, self.layout), np.float32)

    def xml(self) -> str:
        return maze_xml(self.layout)

    def init(self, key):
        k1, k2 = jax.random.split(key)
        pos = jnp.asarray(self.start_xy) + jax.random.uniform(k1, (2,), minval=-0.25, maxval=0.25)
        goal = jnp.asarray(self.goal_xy) + jax.random.uniform(k2, (2,), minval=-0.25, maxval=0.25)
        return pos, jnp.zeros(2), {"goal": goal, "reached": jnp.zeros((), bool)}

    def observe(self, phys: Physics, info):
        return {"policy": jnp.concatenate([phys.qpos, phys.qvel, info["goal"]]).astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        return {"goal": (jnp.linalg.norm(phys.qpos - info["goal"]) <= GOAL_RADIUS).astype(jnp.float32)}

    def update_info(self, phys: Physics, action, info):
        return {**info, "reached": info["reached"] | (jnp.linalg.norm(phys.qpos - info["goal"]) <= GOAL_RADIUS)}

    def metrics(self, phys: Physics, info):
        return {"episode/success": info["reached"].astype(jnp.float32)}

    def terminated(self, phys: Physics, info):
        if not self.cfg.terminate_at_goal:
            return jnp.zeros((), bool)
        return jnp.linalg.norm(phys.qpos - info["goal"]) <= GOAL_RADIUS

