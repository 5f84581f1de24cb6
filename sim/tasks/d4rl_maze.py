"""gymnasium-robotics' D4RL mazes, as Minari's D4RL datasets record them: `pointmaze-*` and `antmaze-*`.

These are the environments of the standard maze datasets (`D4RL/pointmaze/{umaze,medium,large}[-dense]-v2`,
`D4RL/antmaze/{umaze,umaze-diverse,medium-play,medium-diverse,large-play,large-diverse}-v1`), ported so that the
datasets score in our batched sim with D4RL's reference returns, and checked step by step against the originals
(tests/sim/test_d4rl_maze.py). Each task equals one gymnasium-robotics environment (1.4.x, gymnasium 1.x):

| task                     | env id                     | kwargs (and TimeLimit)                                   |
| ------------------------ | -------------------------- | -------------------------------------------------------- |
| pointmaze-umaze[-dense]  | PointMaze_UMaze[Dense]-v3  | maze_map=POINTMAZE_MAPS["umaze"], continuing_task=True,  |
|                          |                            | reset_target=False (300 steps)                           |
| pointmaze-medium[-dense] | PointMaze_Medium[Dense]-v3 | maze_map=POINTMAZE_MAPS["medium"], same (600 steps)      |
| pointmaze-large[-dense]  | PointMaze_Large[Dense]-v3  | maze_map=POINTMAZE_MAPS["large"], same (800 steps)       |
| antmaze-umaze            | AntMaze_UMaze-v4           | maze_map=ANTMAZE_MAPS["umaze"], continuing_task=True,    |
|                          |                            | reset_target=False (700 steps)                           |
| antmaze-medium           | AntMaze_Medium-v4          | maze_map=ANTMAZE_MAPS["medium"], same (1000 steps)       |
| antmaze-large            | AntMaze_Large-v4           | maze_map=ANTMAZE_MAPS["large"], same (1000 steps)        |

Where the maps come from (Farama's minari-dataset-generation-scripts): the pointmaze datasets' evaluation
environments (`eval_env_spec`) have one goal cell ('g': umaze top-left, medium and large bottom-right) and start
in any other open cell. The antmaze datasets were collected in `AntMaze_*-v4` (`AntMaze_Medium_Diverse_GR-v4` /
`AntMaze_Large_Diverse_GR-v4` for the diverse ones; 27-number observation, no contact forces) and evaluate from
D4RL's fixed start ('r') to its fixed goal ('g'): umaze and umaze-diverse share `antmaze-umaze`, medium-play and
medium-diverse `antmaze-medium`, large-play and large-diverse `antmaze-large`. One exception: Minari's recorded
umaze `eval_env_spec` is the umaze rotated by 180 degrees (`ANTMAZE_MAPS["umaze-rotated"]`, Minari issue #304),
a maze its data never visited; `antmaze-umaze` is instead the map umaze-v1 was collected in, which is D4RL's umaze
(start bottom-left, goal top-left behind the wall). `layout="umaze-rotated"` gives Minari's eval env.

Maps are rows of cells, as gymnasium-robotics' `maze_map` (row 0 at the top): '#' wall (1), '.' open (0), 'g' goal,
'r' reset, 'c' both. A cell (i, j) is centred at x = (j + 0.5) s - W s / 2, y = H s / 2 - (i + 0.5) s for a map of
H rows and W columns, cells of s m (`maze_size_scaling`: 1 point, 4 ant); a wall is a box of the cell's footprint,
`maze_height * s` m high (0.4 m point, 2 m ant). Goal and start follow `MazeEnv.reset`: the goal is a uniform goal
cell plus U(-0.25, 0.25) s in x and y; the start a uniform reset cell more than 0.5 s from that goal, plus the
same noise. Without 'g'/'r'/'c' cells every open cell is both; with only 'g' cells the open cells are the starts.

Scores: the registry anchors pointmaze-* at D4RL's maze2d-*-v1 (and -dense-v1) REF_MIN / REF_MAX returns, which
count steps at the goal as these continuing tasks do, and antmaze-* at D4RL's 0 / 1, a success rate: D4RL's
antmaze evaluation stops at the goal, so normalise `episode/success` (or run `continuing_task=False`, whose
return is then 1 on success), not the continuing return, which counts every step spent at the goal.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig
from sim.errors import ConfigError

Array = jax.Array

#: Within this distance (m) of the goal the sparse reward is 1 and the episode counts as a success.
GOAL_RADIUS = 0.45
REWARD_TYPES = ("sparse", "dense")

#: The pointmaze datasets' evaluation maps: one goal cell, every other open cell a start.
POINTMAZE_MAPS: dict[str, tuple[str, ...]] = {
    "umaze": ("#####",
              "#g..#",
              "###.#",
              "#...#",
              "#####"),
    "medium": ("########",
               "#..##..#",
               "#..#...#",
               "##...###",
               "#..#...#",
               "#.#..#.#",
               "#...#.g#",
               "########"),
    "large": ("############",
              "#....#.....#",
              "#.##.#.#.#.#",
              "#......#...#",
              "#.####.###.#",
              "#..#.#.....#",
              "##.#.#.#.###",
              "#..#...#.g.#",
              "############"),
}

#: The antmaze datasets' fixed start ('r') and goal ('g'): D4RL's antmaze evaluation.
ANTMAZE_MAPS: dict[str, tuple[str, ...]] = {
    "umaze": ("#####",
              "#g..#",
              "###.#",
              "#r..#",
              "#####"),
    "umaze-rotated": ("#####",  # Minari's recorded umaze eval_env_spec (see the module docstring)
                      "#..r#",
                      "#.###",
                      "#..g#",
                      "#####"),
    "medium": ("########",
               "#r.##..#",
               "#..#...#",
               "##...###",
               "#..#...#",
               "#.#..#.#",
               "#...#.g#",
               "########"),
    "large": ("############",
              "#r...#.....#",
              "#.##.#.#.#.#",
              "#......#...#",
              "#.####.###.#",
              "#..#.#.....#",
              "##.#.#.#.###",
              "#..#...#.g.#",
              "############"),
}

#: gymnasium-robotics' point.xml (its envs/assets/point/point.xml): a 0.1 m ball of density 1000 (4.19 kg) on two
#: damped slide joints, pushed by motors of gear 100, no gravity; Euler steps of 0.01 s, 20 Newton iterations.
POINT_XML = """<mujoco>
  <compiler inertiafromgeom="true" angle="radian" coordinate="local"/>
  <option timestep="0.01" gravity="0 0 0" iterations="20" integrator="Euler"/>
  <default>
    <joint damping="1" limited="false"/>
    <geom friction=".5 .1 .1" density="1000" margin="0.002" condim="1" contype="2" conaffinity="1"/>
  </default>
  <asset>
    <texture type="2d" name="groundplane" builtin="checker" rgb1="0.2 0.3 0.4" rgb2="0.1 0.2 0.3" width="100"
             height="100"/>
    <material name="groundplane" texture="groundplane" texrepeat="20 20"/>
  </asset>
  <visual>
    <global offwidth="640" offheight="480"/>
    <headlight ambient=".4 .4 .4" diffuse=".8 .8 .8" specular="0.1 0.1 0.1"/>
    <map znear=".01"/>
  </visual>
  <worldbody>
    <geom name="ground" size="40 40 0.25" pos="0 0 -0.1" type="plane" contype="1" conaffinity="0"
          material="groundplane"/>
    <body name="particle" pos="0 0 0">
      <geom name="particle_geom" type="sphere" size="0.1" rgba="0.2 0.6 0.3 1" contype="1"/>
      <joint name="ball_x" type="slide" pos="0 0 0" axis="1 0 0"/>
      <joint name="ball_y" type="slide" pos="0 0 0" axis="0 1 0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="motor_x" joint="ball_x" ctrlrange="-1.0 1.0" ctrllimited="true" gear="100"/>
    <motor name="motor_y" joint="ball_y" ctrlrange="-1.0 1.0" ctrllimited="true" gear="100"/>
  </actuator>
</mujoco>"""


def gymnasium_ant_xml() -> str:
    """Gymnasium's ant.xml, the model AntMaze builds on (gymnasium is a core dependency)."""
    import gymnasium

    return (Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / "ant.xml").read_text()


@dataclasses.dataclass(frozen=True)
class Maze:
    """A parsed maze map: the world (x, y) of its walls, goal cells and reset cells, in cells of `scaling` m."""

    rows: tuple[str, ...]
    scaling: float
    walls: list[tuple[int, int, float, float]]  # (i, j, x, y), row-major
    goals: np.ndarray  # [G, 2]
    resets: np.ndarray  # [R, 2]

    @classmethod
    def parse(cls, rows: tuple[str, ...], scaling: float, any_goal: bool = False) -> Maze:
        """`any_goal`: ignore the map's markers, so that every open cell is a goal and a start."""
        if any_goal:
            rows = tuple("".join("." if ch in "grc" else ch for ch in row) for row in rows)
        height, width = len(rows), len(rows[0])
        cells: dict[str, list[tuple[float, float]]] = {k: [] for k in ".grc"}
        walls = []
        for i, row in enumerate(rows):
            for j, ch in enumerate(row):
                x, y = (j + 0.5) * scaling - width * scaling / 2, height * scaling / 2 - (i + 0.5) * scaling
                if ch == "#":
                    walls.append((i, j, x, y))
                elif ch in cells:
                    cells[ch].append((x, y))
                else:
                    raise ConfigError(f"maze cell {ch!r} at row {i}, column {j}: use '#', '.', 'g', 'r' or 'c'")
        goals, resets, both = cells["g"], cells["r"], cells["c"]
        if not goals and not resets and not both:  # no markers: every open cell is a goal and a start
            both = cells["."]
        elif not resets and not both:
            resets = cells["."]
        elif not goals and not both:
            goals = cells["."]
        return cls(rows, scaling, walls, np.array(goals + both, np.float32), np.array(resets + both, np.float32))


def maze_xml(agent_xml: str, maze: Maze, height: float) -> str:
    """The agent's MJCF plus the maze, as gymnasium-robotics' `Maze.make_maze` builds it: after the agent, one box per
    wall cell (row-major), then the visual goal marker; then a top-down camera for videos (no physics)."""
    root = ET.fromstring(agent_xml)
    world = root.find("worldbody")
    s, half = maze.scaling, height / 2 * maze.scaling
    for i, j, x, y in maze.walls:
        ET.SubElement(world, "geom", name=f"block_{i}_{j}", pos=f"{x} {y} {half}", size=f"{s / 2} {s / 2} {half}",
                      type="box", contype="1", conaffinity="1", rgba="0.7 0.5 0.3 1.0")
    ET.SubElement(world, "site", name="target", pos=f"0 0 {half}", size=f"{0.2 * s}", rgba="1 0 0 0.7",
                  type="sphere")
    span = max(len(maze.rows), len(maze.rows[0])) * s
    ET.SubElement(world, "camera", name="top", pos=f"0 0 {1.2 * span}", xyaxes="1 0 0 0 1 0")
    return ET.tostring(root, encoding="unicode")


@dataclasses.dataclass(frozen=True)
class D4RLMazeConfig(TaskConfig):
    #: A key of the task's maps (`POINTMAZE_MAPS` or `ANTMAZE_MAPS`).
    layout: str = "umaze"
    #: "sparse": 1 within `GOAL_RADIUS` of the goal, else 0; "dense": exp(-distance to the goal).
    reward_type: str = "sparse"
    #: True (Minari's datasets): reaching the goal ends nothing and the goal stays (reset_target=False) until the
    #: time limit. False: the episode terminates on reaching it.
    continuing_task: bool = True
    #: gymnasium-robotics' reset_target (continuing tasks): on reaching the goal a new one is drawn (a uniform goal
    #: cell plus the position noise, drawn again while within `GOAL_RADIUS` of the agent), unless the map has one
    #: goal cell. The arriving step is observed and rewarded with the old goal, the next one with the new goal.
    #: Minari collected its pointmaze datasets so (with `any_goal`); they evaluate without.
    reset_target: bool = False
    #: Every open cell a goal and a start, whatever the layout marks: gymnasium-robotics' default maps, in which
    #: Minari collected the pointmaze datasets. False: the layout's goal ('g') and reset ('r') cells.
    any_goal: bool = False
    #: Every open cell a start, the goals those the layout marks: D4RL's antmaze "play" collection (multi_start
    #: without multigoal). Not a gymnasium-robotics option (a map whose open cells are all 'r' but the 'g' one).
    any_start: bool = False
    layouts: ClassVar[dict[str, tuple[str, ...]]] = {}

    def validate(self) -> None:
        super().validate()
        if self.layout not in self.layouts:
            raise ConfigError(f"layout must be one of {sorted(self.layouts)}, got {self.layout!r}")
        if self.reward_type not in REWARD_TYPES:
            raise ConfigError(f"reward_type must be one of {REWARD_TYPES}, got {self.reward_type!r}")
        if self.reset_target and not self.continuing_task:
            raise ConfigError("reset_target=True draws a new goal on arrival, in a continuing task only: it needs "
                              "continuing_task=True (an episodic task ends on arrival)")


class D4RLMaze(Task):
    """What both mazes share: the goal and start distribution, goal observation, reward and success."""

    config_class = D4RLMazeConfig
    #: Cell size (m) and wall height (in cells) of gymnasium-robotics' maze for this agent.
    scaling: ClassVar[float]
    wall_height: ClassVar[float]
    #: Where the goal sits in the "policy" observation (after the achieved goal), for goal-commanding collectors.
    goal_obs = slice(2, 4)

    def __init__(self, config: D4RLMazeConfig | None = None, name: str | None = None):
        super().__init__(config, name)
        rows = self.cfg.layouts[self.cfg.layout]
        self.maze = Maze.parse(rows, self.scaling, self.cfg.any_goal)
        if self.cfg.any_start:
            self.maze = dataclasses.replace(self.maze, resets=Maze.parse(rows, self.scaling, any_goal=True).resets)
        self.cell_size = self.scaling

    def agent_xml(self) -> str:
        raise NotImplementedError

    def xml(self) -> str:
        return maze_xml(self.agent_xml(), self.maze, self.wall_height)

    def _noise(self, key: Array) -> Array:
        return jax.random.uniform(key, (2,), minval=-0.25, maxval=0.25) * self.scaling

    def init(self, key: Array) -> tuple[Array, Array, dict[str, Array]]:
        k_goal, k_goal_noise, k_reset, k_reset_noise, k_next = jax.random.split(key, 5)
        goals, resets = jnp.asarray(self.maze.goals), jnp.asarray(self.maze.resets)
        goal = goals[jax.random.randint(k_goal, (), 0, goals.shape[0])] + self._noise(k_goal_noise)
        # MazeEnv re-draws the start cell while it is within half a cell of the goal: uniform over the others.
        far = jnp.linalg.norm(resets - goal, axis=-1) > 0.5 * self.scaling
        start = resets[jax.random.categorical(k_reset, jnp.where(far, 0.0, -jnp.inf))] + self._noise(k_reset_noise)
        qpos = jnp.asarray(self.mj_model.qpos0, jnp.float32).at[:2].set(start)
        # "goal": the one observed (this step's); "target": the one the next step is rewarded against. They differ
        # only after an arrival under reset_target; "key" draws the new goals.
        info = {"goal": goal, "target": goal, "reached": jnp.zeros((), bool), "key": k_next}
        return qpos, jnp.zeros(self.mj_model.nv, jnp.float32), info

    def _next_goal(self, key: Array, xy: Array) -> Array:
        """gymnasium-robotics' `update_goal` draw: a goal cell plus noise, again while within `GOAL_RADIUS` of `xy`
        (the first of 16 draws that is not; all 16 near has a probability below 1e-12 on these maps)."""
        goals = jnp.asarray(self.maze.goals)
        k_cell, k_noise = jax.random.split(key)
        noise = jax.random.uniform(k_noise, (16, 2), minval=-0.25, maxval=0.25) * self.scaling
        draws = goals[jax.random.randint(k_cell, (16,), 0, goals.shape[0])] + noise
        return draws[jnp.argmax(jnp.linalg.norm(draws - xy, axis=-1) > GOAL_RADIUS)]

    def agent_obs(self, phys: Physics) -> Array:
        """The "observation" entry of the dict observation."""
        raise NotImplementedError

    def distance(self, phys: Physics, goal: Array) -> Array:
        return jnp.linalg.norm(phys.qpos[:2] - goal)

    def observe(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        # gymnasium.spaces.flatten order of the Dict space: its keys sorted.
        policy = jnp.concatenate([phys.qpos[:2], info["goal"], self.agent_obs(phys)])
        return {"policy": policy.astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        d = self.distance(phys, info["target"])  # this step's goal
        goal = jnp.exp(-d) if self.cfg.reward_type == "dense" else (d <= GOAL_RADIUS).astype(jnp.float32)
        return {"goal": goal}

    def update_info(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        arrived = self.distance(phys, info["target"]) <= GOAL_RADIUS
        info = {**info, "goal": info["target"], "reached": info["reached"] | arrived}
        if self.cfg.reset_target and len(self.maze.goals) > 1:
            key, draw = jax.random.split(info["key"])
            target = jnp.where(arrived, self._next_goal(draw, phys.qpos[:2]), info["target"])
            info = {**info, "target": target, "key": key}
        return info

    def metrics(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        return {"episode/success": info["reached"].astype(jnp.float32)}

    def terminated(self, phys: Physics, info: dict[str, Array]) -> Array:
        if self.cfg.continuing_task:
            return jnp.zeros((), bool)
        return self.distance(phys, info["goal"]) <= GOAL_RADIUS


#: The part of both tasks' documentation that is the same.
_REWARD_DOC = """
Reward term `goal`: `reward_type="sparse"` 1 while within 0.45 m of the goal, else 0; `"dense"` exp(-distance).
No termination: `continuing_task=True`, and the goal stays where it is when reached (reset_target=False), so the
return counts the steps spent at the goal; `continuing_task=False` terminates on arrival. `reset_target=True`
draws a new goal on each arrival, and `any_goal=True` makes every open cell a goal and a start (how Minari collected
the pointmaze datasets: `robolearn collect kind=waypoint`).
Success metric: `episode/success`, 1 if the agent came within 0.45 m of the goal at any point of the episode.
"""


@dataclasses.dataclass(frozen=True)
class D4RLPointMazeConfig(D4RLMazeConfig):
    episode_length: int = 300
    ctrl_dt: float = 0.01
    sim_dt: float = 0.01
    layouts: ClassVar[dict[str, tuple[str, ...]]] = POINTMAZE_MAPS


class D4RLPointMaze(D4RLMaze):
    __doc__ = """gymnasium-robotics' PointMaze (v3) as Minari's D4RL/pointmaze datasets evaluate it: `pointmaze-*`.

Model: gymnasium-robotics' point.xml: a 0.1 m ball (4.19 kg) on two slide joints (damping 1) driven by force
motors of gear 100, no gravity, no friction (condim 1), among 1 m wall cells 0.4 m high. One physics step of
0.01 s per control step (frame_skip 1); every joint velocity is clipped to +-5 m/s before each step, as
PointEnv does. Episodes of 300 (umaze), 600 (medium) or 800 (large) steps.
Action (2): x and y forces in [-1, 1] (clipped).
Observation `"policy"` (8): gymnasium's flattened dict observation (`gymnasium.spaces.flatten`, keys sorted),
float32: achieved goal (ball x, y), desired goal (x, y), then the "observation" entry (x, y, vx, vy).
Initial state: the goal is the layout's goal cell (`POINTMAZE_MAPS`: umaze top-left, medium and large
bottom-right) plus U(-0.25, 0.25) m in x and y; the ball starts at rest in any other open cell (uniform), plus
the same noise: Minari's evaluation environments.""" + _REWARD_DOC
    config_class = D4RLPointMazeConfig
    scaling = 1.0
    wall_height = 0.4
    qvel_limit = 5.0

    def agent_xml(self) -> str:
        return POINT_XML

    def agent_obs(self, phys: Physics) -> Array:
        return jnp.concatenate([phys.qpos, phys.qvel])


@dataclasses.dataclass(frozen=True)
class D4RLAntMazeConfig(D4RLMazeConfig):
    episode_length: int = 700
    ctrl_dt: float = 0.05
    sim_dt: float = 0.01
    layouts: ClassVar[dict[str, tuple[str, ...]]] = ANTMAZE_MAPS


class D4RLAntMaze(D4RLMaze):
    __doc__ = """gymnasium-robotics' AntMaze (v4) as Minari's D4RL/antmaze datasets evaluate it: `antmaze-*`.

Model: Gymnasium's ant.xml (read from the installed gymnasium): a free torso sphere with four legs of hip and
ankle hinges, torque motors of gear 150, every geom with contact margin 0.01; RK4 steps of 0.01 s, 5 per control
step (frame_skip 5, 20 Hz); among 4 m wall cells 2 m high. The inner Ant env's own reward and termination are
ignored (AntMaze's are used); its reset noise is 0. Episodes of 700 (umaze) or 1000 (medium, large) steps.
Action (8): joint torques in [-1, 1], Gymnasium's order: hip_4, ankle_4, hip_1, ankle_1, hip_2, ankle_2, hip_3,
ankle_3.
Observation `"policy"` (31): gymnasium's flattened dict observation (`gymnasium.spaces.flatten`, keys sorted),
float32: achieved goal (torso x, y), desired goal (x, y), then the "observation" entry (27, Gymnasium's v4 Ant
observation without x, y and contact forces): torso z, orientation quaternion (w, x, y, z), 8 joint angles,
torso linear velocity (world frame), angular velocity (torso frame), 8 joint velocities.
Initial state: D4RL's fixed cells (`ANTMAZE_MAPS`; umaze: start bottom-left, goal top-left behind the wall;
medium and large: start top-left, goal bottom-right), each plus U(-0.25, 0.25) x 4 m in x and y. The ant starts
at rest, 0.75 m up, level, legs straight out (hinges at 0).""" + _REWARD_DOC
    config_class = D4RLAntMazeConfig
    scaling = 4.0
    wall_height = 0.5

    def agent_xml(self) -> str:
        return gymnasium_ant_xml()

    def agent_obs(self, phys: Physics) -> Array:
        return jnp.concatenate([phys.qpos[2:], phys.qvel])
