"""A robot on a plain Cyclone DDS stack (nothing of robolearn's) for the deploy loop's timing: the Cyclone peer row.

It publishes /odom (nav_msgs/Odometry) and /imu (sensor_msgs/Imu) at `rate_hz` on absolute deadlines, as
`robolearn fake-robot` does, and times every command (geometry_msgs/TwistStamped on `cmd_topic`) that carries an
odometry's stamp: from that odometry's publish to the command's receipt (CLOCK_MONOTONIC, one machine). The state it
publishes is constant (a car at rest): the benchmark measures the middleware and the runner, not the physics. Types,
QoS and serialization are the Cyclone application's own (`benchmarks/peers/cyclone_app.py`), at cyclonedds' default
settings apart from ``CYCLONEDDS_URI``.

    python benchmarks/peers/cyclone_car.py domain_id=7 rate_hz=100 stats_out=/tmp/car.json   # SIGTERM stops it

It prints ``fake rc car ready`` once its endpoints exist, and writes the statistics `robolearn fake-robot` writes
(`steps`, `commands`, `resets`, `missed`, `latency_ms`, `latency_stamps`) to `stats_out` when stopped.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cyclonedds.core import Listener
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.peers.cyclone_app import idl_class, message, qos  # noqa: E402

ODOM, IMU, TWIST_STAMPED = "nav_msgs/msg/Odometry", "sensor_msgs/msg/Imu", "geometry_msgs/msg/TwistStamped"


def stamp(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nanosec": ns % 1_000_000_000}


class Car:
    """The endpoints, the publish loop and the latency samples."""

    def __init__(self, domain_id: int, cmd_topic: str):
        self.participant = DomainParticipant(domain_id)
        topic = lambda name, kind: Topic(self.participant, "rt" + name, idl_class(kind))  # noqa: E731
        self.odom = DataWriter(self.participant, topic("/odom", ODOM), qos=qos("sensor_data"))
        self.imu = DataWriter(self.participant, topic("/imu", IMU), qos=qos("sensor_data"))
        self.lock = threading.Lock()
        self.published: dict[int, int] = {}  # odometry stamp (wall ns) -> its publish time (monotonic ns)
        self.latency_ns: list[int] = []
        self.latency_stamps: list[int] = []
        self.steps = self.commands = self.missed = 0
        self.reader = DataReader(self.participant, topic(cmd_topic, TWIST_STAMPED), qos=qos("default"),
                                 listener=Listener(on_data_available=self._on_commands))

    def _on_commands(self, reader: Any) -> None:
        now = time.monotonic_ns()
        for cmd in reader.take(N=64):
            key = cmd.header.stamp.sec * 1_000_000_000 + cmd.header.stamp.nanosec
            with self.lock:
                self.commands += 1
                sent = self.published.get(key)
                if sent is not None:
                    self.latency_ns.append(now - sent)
                    self.latency_stamps.append(key)

    def run(self, rate_hz: float, stop: threading.Event) -> None:
        period = int(1e9 / rate_hz)
        deadline = time.monotonic_ns()
        odom = message(ODOM, {"header": {"frame_id": "odom"}, "child_frame_id": "base_link",
                              "pose": {"pose": {"orientation": {"w": 1.0}}}})
        imu = message(IMU, {"header": {"frame_id": "base_link"}, "orientation": {"w": 1.0},
                            "linear_acceleration": {"z": 9.81}})
        while not stop.is_set():
            wall = time.time_ns()
            odom.header.stamp.sec, odom.header.stamp.nanosec = wall // 1_000_000_000, wall % 1_000_000_000
            imu.header.stamp.sec, imu.header.stamp.nanosec = odom.header.stamp.sec, odom.header.stamp.nanosec
            with self.lock:
                self.published[wall] = time.monotonic_ns()
                if len(self.published) > 1000:
                    self.published.pop(next(iter(self.published)))
            self.odom.write(odom)
            self.imu.write(imu)
            self.steps += 1
            deadline += period
            late = time.monotonic_ns() - deadline
            if late > 0:
                self.missed += late // period + 1
                deadline += (late // period + 1) * period
            stop.wait(max(0.0, (deadline - time.monotonic_ns()) / 1e9))

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"steps": self.steps, "commands": self.commands, "resets": 0, "missed": self.missed,
                    "latency_ms": [v / 1e6 for v in self.latency_ns], "latency_stamps": list(self.latency_stamps)}


def main() -> int:
    args = dict(arg.split("=", 1) for arg in sys.argv[1:])
    unknown = set(args) - {"domain_id", "rate_hz", "stats_out", "cmd_topic"}
    if unknown:
        sys.exit(f"cyclone_car.py takes domain_id= rate_hz= stats_out= cmd_topic=, not {sorted(unknown)}")
    car = Car(int(args.get("domain_id", 0)), args.get("cmd_topic", "/cmd"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("fake rc car ready (plain Cyclone DDS application)", flush=True)
    car.run(float(args.get("rate_hz", 100)), stop)
    if "stats_out" in args:
        Path(args["stats_out"]).write_text(json.dumps(car.stats()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
