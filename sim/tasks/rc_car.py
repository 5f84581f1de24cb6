"""A 1/10-scale RC car racing a track through checkpoints, FastRLAP-style: `rc-car-track`.

Model: a 2.6 kg car, 0.44 x 0.25 m: a 2 kg box chassis on a free joint, wheelbase 0.30 m, wheel
track 0.21 m, wheel radius 0.05 m, each wheel on a sprung, damped suspension slider (600 N/m,
about 1 cm of travel under load). The front wheels steer about z as an Ackermann pair: a position
servo (full lock 0.45 rad) drives the mean angle of the two steering hinges and a tendon equality
keeps left - right = 0.7 * mean^2 (wheel track / wheelbase), so the inner wheel turns more.
Rear-wheel drive through an open differential: one DC-motor actuator gives both rear wheels the
same torque, 0.35 N m each at full throttle from rest, falling with wheel speed (back-EMF) to zero
at 6 m/s, at most 0.5 N m (braking). Tyres are spheres with friction 0.8 on a slippery floor, so
full throttle spins the rear wheels from rest and hard steering at speed slides (the car drifts).
Only the four tyre-floor contacts exist. Physics step 0.005 s, control at 20 Hz (10 sub-steps),
1000-step episodes (50 s).

Tracks: a closed centreline through `(x, y)` control points in driving order (a closed centripetal
Catmull-Rom spline) and a width. Presets in `TRACKS`, chosen by `track`: "circuit" (the default,
48 m with 0.9 m-radius hairpins, 1.0 m wide) and "oval" (28 m, 1.2 m wide). `track_points` (with
`track_width`, default 1 m) gives a custom track; centrelines turning tighter than 0.75 m are
refused. Checkpoints lie on the centreline every `checkpoint_spacing` (1 m) of arc length, drawn
(with the track edges) as non-colliding sites; checkpoint 0 (white) is the first control point.
A checkpoint is passed when the car crosses the line through it across the track (ahead of it
along the track and within width/2 + 0.5 m of it).

Observation `"policy"` (10, named in `OBS_NAMES`; the ROS 2 bridge's RC-car adapter sends the same),
in the car's frame (x forward, y left): forward speed (velocimeter x, m/s), yaw rate (gyro z,
rad/s), acceleration x and y (m/s^2: the accelerometer low-passed to the control rate, i.e. the
mean acceleration over the last control period; gravity excluded), vector to the next checkpoint
(x, y, m), vector to the one after (x, y, m), previous action (steering, throttle).
`"critic"` (19, privileged, `CRITIC_NAMES`): the policy group plus the true planar velocity (car
frame x, y, m/s), heading relative to the track direction (cos, sin), signed lateral offset from
the centreline (m, left positive) and the randomized parameters as scales of their nominal values
(tyre friction, mass, motor strength, steering gain; 1 without randomization).
Action (2): `[steering, throttle]` in [-1, 1]. Steering +1 = full left (0.45 rad), -1 = full
right. Throttle +1 = full forward torque, 0 = coast (back-EMF drag only), -1 = full reverse
torque: it brakes a car moving forward, then drives it backwards.
Reward terms (scaled sum, default scales in brackets): `progress` the velocity projected on the
unit vector to the next checkpoint times the control period, i.e. metres gained towards it this
step [1]; `checkpoint` 1 on the step a checkpoint is passed [1]; `crash` 1 on leaving the track
or rolling over [-10]; `stuck` 1 when stuck [-10]. A lap of L metres earns about 2 L.
Termination: crash (the chassis centre further than width/2 from the centreline, or tilted more
than 60 degrees), or stuck: planar speed below `stuck_speed` (0.2 m/s) for more than `stuck_time`
(1.5 s) in a row, counted from the start (a car that never moves ends after 1.5 s).
Metrics: `episode/laps` checkpoints passed / checkpoints per lap (the success measure);
`episode/crashed` and `episode/stuck`, 1 if the episode ended so.
Initial state: at rest at a random checkpoint (`random_start`; else checkpoint 0), heading along
the track, offset U(-0.15, 0.15) m across and U(-0.1, 0.1) m along it, yaw U(-0.15, 0.15) rad;
`info["next_cp"]` is the index of the next checkpoint (the one after the start).
Domain randomization (on by default, re-sampled each reset: the policy is meant for a real car whose
grip, load, battery and steering trim are unknown): tyre friction x U(0.75, 1.25), mass x U(0.8,
1.25) (every body's mass and inertia), motor strength x U(0.8, 1.2), steering gain x U(0.85, 1.15).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from sim.core import Physics, Task, TaskConfig
from sim.errors import ConfigError
from sim.tasks._scene import scene_assets
from sim.tasks.rc_car_geometry import (
    ACKERMANN,
    BACK_EMF,
    BRAKE_TORQUE,
    CHASSIS_HALF,
    CHASSIS_MASS,
    GATE_MARGIN,
    HALF_TRACK,
    MAX_STEER,
    STALL_TORQUE,
    STEER_DAMPING,
    STEER_KP,
    STRUT_MASS,
    SUSPENSION_C,
    SUSPENSION_K,
    SUSPENSION_PRELOAD,
    TRACKS,
    TYRE_FRICTION,
    WHEEL_MASS,
    WHEEL_RADIUS,
    WHEELBASE,
    TrackGeometry,
)

# The observation layout, documented as this module's (the bridge imports it from rc_car_geometry).
from sim.tasks.rc_car_geometry import CRITIC_NAMES as CRITIC_NAMES
from sim.tasks.rc_car_geometry import OBS_NAMES as OBS_NAMES


# --- the model -----------------------------------------------------------------------------------
def _corner(name: str, pos: str, steer: str = "") -> str:
    """One corner: a suspension slider (z), a steering knuckle (front only) and the wheel.

    The wheel is a collision sphere (hidden, group 3) inside a visual tyre cylinder, spinning about y.
    The spring's reference is preloaded so that the nominal car rests with the sliders at 0.
    """
    wheel = f"""<body name="wheel_{name}">
            <joint name="wheel_{name}" type="hinge" axis="0 1 0" damping="0.0002" armature="0.0002"/>
            <geom name="tyre_{name}" type="sphere" size="{WHEEL_RADIUS}" mass="{WHEEL_MASS}" contype="1"
                  friction="{TYRE_FRICTION} 0.005 0.0001" group="3"/>
            <geom type="cylinder" size="{WHEEL_RADIUS} 0.02" euler="90 0 0" mass="0" material="tyre"/>
          </body>"""
    if steer:
        wheel = f"""<body name="knuckle_{name}">
          <inertial pos="0 0 0" mass="0.02" diaginertia="1e-5 1e-5 1e-5"/>
          <joint name="{steer}" type="hinge" axis="0 0 1" range="-40 40" damping="{STEER_DAMPING}" armature="0.001"/>
          {wheel}
        </body>"""
    return f"""<body name="strut_{name}" pos="{pos}">
        <inertial pos="0 0 0" mass="{STRUT_MASS}" diaginertia="1e-5 1e-5 1e-5"/>
        <joint name="susp_{name}" type="slide" axis="0 0 1" range="-0.03 0.03" stiffness="{SUSPENSION_K}"
               springref="{-SUSPENSION_PRELOAD:.5f}" damping="{SUSPENSION_C}"/>
        {wheel}
      </body>"""


def car_xml(track: TrackGeometry) -> str:
    """The MJCF model: the car, a floor covering `track` and the track drawn as sites."""
    lo, hi = track.line.min(0), track.line.max(0)
    centre, span = (lo + hi) / 2, float(np.max(hi - lo)) + track.width
    half = span / 2 + 3
    lx, ly, lz = CHASSIS_HALF
    fx, rx, y = WHEELBASE / 2, -WHEELBASE / 2, HALF_TRACK
    return f"""
<mujoco model="rc_car">
  <compiler angle="degree"/>
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  {scene_assets("1 1")}
    <material name="body" rgba=".8 .15 .1 1"/>
    <material name="tyre" rgba=".1 .1 .1 1"/>
  </asset>
  <worldbody>
    <light name="light" pos="{centre[0]:.2f} {centre[1]:.2f} 10" dir="0 0 -1" directional="true"/>
    <geom name="floor" type="plane" size="{half:.1f} {half:.1f} .1" pos="{centre[0]:.2f} {centre[1]:.2f} 0"
          material="grid" conaffinity="1" friction="0.1 0.005 0.0001"/>
    <camera name="top" pos="{centre[0]:.2f} {centre[1]:.2f} {1.3 * span:.1f}" xyaxes="1 0 0 0 1 0"/>
    {track.sites()}
    <body name="car" pos="0 0 {WHEEL_RADIUS}">
      <freejoint name="root"/>
      <camera name="chase" pos="-1.4 0 0.7" xyaxes="0 -1 0 0.45 0 0.9"/>
      <geom name="chassis" type="box" size="{lx} {ly} {lz}" pos="0 0 0.01" mass="{CHASSIS_MASS}"
            material="body"/>
      <geom name="cabin" type="box" size="0.1 0.06 0.025" pos="-0.03 0 0.06" mass="0" material="body"/>
      <site name="imu" pos="0 0 0"/>
      {_corner("fl", f"{fx} {y} 0", "steer_l")}
      {_corner("fr", f"{fx} {-y} 0", "steer_r")}
      {_corner("rl", f"{rx} {y} 0")}
      {_corner("rr", f"{rx} {-y} 0")}
    </body>
  </worldbody>
  <tendon>
    <fixed name="steer"><joint joint="steer_l" coef="0.5"/><joint joint="steer_r" coef="0.5"/></fixed>
    <fixed name="toe"><joint joint="steer_l" coef="1"/><joint joint="steer_r" coef="-1"/></fixed>
    <fixed name="drive"><joint joint="wheel_rl" coef="1"/><joint joint="wheel_rr" coef="1"/></fixed>
  </tendon>
  <equality>
    <tendon name="ackermann" tendon1="toe" tendon2="steer" polycoef="0 0 {ACKERMANN:.4f} 0 0"/>
  </equality>
  <actuator>
    <position name="steering" tendon="steer" kp="{STEER_KP}" ctrlrange="{-MAX_STEER} {MAX_STEER}"/>
    <general name="throttle" tendon="drive" ctrlrange="-1 1" gainprm="{STALL_TORQUE}" biastype="affine"
             biasprm="0 0 {-BACK_EMF:.6f}" forcelimited="true" forcerange="{-BRAKE_TORQUE} {BRAKE_TORQUE}"/>
  </actuator>
  <sensor>
    <velocimeter name="velocimeter" site="imu"/>
    <gyro name="gyro" site="imu"/>
  </sensor>
</mujoco>
"""


# --- the task ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RcCarConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.05
    sim_dt: float = 0.005
    domain_randomization: bool = True
    #: A preset of `TRACKS`, unless `track_points` is given.
    track: str = "circuit"
    #: A custom closed centreline: (x, y) control points in driving order (m); empty = the preset.
    track_points: tuple[tuple[float, float], ...] = ()
    #: Track width (m); 0 = the preset's (1.0 m for custom points).
    track_width: float = 0.0
    checkpoint_spacing: float = 1.0
    random_start: bool = True
    stuck_speed: float = 0.2
    stuck_time: float = 1.5
    reward_scales: dict[str, float] = dataclasses.field(default_factory=lambda: {
        "progress": 1.0, "checkpoint": 1.0, "crash": -10.0, "stuck": -10.0})

    def validate(self) -> None:
        super().validate()
        if not self.track_points and self.track not in TRACKS:
            raise ConfigError(f"track must be one of {sorted(TRACKS)} (or give track_points), got {self.track!r}")


def _yaw_up(q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Yaw angle and the world-z component of the body's z axis, from a (w, x, y, z) quaternion."""
    w, x, y, z = q
    return jnp.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)), 1 - 2 * (x * x + y * y)


def _to_body(v: jax.Array, yaw: jax.Array) -> jax.Array:
    """A planar world vector in the car's heading frame (x forward, y left)."""
    c, s = jnp.cos(yaw), jnp.sin(yaw)
    return jnp.stack([c * v[0] + s * v[1], -s * v[0] + c * v[1]])


class RcCarTrack(Task):
    __doc__ = __doc__
    config_class = RcCarConfig

    def __init__(self, config: RcCarConfig | None = None, name: str | None = None):
        super().__init__(config, name)
        cfg = self.cfg
        if cfg.track_points:
            points, width = cfg.track_points, cfg.track_width or 1.0
        else:
            points, width = TRACKS[cfg.track].points, cfg.track_width or TRACKS[cfg.track].width
        self.track = TrackGeometry(points, width, cfg.checkpoint_spacing)
        t = self.track
        self._cp = jnp.asarray(t.checkpoints, jnp.float32)
        self._cp_tangent = jnp.asarray(t.cp_tangent, jnp.float32)
        seg = np.roll(t.line, -1, 0) - t.line
        self._seg_a = jnp.asarray(t.line, jnp.float32)
        self._seg_d = jnp.asarray(seg, jnp.float32)
        self._seg_inv = jnp.asarray(1.0 / np.sum(seg**2, 1), jnp.float32)

    # Model indices, cached on first use.
    @functools.cached_property
    def _car(self) -> int:
        return mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_BODY, "car")

    @functools.cached_property
    def _tyres(self) -> np.ndarray:
        return np.array([mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_GEOM, f"tyre_{w}")
                         for w in ("fl", "fr", "rl", "rr")])

    @functools.cached_property
    def _steer_act(self) -> int:
        return mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_ACTUATOR, "steering")

    @functools.cached_property
    def _drive_act(self) -> int:
        return mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_ACTUATOR, "throttle")

    @property
    def num_checkpoints(self) -> int:
        return int(self._cp.shape[0])

    def xml(self) -> str:
        return car_xml(self.track)

    # --- track geometry in JAX -----------------------------------------------------------------
    def centreline_offset(self, xy: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Signed distance of `xy` from the centreline (left of the driving direction positive) and
        the track direction there (angle, rad)."""
        rel = xy - self._seg_a
        t = jnp.clip(jnp.sum(rel * self._seg_d, 1) * self._seg_inv, 0.0, 1.0)
        dist = jnp.linalg.norm(rel - t[:, None] * self._seg_d, axis=1)
        i = jnp.argmin(dist)
        d = self._seg_d[i]
        side = jnp.sign(d[0] * rel[i, 1] - d[1] * rel[i, 0])
        return jnp.where(side == 0, 1.0, side) * dist[i], jnp.arctan2(d[1], d[0])

    def _passed(self, xy: jax.Array, idx: jax.Array) -> jax.Array:
        """Whether the car at `xy` has crossed checkpoint `idx`'s line across the track."""
        rel = xy - self._cp[idx]
        ahead = jnp.dot(rel, self._cp_tangent[idx]) >= 0.0
        return ahead & (jnp.linalg.norm(rel) < self.track.width / 2 + GATE_MARGIN)

    def _crashed(self, phys: Physics) -> jax.Array:
        offset, _ = self.centreline_offset(phys.qpos[0:2])
        _, up = _yaw_up(phys.qpos[3:7])
        return (jnp.abs(offset) > self.track.width / 2) | (up < 0.5)

    def _slow_steps(self, phys: Physics, info) -> jax.Array:
        """Control steps in a row the car has been slower than `stuck_speed`, after this step."""
        slow = jnp.linalg.norm(phys.qvel[0:2]) < self.cfg.stuck_speed
        return jnp.where(slow, info["slow_steps"] + 1, 0).astype(jnp.int32)

    def _stuck(self, slow_steps: jax.Array) -> jax.Array:
        """Slow for more than `stuck_time` (counted in whole control steps)."""
        return slow_steps > int(round(self.cfg.stuck_time / self.cfg.ctrl_dt))

    # --- the task -------------------------------------------------------------------------------
    def init(self, key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        n = self.num_checkpoints
        i = jax.random.randint(k1, (), 0, n) if self.cfg.random_start else jnp.zeros((), jnp.int32)
        tangent = self._cp_tangent[i]
        normal = jnp.stack([-tangent[1], tangent[0]])
        xy = (self._cp[i] + jax.random.uniform(k2, (), minval=-0.15, maxval=0.15) * normal
              + jax.random.uniform(k3, (), minval=-0.1, maxval=0.1) * tangent)
        yaw = jnp.arctan2(tangent[1], tangent[0]) + jax.random.uniform(k4, (), minval=-0.15, maxval=0.15)
        root = jnp.concatenate([xy, jnp.array([WHEEL_RADIUS]), jnp.stack([jnp.cos(yaw / 2), 0.0, 0.0,
                                                                          jnp.sin(yaw / 2)])])
        qpos = jnp.asarray(self.mj_model.qpos0, jnp.float32).at[0:7].set(root)  # the free joint is the first
        info = {"next_cp": ((i + 1) % n).astype(jnp.int32), "passed": jnp.zeros((), jnp.int32),
                "slow_steps": jnp.zeros((), jnp.int32), "prev_action": jnp.zeros(2, jnp.float32),
                "prev_vel": jnp.zeros(2, jnp.float32), "accel": jnp.zeros(2, jnp.float32)}
        return qpos, jnp.zeros(self.mj_model.nv, jnp.float32), info

    def randomize(self, key):
        """Tyre friction, the car's mass, motor strength and steering gain of a new episode.

        The mass scale multiplies every body's mass and inertia and the joints' armature, so the whole
        mass matrix scales (the constraint weights derived from it follow: `sim.randomization`).
        """
        k1, k2, k3, k4 = jax.random.split(key, 4)
        m = self.mj_model
        friction = jnp.asarray(m.geom_friction).at[self._tyres, 0].multiply(
            jax.random.uniform(k1, (), minval=0.75, maxval=1.25))
        mass = jax.random.uniform(k2, (), minval=0.8, maxval=1.25)
        gain = (jnp.asarray(m.actuator_gainprm)
                .at[self._drive_act, 0].multiply(jax.random.uniform(k3, (), minval=0.8, maxval=1.2))
                .at[self._steer_act, 0].multiply(jax.random.uniform(k4, (), minval=0.85, maxval=1.15)))
        scaled = {k: jnp.asarray(getattr(m, k)) * mass for k in ("body_mass", "body_inertia", "dof_armature")}
        return {"geom_friction": friction, "actuator_gainprm": gain, **scaled}

    def _dr_scales(self, info) -> jax.Array:
        dr = info["dr"]
        if not dr:
            return jnp.ones(4)
        m = self.mj_model
        return jnp.stack([dr["geom_friction"][self._tyres[0], 0] / m.geom_friction[self._tyres[0], 0],
                          dr["body_mass"][self._car] / m.body_mass[self._car],
                          dr["actuator_gainprm"][self._drive_act, 0] / m.actuator_gainprm[self._drive_act, 0],
                          dr["actuator_gainprm"][self._steer_act, 0] / m.actuator_gainprm[self._steer_act, 0]])

    def observe(self, phys: Physics, info):
        xy = phys.qpos[0:2]
        yaw, _ = _yaw_up(phys.qpos[3:7])
        vel = self.index.sensor(phys, "velocimeter")
        gyro = self.index.sensor(phys, "gyro")
        nxt = info["next_cp"]
        p1 = _to_body(self._cp[nxt] - xy, yaw)
        p2 = _to_body(self._cp[(nxt + 1) % self.num_checkpoints] - xy, yaw)
        policy = jnp.concatenate([vel[0:1], gyro[2:3], info["accel"], p1, p2, info["prev_action"]]).astype(jnp.float32)
        offset, direction = self.centreline_offset(xy)
        heading = yaw - direction
        critic = jnp.concatenate([policy, _to_body(phys.qvel[0:2], yaw), jnp.stack([jnp.cos(heading), jnp.sin(heading),
                                  offset]), self._dr_scales(info)]).astype(jnp.float32)
        return {"policy": policy, "critic": critic}

    def reward_terms(self, phys: Physics, action, info):
        xy = phys.qpos[0:2]
        to_cp = self._cp[info["next_cp"]] - xy
        toward = jnp.dot(phys.qvel[0:2], to_cp) / jnp.maximum(jnp.linalg.norm(to_cp), 1e-6)
        crash = self._crashed(phys)
        stuck = self._stuck(self._slow_steps(phys, info)) & ~crash
        return {
            "progress": toward * self.cfg.ctrl_dt,
            "checkpoint": self._passed(xy, info["next_cp"]).astype(jnp.float32),
            "crash": crash.astype(jnp.float32),
            "stuck": stuck.astype(jnp.float32),
        }

    def update_info(self, phys: Physics, action, info):
        yaw, _ = _yaw_up(phys.qpos[3:7])
        passed = self._passed(phys.qpos[0:2], info["next_cp"])
        return {**info,
                "next_cp": jnp.where(passed, (info["next_cp"] + 1) % self.num_checkpoints, info["next_cp"]),
                "passed": info["passed"] + passed.astype(jnp.int32),
                "slow_steps": self._slow_steps(phys, info),
                "prev_action": jnp.clip(action, -1.0, 1.0).astype(jnp.float32),
                # The accelerometer low-passed to the control rate: the mean planar acceleration over
                # the step, in the heading frame (a level car's accelerometer x, y).
                "prev_vel": phys.qvel[0:2].astype(jnp.float32),
                "accel": _to_body((phys.qvel[0:2] - info["prev_vel"]) / self.cfg.ctrl_dt, yaw).astype(jnp.float32)}

    def terminated(self, phys: Physics, info):
        return self._crashed(phys) | self._stuck(info["slow_steps"])

    def metrics(self, phys: Physics, info):
        crash = self._crashed(phys)
        return {"episode/laps": info["passed"] / self.num_checkpoints,
                "episode/crashed": crash.astype(jnp.float32),
                "episode/stuck": (self._stuck(info["slow_steps"]) & ~crash).astype(jnp.float32)}
