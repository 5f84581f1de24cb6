"""real.robots.arm through the runner (configs/deploy/arm.yaml): observations by joint name, integrated position
targets and an absolute gripper, holds on stops, velocity mode, Float64MultiArray output. Memory transport."""

from __future__ import annotations

import numpy as np
import pytest
from test_real_runner import ConstantPolicy, rc_config

from real import msgs
from real.deploy import build_runner
from real.robots.arm import ArmAdapter
from real.transport.memory import FakeClock, MemoryBus, MemoryTransport
from robolearn.errors import ConfigError

JOINTS = ["yaw", "shoulder", "elbow", "wrist", "roll", "gripper"]
HOME = np.array([0.1, 0.5, 1.2, 1.0, 0.0, 0.04])
PERIOD = 1 / 25


class ScriptedArm:
    def __init__(self, bus: MemoryBus, clock: FakeClock, command_type: str = msgs.JOINT_STATE) -> None:
        t = MemoryTransport(bus, clock)
        self.joints = t.publisher("/joint_states", msgs.JOINT_STATE, "sensor_data")
        self.ee = t.publisher("/ee_pose", "geometry_msgs/msg/PoseStamped", "sensor_data")
        self.goal = t.publisher("/goal", "geometry_msgs/msg/PointStamped")
        self.commands: list = []
        t.subscribe("/joint_command", command_type, lambda m, _t: self.commands.append(m))

    def publish(self, position=HOME, ee=(0.3, 0.0, 0.2)) -> None:
        names = JOINTS[::-1]  # the driver's order differs from the action order: slots and commands use names
        reverse = [np.ascontiguousarray(np.asarray(a, dtype=float)[::-1]) for a in (position, np.arange(6.0))]
        self.joints.publish(msgs.joint_state_from_arrays(names, *reverse))
        pose = msgs.zero_msg("geometry_msgs/msg/PoseStamped")
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = ee
        self.ee.publish(pose)


def setup(action, **changes):
    clock, bus = FakeClock(10**9), MemoryBus()
    cfg = rc_config("arm", **changes)
    arm = ScriptedArm(bus, clock, "std_msgs/msg/Float64MultiArray"
                      if cfg["adapter"]["output"] == "float64_multiarray" else msgs.JOINT_STATE)
    runner = build_runner(cfg, MemoryTransport(bus, clock), ConstantPolicy(action), {})
    return clock, arm, runner


def test_position_targets_from_joint_states_and_a_latched_goal():
    clock, arm, runner = setup([1.0, 0.0, -1.0, 0.0, 0.0, 1.0])
    assert runner.tick().mode == "stale" and not arm.commands  # no pose known: nothing to hold, nothing sent
    goal = msgs.zero_msg("geometry_msgs/msg/PointStamped")
    goal.point.x, goal.point.y, goal.point.z = 0.4, 0.1, 0.25
    arm.goal.publish(goal)
    arm.publish()
    tick = runner.tick()
    assert tick.mode == "policy"
    np.testing.assert_allclose(tick.obs[:12], [*HOME, *range(6)], rtol=1e-6)  # by joint name
    np.testing.assert_allclose(tick.obs[12:], [0.3, 0.0, 0.2, 0.4, 0.1, 0.25, 0.1, 0.1, 0.05], atol=1e-6)
    cmd = arm.commands[-1]
    assert list(cmd.name) == JOINTS
    # rate limit 0.5 per tick: yaw +0.5 * 1.5 rad/s / 25 Hz, elbow -0.03; the gripper (1.0 per tick) fully open
    np.testing.assert_allclose(cmd.position, HOME + [0.03, 0, -0.03, 0, 0, 0.04], atol=1e-9)
    for _ in range(3):
        clock.advance(PERIOD)
        arm.publish()  # the measured pose lags: targets integrate from the targets, not the measurement
        tick = runner.tick()
    np.testing.assert_allclose(arm.commands[-1].position[[0, 5]], [HOME[0] + 0.03 + 3 * 0.06, 0.08], atol=1e-9)
    clock.advance(10.0)  # joints stale (the goal never is): the stop holds the last MEASURED pose, not the targets
    tick = runner.tick()
    assert tick.mode == "stale" and tick.safety.stale == ("ee", "joints")
    np.testing.assert_allclose(arm.commands[-1].position, HOME)


def test_a_blocked_arm_does_not_wind_up_and_stops_hold_the_measured_pose():
    clock, arm, runner = setup([1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    arm.goal.publish(msgs.zero_msg("geometry_msgs/msg/PointStamped"))
    for _ in range(50):  # 2 s of +1 on yaw while the arm stays blocked at HOME
        arm.publish()
        assert runner.tick().mode == "policy"
        clock.advance(PERIOD)
    lead = arm.commands[-1].position[0] - HOME[0]
    assert lead == pytest.approx(0.3)  # adapter.max_lead, not 50 ticks of integration (clipped at 2.6 rad)
    runner.safety.engage_estop()
    arm.publish()
    assert runner.tick().mode == "estop"
    np.testing.assert_allclose(arm.commands[-1].position, HOME)  # the measured pose, gripper included
    runner.safety.reset_estop()
    clock.advance(PERIOD)
    arm.publish()
    assert runner.tick().mode == "policy"  # targets restart from the measured pose
    np.testing.assert_allclose(arm.commands[-1].position[0], HOME[0] + 0.03)


def test_the_gripper_resumes_from_its_held_opening_not_half_open():
    clock, arm, runner = setup([0.0, 0.0, 0.0, 0.0, 0.0, 1.0], **{"safety.max_rate": [12.5] * 6})
    arm.goal.publish(msg := msgs.zero_msg("geometry_msgs/msg/PointStamped"))
    open_ = HOME.copy()
    open_[5] = 0.08  # fully open: normalized +1
    arm.publish(open_)
    runner.tick()  # startup: the limiter starts from the held opening (+1), not 0 (0.04 m)
    assert arm.commands[-1].position[5] == pytest.approx(0.08)
    runner.safety.engage_estop()
    clock.advance(PERIOD)
    arm.publish(open_)
    runner.tick()
    assert arm.commands[-1].position[5] == pytest.approx(0.08)  # held
    runner.safety.reset_estop()
    clock.advance(PERIOD)
    arm.goal.publish(msg)
    arm.publish(open_)
    assert runner.tick().mode == "policy"
    assert arm.commands[-1].position[5] == pytest.approx(0.08)  # 0.5 per tick from +1 would be 0.06 m from 0


def test_velocity_mode_and_float64_output_stop_at_zero():
    clock, arm, runner = setup([0.2, -0.2, 0.0, 0.0, 0.0, 0.0], **{"adapter.mode": "velocity",
                                                                   "adapter.output": "float64_multiarray"})
    arm.goal.publish(msgs.zero_msg("geometry_msgs/msg/PointStamped"))
    arm.publish()
    runner.tick()
    np.testing.assert_allclose(arm.commands[-1].data, [0.3, -0.3, 0, 0, 0, 0], atol=1e-9)  # rad/s
    runner.safety.engage_estop()
    clock.advance(PERIOD)
    arm.publish()
    assert runner.tick().mode == "estop" and np.all(np.asarray(arm.commands[-1].data) == 0)


def test_arm_adapter_checks():
    adapter = ArmAdapter({"joints": ["a", "b"], "scale": [1.0, 2.0], "low": [-1, 0], "high": [1, 1],
                          "absolute": [False, True]}, 10.0, {})
    adapter.measured = np.array([0.5, 0.5])
    msg = adapter.command_msg(np.array([1.0, -1.0]))
    np.testing.assert_allclose(msg.position, [0.6, 0.0])
    np.testing.assert_allclose(adapter.hold_command(), [0.0, -1.0])  # integrated: hold; absolute: its target
    np.testing.assert_allclose(adapter.teleop_action(msgs.joint_state_from_arrays(["b", "a"], [1.0, 0.65])),
                               [0.5, 1.0])
    with pytest.raises(ConfigError, match="one value per joint"):
        ArmAdapter({"joints": ["a", "b"], "scale": [1.0, 2.0, 3.0]}, 10.0, {})
    with pytest.raises(ConfigError, match="absolute joints need finite"):
        ArmAdapter({"joints": ["a"], "absolute": [True]}, 10.0, {})
    from real.observation import Received

    with pytest.raises(ConfigError, match=r"lacks joints \['b'\]"):
        adapter.update({"joints": Received(msgs.joint_state_from_arrays(["a"], [0.0]))}, 0)
