"""A fake RC car: robolearn's ``rc-car-track`` simulation behind the real car's ROS 2 topics.

It publishes ``/odom`` (nav_msgs/Odometry) and ``/imu`` (sensor_msgs/Imu) and obeys ``/ackermann_cmd``
(ackermann_msgs/AckermannDriveStamped; Twist or TwistStamped with ``cmd_type``) on any transport, so the
whole loop (runner, safety, recorder, actor) runs on one machine, and any ROS 2 node or DDS participant using
the ROS 2 mapping can drive and read it.

    robolearn fake-robot transport=dds rate_hz=50 seed=0       # robot=rc_car, the only robot it simulates

Each control period (absolute deadlines) it steps the task (C backend, one env, ``ctrl_dt = 1 / rate_hz``)
with the latest command held, then publishes the state:

- Odometry: pose in the track's frame (the ``odom`` frame; the course's checkpoints are the track's), twist in
  ``base_link``: the velocimeter and gyro at the car's centre.
- Imu: the body orientation, the gyro, and the specific force a real accelerometer reads (REP-145: gravity
  included, +9.81 z when level): the task's acceleration (mean over the control period) plus gravity.

Commands: ``steering = steering_angle / steering_scale`` (rad; +left as in the sim); with ``cmd_type=twist`` or
``twist_stamped`` the steering angle is ``angular.z`` and the drive field ``linear.x``, as the runner's rc_car
adapter sends them with ``output: twist`` and ``twist_angular: steering`` (Twist carries no stamp, so it gives no
latency samples). The drive field is the raw
throttle in [-1, 1] (``throttle=passthrough``, matching the runner's ``speed_scale: 1``) or a speed in m/s
tracked by a feed-forward + proportional controller (``throttle=speed``). A command older than ``cmd_timeout``
seconds cuts the throttle (an ESC watchdog); steering holds. Crashes and roll-overs reset the car to a start
position (the task's auto-reset; think of a person putting it back); being stuck does not (the runner's
recovery handles that).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from real import msgs
from real.robots.course import Course
from real.robots.rc_car import GRAVITY, quat_matrix
from real.timing import next_deadline, sleep_until
from real.transport import Transport
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

SIM_DT = 0.005  # the task's physics step: the control period must be a multiple of it
COMMAND_TYPES = {"ackermann": msgs.ACKERMANN_DRIVE_STAMPED, "twist": msgs.TWIST, "twist_stamped": msgs.TWIST_STAMPED}


@dataclasses.dataclass
class FakeCarConfig:
    """Settings of the fake RC car (every one a ``key=value`` of ``robolearn fake-robot``)."""

    rate_hz: float = 50.0  # control and publish rate
    odom_topic: str = "/odom"
    imu_topic: str = "/imu"
    cmd_topic: str = "/ackermann_cmd"
    cmd_type: str = "ackermann"  # ackermann (AckermannDriveStamped) | twist | twist_stamped (angular.z = steering)
    sensor_qos: str = "sensor_data"
    cmd_qos: str = "default"
    odom_frame: str = "odom"
    base_frame: str = "base_link"
    steering_scale: float = 0.45  # rad at full steering (the sim's MAX_STEER)
    throttle: str = "passthrough"  # passthrough (drive field = raw throttle) | speed (m/s, tracked)
    speed_gain: float = 0.5  # throttle per m/s of speed error (throttle=speed)
    cmd_timeout: float = 0.5  # s without a command -> throttle 0
    seed: int = 0
    track: str = "circuit"
    domain_randomization: bool = True
    random_start: bool = True

    def __post_init__(self) -> None:
        substeps = 1.0 / (self.rate_hz * SIM_DT) if self.rate_hz > 0 else 0.0
        if self.rate_hz <= 0 or abs(substeps - round(substeps)) > 1e-6 or round(substeps) < 1:
            raise ConfigError(f"fake robot rate_hz must make 1/rate a multiple of {SIM_DT} s (e.g. 20, 50, 100, "
                              f"200), got {self.rate_hz}")
        if self.cmd_type not in COMMAND_TYPES:
            raise ConfigError(f"fake robot cmd_type must be one of {', '.join(COMMAND_TYPES)}, got {self.cmd_type!r}")
        if self.throttle not in ("passthrough", "speed"):
            raise ConfigError(f"fake robot throttle must be passthrough or speed, got {self.throttle!r}")
        if self.cmd_timeout <= 0 or self.steering_scale <= 0:
            raise ConfigError("fake robot cmd_timeout and steering_scale must be > 0")


#: Why `robot=` takes only the car, and what stands in for an arm: deploy's other robot.
ONLY_THE_CAR = ("the fake robot simulates only the RC car (robot=rc_car, the default: deploy's "
                "configs/robot/rc_car.yaml). For an arm policy: play it in the sim arm tasks (robolearn eval "
                "checkpoint=<run>/checkpoints/final), then run robolearn deploy robot=arm against the arm's ROS 2 "
                "driver; without hardware, ros2_control's mock_components/GenericSystem answers joint commands with "
                "/joint_states")


@dataclasses.dataclass
class FakeRobotConfig(FakeCarConfig):
    """`robolearn fake-robot`: the process (robot, transport, duration, stats file) and the car's settings."""

    robot: str = "rc_car"            # the simulated robot: rc_car only (as deploy's robot=rc_car; old command lines)
    transport: str = "auto"          # auto | dds | rclpy (not memory: other processes must reach it)
    domain_id: int | None = None     # DDS / ROS domain; null: ROS_DOMAIN_ID or 0
    duration: float | None = None    # seconds; null: until Ctrl-C / SIGTERM
    stats_out: str | None = None     # a JSON file for the command-latency statistics at exit

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.robot != "rc_car":
            raise ConfigError(f"robot={self.robot}: {ONLY_THE_CAR}")


class FakeRcCar:
    """The simulated car on ``transport``. `step` advances one control period and publishes; `run` loops."""

    def __init__(self, transport: Transport, config: FakeCarConfig | None = None) -> None:
        import sim

        self.config = cfg = config or FakeCarConfig()
        self.transport = transport
        self.env = sim.make("rc-car-track", num_envs=1, backend="mujoco", nthread=1, seed=cfg.seed,
                            ctrl_dt=1.0 / cfg.rate_hz, episode_length=2**30, stuck_time=1e6, track=cfg.track,
                            domain_randomization=cfg.domain_randomization, random_start=cfg.random_start)
        index = self.env.task.index
        self._velocimeter, self._gyro = index.sensor_slice("velocimeter"), index.sensor_slice("gyro")
        self.period_ns = round(1e9 / cfg.rate_hz)
        self.odom_pub = transport.publisher(cfg.odom_topic, msgs.ODOMETRY, cfg.sensor_qos)
        self.imu_pub = transport.publisher(cfg.imu_topic, msgs.IMU, cfg.sensor_qos)
        self._lock = threading.Lock()
        self._command: tuple[float, float, int] | None = None  # steering angle, drive field, receive time
        self._published: collections.OrderedDict[int, int] = collections.OrderedDict()  # stamp -> publish time
        self.latency_ns: list[int] = []  # odom publish -> receipt of a command carrying that odom's stamp
        self.latency_stamps: list[int] = []  # the odom header stamp of each latency sample
        self.commands = 0
        self.steps = 0
        self.resets = 0
        self.missed = 0
        self.forward_speed = 0.0
        self._stop = threading.Event()
        self.cmd_sub = transport.subscribe(cfg.cmd_topic, COMMAND_TYPES[cfg.cmd_type], self._on_command, cfg.cmd_qos)

    def course(self) -> Course:
        """The track's checkpoints as a `Course` (the odom frame is the track's frame)."""
        from sim.tasks.rc_car_geometry import GATE_MARGIN

        track = self.env.task.track
        return Course(track.checkpoints, track.width / 2 + GATE_MARGIN, track.cp_tangent)

    # --- commands ----------------------------------------------------------------------------------------

    def _on_command(self, msg: Any, receive_time_ns: int) -> None:
        if self.config.cmd_type == "ackermann":
            steering, drive = msgs.ackermann_to_array(msg)
        else:
            twist = msgs.twist_to_array(msg)
            steering, drive = twist[5], twist[0]
        stamp = msgs.stamp_ns(msg.header.stamp) if hasattr(msg, "header") else 0
        with self._lock:
            self._command = (float(steering), float(drive), receive_time_ns)
            self.commands += 1
            published = self._published.get(stamp) if stamp else None
            if published is not None:
                self.latency_ns.append(receive_time_ns - published)
                self.latency_stamps.append(stamp)

    def action(self, now_ns: int) -> np.ndarray:
        """The sim action ``[steering, throttle]`` for the latest command at ``now_ns``."""
        with self._lock:
            command = self._command
        if command is None:
            return np.zeros(2)
        steering_angle, drive, received = command
        steering = float(np.clip(steering_angle / self.config.steering_scale, -1.0, 1.0))
        if now_ns - received > self.config.cmd_timeout * 1e9:
            return np.array([steering, 0.0])  # the ESC watchdog: no fresh command, no throttle
        if self.config.throttle == "passthrough":
            throttle = drive
        else:
            from sim.tasks.rc_car_geometry import TOP_SPEED

            throttle = drive / TOP_SPEED + self.config.speed_gain * (drive - self.forward_speed)
        return np.array([steering, float(np.clip(throttle, -1.0, 1.0))])

    # --- stepping ----------------------------------------------------------------------------------------

    def step(self, now_ns: int | None = None) -> dict[str, np.ndarray]:
        """Apply the current command for one control period, then publish /odom and /imu; returns the state."""
        import torch

        now = self.transport.now() if now_ns is None else now_ns
        action = self.action(now)
        _, _, dones, _ = self.env.step(torch.as_tensor(action, dtype=torch.float32)[None])
        if bool(dones[0]):
            self.resets += 1
            log.info("fake car crashed or rolled over: reset to a start position (%d so far)", self.resets)
        self.steps += 1
        state = self.state()
        self.publish(state)
        return state

    def state(self) -> dict[str, np.ndarray]:
        """Pose, body velocities and accelerometer reading of the simulated car."""
        data = self.env.state.data
        qpos = np.asarray(data.qpos, dtype=np.float64)[0]
        sensors = np.asarray(data.sensordata, dtype=np.float64)[0]
        w, x, y, z = qpos[3:7]
        rotation = quat_matrix(x, y, z, w)
        yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        ax, ay = np.asarray(self.env.state.info["accel"], dtype=np.float64)[0]  # level heading frame, period mean
        accel_world = np.array([math.cos(yaw) * ax - math.sin(yaw) * ay, math.sin(yaw) * ax + math.cos(yaw) * ay,
                                GRAVITY])
        velocity = sensors[self._velocimeter]
        self.forward_speed = float(velocity[0])
        return {"position": qpos[0:3], "orientation": np.array([x, y, z, w]), "velocity": velocity,
                "gyro": sensors[self._gyro], "specific_force": rotation.T @ accel_world}

    def publish(self, state: dict[str, np.ndarray]) -> None:
        cfg = self.config
        stamp = time.time_ns()
        odom = msgs.odometry_from_array(np.concatenate([state["position"], state["orientation"], state["velocity"],
                                                        state["gyro"]]), stamp, cfg.odom_frame, cfg.base_frame)
        imu = msgs.imu_from_array(np.concatenate([state["orientation"], state["gyro"], state["specific_force"]]),
                                  stamp, cfg.base_frame)
        with self._lock:
            self._published[stamp] = self.transport.now()
            while len(self._published) > 256:
                self._published.popitem(last=False)
        self.odom_pub.publish(odom)
        self.imu_pub.publish(imu)

    def run(self, duration: float | None = None) -> None:
        """Step and publish every period on absolute deadlines until `stop` or ``duration`` seconds."""
        self._stop.clear()
        deadline = self.transport.now()
        end = None if duration is None else deadline + int(duration * 1e9)
        while not self._stop.is_set() and (end is None or deadline < end):
            sleep_until(deadline, self.transport.now)
            self.step()
            deadline, missed = next_deadline(deadline, self.transport.now(), self.period_ns)
            self.missed += missed

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> dict[str, Any]:
        """Counters and the odom -> command latencies (ms), for logs and the benchmark."""
        with self._lock:
            latency = np.asarray(self.latency_ns, dtype=np.float64) / 1e6
        out: dict[str, Any] = {"steps": self.steps, "commands": self.commands, "resets": self.resets,
                               "missed": self.missed, "latency_samples": int(latency.size)}
        if latency.size:
            out.update(latency_p50_ms=float(np.percentile(latency, 50)),
                       latency_p99_ms=float(np.percentile(latency, 99)), latency_max_ms=float(latency.max()))
        return out

    def close(self) -> None:
        self.stop()
        self.cmd_sub.close()
        self.env.close()


def cmd_fake_robot(cfg: FakeRobotConfig) -> int:
    """Simulate the robot on a transport other processes reach, until Ctrl-C, SIGTERM or `duration`."""
    from real.deploy import open_transport

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cfg.transport == "memory":
        raise ConfigError("the fake robot needs a transport other processes can reach: dds, rclpy or auto")
    config, duration, stats_out = cfg, cfg.duration, cfg.stats_out
    transport = open_transport(cfg.transport, cfg.domain_id)
    car: FakeRcCar | None = None
    previous = signal.signal(signal.SIGTERM, lambda *_: car.stop() if car is not None else None)
    with transport:
        car = FakeRcCar(transport, config)
        print(f"fake rc car ready: {config.rate_hz:g} Hz, {config.odom_topic} {config.imu_topic} -> "
              f"{config.cmd_topic}", flush=True)
        try:
            car.run(duration)
        except KeyboardInterrupt:
            pass
        finally:
            car.close()
            signal.signal(signal.SIGTERM, previous)
            summary = car.summary()
            log.info("fake car: %s", summary)
            if stats_out:
                Path(stats_out).write_text(json.dumps({**summary, "latency_ms": [v / 1e6 for v in car.latency_ns],
                                                       "latency_stamps": car.latency_stamps}))
    return 0
