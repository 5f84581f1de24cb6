"""real.fake_robot: the simulated RC car behind /odom, /imu and /ackermann_cmd, alone and driven by the runner.

One car (one simulator compile, the expensive part) serves three checks run in turn by one test, on the memory
transport with a fake clock: separate tests could land on both xdist workers and compile twice.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_real_runner import rc_config

from real import msgs
from real.deploy import build_runner, load_deploy_policy
from real.fake_robot import FakeCarConfig, FakeRcCar
from real.transport import SENSOR_DATA, QoS
from real.transport.memory import FakeClock, MemoryBus, MemoryTransport
from robolearn.commands.cli import run
from robolearn.errors import ConfigError

RATE = 20.0  # the task's own control rate: the runner sees exactly the task's observation


def test_fake_car_state_commands_and_the_runner_loop():
    clock, bus = FakeClock(10**9), MemoryBus()
    car = FakeRcCar(MemoryTransport(bus, clock), FakeCarConfig(rate_hz=RATE, seed=3, domain_randomization=False))
    try:
        check_published_state(clock, bus, car)
        check_commands_and_the_esc_watchdog(clock, bus, car)
        check_the_runner_drives_it(clock, bus, car)
    finally:
        car.close()


def check_published_state(clock: FakeClock, bus: MemoryBus, car: FakeRcCar) -> None:
    """/odom and /imu carry the simulator's pose, body twist and accelerometer, with ROS conventions."""
    probe = MemoryTransport(bus, clock)
    got = {}
    probe.subscribe("/odom", msgs.ODOMETRY, lambda m, t: got.__setitem__("odom", m), SENSOR_DATA)
    probe.subscribe("/imu", msgs.IMU, lambda m, t: got.__setitem__("imu", m), SENSOR_DATA)
    reliable = []
    probe.subscribe("/odom", msgs.ODOMETRY, lambda m, t: reliable.append(m), QoS(10))  # best effort never matches
    car.step(clock())
    clock.advance(1 / RATE)
    data = car.env.state.data
    qpos, sensors = np.asarray(data.qpos)[0], np.asarray(data.sensordata)[0]
    odom = msgs.odometry_to_array(got["odom"])
    np.testing.assert_allclose(odom[:3], qpos[:3], atol=1e-6)  # the track's frame
    np.testing.assert_allclose(odom[3:7], [*qpos[4:7], qpos[3]], atol=1e-6)  # ROS (x, y, z, w) from MuJoCo (w, x, y, z)
    np.testing.assert_allclose(odom[7:], sensors[:6], atol=1e-6)  # velocimeter, gyro: base_link twist
    assert (got["odom"].header.frame_id, got["odom"].child_frame_id) == ("odom", "base_link")
    imu = msgs.imu_to_array(got["imu"])
    np.testing.assert_allclose(imu[:7], odom[3:7].tolist() + odom[10:13].tolist(), atol=1e-6)
    assert imu[9] == pytest.approx(9.81, abs=0.2)  # an accelerometer at rest reads +g (REP-145)
    assert got["imu"].header.stamp == got["odom"].header.stamp and not reliable
    probe.close()


def check_commands_and_the_esc_watchdog(clock: FakeClock, bus: MemoryBus, car: FakeRcCar) -> None:
    """/ackermann_cmd steers (+ = left) and drives; a silent commander loses the throttle, not the steering."""
    driver = MemoryTransport(bus, clock)
    pub = driver.publisher("/ackermann_cmd", msgs.ACKERMANN_DRIVE_STAMPED)
    yaw_rates = []
    for _ in range(int(RATE)):  # one second: quarter-lock left, 40 % throttle
        pub.publish(msgs.ackermann_from_array([0.1125, 0.4]))
        yaw_rates.append(car.step(clock())["gyro"][2])
        clock.advance(1 / RATE)
    assert car.forward_speed > 0.3 and np.mean(yaw_rates[-5:]) > 0.2  # forward, turning left (+ = left)
    np.testing.assert_allclose(car.action(clock()), [0.25, 0.4], rtol=1e-6)
    clock.advance(0.6)  # past cmd_timeout: no throttle, steering held
    np.testing.assert_allclose(car.action(clock()), [0.25, 0.0], rtol=1e-6)
    pub.publish(msgs.ackermann_from_array([-9.0, 1.5]))  # out of range: clipped; speed mode tracks 1.5 m/s
    car.config = FakeCarConfig(rate_hz=RATE, throttle="speed")
    speed = car.forward_speed
    expected = 1.5 / 6.0 + 0.5 * (1.5 - speed)
    np.testing.assert_allclose(car.action(clock()), [-1.0, min(expected, 1.0)], rtol=1e-6)
    car.config = FakeCarConfig(rate_hz=RATE, seed=3, domain_randomization=False)
    driver.close()


def check_the_runner_drives_it(clock: FakeClock, bus: MemoryBus, car: FakeRcCar) -> None:
    """The whole loop on the memory bus: the runner's observation, built from /odom and /imu and its own last
    command, equals the task's own policy observation, and the demo-lap controller makes progress."""
    policy, _ = load_deploy_policy(policy="sim.tasks.rc_car_control:demo_lap_policy")
    runner = build_runner(rc_config(rate_hz=RATE, **{"adapter.course.points": None}), MemoryTransport(bus, clock),
                          policy, {})
    resets = car.resets
    for step in range(160):
        car.step(clock())
        tick = runner.tick(clock())
        if step >= 20:  # after the first checkpoint (the start's "next" is ambiguous when level with one)
            np.testing.assert_allclose(tick.obs, np.asarray(car.env.state.obs["policy"])[0], atol=1e-4)
        assert tick.mode == "policy"
        clock.advance(1 / RATE)
    assert tick.status["checkpoints_passed"] >= 6 and car.resets == resets
    assert car.commands >= 160 and math.isfinite(car.forward_speed)
    runner.close()


def test_config_and_cli_errors(monkeypatch):
    with pytest.raises(ConfigError, match="multiple of"):
        FakeCarConfig(rate_hz=30)
    with pytest.raises(ConfigError, match="throttle"):
        FakeCarConfig(throttle="pwm")
    seen = []
    monkeypatch.setattr("real.deploy.open_transport", lambda *a: seen.append(a) or (_ for _ in ()).throw(
        SystemExit))  # stop once the options are parsed and checked
    with pytest.raises(SystemExit):
        run("fake-robot", ["rate_hz=100", "seed=2", "random_start=false", "odom_topic=/o", "domain_id=3"])
    assert seen == [("auto", 3)]
    with pytest.raises(ConfigError, match="wheels"):
        run("fake-robot", ["wheels=4"])
    with pytest.raises(ConfigError, match="seed"):
        run("fake-robot", ["seed=x"])
    with pytest.raises(ConfigError, match="multiple of"):
        run("fake-robot", ["rate_hz=30"])
    with pytest.raises(ConfigError, match="robot=arm: the fake robot simulates only the RC car.*deploy robot=arm"):
        run("fake-robot", ["robot=arm"])  # the car is the only fake robot: the message says what to use for an arm
    with pytest.raises(ConfigError, match="other processes can reach"):
        run("fake-robot", ["transport=memory"])


def test_the_old_command_line_with_robot_rc_car_runs(monkeypatch):
    """`robolearn fake-robot robot=rc_car ...` (before robot= left, and again now) runs the car to `duration`. The
    simulator is stubbed (its compile takes seconds; the test above drives the real one)."""
    runs = []

    class Car:
        def __init__(self, transport, config):
            self.config = config

        def run(self, duration):
            runs.append((self.config.robot, self.config.rate_hz, duration))

        def close(self):
            pass

        def summary(self):
            return {"steps": 0}

    monkeypatch.setattr("real.deploy.open_transport", lambda *a: MemoryTransport(MemoryBus()))
    monkeypatch.setattr("real.fake_robot.FakeRcCar", Car)
    assert run("fake-robot", ["robot=rc_car", "transport=dds", "rate_hz=20", "duration=0.5"]) == 0
    assert runs == [("rc_car", 20.0, 0.5)]
