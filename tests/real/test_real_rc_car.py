"""real.robots.rc_car and course: checkpoint progress and laps, gravity-free accelerations, stuck and crash
recovery through the runner, Twist outputs and the teleop inverse. Memory transport, fake clock."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_real_runner import SQUARE, ConstantPolicy, memory_setup, rc_config

from real import msgs
from real.robots.course import Course, CourseProgress
from real.robots.rc_car import RcCarAdapter, level_acceleration, quat_matrix
from robolearn.errors import ConfigError

PERIOD = 0.02


def test_course_progress_passes_checkpoints_and_times_laps():
    progress = CourseProgress(Course(SQUARE))
    assert progress.update(np.array([0.5, -0.1]), 0) == 0 and progress.next_index == 1  # level with cp 0 already
    np.testing.assert_allclose(progress.goal_vectors(np.array([0.5, 0.0]), math.pi), [-1.5, 0.0, -1.5, -2.0],
                               atol=1e-12)  # facing -x: both behind, the second also to the right
    assert progress.update(np.array([1.8, 0.0]), 1) == 0  # close, but not yet level with cp 1 (2, 0)
    t = 10**9
    for _ in range(2):
        for xy in ([2.1, 0.2], [1.9, 2.1], [-0.1, 1.9], [0.1, -0.1]):  # cp 1, 2, 3, 0 in turn
            t += 10**9
            assert progress.update(np.array(xy), t) == 1
    assert progress.passed_total == 8 and progress.laps == 2.0 and progress.lap_times == [4.0]
    progress.reset()
    assert progress.update(np.array([0.5, 2.3]), 0) == 0 and progress.next_index == 3  # not yet at cp 3 (0, 2)


def test_level_acceleration_removes_gravity_with_the_orientation():
    yaw, pitch = 1.0, math.radians(30)
    q = [-math.sin(pitch / 2) * math.sin(yaw / 2), math.sin(pitch / 2) * math.cos(yaw / 2),
         math.cos(pitch / 2) * math.sin(yaw / 2), math.cos(pitch / 2) * math.cos(yaw / 2)]  # yaw then pitch
    rotation = quat_matrix(*q)
    world = np.array([2 * math.cos(yaw), 2 * math.sin(yaw), 9.81])  # 2 m/s^2 along the heading, plus gravity
    imu = msgs.imu_from_array([*q, 0, 0, 0, *(rotation.T @ world)])
    np.testing.assert_allclose(level_acceleration(imu, None), [2.0, 0.0], atol=1e-9)
    imu.orientation_covariance[0] = -1  # REP-145: no orientation -> the fallback (odometry), else level
    np.testing.assert_allclose(level_acceleration(imu, tuple(q)), [2.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(level_acceleration(imu, None), (rotation.T @ world)[:2])


def test_stuck_triggers_a_recovery_manoeuvre_then_the_policy_resumes():
    cfg = rc_config(**{"adapter.recovery.steering": "straight", "safety.max_rate": None})
    clock, car, runner = memory_setup(cfg, ConstantPolicy([0.3, 0.5]))
    ticks = []
    for _ in range(int(3.0 / PERIOD) + 1):  # the policy pushes, the car does not move: stuck after 3 s
        car.publish(x=0.5, y=0.01 * np.sin(len(ticks)))  # a little odometry noise
        ticks.append(runner.tick())
        clock.advance(PERIOD)
    assert [t.status["event"] for t in ticks].count("stuck") == 1 and ticks[-1].status["event"] == "stuck"
    assert all(t.mode == "policy" for t in ticks)
    recovery = []
    for _ in range(int(1.0 / PERIOD) + 2):
        car.publish(x=0.5)
        recovery.append(runner.tick())
        clock.advance(PERIOD)
    modes = [t.mode for t in recovery]
    assert modes[:50] == ["recovery"] * 50 and modes[-1] == "policy"  # 1 s of reverse, then the policy again
    np.testing.assert_allclose(recovery[0].action, [0.0, -0.6])  # the manoeuvre, recorded as the tick's action
    np.testing.assert_allclose(car.commands[-3].drive.speed, -0.6, rtol=1e-6)
    assert recovery[0].status["recovering"] and runner.stats.totals["recovery_ticks"] == 50


def test_crash_from_the_imu_and_no_stuck_detection_while_stopped():
    clock, car, runner = memory_setup(rc_config(**{"adapter.seed": 5}), ConstantPolicy([0.0, 0.5]))
    for _ in range(200):  # 4 s without motion, but the inputs are stale: never "stuck"
        car.publish(imu=False)
        assert runner.tick().mode == "stale"
        clock.advance(PERIOD)
    car.publish()
    car.imu.publish(msgs.imu_from_array([0, 0, 0, 1, 0, 0, 0, 0, 0, -9.81]))  # upside down
    tick = runner.tick()
    assert tick.status["event"] == "crash" and tick.status["crash_count"] == 1
    clock.advance(PERIOD)
    car.publish()
    tick = runner.tick()
    assert tick.mode == "recovery" and -1 <= tick.action[0] <= 1 and tick.action[1] == -0.6
    clock2, car2, runner2 = memory_setup(rc_config(**{"adapter.seed": 5}), ConstantPolicy([0.0, 0.5]))
    runner2.adapter.start_recovery(0, "crash")
    assert runner2.adapter.recovery_action[0] == tick.action[0]  # seeded: the same random steering


@pytest.mark.parametrize("output", ["twist", "twist_stamped", "ackermann"])
def test_command_messages_and_the_teleop_inverse(output):
    adapter = RcCarAdapter({"output": output, "twist_angular": "yaw_rate", "speed_scale": 2.0,
                            "course": {"points": SQUARE}}, 50.0, {})
    msg = adapter.command_msg(np.array([0.5, 0.5]), stamp_ns=123)
    if output == "ackermann":
        np.testing.assert_allclose(msgs.ackermann_to_array(msg), [0.225, 1.0], rtol=1e-6)
    else:
        twist = msgs.twist_to_array(msg)
        np.testing.assert_allclose(twist[[0, 5]], [1.0, math.tan(0.225) / 0.30])
        assert (output == "twist_stamped") == hasattr(msg, "header")
    np.testing.assert_allclose(adapter.teleop_action(msg), [0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(msgs.twist_to_array(adapter.stop_msg()) if output != "ackermann"
                               else msgs.ackermann_to_array(adapter.stop_msg()), 0.0)


def test_adapter_config_errors():
    with pytest.raises(ConfigError, match="adapter.recovery needs"):
        RcCarAdapter({"recovery": {"throttle": -2}, "course": {"points": SQUARE}}, 50.0, {})
    with pytest.raises(ConfigError, match=r"unknown keys \['gps'\]"):
        RcCarAdapter({"gps": True}, 50.0, {})
    with pytest.raises(ConfigError, match="stuck window"):
        RcCarAdapter({"stuck": {"window": 0}, "course": {"points": SQUARE}}, 50.0, {})
    with pytest.raises(ConfigError, match="course file"):
        RcCarAdapter({"course": {"file": "/nonexistent/course.yaml"}}, 50.0, {})
