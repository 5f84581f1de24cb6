"""real.runner: observations from topics, the stale watchdog, e-stop, teleop, limits, hooks, policy swaps, pacing.

The helpers at the top (configs, tiny policies, a scripted car on the memory bus) serve the other test_real_*
runner tests too. Everything here runs on the memory transport with a fake clock except the pacing test.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import pytest
import torch

from real import msgs
from real.deploy import build_runner, compose_deploy
from real.robots.course import Course
from real.runner import PolicyRunner, RunnerConfig
from real.timing import STAT_NAMES, LoopStats, next_deadline
from real.transport.memory import FakeClock, MemoryBus, MemoryTransport
from robolearn.checkpoints import checkpoint
from robolearn.errors import ConfigError

SQUARE = [[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0]]  # a small course, driven counter-clockwise
def set_key(cfg: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        cfg = cfg[k]
    cfg[keys[-1]] = value


def rc_config(robot: str = "rc_car", **changes: Any) -> dict:
    """The shipped deploy config with the square course (rc_car) and ``changes`` by dotted key (a__b = a.b).

    The rc_car runs at 50 Hz here with the shipped 0.2 per tick rate limit (the tests' timings assume it); the
    shipped default (rate_hz null: 20 Hz without a checkpoint) is tested in test_rate_follows_the_checkpoint."""
    cfg = compose_deploy(robot)
    if robot == "rc_car":
        cfg["adapter"]["course"]["points"] = SQUARE
        cfg["rate_hz"], cfg["safety"]["max_rate"] = 50.0, [10.0, 10.0]
    for key, value in changes.items():
        set_key(cfg, key.replace("__", "."), value)
    return cfg


class ConstantPolicy(torch.nn.Module):
    """Always the same action; counts its calls (the runner's dry run is one)."""

    def __init__(self, action: list[float]) -> None:
        super().__init__()
        self.action = torch.nn.Parameter(torch.tensor(action, dtype=torch.float32))
        self.calls = 0
        self.seen: list[np.ndarray] = []

    def forward(self, obs: dict) -> torch.Tensor:
        self.calls += 1
        self.seen.append(obs["policy"][0].numpy().copy())
        return self.action.expand(obs["policy"].shape[0], -1)


class ScriptedCar:
    """The robot's side of the memory bus: publishes /odom, /imu, /estop, teleop; records commands."""

    def __init__(self, bus: MemoryBus, clock: FakeClock) -> None:
        self.transport = MemoryTransport(bus, clock)
        t = self.transport
        self.odom = t.publisher("/odom", msgs.ODOMETRY, "sensor_data")
        self.imu = t.publisher("/imu", msgs.IMU, "sensor_data")
        self.estop = t.publisher("/estop", msgs.BOOL)
        self.teleop = t.publisher("/teleop/ackermann_cmd", msgs.ACKERMANN_DRIVE_STAMPED)
        self.commands: list[Any] = []
        t.subscribe("/ackermann_cmd", msgs.ACKERMANN_DRIVE_STAMPED, lambda m, _t: self.commands.append(m))

    def publish(self, x: float = 0.0, y: float = 0.0, yaw: float = 0.0, vx: float = 0.0, wz: float = 0.0,
                accel: tuple[float, float] = (0.0, 0.0), imu: bool = True) -> None:
        q = [0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)]
        self.odom.publish(msgs.odometry_from_array([x, y, 0.0, *q, vx, 0, 0, 0, 0, wz], 1, "odom", "base_link"))
        if imu:
            self.imu.publish(msgs.imu_from_array([*q, 0, 0, wz, accel[0], accel[1], 9.81], 1, "base_link"))

    def last_command(self) -> np.ndarray:
        return msgs.ackermann_to_array(self.commands[-1])


def memory_setup(cfg: dict, policy: torch.nn.Module, run_config: dict | None = None):
    """(clock, scripted car, runner) on one memory bus with a fake clock at 1 s."""
    clock, bus = FakeClock(10**9), MemoryBus()
    car = ScriptedCar(bus, clock)
    runner = build_runner(cfg, MemoryTransport(bus, clock), policy, run_config or {})
    return clock, car, runner


# --- tests -------------------------------------------------------------------------------------------------

PERIOD = 0.02  # the rc_car config's 50 Hz


def test_observation_from_topics_and_the_command_message():
    policy = ConstantPolicy([0.5, 0.3])
    clock, car, runner = memory_setup(rc_config(), policy)
    car.publish(x=0.5, y=0.0, yaw=math.pi / 2, vx=1.2, wz=0.4, accel=(1.0, 0.5))
    car.imu.publish(msgs.imu_from_array([0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4), 0, 0, 0.4, 3.0, 0.5,
                                         9.81]))
    tick = runner.tick()
    assert tick.mode == "policy" and runner.builder.names[:2] == ["forward_speed", "yaw_rate"]
    # speed, yaw rate; IMU mean over the period (gravity removed); checkpoints 1 and 2 in the car's frame
    # (facing +y at (0.5, 0): (2, 0) is 1.5 m to the right, (2, 2) 2 m ahead and 1.5 m right); no previous action
    np.testing.assert_allclose(tick.obs, [1.2, 0.4, 2.0, 0.5, 0.0, -1.5, 2.0, -1.5, 0.0, 0.0], atol=1e-5)
    np.testing.assert_allclose(tick.command, [0.2, 0.2])  # rate limit: 10 units/s at 50 Hz = 0.2 per tick
    np.testing.assert_allclose(car.last_command(), [0.2 * 0.45, 0.2], rtol=1e-6)  # steering rad, raw throttle
    assert car.commands[-1].header.frame_id == "base_link" and msgs.stamp_ns(car.commands[-1].header.stamp) > 0
    clock.advance(PERIOD)
    car.publish(x=0.5, yaw=math.pi / 2)
    tick = runner.tick()
    np.testing.assert_allclose(tick.obs[8:], [0.2, 0.2])  # the previous command sent
    np.testing.assert_allclose(tick.command, [0.4, 0.3])
    assert tick.status["next_checkpoint"] == 1 and tick.status["checkpoints_passed"] == 0


def test_stale_or_missing_inputs_stop_without_a_policy_step():
    policy = ConstantPolicy([0.0, 0.5])
    clock, car, runner = memory_setup(rc_config(), policy)
    calls = policy.calls
    tick = runner.tick()  # nothing received yet
    assert tick.mode == "stale" and set(tick.safety.stale) == {"odom", "imu"} and tick.raw_action is None
    assert policy.calls == calls and np.all(car.last_command() == 0)
    car.publish(imu=False)
    tick = runner.tick()
    assert tick.mode == "stale" and tick.safety.stale == ("imu",)
    car.publish()
    assert runner.tick().mode == "policy" and policy.calls == calls + 1
    clock.advance(3 * PERIOD)  # exactly the maximum age: still fresh
    assert runner.tick().mode == "policy"
    clock.advance(0.001)
    tick = runner.tick()
    assert tick.mode == "stale" and np.all(tick.command == 0) and np.all(car.last_command() == 0)
    assert runner.stats.totals["stale_ticks"] == 3


def test_estop_latches_through_the_runner():
    clock, car, runner = memory_setup(rc_config(), ConstantPolicy([0.1, 0.1]))
    car.publish()
    assert runner.tick().mode == "policy"
    car.estop.publish(msgs.bool_msg(True))
    for value in (True, False):  # false does not unlatch
        clock.advance(PERIOD)
        car.publish()
        car.estop.publish(msgs.bool_msg(value))
        tick = runner.tick()
        assert tick.mode == "estop" and tick.safety.estop and np.all(car.last_command() == 0)
    runner.safety.reset_estop()
    clock.advance(PERIOD)
    car.publish()
    assert runner.tick().mode == "policy" and car.last_command()[1] > 0


def test_teleop_overrides_the_policy_and_is_recorded():
    clock, car, runner = memory_setup(rc_config(**{"safety.max_rate": None}), ConstantPolicy([0.5, 0.5]))
    car.publish()
    car.teleop.publish(msgs.ackermann_from_array([-0.225, 0.4]))
    tick = runner.tick()
    assert tick.mode == "teleop" and tick.safety.intervention
    np.testing.assert_allclose(tick.command, [-0.5, 0.4], rtol=1e-6)  # the human's command, normalized
    np.testing.assert_allclose(tick.safety.action, [-0.5, 0.4], rtol=1e-6)  # what an actor records
    clock.advance(0.6)  # past teleop_hold: the policy drives again
    car.publish()
    assert runner.tick().mode == "policy" and runner.stats.totals["intervention_ticks"] == 1


def test_policy_output_is_clipped_and_nan_gives_the_zero_command():
    clock, car, runner = memory_setup(rc_config(**{"safety.max_rate": None}), ConstantPolicy([5.0, -3.0]))
    car.publish()
    tick = runner.tick()
    np.testing.assert_allclose(tick.raw_action, [5.0, -3.0])
    np.testing.assert_allclose(tick.command, [1.0, -1.0])
    runner.swap_policy(ConstantPolicy([float("nan"), 0.2]))
    clock.advance(PERIOD)
    car.publish()
    tick = runner.tick()
    assert tick.mode == "fault" and tick.safety.nonfinite and np.all(tick.command == 0)


def test_hooks_and_policy_swaps_between_ticks(caplog):
    policy = ConstantPolicy([0.1, 0.1])
    clock, car, runner = memory_setup(rc_config(**{"safety.max_rate": None}), policy)
    seen = []
    runner.add_hook(seen.append)
    runner.add_hook(lambda tick: 1 / 0)  # a broken hook is logged; the loop goes on
    car.publish()
    runner.tick()
    runner.swap_policy(state_dict={"action": torch.tensor([0.3, -0.2])}, version=7)
    np.testing.assert_allclose(policy.action.detach(), [0.1, 0.1])  # nothing changes until the next tick
    with pytest.raises(ValueError, match="does not fit"):
        runner.swap_policy(state_dict={"action": torch.zeros(3)})
    clock.advance(PERIOD)
    car.publish()
    with caplog.at_level(logging.ERROR):
        runner.tick()
    assert [t.policy_version for t in seen] == [0, 7] and [t.index for t in seen] == [0, 1]
    np.testing.assert_allclose(seen[1].command, [0.3, -0.2], rtol=1e-6)
    assert "tick hook" in caplog.text


def _checkpoint(tmp_path, obs_dim: int = 10, env: str = "rc-car-track"):
    from policies.actor_critic import ActorCritic

    torch.manual_seed(0)
    model = ActorCritic(obs_dim, 2, actor_hidden=(16, 16), critic_hidden=(16,))
    run = {"env": {"name": env, "num_envs": 1, "backend": "mujoco", "overrides": {"ctrl_dt": 0.02}}}
    return checkpoint.save(tmp_path / "ckpt", {"policy": model.config, "run": run}, model.state_dict())


def test_checkpoint_policy_and_layout_checks(tmp_path):
    cfg = rc_config(checkpoint=str(_checkpoint(tmp_path)))
    clock, bus = FakeClock(10**9), MemoryBus()
    car = ScriptedCar(bus, clock)
    runner = build_runner(cfg, MemoryTransport(bus, clock))
    assert runner.adapter.run_config["env"]["name"] == "rc-car-track"
    car.publish(vx=1.0)
    tick = runner.tick()
    assert tick.mode == "policy" and np.all(np.abs(tick.command) <= 1) and np.all(np.isfinite(tick.raw_action))
    swapped = {k: torch.zeros_like(v) for k, v in runner.policy.state_dict().items()}
    runner.swap_policy(state_dict=swapped)
    clock.advance(PERIOD)
    car.publish()
    assert runner.tick().policy_version == 1
    # the trained task's observation order is enforced; a policy of another width is refused
    cfg["observation"] = cfg["observation"][1:] + cfg["observation"][:1]
    with pytest.raises(ConfigError, match="trained on rc-car-track"):
        build_runner(cfg, MemoryTransport(bus, clock))
    cfg = rc_config(checkpoint=str(_checkpoint(tmp_path, obs_dim=7, env="other")))
    with pytest.raises(ConfigError, match="10-entry observation"):
        build_runner(cfg, MemoryTransport(bus, clock))


@pytest.mark.parametrize(("change", "message"), [
    ({"rate_hz": 0}, "rate_hz"),
    ({"inputs": {"odom": {"topic": "/odom"}}}, "needs a topic and a type"),
    ({"observation": [{"name": "a", "from": "wheel.speed"}]}, "not among the inputs"),
    ({"observation": [{"name": "a", "from": "robot.altitude"}]}, "offers no 'altitude'"),
    ({"observation": [{"name": "a", "from": "action[5]"}]}, "out of range"),
    ({"observation": [{"name": "a", "from": "odom.pose", "reduce": "max"}]}, "reduce must be"),
    ({"command": {"topic": "/c", "stamp": "gps"}}, "command.stamp"),
    ({"safety": {"low": [0.1, 0], "high": [1, 1]}}, "must lie within"),
    ({"safety": {"max_rate": [1, 1], "speed": 3}}, "unknown keys"),
    ({"adapter": {"output": "pwm"}}, "adapter.output"),
    ({"adapter": {"course": {"track": "monza"}}}, "course track"),
    ({"robot": "boat"}, "unknown robot"),
    ({"lidar": True}, "unknown keys"),
])
def test_bad_configs_name_the_field(change, message):
    cfg = rc_config()
    cfg.update(change)
    with pytest.raises(ConfigError, match=message):
        build_runner(cfg, MemoryTransport(), ConstantPolicy([0.0, 0.0]), {})
    with pytest.raises(ConfigError, match="no runner preset for robot .boat."):
        compose_deploy("boat")


def test_field_paths_by_index_name_and_mean():
    from real.observation import InputSpec, ObservationBuilder, Received, Slot

    inputs = {"j": InputSpec("j", "/joint_states", msgs.JOINT_STATE, keep_period=True)}
    slots = [Slot("elbow", "j.position[elbow]"), Slot("first", "j.velocity[0]", scale=2.0, offset=1.0),
             Slot("mean", "j.position[1]", reduce="mean"), Slot("diff", "j.position[0]", minus="j.position[1]")]
    builder = ObservationBuilder(slots, inputs, num_actions=1)
    assert builder.inputs_used == ["j"] and builder.averaged_inputs == ["j"]
    a = msgs.joint_state_from_arrays(["shoulder", "elbow"], [0.1, 0.2], [0.5, 0.0])
    b = msgs.joint_state_from_arrays(["shoulder", "elbow"], [0.1, 0.4], [0.5, 0.0])
    obs = builder.build({"j": Received(b, 1, [a, b], 2)}, {}, np.zeros(1))
    np.testing.assert_allclose(obs, [0.4, 2.0, 0.3, -0.3], rtol=1e-6)
    obs = builder.build({"j": Received(None, None, [], 0)}, {}, np.zeros(1))
    assert np.all(np.isnan(obs))
    with pytest.raises(ConfigError, match="no 'wrist'"):
        ObservationBuilder([Slot("w", "j.position[wrist]")], inputs, 1).build({"j": Received(b)}, {}, np.zeros(1))


def test_loop_statistics_and_their_message():
    stats = LoopStats(period_ns=10_000_000)
    for i, period in enumerate([None, 10.0, 10.2, 9.8, 30.0]):
        stats.record(None if period is None else int(period * 1e6), 50_000, 200_000, missed=i == 4,
                     mode={2: "stale", 3: "fault"}.get(i, "policy"))
    s = stats.summary()
    assert s["ticks"] == 5 and s["missed_ticks"] == 1 and s["stale_ticks"] == 1 and s["fault_ticks"] == 1
    assert s["period_max_ms"] == pytest.approx(30.0) and s["jitter_max_ms"] == pytest.approx(20.0)
    assert s["compute_p50_ms"] == pytest.approx(0.2) and s["lateness_p50_ms"] == pytest.approx(0.05)
    msg = stats.message()
    assert msg.layout.dim[0].label.split(",") == list(STAT_NAMES)
    np.testing.assert_allclose(msgs.float32_multiarray_to_array(msg), [s[k] for k in STAT_NAMES], rtol=1e-6)
    assert next_deadline(100, 105, 10) == (110, 0) and next_deadline(100, 135, 10) == (140, 3)


def test_run_paces_on_absolute_deadlines_and_stops_the_car_on_exit():
    """Real clock, 100 Hz: one slow tick skips deadlines (counted); the loop ends with the stop message, also
    when the policy raises."""
    cfg = rc_config(rate_hz=100, **{"stats.interval_s": 0.1})
    bus = MemoryBus()
    car = ScriptedCar(bus, time.monotonic_ns)
    policy = ConstantPolicy([0.0, 0.5])
    runner = build_runner(cfg, MemoryTransport(bus), policy, {})
    stats_msgs = []
    car.transport.subscribe("/robolearn/loop_stats", msgs.FLOAT32_MULTI_ARRAY, lambda m, t: stats_msgs.append(m))
    ticks = []

    def hook(tick):
        car.publish()  # fresh inputs for the next tick
        ticks.append(tick)
        if tick.index == 10:
            time.sleep(0.025)  # an overrun: the deadlines it covers are skipped, not made up

    runner.add_hook(hook)
    car.publish()
    summary = runner.run(max_ticks=30)
    deadlines = np.array([t.time_ns - t.lateness_ns for t in ticks])
    steps = np.diff(deadlines - deadlines[0])
    assert np.all(steps % 10_000_000 == 0)  # every deadline on the 10 ms grid, whatever the ticks took
    np.testing.assert_array_equal(steps // 10_000_000 - 1, [t.missed for t in ticks[1:]])
    assert summary["ticks"] == 30 and summary["missed_ticks"] == sum(t.missed for t in ticks) >= 2
    assert ticks[11].missed >= 2 and all(t.lateness_ns >= 0 for t in ticks)
    assert stats_msgs and np.all(car.last_command() == 0)  # stop message last
    runner.swap_policy(ConstantPolicy([float("inf"), 0.0]))  # an inf action: fault ticks, the zero command
    car.publish()  # fresh inputs: on a loaded machine the pause since the last tick can exceed max_obs_age
    runner.run(max_ticks=2)
    assert [t.mode for t in ticks[-2:]] == ["fault", "fault"] and np.all(car.last_command() == 0)

    class Boom(torch.nn.Module):
        def forward(self, obs):
            raise RuntimeError("policy crashed")

    with pytest.raises(ConfigError, match="policy crashed"):
        runner.swap_policy(Boom())  # a new module is dry-run at swap time, like the first one

    class CrashLater(ConstantPolicy):
        def forward(self, obs):
            if self.calls:
                raise RuntimeError("policy crashed")
            return super().forward(obs)

    runner.swap_policy(CrashLater([0.0, 0.0]))
    count = len(car.commands)
    with pytest.raises(RuntimeError, match="policy crashed"):
        runner.run(max_ticks=5)
    assert len(car.commands) >= count + 3 and np.all(car.last_command() == 0)


def test_deploy_cli_with_a_scripted_policy(capsys):
    from robolearn.commands.cli import main

    code = main(["deploy", "robot=rc_car", "policy=sim.tasks.rc_car_control:demo_lap_policy", "transport=memory",
                 "duration=0.1"])  # rate_hz null: 20 Hz without a checkpoint
    assert code == 0
    assert main(["deploy", "robot=rc_car", "transport=memory"]) == 2  # neither checkpoint nor policy
    assert "exactly one of checkpoint" in capsys.readouterr().err


def test_course_sources(tmp_path):
    course = Course(SQUARE)
    for name in ("c.yaml", "c.csv"):
        loaded = Course.load(course.save(tmp_path / name))
        np.testing.assert_allclose(loaded.points, course.points)
    circle = [[np.cos(a), np.sin(a)] for a in np.linspace(0, 2 * np.pi, 200, endpoint=False)]
    assert len(Course.from_path(np.asarray(circle) * 3, spacing=1.0)) == 19  # 2 pi 3 m / 1 m
    track = Course.from_config({}, {"env": {"name": "rc-car-track", "overrides": {"track": "oval"}}})
    assert len(track) == 28 and track.pass_radius == pytest.approx(1.1)  # the oval: 28 m, 1.2 m wide
    with pytest.raises(ConfigError, match="at least 3"):
        Course([[0, 0], [1, 1]])
    assert isinstance(RunnerConfig.from_dict({k: v for k, v in rc_config().items() if k in (
        "robot", "inputs", "observation", "command")}), RunnerConfig)
    assert PolicyRunner.act.__doc__


def test_a_brake_stop_goes_out_as_the_brake_stamped_now_also_on_exit():
    cfg = rc_config(**{"safety.stop": "brake", "safety.brake_command": [0.0, -1.0], "command.stamp": "odom"})
    clock, car, runner = memory_setup(cfg, ConstantPolicy([0.0, 0.2]))
    car.odom.publish(msgs.odometry_from_array([0.0] * 6 + [1.0] + [0.0] * 6, 5, "odom", "base_link"))
    car.imu.publish(msgs.imu_from_array([0, 0, 0, 1, 0, 0, 0, 0, 0, 9.81]))
    assert runner.tick().mode == "policy" and msgs.stamp_ns(car.commands[-1].header.stamp) == 5  # the odom stamp
    clock.advance(1.0)  # odom stale: the brake on the wire (not zero), stamped now (not the stale odom stamp)
    before = time.time_ns()
    tick = runner.tick()
    assert tick.mode == "stale"
    np.testing.assert_allclose(car.last_command(), [0.0, -1.0])
    assert msgs.stamp_ns(car.commands[-1].header.stamp) >= before
    car.publish()
    count = len(car.commands)
    runner.run(max_ticks=1)
    assert len(car.commands) >= count + 3
    np.testing.assert_allclose(car.last_command(), [0.0, -1.0])  # the exit path sends the brake too


def test_links_are_checked_and_require_estop_stays_stopped_until_an_estop_publisher_matches(caplog):
    clock, bus = FakeClock(10**9), MemoryBus()
    runner = build_runner(rc_config(require_estop=True), MemoryTransport(bus, clock), ConstantPolicy([0.0, 0.2]), {})
    car = MemoryTransport(bus, clock)
    car.publisher("/odom", msgs.ODOMETRY, "sensor_data").publish(
        msgs.odometry_from_array([0.0] * 6 + [1.0] + [0.0] * 6))
    car.publisher("/imu", msgs.IMU, "sensor_data").publish(msgs.imu_from_array([0, 0, 0, 1, 0, 0, 0, 0, 0, 9.81]))
    tick = runner.tick()
    assert tick.mode == "stale" and tick.safety.stale == ("estop_link",) and tick.raw_action is None
    with caplog.at_level(logging.WARNING):
        problems = runner.check_links()
    assert len(problems) == 2 and "no e-stop publisher on /estop" in caplog.text and "nobody subscribes" in caplog.text
    car.publisher("/estop", msgs.BOOL)
    car.subscribe("/ackermann_cmd", msgs.ACKERMANN_DRIVE_STAMPED, lambda m, t: None)
    assert runner.check_links() == [] and runner.tick().mode == "policy"
    with pytest.raises(ConfigError, match="needs an estop topic"):
        build_runner(rc_config(require_estop=True, estop=None), MemoryTransport(bus, clock), ConstantPolicy([0, 0]), {})


def test_a_malformed_teleop_message_is_dropped_and_a_stats_failure_does_not_end_control(caplog):
    clock, car, runner = memory_setup(rc_config(), ConstantPolicy([0.0, 0.2]))
    bad = msgs.zero_msg(msgs.ACKERMANN_DRIVE_STAMPED)
    bad.drive = None  # not convertible: dropped in the subscription callback (the transport thread), counted
    with caplog.at_level(logging.WARNING):
        runner._on_teleop(bad, clock())
    car.publish()
    assert runner.bad_teleop == 1 and "dropped a teleop message" in caplog.text and runner.tick().mode == "policy"

    def broken(msg):
        raise OSError("socket gone")

    runner.stats_publisher.publish = broken
    with caplog.at_level(logging.ERROR):
        assert runner.report()["ticks"] == 1
    assert "loop statistics failed" in caplog.text


def test_an_invalid_odometry_quaternion_stops_the_car():
    clock, car, runner = memory_setup(rc_config(), ConstantPolicy([0.0, 0.5]))
    car.odom.publish(msgs.odometry_from_array([0.5, 0.0, 0.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0]))  # zero quaternion
    car.imu.publish(msgs.imu_from_array([0, 0, 0, 1, 0, 0, 0, 0, 0, 9.81]))
    tick = runner.tick()
    assert np.isnan(tick.obs[4:8]).all()  # the checkpoint vectors need the yaw: NaN, not yaw 0
    assert tick.mode == "fault" and np.all(car.last_command() == 0) and runner.stats.totals["fault_ticks"] == 1


def test_rate_follows_the_checkpoint(caplog):
    cfg = compose_deploy("rc_car")
    cfg["adapter"]["course"]["points"] = SQUARE
    with caplog.at_level(logging.WARNING):
        runner = build_runner(cfg, MemoryTransport(MemoryBus(), FakeClock()), ConstantPolicy([0.0, 0.0]), {})
    assert runner.config.rate_hz == 20.0 and "20 Hz" in caplog.text  # no checkpoint: the sim task's rate, said
    assert runner.safety.config.max_delta == pytest.approx([0.2, 0.2])  # FastRLAP's 0.2 per tick
    trained = {"env": {"name": "rc-car-track", "overrides": {"ctrl_dt": 0.04}}}
    runner = build_runner(cfg, MemoryTransport(MemoryBus(), FakeClock()), ConstantPolicy([0.0, 0.0]), trained)
    assert runner.config.rate_hz == pytest.approx(25.0)
    with pytest.raises(ConfigError, match="force_rate"):
        build_runner({**cfg, "rate_hz": 50}, MemoryTransport(MemoryBus(), FakeClock()), ConstantPolicy([0, 0]), trained)
    runner = build_runner({**cfg, "rate_hz": 50, "force_rate": True}, MemoryTransport(MemoryBus(), FakeClock()),
                          ConstantPolicy([0.0, 0.0]), trained)
    assert runner.config.rate_hz == 50.0
