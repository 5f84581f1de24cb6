"""Quadruped joystick: a Go1-like robot dog follows planar velocity and yaw-rate commands (after MuJoCo
Playground's Go1JoystickFlatTerrain, written from primitives).

Model: a 12.7 kg quadruped: trunk box 0.38 x 0.19 x 0.11 m (5.2 kg) and four legs (FR, FL, RR, RL),
each with hip abduction (x axis, +-0.86 rad), thigh (y axis, -0.69..4.5 rad) and calf (y axis,
-2.82..-0.89 rad) hinges, 0.213 m thigh and calf, 0.023 m sphere feet. Position actuators with
kp 40 N m/rad and kd 1 N m s/rad, torque limits 23.7 N m (hip, thigh) and 35.55 N m (calf), joint
damping 0.1 and armature 0.01. (Playground's Go1 uses kp 35 and kd 0.5; with those the default pose
tips over under zero actions when the randomized parameters are at their worst.) Only the feet and
two spheres inside the trunk collide, with the floor (friction 0.8). Physics step 0.004 s, control
at 50 Hz (5 sub-steps), 1000-step episodes (20 s).

Commands: (vx, vy, yaw rate) in the trunk frame, vx in [-1, 1] m/s, vy in [-0.6, 0.6] m/s, yaw rate
in [-1, 1] rad/s, uniform; 10% of them are exactly zero (stand still). A new command is drawn every
5 s (`command_period`), so an episode holds four.
Gait clock: phase = phase0 + 2 pi * `gait_frequency` (2 Hz) * t, with phase0 uniform per episode.
Nothing in the reward enforces it: it is there so that a policy (or the scripted trot) can time its
steps from the observation alone.

Observation `"policy"` (47): body angular velocity from the gyro (3), gravity direction in the
trunk frame (3), command (3), joint positions minus the default pose (12), joint velocities (12),
previous action (12), gait clock cos/sin (2). Legs in the order FR, FL, RR, RL; per leg hip, thigh, calf.
`"critic"` (61, privileged): the policy group plus the trunk-frame linear velocity (3), the four foot
contact states (4, 1 in contact), the trunk height (1) and the episode's physics parameters (6):
floor friction, payload mass (kg), leg mass scale, joint damping scale, armature scale, kp scale
(nominal values 0.8, 0, 1, 1, 1, 1 when domain randomization is off).
Action (12): joint position targets = default pose (hip 0, thigh 0.9, calf -1.8 rad) + `action_scale`
(0.5 rad) * action, action clipped to [-1, 1]; targets are clamped to the joint ranges.

Reward terms (default scales in brackets), Playground-style: the scaled sum times the control period
(0.02 s), clipped at 0 from below (a step's reward is never negative; at most 0.03 from tracking plus
the air-time bonus). `tracking_lin_vel` exp(-|v_xy - cmd_xy|^2 / 0.25), trunk-frame velocity [1.0];
`tracking_ang_vel` exp(-(w_z - cmd_yaw)^2 / 0.25) [0.5]; `lin_vel_z` squared vertical velocity
[-0.5]; `ang_vel_xy` squared roll and pitch rates [-0.05]; `orientation` squared horizontal part of
the gravity direction in the trunk frame [-5.0]; `torques` sum of squared actuator torques [-1e-4];
`energy` sum |joint velocity * torque| [-1e-3]; `action_rate` squared change of the action [-0.01];
`feet_air_time` (air time - 0.1 s) summed at each touchdown, only under a non-zero command [0.1];
`stand_still` sum |joint offsets from the default pose| under a zero command [-1.0];
`termination` 1 on the terminal step [-1.0].
Termination: the trunk flipped (its z axis points down) or its centre lower than 0.15 m (about 0.25
m at rest under zero actions: the servos sag under the weight).
Metrics: `lin_vel_error` (m/s) and `yaw_rate_error` (rad/s), absolute tracking errors.
Initial state: the default standing pose 0.29 m up with a uniform yaw, joint angles within +-0.05
rad of the default, trunk linear and angular velocities uniform in +-0.3 (m/s, rad/s).
Domain randomization (on by default, re-sampled each reset, the values in the critic group): floor
and foot friction U(0.4, 1.0); trunk payload U(-1, 1) kg; leg masses and inertias x U(0.9, 1.1);
joint damping x U(0.8, 1.2); armature x U(0.9, 1.1); kp x U(0.9, 1.1) (all actuators). The contact
and limit softness MuJoCo derives from the masses follows them (`sim.randomization`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig
from sim.tasks._scene import scene_assets
from sim.tasks.quadrotor import quat_to_mat

# --- geometry (metres) and actuation, shared with the scripted controller ---------------------------
LEGS = ("FR", "FL", "RR", "RL")
#: (front +1 / rear -1, left +1 / right -1) of each leg.
LEG_SIGNS = ((1, -1), (1, 1), (-1, -1), (-1, 1))
HIP_X = 0.1881          # abduction joints, from the trunk centre
HIP_Y = 0.04675
THIGH_OFFSET = 0.08     # lateral offset of the thigh joint from the abduction joint
THIGH_LENGTH = 0.213
CALF_LENGTH = 0.213
FOOT_RADIUS = 0.023
TRUNK_MASS, HIP_MASS, THIGH_MASS, CALF_MASS, FOOT_MASS = 5.204, 0.68, 1.009, 0.15, 0.046   # kg
TOTAL_MASS = TRUNK_MASS + 4 * (HIP_MASS + THIGH_MASS + CALF_MASS + FOOT_MASS)
DEFAULT_POSE = (0.0, 0.9, -1.8) * 4
KP = 40.0
KD = 1.0
INIT_HEIGHT = 0.29
NOMINAL_FRICTION = 0.8
OBS_SIZE = 47
CRITIC_EXTRA = 14


def _leg(name: str, front: int, left: int) -> str:
    return f"""
      <body name="{name}_hip" pos="{front * HIP_X} {left * HIP_Y} 0">
        <joint name="{name}_hip" class="abduction"/>
        <geom type="cylinder" size="0.046 0.02" quat="1 1 0 0" mass="{HIP_MASS}" material="self"/>
        <body name="{name}_thigh" pos="0 {left * THIGH_OFFSET} 0">
          <joint name="{name}_thigh" class="thigh"/>
          <geom type="capsule" fromto="0 0 0 0 0 {-THIGH_LENGTH}" size="0.02" mass="{THIGH_MASS}" material="self"/>
          <body name="{name}_calf" pos="0 0 {-THIGH_LENGTH}">
            <joint name="{name}_calf" class="calf"/>
            <geom type="capsule" fromto="0 0 0 0 0 {-CALF_LENGTH}" size="0.012" mass="{CALF_MASS}" material="self"/>
            <geom name="{name}_foot" class="foot" pos="0 0 {-CALF_LENGTH}"/>
          </body>
        </body>
      </body>"""


XML = f"""
<mujoco model="quadruped">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.004"/>
  {scene_assets("8 8")}
    <material name="self" rgba=".75 .6 .4 1"/>
    <material name="dark" rgba=".15 .15 .15 1"/>
  </asset>
  <default>
    <geom contype="0" conaffinity="0"/>
    <joint damping="0.1" armature="0.01"/>
    <position kp="{KP}" kv="{KD}" inheritrange="1" forcerange="-23.7 23.7"/>
    <default class="abduction"><joint axis="1 0 0" range="-0.863 0.863"/></default>
    <default class="thigh"><joint axis="0 1 0" range="-0.686 4.501"/></default>
    <default class="calf">
      <joint axis="0 1 0" range="-2.818 -0.888"/>
      <position forcerange="-35.55 35.55"/>
    </default>
    <default class="trunk_collision">
      <geom type="sphere" size="0.055" mass="0" conaffinity="1" condim="3" friction="{NOMINAL_FRICTION} 0.02 0.01"
            group="3"/>
    </default>
    <default class="foot">
      <geom type="sphere" size="{FOOT_RADIUS}" mass="{FOOT_MASS}" conaffinity="1" condim="3"
            friction="{NOMINAL_FRICTION} 0.02 0.01" material="dark"/>
    </default>
  </default>
  <worldbody>
    <light name="light" pos="0 0 4" dir="0 0 -1" directional="true"/>
    <geom name="floor" type="plane" size="20 20 .1" material="grid" contype="1" condim="3"
          friction="{NOMINAL_FRICTION} 0.02 0.01"/>
    <body name="trunk" pos="0 0 {INIT_HEIGHT}">
      <camera name="track" pos="0.9 -1.4 0.5" xyaxes="0.84 0.54 0 -0.2 0.3 0.93" mode="trackcom"/>
      <freejoint name="root"/>
      <geom name="trunk" type="box" size="0.19 0.095 0.055" mass="{TRUNK_MASS}" material="self"/>
      <site name="imu"/>
      <!-- Two spheres in the trunk box: a fallen robot lies on the floor instead of sinking through it. -->
      <geom name="trunk_front" class="trunk_collision" pos="0.135 0 0"/>
      <geom name="trunk_rear" class="trunk_collision" pos="-0.135 0 0"/>
      {"".join(_leg(n, f, s) for n, (f, s) in zip(LEGS, LEG_SIGNS, strict=True))}
    </body>
  </worldbody>
  <actuator>
    {"".join(f'''
    <position name="{n}_hip" joint="{n}_hip" class="abduction"/>
    <position name="{n}_thigh" joint="{n}_thigh" class="thigh"/>
    <position name="{n}_calf" joint="{n}_calf" class="calf"/>''' for n in LEGS)}
  </actuator>
  <sensor>
    <gyro name="gyro" site="imu"/>
    {"".join(f'''
    <actuatorfrc name="{n}_{j}_torque" actuator="{n}_{j}"/>''' for n in LEGS for j in ("hip", "thigh", "calf"))}
    {"".join(f'''
    <contact name="{n}_contact" geom1="{n}_foot" geom2="floor" num="1" data="found"/>''' for n in LEGS)}
  </sensor>
</mujoco>
"""


@dataclasses.dataclass(frozen=True)
class QuadrupedConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.02
    sim_dt: float = 0.004
    domain_randomization: bool = True
    #: Joint target offset (rad) of a full action.
    action_scale: float = 0.5
    #: Largest |command| per component: vx (m/s), vy (m/s), yaw rate (rad/s).
    command_range: tuple[float, float, float] = (1.0, 0.6, 1.0)
    #: Probability that a drawn command is zero (stand still).
    zero_command_prob: float = 0.1
    #: Seconds between command draws.
    command_period: float = 5.0
    gait_frequency: float = 2.0
    tracking_sigma: float = 0.25
    min_height: float = 0.15
    reward_scales: dict[str, float] = dataclasses.field(default_factory=lambda: {
        "tracking_lin_vel": 1.0, "tracking_ang_vel": 0.5, "lin_vel_z": -0.5, "ang_vel_xy": -0.05,
        "orientation": -5.0, "torques": -1e-4, "energy": -1e-3, "action_rate": -0.01, "feet_air_time": 0.1,
        "stand_still": -1.0, "termination": -1.0})


class QuadrupedJoystick(Task):
    __doc__ = __doc__
    config_class = QuadrupedConfig

    # Model indices and episode constants, derived on first use.
    _default = np.asarray(DEFAULT_POSE, np.float32)

    @functools.cached_property
    def _command_steps(self) -> int:
        """Control steps between command draws."""
        return max(1, int(round(self.cfg.command_period / self.cfg.policy_dt)))

    @functools.cached_property
    def _num_commands(self) -> int:
        return -(-self.cfg.episode_length // self._command_steps)

    @functools.cached_property
    def _torque(self) -> int:
        return self.index.sensor_slice(f"{LEGS[0]}_hip_torque").start

    @functools.cached_property
    def _contact(self) -> np.ndarray:
        return np.array([self.index.sensor_slice(f"{n}_contact").start for n in LEGS])

    @functools.cached_property
    def _trunk(self) -> int:
        return int(self.mj_model.body("trunk").id)

    @functools.cached_property
    def _legs(self) -> np.ndarray:
        return np.arange(self._trunk + 1, self.mj_model.nbody)

    @functools.cached_property
    def _friction_geoms(self) -> np.ndarray:
        """The floor, then the four feet."""
        m = self.mj_model
        return np.array([m.geom("floor").id] + [m.geom(f"{n}_foot").id for n in LEGS])

    def xml(self) -> str:
        return XML

    def action_to_ctrl(self, action: jax.Array) -> jax.Array:
        """Joint targets: the default pose plus `action_scale` times the clipped action."""
        return self._default + self.cfg.action_scale * jnp.clip(action, -1.0, 1.0)

    # --- commands and clock ------------------------------------------------------------------------
    def _sample_command(self, key: jax.Array) -> jax.Array:
        k1, k2 = jax.random.split(key)
        high = jnp.asarray(self.cfg.command_range, jnp.float32)
        cmd = jax.random.uniform(k1, (3,), minval=-high, maxval=high)
        return jnp.where(jax.random.uniform(k2) < self.cfg.zero_command_prob, 0.0, cmd)

    def command(self, info, steps) -> jax.Array:
        """The command in force at control step `steps`."""
        return info["commands"][jnp.minimum(steps // self._command_steps, self._num_commands - 1)]

    def clock(self, info, steps) -> jax.Array:
        """Gait clock (cos, sin) at control step `steps`."""
        t = steps * self.cfg.policy_dt
        phase = info["phase"] + 2.0 * jnp.pi * self.cfg.gait_frequency * t
        return jnp.stack([jnp.cos(phase), jnp.sin(phase)])

    # --- the task ------------------------------------------------------------------------------------
    def init(self, key):
        k = jax.random.split(key, 6)
        yaw = jax.random.uniform(k[0], (), minval=-jnp.pi, maxval=jnp.pi)
        quat = jnp.array([jnp.cos(yaw / 2), 0.0, 0.0, jnp.sin(yaw / 2)])
        joints = self._default + jax.random.uniform(k[1], (12,), minval=-0.05, maxval=0.05)
        qpos = jnp.concatenate([jnp.array([0.0, 0.0, INIT_HEIGHT]), quat, joints])
        qvel = jnp.concatenate([jax.random.uniform(k[2], (6,), minval=-0.3, maxval=0.3), jnp.zeros(12)])
        info = {
            "commands": jax.vmap(self._sample_command)(jax.random.split(k[3], self._num_commands)),
            "phase": jax.random.uniform(k[4], (), minval=0.0, maxval=2 * jnp.pi),
            "prev_action": jnp.zeros(12, jnp.float32),
            "air_time": jnp.zeros(4, jnp.float32),
            "last_contact": jnp.zeros(4, jnp.float32),
        }
        return qpos, qvel, info

    def randomize(self, key):
        k = jax.random.split(key, 6)
        m = self.mj_model
        friction = jnp.asarray(m.geom_friction).at[self._friction_geoms, 0].set(
            jax.random.uniform(k[0], (), minval=0.4, maxval=1.0))
        leg_scale = jax.random.uniform(k[2], (), minval=0.9, maxval=1.1)
        mass = jnp.asarray(m.body_mass).at[self._trunk].add(jax.random.uniform(k[1], (), minval=-1.0, maxval=1.0))
        mass = mass.at[self._legs].multiply(leg_scale)
        inertia = jnp.asarray(m.body_inertia).at[self._legs].multiply(leg_scale)
        joint_dofs = jnp.arange(m.nv) >= 6
        damping = jnp.asarray(m.dof_damping) * jnp.where(joint_dofs, jax.random.uniform(k[3], (), minval=0.8,
                                                                                         maxval=1.2), 1.0)
        armature = jnp.asarray(m.dof_armature) * jnp.where(joint_dofs, jax.random.uniform(k[4], (), minval=0.9,
                                                                                           maxval=1.1), 1.0)
        kp = jax.random.uniform(k[5], (), minval=0.9, maxval=1.1)
        gain = jnp.asarray(m.actuator_gainprm).at[:, 0].multiply(kp)
        bias = jnp.asarray(m.actuator_biasprm).at[:, 1].multiply(kp)
        return {"geom_friction": friction, "body_mass": mass, "body_inertia": inertia, "dof_damping": damping,
                "dof_armature": armature, "actuator_gainprm": gain, "actuator_biasprm": bias}

    def _physics_params(self, info) -> jax.Array:
        """The episode's (friction, payload, leg mass scale, damping scale, armature scale, kp scale)."""
        dr = info["dr"]
        if not dr:
            return jnp.array([NOMINAL_FRICTION, 0.0, 1.0, 1.0, 1.0, 1.0])
        m = self.mj_model
        leg = int(self._legs[0])
        return jnp.stack([
            dr["geom_friction"][self._friction_geoms[0], 0],
            dr["body_mass"][self._trunk] - m.body_mass[self._trunk],
            dr["body_mass"][leg] / m.body_mass[leg],
            dr["dof_damping"][6] / m.dof_damping[6],
            dr["dof_armature"][6] / m.dof_armature[6],
            dr["actuator_gainprm"][0, 0] / m.actuator_gainprm[0, 0],
        ])

    def _body(self, phys: Physics):
        """Trunk rotation, trunk-frame linear velocity, body angular velocity, gravity in the trunk frame."""
        rot = quat_to_mat(phys.qpos[3:7])
        return rot, rot.T @ phys.qvel[:3], phys.qvel[3:6], -rot[2]

    def contacts(self, phys: Physics) -> jax.Array:
        """1.0 for each foot (FR, FL, RR, RL) touching the floor."""
        return (phys.sensordata[self._contact] > 0).astype(jnp.float32)

    def torques(self, phys: Physics) -> jax.Array:
        return phys.sensordata[self._torque:self._torque + 12]

    def observe(self, phys: Physics, info):
        _, linvel, _, gravity = self._body(phys)
        steps = info["steps"]
        policy = jnp.concatenate([
            self.index.sensor(phys, "gyro"), gravity, self.command(info, steps), phys.qpos[7:] - self._default,
            phys.qvel[6:], info["prev_action"], self.clock(info, steps)]).astype(jnp.float32)
        critic = jnp.concatenate([policy, linvel, self.contacts(phys), phys.qpos[2:3],
                                  self._physics_params(info)]).astype(jnp.float32)
        return {"policy": policy, "critic": critic}

    def _fallen(self, phys: Physics) -> jax.Array:
        _, _, _, gravity = self._body(phys)
        return (gravity[2] > 0.0) | (phys.qpos[2] < self.cfg.min_height)

    def reward_terms(self, phys: Physics, action, info):
        _, linvel, angvel, gravity = self._body(phys)
        cmd = self.command(info, info["steps"])
        sigma = self.cfg.tracking_sigma
        torque = self.torques(phys)
        contact = self.contacts(phys)
        air_time = info["air_time"] + self.cfg.policy_dt
        # A touchdown: the foot was in the air and now touches (or touched at the last step, which
        # debounces a foot that bounces once on landing).
        touchdown = (info["air_time"] > 0) * jnp.maximum(contact, info["last_contact"])
        moving = jnp.linalg.norm(cmd) > 0.01
        return {
            "tracking_lin_vel": jnp.exp(-jnp.sum((linvel[:2] - cmd[:2]) ** 2) / sigma),
            "tracking_ang_vel": jnp.exp(-((angvel[2] - cmd[2]) ** 2) / sigma),
            "lin_vel_z": phys.qvel[2] ** 2,
            "ang_vel_xy": jnp.sum(angvel[:2] ** 2),
            "orientation": jnp.sum(gravity[:2] ** 2),
            "torques": jnp.sum(torque**2),
            "energy": jnp.sum(jnp.abs(phys.qvel[6:] * torque)),
            "action_rate": jnp.sum((jnp.clip(action, -1, 1) - info["prev_action"]) ** 2),
            "feet_air_time": jnp.sum((air_time - 0.1) * touchdown) * moving,
            "stand_still": jnp.sum(jnp.abs(phys.qpos[7:] - self._default)) * ~moving,
            "termination": self._fallen(phys).astype(jnp.float32),
        }

    def reward(self, terms):
        """Playground's combination: the scaled sum per second, times the control period, clipped at 0."""
        total = super().reward(terms) * self.cfg.ctrl_dt
        return jnp.maximum(total, 0.0)

    def terminated(self, phys: Physics, info):
        return self._fallen(phys)

    def update_info(self, phys: Physics, action, info):
        contact = self.contacts(phys)
        air_time = (info["air_time"] + self.cfg.policy_dt) * (1.0 - contact)
        return {**info, "prev_action": jnp.clip(action, -1.0, 1.0).astype(jnp.float32),
                "air_time": air_time.astype(jnp.float32), "last_contact": contact}

    def metrics(self, phys: Physics, info):
        _, linvel, angvel, _ = self._body(phys)
        # After a step info["steps"] is already the next step: the command just tracked is one step back.
        cmd = self.command(info, jnp.maximum(info["steps"] - 1, 0))
        return {"lin_vel_error": jnp.linalg.norm(linvel[:2] - cmd[:2]), "yaw_rate_error": jnp.abs(angvel[2] - cmd[2])}

