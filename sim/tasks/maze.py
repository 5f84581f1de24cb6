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
`start="random"` draws the start cell uniformly from every open cell, `start="play"` from the
layout's decision points (`play_cells`: dead ends, junctions and turns), as D4RL's antmaze
`diverse` and `play` datasets began their episodes (for collecting data; evaluation keeps "fixed").
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
START_MODES = ("fixed", "random", "play")


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


def open_cells(layout: list[str]) -> list[tuple[int, int]]:
    """Every open cell (row, col), row-major."""
    return [(r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch != "#"]


def _neighbours(layout: list[str], cell: tuple[int, int]) -> list[tuple[int, int]]:
    r, c = cell
    return [(r + dr, c + dc) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)) if layout[r + dr][c + dc] != "#"]


def play_cells(layout: list[str]) -> list[tuple[int, int]]:
    """The layout's decision points, D4RL antmaze-play's "hand-picked" locations made a rule: dead ends (one
    open neighbour), junctions (three or more) and turns (two that are not opposite)."""
    cells = []
    for cell in open_cells(layout):
        n = _neighbours(layout, cell)
        straight = len(n) == 2 and (n[0][0] == n[1][0] or n[0][1] == n[1][1])
        if not straight:
            cells.append(cell)
    return cells


def next_hops(layout: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Shortest-path routing between every pair of open cells, for goal-reaching controllers.

    Returns ``index`` [rows, cols] (each open cell's number in `open_cells`, -1 for walls) and ``hop``
    [G, rows, cols, 2]: for goal cell number g and an open cell (r, c), the neighbour (row, col) one step
    closer to g on a shortest path (the goal cell itself points to itself; ties broken by neighbour order).
    """
    cells = open_cells(layout)
    index = -np.ones((len(layout), len(layout[0])), np.int64)
    for i, cell in enumerate(cells):
        index[cell] = i
    hop = np.zeros((len(cells), len(layout), len(layout[0]), 2), np.int64)
    for g, goal in enumerate(cells):
        dist = bfs_distances(layout, goal)
        for cell, d in dist.items():
            hop[g, cell[0], cell[1]] = cell if d == 0 else min(_neighbours(layout, cell), key=lambda n: dist[n])
    return index, hop


def start_choices(layout: list[str], mode: str, scale: float = 1.0) -> np.ndarray | None:
    """World (x, y) of the cells episodes may begin in under `MazeConfig.start` (None for "fixed")."""
    if mode == "fixed":
        return None
    cells = open_cells(layout) if mode == "random" else play_cells(layout)
    return scale * np.array([cell_center(*cell, layout) for cell in cells], np.float32)


def draw_start(fixed: np.ndarray, choices: np.ndarray | None, key: jax.Array) -> jax.Array:
    """The start cell's centre: `fixed`, or one of `choices` drawn with `key` (folded, so the fixed start
    keeps its original random stream)."""
    if choices is None:
        return jnp.asarray(fixed)
    i = jax.random.randint(jax.random.fold_in(key, 1), (), 0, choices.shape[0])
    return jnp.asarray(choices)[i]


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
    #: Where episodes begin: "fixed" (the start cell), "random" (any open cell) or "play" (`play_cells`).
    start: str = "fixed"

    def validate(self) -> None:
        super().validate()
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {sorted(LAYOUTS)}, got {self.layout!r}")
        if self.start not in START_MODES:
            raise ConfigError(f"start must be one of {START_MODES}, got {self.start!r}")


class PointMaze(Task):
    __doc__ = __doc__
    config_class = MazeConfig
    #: Where the goal sits in the "policy" observation and the cell size (m): what a goal-commanding
    #: data collector needs to give the reference controller a goal of its own.
    goal_obs = slice(4, 6)
    cell_size = 1.0

    def __init__(self, config: MazeConfig | None = None, name: str | None = None):
        super().__init__(config, name)
        self.layout = LAYOUTS[self.cfg.layout]
        start, goal = start_and_goal(self.layout)
        self.start_xy = np.array(cell_center(*start, self.layout), np.float32)
        self.goal_xy = np.array(cell_center(*goal, self.layout), np.float32)
        self.start_choices = start_choices(self.layout, self.cfg.start)

    def xml(self) -> str:
        return maze_xml(self.layout)

    def init(self, key):
        k1, k2 = jax.random.split(key)
        pos = draw_start(self.start_xy, self.start_choices, k1)
        pos = pos + jax.random.uniform(k1, (2,), minval=-0.25, maxval=0.25)
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

