"""Quadrotor hover and trajectory tracking with direct motor thrust commands ("Learning to Fly in Seconds").

Model: a Crazyflie-sized X-quadrotor (27 g, 28 mm arm offsets, thrust-to-weight 3.5): a free body
with four site actuators, each pushing along the body z axis and twisting about it (yaw drag
0.006 N m per N, alternating signs). Physics step 0.002 s, control at 100 Hz (5 sub-steps),
500-step episodes (5 s). No contacts: leaving the 2 m box around the target, flipping over or
touching the ground ends the episode (terminated).

Observation `"policy"` (22): target minus position (3, world), rotation matrix (9, row-major),
velocity minus target velocity (3, world), body angular velocity from the gyro (3), previous
action (4). `"critic"` (30, privileged): the same plus the episode's mass, per-axis inertia and
mean thrust scales (5, from domain randomization) and the noise-free angular velocity (3).
Action (4): motor thrusts in [-1, 1] -> [0, 0.232] N each (hover is about -0.43).
Reward terms (scaled sum, default scales in brackets): `alive` 1 per step [1], `position` distance
to the target [-1], `tilt` 1 - cos(tilt) [-0.2], `velocity` squared velocity error, capped at 25
[-0.05], `spin` squared angular velocity, capped at 100 [-0.01], `effort` squared deviation from
hover thrust [-0.02]. A step's reward is at most 1 and at least about -4.
Initial state: position within 0.5 m of the target, tilt up to 30 degrees, velocity up to 0.5 m/s,
angular velocity up to 1 rad/s.
Domain randomization (on by default, re-sampled each reset): mass x U(0.8, 1.2), inertia x
U(0.8, 1.2) per axis, each motor's thrust x U(0.85, 1.15).

`quadrotor-hover` holds position at (0, 0, 1); `quadrotor-track` follows a figure-eight through
(0, 0, 1) (1 m wide, 8 s period, random phase; its velocity feeds the velocity error).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from sim.core import Physics, Task, TaskConfig
from sim.tasks._scene import scene_assets

MASS = 0.027
ARM = 0.028
MAX_THRUST = 0.232
HOVER_ACTION = 2.0 * (MASS * 9.81 / 4) / MAX_THRUST - 1.0

XML = f"""
<mujoco model="quadrotor">
  <option timestep="0.002"/>
  <default><geom contype="0" conaffinity="0"/></default>
  {scene_assets("4 4")}
  </asset>
  <worldbody>
    <light name="light" pos="0 0 4"/>
    <camera name="track" pos="0 -1.2 1.3" xyaxes="1 0 0 0 0.6 0.8" mode="trackcom"/>
    <geom name="floor" type="plane" size="5 5 .1" material="grid"/>
    <body name="quad" pos="0 0 1">
      <freejoint name="root"/>
      <geom name="core" type="box" size="0.015 0.015 0.006" mass="{MASS}" rgba=".3 .3 .3 1"/>
      <geom name="arm1" type="capsule" fromto="0 0 0 {ARM} {-ARM} 0" size="0.003" mass="0"/>
      <geom name="arm2" type="capsule" fromto="0 0 0 {-ARM} {-ARM} 0" size="0.003" mass="0"/>
      <geom name="arm3" type="capsule" fromto="0 0 0 {-ARM} {ARM} 0" size="0.003" mass="0"/>
      <geom name="arm4" type="capsule" fromto="0 0 0 {ARM} {ARM} 0" size="0.003" mass="0"/>
      <site name="m1" pos="{ARM} {-ARM} 0.004" type="cylinder" size="0.02 0.001" rgba=".8 .2 .2 .5"/>
      <site name="m2" pos="{-ARM} {-ARM} 0.004" type="cylinder" size="0.02 0.001" rgba=".2 .2 .8 .5"/>
      <site name="m3" pos="{-ARM} {ARM} 0.004" type="cylinder" size="0.02 0.001" rgba=".2 .2 .8 .5"/>
      <site name="m4" pos="{ARM} {ARM} 0.004" type="cylinder" size="0.02 0.001" rgba=".8 .2 .2 .5"/>
      <site name="imu"/>
    </body>
  </worldbody>
  <actuator>
    <general name="m1" site="m1" gear="0 0 1 0 0 -0.006" ctrllimited="true" ctrlrange="0 {MAX_THRUST}"/>
    <general name="m2" site="m2" gear="0 0 1 0 0 0.006" ctrllimited="true" ctrlrange="0 {MAX_THRUST}"/>
    <general name="m3" site="m3" gear="0 0 1 0 0 -0.006" ctrllimited="true" ctrlrange="0 {MAX_THRUST}"/>
    <general name="m4" site="m4" gear="0 0 1 0 0 0.006" ctrllimited="true" ctrlrange="0 {MAX_THRUST}"/>
  </actuator>
  <sensor>
    <gyro name="gyro" site="imu"/>
    <accelerometer name="accelerometer" site="imu"/>
  </sensor>
</mujoco>
"""


def quat_to_mat(q: jax.Array) -> jax.Array:
    """Rotation matrix of a unit quaternion (w, x, y, z), MuJoCo's convention."""
    w, x, y, z = q
    return jnp.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


@dataclasses.dataclass(frozen=True)
class QuadrotorConfig(TaskConfig):
    episode_length: int = 500
    ctrl_dt: float = 0.01
    sim_dt: float = 0.002
    domain_randomization: bool = True
    #: Follow the figure-eight (`quadrotor-track`) instead of holding position (`quadrotor-hover`).
    track: bool = False
    reward_scales: dict[str, float] = dataclasses.field(default_factory=lambda: {
        "alive": 1.0, "position": -1.0, "tilt": -0.2, "velocity": -0.05, "spin": -0.01, "effort": -0.02})


class Quadrotor(Task):
    __doc__ = __doc__
    config_class = QuadrotorConfig
    _CENTER = (0.0, 0.0, 1.0)
    _PERIOD = 8.0
    _SIZE = 0.5

    def xml(self) -> str:
        return XML

    # --- the target -----------------------------------------------------------------------------
    def target(self, info, t) -> tuple[jax.Array, jax.Array]:
        """Target position and velocity at control step `t` (fixed for hover, a figure-eight for track)."""
        center = jnp.array(self._CENTER)
        if not self.cfg.track:
            return center, jnp.zeros(3)
        w = 2 * jnp.pi / self._PERIOD
        s = w * t * self.cfg.policy_dt + info["phase"]
        a = self._SIZE
        pos = center + jnp.array([a * jnp.sin(s), a * jnp.sin(2 * s) / 2, 0.2 * jnp.sin(s)])
        vel = w * jnp.array([a * jnp.cos(s), a * jnp.cos(2 * s), 0.2 * jnp.cos(s)])
        return pos, vel

    # --- the task -------------------------------------------------------------------------------
    def init(self, key):
        k = jax.random.split(key, 6)
        phase = jax.random.uniform(k[5], (), minval=0, maxval=2 * jnp.pi)
        info = {"phase": phase, "prev_action": jnp.full(4, HOVER_ACTION, jnp.float32)}
        target, target_vel = self.target(info, 0)
        pos = target + jax.random.uniform(k[0], (3,), minval=-0.5, maxval=0.5)
        axis = jax.random.normal(k[1], (3,))
        axis = axis / (jnp.linalg.norm(axis) + 1e-9)
        angle = jax.random.uniform(k[2], (), minval=0, maxval=jnp.deg2rad(30.0))
        quat = jnp.concatenate([jnp.cos(angle / 2)[None], jnp.sin(angle / 2) * axis])
        vel = target_vel + jax.random.uniform(k[3], (3,), minval=-0.5, maxval=0.5)
        angvel = jax.random.uniform(k[4], (3,), minval=-1.0, maxval=1.0)
        return jnp.concatenate([pos, quat]), jnp.concatenate([vel, angvel]), info

    def randomize(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        m = self.mj_model
        mass = jnp.asarray(m.body_mass).at[1].multiply(jax.random.uniform(k1, (), minval=0.8, maxval=1.2))
        inertia = jnp.asarray(m.body_inertia).at[1].multiply(jax.random.uniform(k2, (3,), minval=0.8, maxval=1.2))
        gain = jnp.asarray(m.actuator_gainprm).at[:, 0].multiply(jax.random.uniform(k3, (4,), minval=0.85, maxval=1.15))
        return {"body_mass": mass, "body_inertia": inertia, "actuator_gainprm": gain}

    def _state(self, phys: Physics, info, t):
        target, target_vel = self.target(info, t)
        rot = quat_to_mat(phys.qpos[3:7])
        err = target - phys.qpos[:3]
        vel_err = phys.qvel[:3] - target_vel
        gyro = self.index.sensor(phys, "gyro")
        return err, rot, vel_err, gyro

    def observe(self, phys: Physics, info):
        err, rot, vel_err, gyro = self._state(phys, info, info["steps"])
        policy = jnp.concatenate([err, rot.reshape(-1), vel_err, gyro, info["prev_action"]]).astype(jnp.float32)
        m = self.mj_model
        if info["dr"]:
            dr = info["dr"]
            scales = jnp.concatenate([dr["body_mass"][1:2] / m.body_mass[1], dr["body_inertia"][1] / m.body_inertia[1],
                                      dr["actuator_gainprm"][:, 0].mean(keepdims=True)])
        else:
            scales = jnp.ones(5)
        critic = jnp.concatenate([policy, scales, phys.qvel[3:]]).astype(jnp.float32)
        return {"policy": policy, "critic": critic}

    def reward_terms(self, phys: Physics, action, info):
        err, rot, vel_err, gyro = self._state(phys, info, info["steps"] + 1)
        return {
            "alive": jnp.ones(()),
            "position": jnp.linalg.norm(err),
            "tilt": 1.0 - rot[2, 2],
            "velocity": jnp.minimum(jnp.sum(vel_err**2), 25.0),
            "spin": jnp.minimum(jnp.sum(gyro**2), 100.0),
            "effort": jnp.sum((jnp.clip(action, -1, 1) - HOVER_ACTION) ** 2),
        }

    def terminated(self, phys: Physics, info):
        err, rot, _, _ = self._state(phys, info, info["steps"] + 1)
        return (jnp.linalg.norm(err) > 2.0) | (rot[2, 2] < 0.0) | (phys.qpos[2] < 0.05)

    def update_info(self, phys: Physics, action, info):
        return {**info, "prev_action": jnp.clip(action, -1.0, 1.0).astype(jnp.float32)}

