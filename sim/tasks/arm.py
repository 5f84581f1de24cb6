"""Table-top manipulation with a 5-joint arm and a parallel gripper: `arm-reach`, `arm-push`, `arm-pick-place`.

Model: an arm on a table (the floor plane, z = 0) built from primitives: base yaw, shoulder, elbow
and wrist pitch, wrist roll (a vertical 2-link planar arm of 0.28 m and 0.26 m links, shoulder
0.12 m above the table; the geometry makes inverse kinematics analytic, see `planar_ik`), and two finger
slide joints (0-4 cm each, 8 cm maximum opening) kept equal by an equality constraint and driven by
one position actuator on their mean (a fixed tendon; kp 500 N/m, 30 N). Each arm joint has a
position servo (kp 300/300/200/60/20 N m/rad, torque limits 40/60/40/15/5 N m, joint damping
30/30/15/3/1 N m s/rad) whose target is integrated from the action (MuJoCo's integrated-velocity
actuator: the target moves at the commanded rate and stays in the joint range). A 4 cm, 0.1 kg
cube (free joint; friction 0.8, table 0.5, finger pads 0.7; elliptic friction cones) and a green
goal marker (a non-colliding sphere on three slide joints, so renders show it). Only the contacts
that matter: finger pads with the cube and the table, cube with the table; the arm links pass
through the table. `arm-reach` has no cube. Physics step 0.005 s, control at 25 Hz (8 sub-steps);
episodes of 100 (reach), 150 (push) or 200 (pick-place) control steps.

Observation `"policy"`: arm joint angles (5: yaw, shoulder, elbow, wrist, roll), gripper opening
(1, m, 0-0.08), arm joint velocities (5), opening velocity (1), gripper position (3, the grasp
point between the fingertips, world frame), goal position (3), goal minus gripper (3): 21 for
`arm-reach`. Push and pick-place add the cube position (3), the cube's x and y axes in the world
(6, its orientation), cube minus gripper (3) and goal minus cube (3): 36.
`"critic"` (privileged; 25, 46, 46): the policy group, plus the cube's linear and angular velocity
(6, push and pick-place) and the episode's physics (4): cube mass scale, cube friction, mean
actuator-gain scale, mean joint-damping scale (1, 0.8, 1, 1 without domain randomization).
Action (6), in [-1, 1]: joint-target velocities of the 5 arm joints (x 1.5, 1.5, 1.5, 2, 2 rad/s,
i.e. delta joint-position targets of up to 0.06-0.08 rad per control step; 0 holds the target),
and the gripper opening target (-1 closed, +1 fully open; absolute).
Reward terms (scaled sum, default scales in brackets): `success` 1 while the task is achieved
(sparse) [1]; shaping: `reach` 1 - tanh(5 d), d the gripper's distance to the goal (reach) [0.5] or to
the cube (push [0.1], pick-place [0.1]); `place` 1 - tanh(5 d), d the cube's distance to the goal
(push, pick-place) [0.5]; `grasp` (pick-place) 1 while the cube is held (gripper within 3 cm of its
centre, fingers closed on it) and lifted 1 cm off the table [0.25]. `shaped=False` rewards `success`
only (the shaping terms are still logged).
Success (within `success_radius` = 5 cm): reach, the gripper at the goal; push, the cube at a goal on
the table; pick-place, the cube at a goal up to 20 cm above the table. The episode does not end on
success (the policy should hold it); `terminate_on_success=True` ends it, robomimic / SERL style (use
it with `shaped=False`: ending early forfeits the shaping rewards still to come).
Success metric: `episode/success`, 1.0 if the task was achieved at any step of the episode.
Initial state: arm joints at the home pose (gripper 20 cm above the table, 30 cm in front of the
base, open) plus U(-0.05, 0.05) rad, at rest, joint targets at home. Cube resting on the table
25-42 cm from the base within +-40 degrees of the front, yaw U(-45, 45) degrees. Goal: reach,
20-45 cm from the base within +-57 degrees, 5-30 cm above the table; push, on the table 10-25 cm
from the cube (and 22-45 cm from the base within +-52 degrees); pick-place, as push, raised
U(0, 20) cm.
Domain randomization (off by default, re-sampled each reset): cube mass x U(0.5, 2), cube friction
x U(0.7, 1.3), each actuator's gain x U(0.8, 1.2), each arm joint's damping x U(0.8, 1.2).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig
from sim.errors import ConfigError
from sim.tasks._scene import scene_assets

# --- geometry (metres); `sim.tasks.arm_control` inverts it -----------------------------------------
SHOULDER_HEIGHT = 0.12
UPPER_ARM = 0.28
FOREARM = 0.26
WRIST_TO_ROLL = 0.03   # wrist pitch axis to the roll joint
ROLL_TO_FINGER = 0.03  # roll joint to the finger slides
PAD_LENGTH = 0.05
PAD_START = 0.005      # the pads begin this far below the finger slides
GRASP_FROM_TIP = 0.02  # the grasp point sits this far above the fingertips
#: Wrist pitch axis to the grasp point (the gripper points straight down when shoulder + elbow + wrist = pi).
HAND = WRIST_TO_ROLL + ROLL_TO_FINGER + PAD_START + PAD_LENGTH - GRASP_FROM_TIP
HALF_CUBE = 0.02
#: The cube starts resting on the table: its contact already active on both backends (exactly touching, MJX
#: would see no contact in the first sub-step and the C engine one).
CUBE_REST_Z = HALF_CUBE - 1e-4
MAX_FINGER = 0.04

ARM_JOINTS = ("yaw", "shoulder", "elbow", "wrist", "roll")
JOINT_RANGES = ((-2.6, 2.6), (-1.0, 1.8), (-0.2, 2.8), (-1.0, 2.6), (-1.6, 1.6))
SERVO_KP = (300.0, 300.0, 200.0, 60.0, 20.0)
JOINT_DAMPING = (30.0, 30.0, 15.0, 3.0, 1.0)
TORQUE_LIMIT = (40.0, 60.0, 40.0, 15.0, 5.0)
#: Joint-target speed at action +-1 (rad/s).
MAX_SPEED = (1.5, 1.5, 1.5, 2.0, 2.0)
GRIPPER_KP = 500.0
GRIPPER_FORCE = 30.0
FINGER_DAMPING = 50.0
CUBE_MASS = 0.1
CUBE_FRICTION = 0.8


def planar_ik(rho: float, z: float) -> tuple[float, float, float]:
    """Shoulder, elbow, wrist angles putting the grasp point at (radius rho, height z), pointing down.

    Angles are from the vertical, positive leaning forward; elbow up.
    """
    x, y = rho, z + HAND - SHOULDER_HEIGHT
    d2 = x * x + y * y
    elbow = np.arccos(np.clip((d2 - UPPER_ARM**2 - FOREARM**2) / (2 * UPPER_ARM * FOREARM), -1, 1))
    inner = np.arccos(np.clip((UPPER_ARM**2 + d2 - FOREARM**2) / (2 * UPPER_ARM * np.sqrt(d2)), -1, 1))
    shoulder = np.arctan2(x, y) - inner
    return float(shoulder), float(elbow), float(np.pi - shoulder - elbow)


HOME_GRASP = (0.30, 0.20)  # radius and height of the grasp point at home
HOME = (0.0, *planar_ik(*HOME_GRASP), 0.0)

# Workspaces, as (radius, angle from the front) ranges about the base.
CUBE_RADIUS = (0.25, 0.42)
CUBE_ANGLE = 0.7
REACH_RADIUS = (0.20, 0.45)
REACH_ANGLE = 1.0
REACH_HEIGHT = (0.05, 0.30)
GOAL_DISTANCE = (0.10, 0.25)  # push and pick-place goals from the cube
PLACE_HEIGHT = 0.20


def arm_xml(with_cube: bool) -> str:
    """The MJCF model; the cube is left out for reaching.

    Arm servos: force = kp (home + act - q), the activation `act` integrating the control (a joint-target
    velocity) and clamped so that the target stays in the joint range. Activations start at 0 on every reset,
    so joint targets start at the home pose.
    """
    joints = {n: f'name="{n}" range="{lo} {hi}" damping="{d}"'
              for n, (lo, hi), d in zip(ARM_JOINTS, JOINT_RANGES, JOINT_DAMPING, strict=True)}
    servos = "".join(
        f'<general name="{n}" joint="{n}" dyntype="integrator" biastype="affine" gainprm="{kp}" '
        f'biasprm="{kp * h:.6f} {-kp} 0" ctrlrange="{-v} {v}" actlimited="true" '
        f'actrange="{lo - h:.6f} {hi - h:.6f}" forcerange="{-f} {f}"/>\n    '
        for n, (lo, hi), kp, f, v, h in zip(ARM_JOINTS, JOINT_RANGES, SERVO_KP, TORQUE_LIMIT, MAX_SPEED, HOME,
                                            strict=True))
    pad = (f'type="box" size="0.01 0.006 {PAD_LENGTH / 2}" mass="0.05" contype="2" conaffinity="1" '
           f'friction="0.7 0.01 0.001" material="pad"')
    pad_z = PAD_START + PAD_LENGTH / 2
    finger = f'type="slide" range="0 {MAX_FINGER}" damping="{FINGER_DAMPING}" armature="0.01"'
    cube = f"""
    <body name="cube" pos="0.35 0 {HALF_CUBE}">
      <freejoint name="cube"/>
      <geom name="cube" type="box" size="{HALF_CUBE} {HALF_CUBE} {HALF_CUBE}" mass="{CUBE_MASS}" material="cube"
            contype="0" conaffinity="3" friction="{CUBE_FRICTION} 0.01 0.001"/>
    </body>""" if with_cube else ""
    return f"""
<mujoco model="arm">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.005" cone="elliptic" impratio="10"/>
  {scene_assets("8 8")}
    <material name="self" rgba=".75 .75 .8 1"/>
    <material name="pad" rgba=".25 .25 .25 1"/>
    <material name="cube" rgba=".85 .3 .2 1"/>
    <material name="goal" rgba=".2 .9 .2 .4"/>
  </asset>
  <default>
    <geom contype="0" conaffinity="0" material="self"/>
    <joint armature="0.05"/>
  </default>
  <worldbody>
    <light name="light" pos="0 0 2"/>
    <camera name="side" pos="0.85 -0.65 0.5" xyaxes="0.763 0.646 0 -0.286 0.338 0.897"/>
    <camera name="top" pos="0.3 0 0.9" xyaxes="0 -1 0 1 0 0"/>
    <camera name="front" pos="0.8 0 0.6" xyaxes="0 1 0 -0.673 0 0.74" fovy="60"/>
    <geom name="table" type="plane" size="1 1 .05" material="grid" contype="1" friction="0.5 0.01 0.001"/>
    <body name="base">
      <joint {joints["yaw"]} axis="0 0 1"/>
      <geom type="cylinder" size="0.05 {SHOULDER_HEIGHT / 2}" pos="0 0 {SHOULDER_HEIGHT / 2}" mass="2"/>
      <body name="upper_arm" pos="0 0 {SHOULDER_HEIGHT}">
        <joint {joints["shoulder"]} axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 {UPPER_ARM}" size="0.035" mass="1.0"/>
        <body name="forearm" pos="0 0 {UPPER_ARM}">
          <joint {joints["elbow"]} axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0 0 {FOREARM}" size="0.03" mass="0.6"/>
          <body name="wrist" pos="0 0 {FOREARM}">
            <joint {joints["wrist"]} axis="0 1 0"/>
            <geom type="cylinder" fromto="0 0 0 0 0 {WRIST_TO_ROLL}" size="0.025" mass="0.2"/>
            <body name="hand" pos="0 0 {WRIST_TO_ROLL}">
              <joint {joints["roll"]} axis="0 0 1"/>
              <geom type="box" size="0.02 0.055 0.01" pos="0 0 {ROLL_TO_FINGER - 0.01}" mass="0.3"/>
              <site name="grasp" pos="0 0 {HAND - WRIST_TO_ROLL}" size="0.006" rgba="1 1 0 .6"/>
              <body name="finger_l" pos="0 0 {ROLL_TO_FINGER}">
                <joint name="finger_l" axis="0 1 0" {finger}/>
                <geom name="pad_l" pos="0 0.006 {pad_z}" {pad}/>
              </body>
              <body name="finger_r" pos="0 0 {ROLL_TO_FINGER}">
                <joint name="finger_r" axis="0 -1 0" {finger}/>
                <geom name="pad_r" pos="0 -0.006 {pad_z}" {pad}/>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>{cube}
    <body name="goal" gravcomp="1">
      <joint name="goal_x" type="slide" axis="1 0 0"/>
      <joint name="goal_y" type="slide" axis="0 1 0"/>
      <joint name="goal_z" type="slide" axis="0 0 1"/>
      <geom name="goal" type="sphere" size="0.02" mass="0.001" material="goal"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="grip"><joint joint="finger_l" coef="0.5"/><joint joint="finger_r" coef="0.5"/></fixed>
  </tendon>
  <equality><joint joint1="finger_r" joint2="finger_l"/></equality>
  <actuator>
    {servos}<position name="gripper" tendon="grip" kp="{GRIPPER_KP}" ctrlrange="0 {MAX_FINGER}"
              forcerange="{-GRIPPER_FORCE} {GRIPPER_FORCE}"/>
  </actuator>
  <sensor>
    <framepos name="grasp" objtype="site" objname="grasp"/>
  </sensor>
</mujoco>
"""


#: The three tasks on this model (`ArmConfig.kind`).
KINDS = ("reach", "push", "pick-place")


@dataclasses.dataclass(frozen=True)
class ArmConfig(TaskConfig):
    #: "reach" (no cube), "push" or "pick-place"; the registered variants also set the episode length and
    #: the reward scales of the docstring.
    kind: str = "reach"
    episode_length: int = 100
    ctrl_dt: float = 0.04
    sim_dt: float = 0.005
    #: Add the dense shaping terms to the sparse `success` reward.
    shaped: bool = True
    #: End the episode (terminated) as soon as the task is achieved.
    terminate_on_success: bool = False
    success_radius: float = 0.05

    def validate(self) -> None:
        super().validate()
        if self.kind not in KINDS:
            raise ConfigError(f"kind must be one of {KINDS}, got {self.kind!r}")


def _polar(key: jax.Array, radius: tuple[float, float], angle: float, shape: tuple[int, ...] = ()) -> jax.Array:
    """Points on the table, uniform in radius and in angle from the front (x axis)."""
    k1, k2 = jax.random.split(key)
    r = jax.random.uniform(k1, shape, minval=radius[0], maxval=radius[1])
    a = jax.random.uniform(k2, shape, minval=-angle, maxval=angle)
    return jnp.stack([r * jnp.cos(a), r * jnp.sin(a)], -1)


def _yaw_quat(yaw: jax.Array) -> jax.Array:
    return jnp.array([jnp.cos(yaw / 2), 0.0, 0.0, jnp.sin(yaw / 2)])


def _quat_axes(q: jax.Array) -> jax.Array:
    """The first two columns (body x and y axes in the world) of a unit quaternion's rotation matrix."""
    w, x, y, z = q
    return jnp.array([1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y),
                      2 * (x * y - w * z), 1 - 2 * (x * x + z * z), 2 * (y * z + w * x)])


class Arm(Task):
    __doc__ = __doc__
    config_class = ArmConfig

    # Model indices, cached on first use.
    @functools.cached_property
    def _arm_q(self) -> np.ndarray:
        return np.array([self.index.qpos_slice(n).start for n in ARM_JOINTS])

    @functools.cached_property
    def _arm_v(self) -> np.ndarray:
        return np.array([self.index.qvel_slice(n).start for n in ARM_JOINTS])

    @functools.cached_property
    def _fingers_q(self) -> np.ndarray:
        return np.array([self.index.qpos_slice(n).start for n in ("finger_l", "finger_r")])

    @functools.cached_property
    def _fingers_v(self) -> np.ndarray:
        return np.array([self.index.qvel_slice(n).start for n in ("finger_l", "finger_r")])

    @functools.cached_property
    def _goal_q(self) -> slice:
        start = self.index.qpos_slice("goal_x").start
        return slice(start, start + 3)

    @functools.cached_property
    def _cube_q(self) -> slice:
        return self.index.qpos_slice("cube")

    @functools.cached_property
    def _cube_v(self) -> slice:
        return self.index.qvel_slice("cube")

    @property
    def has_cube(self) -> bool:
        return self.cfg.kind != "reach"

    def xml(self) -> str:
        return arm_xml(self.has_cube)

    # --- the episode ---------------------------------------------------------------------------------
    def init(self, key):
        m = self.mj_model
        k_arm, k_cube, k_yaw, k_goal, k_height = jax.random.split(key, 5)
        qpos = jnp.zeros(m.nq)
        arm = jnp.asarray(HOME) + jax.random.uniform(k_arm, (5,), minval=-0.05, maxval=0.05)
        qpos = qpos.at[self._arm_q].set(arm).at[self._fingers_q].set(MAX_FINGER)
        if self.cfg.kind == "reach":
            xy = _polar(k_goal, REACH_RADIUS, REACH_ANGLE)
            goal = jnp.append(xy, jax.random.uniform(k_height, (), minval=REACH_HEIGHT[0], maxval=REACH_HEIGHT[1]))
        else:
            cube = _polar(k_cube, CUBE_RADIUS, CUBE_ANGLE)
            yaw = jax.random.uniform(k_yaw, (), minval=-jnp.pi / 4, maxval=jnp.pi / 4)
            qpos = qpos.at[self._cube_q].set(jnp.concatenate([cube, jnp.array([CUBE_REST_Z]), _yaw_quat(yaw)]))
            # The first of 16 candidates in the workspace at a good distance from the cube (one nearly always is).
            candidates = _polar(k_goal, (CUBE_RADIUS[0] - 0.03, CUBE_RADIUS[1] + 0.03), CUBE_ANGLE + 0.2, (16,))
            dist = jnp.linalg.norm(candidates - cube, axis=-1)
            ok = (dist >= GOAL_DISTANCE[0]) & (dist <= GOAL_DISTANCE[1])
            xy = candidates[jnp.argmax(ok)]
            height = 0.0
            if self.cfg.kind == "pick-place":
                height = jax.random.uniform(k_height, (), minval=0.0, maxval=PLACE_HEIGHT)
            goal = jnp.append(xy, HALF_CUBE + height)
        qpos = qpos.at[self._goal_q].set(goal)
        info = {"goal": goal.astype(jnp.float32), "succeeded": jnp.zeros((), bool)}
        return qpos, jnp.zeros(m.nv), info

    def randomize(self, key):
        m = self.mj_model
        k_mass, k_fric, k_gain, k_damp = jax.random.split(key, 4)
        gain = jax.random.uniform(k_gain, (m.nu,), minval=0.8, maxval=1.2)
        gainprm = jnp.asarray(m.actuator_gainprm).at[:, 0].multiply(gain)
        biasprm = jnp.asarray(m.actuator_biasprm).at[:, :2].multiply(gain[:, None])
        damping = jnp.asarray(m.dof_damping).at[self._arm_v].multiply(
            jax.random.uniform(k_damp, (5,), minval=0.8, maxval=1.2))
        params = {"actuator_gainprm": gainprm, "actuator_biasprm": biasprm, "dof_damping": damping}
        if self.has_cube:
            mass = jax.random.uniform(k_mass, (), minval=0.5, maxval=2.0)
            body = m.body("cube").id
            params["body_mass"] = jnp.asarray(m.body_mass).at[body].multiply(mass)
            params["body_inertia"] = jnp.asarray(m.body_inertia).at[body].multiply(mass)
            fric = jax.random.uniform(k_fric, (), minval=0.7, maxval=1.3)
            params["geom_friction"] = jnp.asarray(m.geom_friction).at[m.geom("cube").id, 0].multiply(fric)
        return params

    # --- what the agent sees --------------------------------------------------------------------------
    def _grasp(self, phys: Physics) -> jax.Array:
        return self.index.sensor(phys, "grasp")

    def _cube(self, phys: Physics) -> jax.Array:
        return phys.qpos[self._cube_q][:3]

    def observe(self, phys: Physics, info):
        grasp, goal = self._grasp(phys), info["goal"]
        parts = [phys.qpos[self._arm_q], phys.qpos[self._fingers_q].sum(keepdims=True),
                 phys.qvel[self._arm_v], phys.qvel[self._fingers_v].sum(keepdims=True), grasp, goal, goal - grasp]
        extra = []
        if self.has_cube:
            cube = phys.qpos[self._cube_q]
            parts += [cube[:3], _quat_axes(cube[3:]), cube[:3] - grasp, goal - cube[:3]]
            extra = [phys.qvel[self._cube_v]]
        policy = jnp.concatenate(parts).astype(jnp.float32)
        critic = jnp.concatenate([policy, *extra, self._physics_features(info)]).astype(jnp.float32)
        return {"policy": policy, "critic": critic}

    def _physics_features(self, info) -> jax.Array:
        """Cube mass scale, cube friction, mean gain scale, mean damping scale of this episode (for the critic)."""
        dr, m = info["dr"], self.mj_model
        if not dr:
            return jnp.array([1.0, CUBE_FRICTION, 1.0, 1.0])
        gain = jnp.mean(dr["actuator_gainprm"][:, 0] / m.actuator_gainprm[:, 0])
        damping = jnp.mean(dr["dof_damping"][self._arm_v] / m.dof_damping[self._arm_v])
        if not self.has_cube:
            return jnp.array([1.0, CUBE_FRICTION, gain, damping])
        body = m.body("cube").id
        mass = dr["body_mass"][body] / m.body_mass[body]
        return jnp.stack([mass, dr["geom_friction"][m.geom("cube").id, 0], gain, damping])

    # --- how it is scored -----------------------------------------------------------------------------
    def _success(self, phys: Physics, info) -> jax.Array:
        target = self._grasp(phys) if self.cfg.kind == "reach" else self._cube(phys)
        return jnp.linalg.norm(info["goal"] - target) < self.cfg.success_radius

    def reward_terms(self, phys: Physics, action, info):
        terms = {"success": self._success(phys, info).astype(jnp.float32)}
        grasp, goal = self._grasp(phys), info["goal"]
        if self.cfg.kind == "reach":
            terms["reach"] = 1.0 - jnp.tanh(5.0 * jnp.linalg.norm(goal - grasp))
            return terms
        cube = self._cube(phys)
        terms["reach"] = 1.0 - jnp.tanh(5.0 * jnp.linalg.norm(cube - grasp))
        if self.cfg.kind == "pick-place":
            opening = phys.qpos[self._fingers_q].sum()
            closed_on_cube = (opening > 2 * HALF_CUBE - 0.01) & (opening < 2 * HALF_CUBE + 0.004)
            held = (jnp.linalg.norm(cube - grasp) < 0.03) & closed_on_cube
            terms["grasp"] = (held & (cube[2] > HALF_CUBE + 0.01)).astype(jnp.float32)
        terms["place"] = 1.0 - jnp.tanh(5.0 * jnp.linalg.norm(goal - cube))
        return terms

    def reward(self, terms):
        """The scaled sum; without `shaped` only the sparse `success` term counts (the others are still logged)."""
        if self.cfg.shaped:
            return super().reward(terms)
        return self.cfg.reward_scales["success"] * terms["success"]

    def update_info(self, phys: Physics, action, info):
        return {**info, "succeeded": info["succeeded"] | self._success(phys, info)}

    def terminated(self, phys: Physics, info):
        if not self.cfg.terminate_on_success:
            return jnp.zeros((), bool)
        return self._success(phys, info)

    def metrics(self, phys: Physics, info):
        return {"episode/success": info["succeeded"].astype(jnp.float32)}

