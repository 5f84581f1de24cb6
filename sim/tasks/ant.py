"""The four-legged ant: velocity tracking (`ant-velocity`) and D4RL-style mazes (`ant-maze-*`).

Each task's documentation is its class docstring: the shared model description (`MODEL_DOC`)
followed by the task's own (`VELOCITY_DOC`, `MAZE_DOC`).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig
from sim.errors import ConfigError
from sim.tasks._scene import scene_assets
from sim.tasks.maze import LAYOUTS, START_MODES, cell_center, draw_start, start_and_goal, start_choices

# --- the model --------------------------------------------------------------------------------------
TORSO_RADIUS = 0.25
LEG_RADIUS = 0.08
STUB = 0.2 * math.sqrt(2.0)     # fixed segment from the torso centre to the hip
THIGH = 0.2 * math.sqrt(2.0)    # hip to ankle
SHIN = 0.4 * math.sqrt(2.0)     # ankle to foot tip
#: Position servos: stiffness (N m/rad) and damping (N m s/rad) of every joint's actuator.
SERVO_KP = 100.0
SERVO_KV = 10.0
TORQUE_UNIT = 100.0
#: Leg directions (rad): front-left, back-left, back-right, front-right.
LEG_YAWS = (math.pi / 4, 3 * math.pi / 4, 5 * math.pi / 4, 7 * math.pi / 4)
HIP_RANGE = (-math.radians(30), math.radians(30))
ANKLE_RANGE = (math.radians(30), math.radians(70))
STAND_ANKLE = 1.0
INIT_HEIGHT = 0.6
MIN_HEIGHT = 0.28  # the torso sphere (radius 0.25) resting on the floor
GAIT_HZ = 1.5
COMMAND_SIGMA = 0.25
MAZE_CELL = 2.5
WALL_HEIGHT = 1.0
GOAL_RADIUS = 0.5

# Collision bits: the floor and the walls (contype 1) touch the ant's colliding geoms (conaffinity 1);
# the ant never collides with itself and the walls never with the floor.
_ANT_COLLIDES = 'contype="0" conaffinity="1"'
_WORLD_COLLIDES = 'contype="1" conaffinity="0"'


def _leg_xml(i: int, yaw: float) -> str:
    c, s = math.cos(yaw), math.sin(yaw)
    return f"""
      <geom name="stub_{i}" type="capsule" fromto="0 0 0 {STUB * c:.6f} {STUB * s:.6f} 0"/>
      <body name="thigh_{i}" pos="{STUB * c:.6f} {STUB * s:.6f} 0" euler="0 0 {yaw:.6f}">
        <joint name="hip_{i}" axis="0 0 1" range="{HIP_RANGE[0]:.6f} {HIP_RANGE[1]:.6f}"/>
        <geom name="thigh_{i}" type="capsule" fromto="0 0 0 {THIGH:.6f} 0 0"/>
        <body name="shin_{i}" pos="{THIGH:.6f} 0 0">
          <joint name="ankle_{i}" axis="0 1 0" range="{ANKLE_RANGE[0]:.6f} {ANKLE_RANGE[1]:.6f}"/>
          <geom name="shin_{i}" type="capsule" fromto="0 0 0 {SHIN:.6f} 0 0"/>
          <geom name="foot_{i}" type="sphere" pos="{SHIN:.6f} 0 0" mass="0" {_ANT_COLLIDES}/>
        </body>
      </body>"""


def ant_xml(walls: str = "", floor_size: float = 20.0) -> str:
    """The ant MJCF, with optional wall geoms (world-body boxes, then a top-down camera) and the floor's
    half-size."""
    legs = "".join(_leg_xml(i + 1, yaw) for i, yaw in enumerate(LEG_YAWS))
    ranges = {"hip": HIP_RANGE, "ankle": ANKLE_RANGE}
    servos = "".join(f'<position name="{j}_{i}" joint="{j}_{i}" ctrlrange="{ranges[j][0]:.6f} {ranges[j][1]:.6f}"/>'
                     for i in range(1, 5) for j in ("hip", "ankle"))
    return f"""
<mujoco model="ant">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.01"/>
  {scene_assets(f"{floor_size / 2:g} {floor_size / 2:g}")}
    <material name="self" rgba=".8 .6 .4 1"/>
    <material name="wall" rgba=".7 .5 .3 1"/>
  </asset>
  <default>
    <joint damping="1" armature="1" solreflimit="0.04 1"/>
    <geom type="capsule" size="{LEG_RADIUS}" density="5" friction="1 0.5 0.5" solref="0.04 1" contype="0"
          conaffinity="0" material="self"/>
    <position kp="{SERVO_KP:g}" kv="{SERVO_KV:g}"/>
  </default>
  <worldbody>
    <light name="light" pos="0 0 {floor_size}" dir="0 0 -1" directional="true"/>
    <geom name="floor" type="plane" size="{floor_size} {floor_size} .1" material="grid" {_WORLD_COLLIDES}/>
    {walls}
    <body name="torso" pos="0 0 {INIT_HEIGHT}">
      <camera name="track" pos="0 -3 2" xyaxes="1 0 0 0 0.55 0.83" mode="trackcom"/>
      <freejoint name="root"/>
      <geom name="torso" type="sphere" size="{TORSO_RADIUS}" {_ANT_COLLIDES}/>{legs}
    </body>
  </worldbody>
  <actuator>{servos}</actuator>
</mujoco>
"""

MODEL_DOC = """Model (own MJCF, Gymnasium/D4RL Ant dimensions): a 0.25 m torso sphere with four legs on the
diagonals (front-left, back-left, back-right, front-right), each a fixed 0.28 m stub, a hip hinge
about the vertical (+-30 deg), a 0.28 m thigh, an ankle hinge (30..70 deg, positive bends the shin
down) and a 0.57 m shin; capsules of radius 0.08, density 5 (0.9 kg in all); joint damping 1,
armature 1. Unlike Gymnasium's torque motors, the 8 actuators are position servos (kp 100 N m/rad,
kv 10 N m s/rad, as MuJoCo Playground's quadrupeds): under random torques the light ant hops, and
its landings amplify the float32 (MJX) / float64 (C engine) differences beyond any tolerance. Only the
torso and four foot spheres (at the shin tips) collide, with the floor (friction 1, soft contacts
of time constant 0.04 s) and in the mazes with the walls. Physics step 0.01 s (Euler), control at
20 Hz (5 sub-steps), as Gymnasium's Ant.
Gait clock: the observation carries (cos, sin) of 2 pi 1.5 Hz t, t the episode time, for policies
(and the scripted reference) that want a gait rhythm.
Action (8): joint angle targets in [-1, 1], mapped to each joint's range, ordered hip_1, ankle_1,
..., hip_4, ankle_4 (legs front-left, back-left, back-right, front-right).
Initial state: torso at rest 0.6 m up with a uniformly random heading, hips 0 and ankles 1 rad
(standing), plus U(-0.1, 0.1) on every joint and N(0, 0.1) joint velocities.
"""

VELOCITY_DOC = """
`ant-velocity`: track a commanded velocity: vx, vy (m/s, heading frame) and yaw rate (rad/s), each
uniform in +-(0.6, 0.6, 0.5), drawn at reset and re-drawn every 250 steps (`resample_steps`, 0:
once per episode); 1000-step episodes (50 s).
Observation `"policy"` (31): hip and ankle angles (8, in action order), their velocities (8),
gravity in the torso frame (3), torso linear velocity in the torso frame (3), torso angular
velocity (3, torso frame), torso height (1), the command (3), the gait clock (2). `"critic"` (42,
privileged): the same plus the episode's friction scale, total mass scale, mean joint damping
scale (3) and the 8 servo stiffness scales (from domain randomization; ones without).
Reward terms (scaled sum, default scales in brackets), MuJoCo-Playground style: `tracking_lin_vel`
exp(-|v_xy - cmd_xy|^2 / 0.25), v in the heading frame [1]; `tracking_ang_vel` exp(-(w_z -
cmd_wz)^2 / 0.25) [0.5]; `lin_vel_z` v_z^2 [-0.2]; `ang_vel_xy` |w_xy|^2 [-0.02]; `orientation`
|gravity_xy|^2 in the torso frame (tilt) [-1]; `torque` mean squared servo torque in units of
100 N m [-0.1]. A step's reward is at most 1.5.
Termination: the torso lying on the floor (its centre below 0.28 m) or upside down (its z axis
pointing below the horizon).
Domain randomization (off by default, re-sampled each reset): friction x U(0.6, 1.2) (one scale
for every geom), each body's mass and inertia x U(0.8, 1.2), joint damping x U(0.8, 1.2) per
joint, servo stiffness kp x U(0.85, 1.15) per servo.
Success metric: none (the tracking terms say how well it tracks).
"""

MAZE_DOC = """
`ant-maze-{umaze,medium,large}`: the ant in the point-maze layouts (sim/tasks/maze.py, D4RL's maps)
with 2.5 m cells (D4RL: 4 m; ours keep the farthest-goal paths walkable in an episode) and 1 m
high walls (each maximal rectangle of wall cells one box geom: 5, 12 and 15 boxes). Only the
torso and the feet touch the walls. Episodes of 700 (umaze) or 1000 (medium, large) steps, as
D4RL's antmaze.
Observation `"policy"` (33), D4RL's order: torso position (x, y, z), orientation quaternion (w, x,
y, z), hip and ankle angles (8, in action order), torso linear velocity (3, world frame), angular
velocity (3, torso frame), joint velocities (8), then the goal position (x, y) and the gait
clock (2).
Reward term `goal`: 1 while the torso is within 0.5 m (in x, y) of the goal, else 0 (sparse, as
D4RL antmaze). No termination (as D4RL; `terminate_at_goal=True` ends the episode on arrival,
`terminate_unhealthy=True` when low or flipped).
Initial state: as above, at the start cell (the top-left open cell; `start="random"`: any open
cell, `start="play"`: one of the decision points, as sim/tasks/maze.py) plus U(-0.25, 0.25) m in x and
y; the goal is the centre of the open cell farthest from the start (by path length) plus U(-0.25,
0.25) m in x and y, per episode.
Domain randomization (off by default): as ant-velocity.
Success metric: `episode/success`, 1 if the torso came within 0.5 m of the goal at any point of
the episode (logged over finished episodes, a success rate).
"""


# --- shared kinematics --------------------------------------------------------------------------------
def quat_rotate_inverse(q: jax.Array, v: jax.Array) -> jax.Array:
    """Rotate world vector `v` into the frame of unit quaternion `q` (w, x, y, z): R(q)^T v."""
    w, xyz = q[0], q[1:]
    t = 2.0 * jnp.cross(xyz, v)
    return v - w * t + jnp.cross(xyz, t)


def yaw_of(q: jax.Array) -> jax.Array:
    """Heading angle of the torso (rotation about the world z axis)."""
    w, x, y, z = q
    return jnp.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


# --- the tasks -------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AntConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.05
    sim_dt: float = 0.01
    #: End the episode when the torso is below `MIN_HEIGHT` or upside down.
    terminate_unhealthy: bool = True


class Ant(Task):
    """The ant's model, initial state, proprioception and health check (shared by the ant tasks)."""

    config_class = AntConfig

    def xml(self) -> str:
        return ant_xml()

    def _init_ant(self, key: jax.Array, xy: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Standing pose at `xy` with a random heading and small joint noise."""
        k_yaw, k_q, k_v = jax.random.split(key, 3)
        yaw = jax.random.uniform(k_yaw, (), minval=-jnp.pi, maxval=jnp.pi)
        quat = jnp.array([jnp.cos(yaw / 2), 0.0, 0.0, jnp.sin(yaw / 2)])
        joints = jnp.tile(jnp.array([0.0, STAND_ANKLE]), 4) + jax.random.uniform(k_q, (8,), minval=-0.1, maxval=0.1)
        qpos = jnp.concatenate([xy, jnp.array([INIT_HEIGHT]), quat, joints])
        qvel = jnp.concatenate([jnp.zeros(6), 0.1 * jax.random.normal(k_v, (8,))])
        return qpos, qvel

    def clock(self, info) -> jax.Array:
        """The gait clock (cos, sin of 2 pi GAIT_HZ t) at the episode time of `info["steps"]`."""
        t = info["steps"] * self.cfg.policy_dt
        phase = 2.0 * jnp.pi * GAIT_HZ * t
        return jnp.stack([jnp.cos(phase), jnp.sin(phase)])

    def unhealthy(self, phys: Physics) -> jax.Array:
        up_z = quat_rotate_inverse(phys.qpos[3:7], jnp.array([0.0, 0.0, 1.0]))[2]  # = world z of the torso z
        return (phys.qpos[2] < MIN_HEIGHT) | (up_z < 0.0)

    def terminated(self, phys: Physics, info):
        if not self.cfg.terminate_unhealthy:
            return jnp.zeros((), bool)
        return self.unhealthy(phys)

    def randomize(self, key):
        m = self.mj_model
        k_f, k_m, k_d, k_g = jax.random.split(key, 4)
        friction = jnp.asarray(m.geom_friction).at[:, 0].multiply(jax.random.uniform(k_f, (), minval=0.6, maxval=1.2))
        mass_scale = jax.random.uniform(k_m, (m.nbody,), minval=0.8, maxval=1.2).at[0].set(1.0)
        damping = jnp.asarray(m.dof_damping).at[6:].multiply(jax.random.uniform(k_d, (8,), minval=0.8, maxval=1.2))
        kp_scale = jax.random.uniform(k_g, (8,), minval=0.85, maxval=1.15)
        gain = jnp.asarray(m.actuator_gainprm).at[:, 0].multiply(kp_scale)
        bias = jnp.asarray(m.actuator_biasprm).at[:, 1].multiply(kp_scale)  # the servo's -kp q term
        return {"geom_friction": friction, "body_mass": jnp.asarray(m.body_mass) * mass_scale,
                "body_inertia": jnp.asarray(m.body_inertia) * mass_scale[:, None],
                "dof_damping": damping, "actuator_gainprm": gain, "actuator_biasprm": bias}

    def servo_torque(self, phys: Physics) -> jax.Array:
        """The nominal servos' joint torques kp (target - q) - kv qdot (N m, 8)."""
        return SERVO_KP * (phys.ctrl - phys.qpos[7:]) - SERVO_KV * phys.qvel[6:]

    def dr_scales(self, info) -> jax.Array:
        """Friction, total mass and mean damping scales and the 8 gain scales of this episode (11)."""
        if not info["dr"]:
            return jnp.ones(11)
        m, dr = self.mj_model, info["dr"]
        return jnp.concatenate([
            dr["geom_friction"][:1, 0] / m.geom_friction[0, 0],
            (dr["body_mass"].sum() / m.body_mass.sum())[None],
            (dr["dof_damping"][6:] / m.dof_damping[6:]).mean(keepdims=True),
            dr["actuator_gainprm"][:, 0] / m.actuator_gainprm[:, 0]])


@dataclasses.dataclass(frozen=True)
class AntVelocityConfig(AntConfig):
    #: Half-widths of the uniform command ranges: vx, vy (m/s, heading frame), yaw rate (rad/s).
    command_range: tuple[float, float, float] = (0.6, 0.6, 0.5)
    #: Re-sample the command every this many control steps (0: once per episode).
    resample_steps: int = 250
    reward_scales: dict[str, float] = dataclasses.field(default_factory=lambda: {
        "tracking_lin_vel": 1.0, "tracking_ang_vel": 0.5, "lin_vel_z": -0.2, "ang_vel_xy": -0.02,
        "orientation": -1.0, "torque": -0.1})


class AntVelocity(Ant):
    __doc__ = MODEL_DOC + VELOCITY_DOC
    config_class = AntVelocityConfig

    def _num_commands(self) -> int:
        r = self.cfg.resample_steps
        return 1 if r <= 0 else -(-self.cfg.episode_length // r)

    def init(self, key):
        k_ant, k_cmd = jax.random.split(key)
        qpos, qvel = self._init_ant(k_ant, jnp.zeros(2))
        high = jnp.asarray(self.cfg.command_range, jnp.float32)
        commands = jax.random.uniform(k_cmd, (self._num_commands(), 3), minval=-high, maxval=high)
        return qpos, qvel, {"commands": commands}

    def command(self, info) -> jax.Array:
        """The command in force at control step `info["steps"]`."""
        r = self.cfg.resample_steps
        if r <= 0:
            return info["commands"][0]
        k = jnp.minimum(info["steps"] // r, info["commands"].shape[0] - 1)
        return info["commands"][k]

    def _body_state(self, phys: Physics):
        q = phys.qpos[3:7]
        gravity = quat_rotate_inverse(q, jnp.array([0.0, 0.0, -1.0]))
        lin_vel = quat_rotate_inverse(q, phys.qvel[:3])
        return gravity, lin_vel, phys.qvel[3:6]

    def observe(self, phys: Physics, info):
        gravity, lin_vel, ang_vel = self._body_state(phys)
        policy = jnp.concatenate([phys.qpos[7:], phys.qvel[6:], gravity, lin_vel, ang_vel, phys.qpos[2:3],
                                  self.command(info), self.clock(info)]).astype(jnp.float32)
        critic = jnp.concatenate([policy, self.dr_scales(info)]).astype(jnp.float32)
        return {"policy": policy, "critic": critic}

    def reward_terms(self, phys: Physics, action, info):
        cmd = self.command(info)
        gravity, _, ang_vel = self._body_state(phys)
        yaw = yaw_of(phys.qpos[3:7])
        c, s = jnp.cos(yaw), jnp.sin(yaw)
        vx, vy = phys.qvel[0], phys.qvel[1]
        heading_vel = jnp.stack([c * vx + s * vy, -s * vx + c * vy])
        return {
            "tracking_lin_vel": jnp.exp(-jnp.sum((heading_vel - cmd[:2]) ** 2) / COMMAND_SIGMA),
            "tracking_ang_vel": jnp.exp(-((phys.qvel[5] - cmd[2]) ** 2) / COMMAND_SIGMA),
            "lin_vel_z": phys.qvel[2] ** 2,
            "ang_vel_xy": jnp.sum(ang_vel[:2] ** 2),
            "orientation": jnp.sum(gravity[:2] ** 2),
            "torque": jnp.mean((self.servo_torque(phys) / TORQUE_UNIT) ** 2),
        }


# --- the mazes --------------------------------------------------------------------------------------------
def wall_boxes(layout: list[str]) -> list[tuple[int, int, int, int]]:
    """Cover the wall cells with few rectangles (row0, col0, row1, col1, inclusive): from each uncovered
    wall cell (row-major), the longest run of walls to the right, extended down while whole rows are walls."""
    rows, cols = len(layout), len(layout[0])
    covered: set[tuple[int, int]] = set()
    boxes = []
    for r in range(rows):
        for c in range(cols):
            if layout[r][c] != "#" or (r, c) in covered:
                continue
            c1 = c
            while c1 + 1 < cols and layout[r][c1 + 1] == "#":
                c1 += 1
            r1 = r
            while r1 + 1 < rows and all(layout[r1 + 1][k] == "#" for k in range(c, c1 + 1)):
                r1 += 1
            covered.update((i, j) for i in range(r, r1 + 1) for j in range(c, c1 + 1))
            boxes.append((r, c, r1, c1))
    return boxes


def maze_walls_xml(layout: list[str]) -> str:
    """One box geom per rectangle of `wall_boxes`, in world coordinates (`MAZE_CELL` m cells)."""
    geoms = []
    for k, (r0, c0, r1, c1) in enumerate(wall_boxes(layout)):
        (x0, y0), (x1, y1) = cell_center(r0, c0, layout), cell_center(r1, c1, layout)
        x, y = MAZE_CELL * (x0 + x1) / 2, MAZE_CELL * (y0 + y1) / 2
        hx, hy = MAZE_CELL * (c1 - c0 + 1) / 2, MAZE_CELL * (r1 - r0 + 1) / 2
        geoms.append(f'<geom name="wall_{k}" type="box" pos="{x:g} {y:g} {WALL_HEIGHT / 2:g}" '
                     f'size="{hx:g} {hy:g} {WALL_HEIGHT / 2:g}" material="wall" {_WORLD_COLLIDES}/>')
    return "\n    ".join(geoms)


@dataclasses.dataclass(frozen=True)
class AntMazeConfig(AntConfig):
    #: One of the point-maze `LAYOUTS`.
    layout: str = "umaze"
    episode_length: int = 700
    terminate_unhealthy: bool = False
    terminate_at_goal: bool = False
    #: Where episodes begin: "fixed" (the start cell), "random" (any open cell) or "play" (decision points).
    start: str = "fixed"

    def validate(self) -> None:
        super().validate()
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {sorted(LAYOUTS)}, got {self.layout!r}")
        if self.start not in START_MODES:
            raise ConfigError(f"start must be one of {START_MODES}, got {self.start!r}")


class AntMaze(Ant):
    __doc__ = MODEL_DOC + MAZE_DOC
    config_class = AntMazeConfig
    goal_obs = slice(29, 31)  # as PointMaze's: the goal's place in the "policy" observation, the cell size
    cell_size = MAZE_CELL

    def __init__(self, config: AntMazeConfig | None = None, name: str | None = None):
        super().__init__(config, name)
        self.layout = LAYOUTS[self.cfg.layout]
        start, goal = start_and_goal(self.layout)
        self.start_xy = MAZE_CELL * np.array(cell_center(*start, self.layout), np.float32)
        self.goal_xy = MAZE_CELL * np.array(cell_center(*goal, self.layout), np.float32)
        self.start_choices = start_choices(self.layout, self.cfg.start, MAZE_CELL)

    def xml(self) -> str:
        size = MAZE_CELL * max(len(self.layout), len(self.layout[0])) / 2 + 2.0
        top = f'<camera name="top" pos="0 0 {2.2 * size:g}" xyaxes="1 0 0 0 1 0"/>'
        return ant_xml(walls=maze_walls_xml(self.layout) + "\n    " + top, floor_size=size)

    def init(self, key):
        k_start, k_ant, k_goal = jax.random.split(key, 3)
        xy = draw_start(self.start_xy, self.start_choices, k_start)
        xy = xy + jax.random.uniform(k_start, (2,), minval=-0.25, maxval=0.25)
        qpos, qvel = self._init_ant(k_ant, xy)
        goal = jnp.asarray(self.goal_xy) + jax.random.uniform(k_goal, (2,), minval=-0.25, maxval=0.25)
        return qpos, qvel, {"goal": goal, "reached": jnp.zeros((), bool)}

    def at_goal(self, phys: Physics, info) -> jax.Array:
        return jnp.linalg.norm(phys.qpos[:2] - info["goal"]) <= GOAL_RADIUS

    def observe(self, phys: Physics, info):
        return {"policy": jnp.concatenate([phys.qpos, phys.qvel, info["goal"], self.clock(info)]).astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        return {"goal": self.at_goal(phys, info).astype(jnp.float32)}

    def update_info(self, phys: Physics, action, info):
        return {**info, "reached": info["reached"] | self.at_goal(phys, info)}

    def metrics(self, phys: Physics, info):
        return {"episode/success": info["reached"].astype(jnp.float32)}

    def terminated(self, phys: Physics, info):
        done = super().terminated(phys, info)
        if self.cfg.terminate_at_goal:
            done = done | self.at_goal(phys, info)
        return done

