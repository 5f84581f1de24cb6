"""The RC car adapter: the ``rc-car-track`` observation from /odom and /imu, Ackermann or Twist commands,
FastRLAP-style course progress, stuck and crash detection, and an autonomous recovery manoeuvre.

Observation features (``robot.<name>`` slots; the sim task's `OBS_NAMES` take the rest straight from /odom and
from the runner's previous command):

- ``accel_x``, ``accel_y``: the IMU's linear acceleration with gravity removed, in the car's level heading
  frame (x forward, y left), averaged over the IMU messages of the control period, as the task low-passes its
  accelerometer to the control rate. Gravity is removed with the IMU's orientation (REP-145: covariance[0] =
  -1 marks none), else the odometry's, else the car is taken as level. The IMU is assumed mounted along
  base_link.
- ``next_cp_x/y``, ``next2_cp_x/y``: the next two course checkpoints in the car's heading frame (`course.py`).
- ``x``, ``y``, ``yaw``, ``speed``: the odometry pose and planar speed, for custom layouts.

Commands (``output``): AckermannDriveStamped (default), Twist or TwistStamped. ``steering_angle = a0 *
steering_scale`` rad with the sim's sign (+1 = left, as ROS's REP-103 positive angle); the drive field is
``a1 * speed_scale``. With ``speed_scale: 1`` the speed field carries the raw throttle in [-1, 1]
("passthrough": an ESC in duty-cycle mode, and the fake robot's default), as the sim's throttle is a motor
command, not a speed; set it to the car's top speed (m/s) for a speed-controlled drive. Twist puts the speed in
``linear.x`` and, in ``angular.z``, the steering angle (``twist_angular: steering``) or the bicycle model's
yaw rate ``v tan(angle) / wheelbase`` (``yaw_rate``).

Autonomy (FastRLAP `state_machine.py`): while the policy drives, the car is *stuck* when every position of the
last ``stuck.window`` seconds lies within ``stuck.radius`` of their mean, and *crashed* when the IMU reads
upside down (z below ``crash.inverted_accel_z``) or a horizontal acceleration above
``crash.max_horizontal_accel``. Either starts a recovery: ``recovery.duration`` seconds of reverse throttle
with random (seeded) or straight steering, which the runner sends (through the safety filter) instead of the
policy, in mode "recovery".
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from real import msgs
from real.observation import Received
from real.robots.base import RobotAdapter, check_keys
from real.robots.course import Course, CourseProgress
from robolearn.errors import ConfigError

GRAVITY = 9.81
OUTPUTS = {"ackermann": msgs.ACKERMANN_DRIVE_STAMPED, "twist": msgs.TWIST, "twist_stamped": msgs.TWIST_STAMPED}
FEATURES = ("accel_x", "accel_y", "next_cp_x", "next_cp_y", "next2_cp_x", "next2_cp_y", "x", "y", "yaw", "speed")
KEYS = ("odom_input", "imu_input", "output", "steering_scale", "speed_scale", "twist_angular", "wheelbase",
        "frame_id", "course", "stuck", "crash", "recovery", "seed")


def quat_matrix(x: float, y: float, z: float, w: float) -> np.ndarray:
    """Rotation matrix of a unit quaternion (ROS order x, y, z, w)."""
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def quat_yaw(x: float, y: float, z: float, w: float) -> float:
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def _orientation(q: Any, covariance: Any = None) -> tuple[float, float, float, float] | None:
    """A geometry_msgs/Quaternion as a unit (x, y, z, w), or None when absent (zero, or covariance[0] = -1)."""
    if covariance is not None and len(covariance) and covariance[0] == -1:
        return None
    xyzw = np.array([q.x, q.y, q.z, q.w], dtype=np.float64)
    norm = float(np.linalg.norm(xyzw))
    return None if not 0.5 < norm < 1.5 else tuple(xyzw / norm)


def level_acceleration(imu: Any, fallback: tuple[float, float, float, float] | None) -> tuple[float, float]:
    """An Imu's linear acceleration minus gravity, in the level heading frame: ``(ax, ay)`` (m/s^2).

    Only the world x, y rows of the rotation matter (gravity is along z), so those are computed with plain
    floats: this runs for every IMU message of every tick.
    """
    a = imu.linear_acceleration
    q = _orientation(imu.orientation, imu.orientation_covariance) or fallback
    if q is None:  # assume level
        return float(a.x), float(a.y)
    x, y, z, w = q
    wx = (1 - 2 * (y * y + z * z)) * a.x + 2 * (x * y - w * z) * a.y + 2 * (x * z + w * y) * a.z
    wy = 2 * (x * y + w * z) * a.x + (1 - 2 * (x * x + z * z)) * a.y + 2 * (y * z - w * x) * a.z
    yaw = quat_yaw(x, y, z, w)
    c, s = math.cos(yaw), math.sin(yaw)
    return c * wx + s * wy, -s * wx + c * wy


class StuckDetector:
    """Stuck: every position of the last ``window`` seconds within ``radius`` metres of their mean."""

    def __init__(self, window: float = 3.0, radius: float = 0.3) -> None:
        if not window > 0 or not radius > 0:
            raise ConfigError(f"stuck window and radius must be > 0, got {window}, {radius}")
        self.window_ns, self.radius = int(window * 1e9), float(radius)
        self.samples: collections.deque[tuple[int, np.ndarray]] = collections.deque()

    def add(self, now_ns: int, xy: np.ndarray) -> bool:
        self.samples.append((now_ns, np.asarray(xy, dtype=np.float64)))
        while len(self.samples) > 1 and now_ns - self.samples[1][0] >= self.window_ns:
            self.samples.popleft()  # keep the oldest sample that still spans the window
        if now_ns - self.samples[0][0] < self.window_ns:
            return False
        points = np.stack([p for _, p in self.samples])
        return bool(np.max(np.linalg.norm(points - points.mean(0), axis=1)) < self.radius)

    def clear(self) -> None:
        self.samples.clear()


class RcCarAdapter(RobotAdapter):
    """See the module docstring; configured by the ``adapter`` section of configs/deploy/rc_car.yaml."""

    name = "rc_car"
    features = FEATURES

    def __init__(self, cfg: dict[str, Any], rate_hz: float, run_config: dict[str, Any]) -> None:
        super().__init__(cfg, rate_hz, run_config)
        check_keys(cfg, KEYS, "adapter (rc_car)")
        self.num_actions = 2
        self.odom_input = str(cfg.get("odom_input", "odom"))
        self.imu_input = str(cfg.get("imu_input", "imu"))
        self.inputs = (self.odom_input, self.imu_input)
        self.period_inputs = (self.imu_input,)
        self.output = str(cfg.get("output", "ackermann"))
        if self.output not in OUTPUTS:
            raise ConfigError(f"adapter.output must be one of {sorted(OUTPUTS)}, got {self.output!r}")
        self.command_type = OUTPUTS[self.output]
        self.steering_scale = float(cfg.get("steering_scale", 0.45))
        self.speed_scale = float(cfg.get("speed_scale", 1.0))
        self.wheelbase = float(cfg.get("wheelbase", 0.30))
        self.twist_angular = str(cfg.get("twist_angular", "steering"))
        if self.twist_angular not in ("steering", "yaw_rate"):
            raise ConfigError(f"adapter.twist_angular must be 'steering' or 'yaw_rate', got {self.twist_angular!r}")
        if self.steering_scale <= 0 or self.speed_scale <= 0 or self.wheelbase <= 0:
            raise ConfigError("adapter steering_scale, speed_scale and wheelbase must be > 0")
        self.frame_id = str(cfg.get("frame_id", "base_link"))
        self.course = Course.from_config(cfg.get("course") or {}, run_config)
        self.progress = CourseProgress(self.course)
        stuck = dict(cfg.get("stuck") or {})
        check_keys(stuck, ("window", "radius"), "adapter.stuck")
        self.stuck = StuckDetector(float(stuck.get("window", 3.0)), float(stuck.get("radius", 0.3)))
        crash = dict(cfg.get("crash") or {})
        check_keys(crash, ("inverted_accel_z", "max_horizontal_accel"), "adapter.crash")
        self.inverted_accel_z = float(crash.get("inverted_accel_z", -4.0))
        self.max_horizontal_accel = float(crash.get("max_horizontal_accel", 20.0))
        rec = dict(cfg.get("recovery") or {})
        check_keys(rec, ("duration", "throttle", "steering"), "adapter.recovery")
        self.recovery_duration = float(rec.get("duration", 1.0))
        self.recovery_throttle = float(rec.get("throttle", -0.6))
        self.recovery_steering = rec.get("steering", "random")
        if self.recovery_steering not in ("random", "straight") and not isinstance(self.recovery_steering,
                                                                                     int | float):
            raise ConfigError(f"adapter.recovery.steering must be random, straight or a number, "
                              f"got {self.recovery_steering!r}")
        if not -1 <= self.recovery_throttle <= 1 or self.recovery_duration <= 0:
            raise ConfigError("adapter.recovery needs throttle in [-1, 1] and duration > 0")
        self.rng = np.random.default_rng(int(cfg.get("seed", 0)))
        self.reset()

    def reset(self) -> None:
        self.progress.reset()
        self.stuck.clear()
        self.xy: np.ndarray | None = None
        self.crash_seen = False
        self.recovery_until_ns: int | None = None
        self.recovery_action = np.zeros(2)
        self.event: str | None = None
        self.counts = {"stuck": 0, "crash": 0}

    def check(self, observation_names: list[str]) -> None:
        env = (self.run_config.get("env") or {}).get("name")
        if env == "rc-car-track":
            from sim.tasks.rc_car_geometry import OBS_NAMES

            if tuple(observation_names) != OBS_NAMES:
                raise ConfigError(f"the checkpoint was trained on rc-car-track, whose observation is {OBS_NAMES}; "
                                  f"the deploy config's slots are {tuple(observation_names)}")

    # --- per tick ----------------------------------------------------------------------------------------

    def update(self, snapshot: Mapping[str, Received], now_ns: int) -> dict[str, float]:
        self.event, self.crash_seen = None, False
        out = dict.fromkeys(FEATURES, float("nan"))
        odom = snapshot[self.odom_input].msg
        pose_q = None
        if odom is not None:
            p, q = odom.pose.pose.position, odom.pose.pose.orientation
            self.xy = np.array([p.x, p.y], dtype=np.float64)
            pose_q = _orientation(q)
            yaw = quat_yaw(*pose_q) if pose_q else float("nan")  # invalid quaternion: NaN goals, the car stops
            self.progress.update(self.xy, now_ns)
            goals = self.progress.goal_vectors(self.xy, yaw)
            v = odom.twist.twist.linear
            out.update(x=self.xy[0], y=self.xy[1], yaw=yaw, speed=math.hypot(v.x, v.y), next_cp_x=goals[0],
                       next_cp_y=goals[1], next2_cp_x=goals[2], next2_cp_y=goals[3])
        imu = snapshot[self.imu_input]
        period = imu.period or ([imu.msg] if imu.msg is not None else [])
        if period:
            accels = [level_acceleration(m, pose_q) for m in period]
            out.update(accel_x=sum(a[0] for a in accels) / len(accels), accel_y=sum(a[1] for a in accels) / len(accels))
            raw = [m.linear_acceleration for m in period]
            self.crash_seen = any(a.z < self.inverted_accel_z or math.hypot(a.x, a.y) > self.max_horizontal_accel
                                  for a in raw)
        return out

    def override(self, now_ns: int) -> tuple[np.ndarray, str] | None:
        if self.recovery_until_ns is None:
            return None
        if now_ns >= self.recovery_until_ns:  # done: the policy drives again, with a fresh stuck window
            self.recovery_until_ns = None
            self.stuck.clear()
            return None
        return self.recovery_action.copy(), "recovery"

    def after_tick(self, mode: str, command: np.ndarray, now_ns: int) -> None:
        if mode != "policy" or self.xy is None:
            if mode != "recovery":
                self.stuck.clear()
            return
        stuck = self.stuck.add(now_ns, self.xy)
        if self.crash_seen or stuck:
            self.start_recovery(now_ns, "crash" if self.crash_seen else "stuck")

    def start_recovery(self, now_ns: int, event: str) -> None:
        """Reverse for ``recovery.duration`` seconds from the next tick on."""
        if self.recovery_steering == "random":
            steering = float(self.rng.uniform(-1.0, 1.0))
        else:
            steering = 0.0 if self.recovery_steering == "straight" else float(self.recovery_steering)
        self.recovery_action = np.array([steering, self.recovery_throttle])
        self.recovery_until_ns = now_ns + round((self.recovery_duration + 1 / self.rate_hz) * 1e9)
        self.event = event
        self.counts[event] += 1
        self.stuck.clear()

    def status(self) -> dict[str, Any]:
        p = self.progress
        return {"next_checkpoint": p.next_index, "checkpoints_passed": p.passed_total, "passed_now": p.passed_now,
                "laps": p.laps, "lap_times": list(p.lap_times), "recovering": self.recovery_until_ns is not None,
                "event": self.event, "stuck_count": self.counts["stuck"], "crash_count": self.counts["crash"]}

    # --- messages ----------------------------------------------------------------------------------------

    def command_msg(self, command: np.ndarray, stamp_ns: int = 0) -> Any:
        steering = float(command[0]) * self.steering_scale
        speed = float(command[1]) * self.speed_scale
        if self.output == "ackermann":
            return msgs.ackermann_from_array([steering, speed], stamp_ns, self.frame_id)
        angular = steering if self.twist_angular == "steering" else speed * math.tan(steering) / self.wheelbase
        twist = [speed, 0.0, 0.0, 0.0, 0.0, angular]
        if self.output == "twist":
            return msgs.twist_from_array(twist)
        return msgs.twist_stamped_from_array(twist, stamp_ns, self.frame_id)

    def teleop_action(self, msg: Any) -> np.ndarray:
        if self.output == "ackermann":
            steering, speed = msgs.ackermann_to_array(msg)
        else:
            twist = msgs.twist_to_array(msg)
            speed, angular = twist[0], twist[5]
            if self.twist_angular == "steering":
                steering = angular
            else:
                steering = math.atan(angular * self.wheelbase / speed) if abs(speed) > 1e-6 else 0.0
        return np.array([steering / self.steering_scale, speed / self.speed_scale])
