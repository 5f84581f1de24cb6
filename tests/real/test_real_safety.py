"""real.safety: every rule of the safety filter, the e-stop latch, teleop override and zero-on-exit."""

import logging
import signal
import threading

import numpy as np
import pytest

from real import msgs
from real.safety import SafetyConfig, SafetyFilter, publish_zero, subscribe_estop, zero_on_exit
from real.transport import LATCHED
from real.transport.memory import FakeClock, MemoryTransport

S = 1_000_000_000  # ns per second


def make(**kw) -> SafetyFilter:
    return SafetyFilter(SafetyConfig(**{"low": [-1.0, -1.0], "high": [1.0, 1.0], **kw}))


def test_config_validation():
    with pytest.raises(ValueError, match="low <= high"):
        SafetyConfig(low=[1.0], high=[0.0])
    with pytest.raises(ValueError, match="low <= high"):
        SafetyConfig(low=[0.0, 0.0], high=[1.0])
    with pytest.raises(ValueError, match="max_delta must be positive"):
        SafetyConfig(low=[0.0], high=[1.0], max_delta=0)
    with pytest.raises(ValueError, match="max_accel must be positive"):
        SafetyConfig(low=[0.0], high=[1.0], max_accel=[-1])
    with pytest.raises(ValueError, match="'zero' or 'brake'"):
        SafetyConfig(low=[0.0], high=[1.0], stop="coast")
    with pytest.raises(ValueError, match="needs a brake_command"):
        SafetyConfig(low=[0.0], high=[1.0], stop="brake")
    with pytest.raises(ValueError, match="must lie within"):
        SafetyConfig(low=[-1.0], high=[1.0], stop="brake", brake_command=[-2.0])
    with pytest.raises(ValueError, match="zero command"):
        SafetyConfig(low=[0.5], high=[1.0])  # zero is not a valid command here: give a brake command
    with pytest.raises(ValueError, match="max_obs_age"):
        SafetyConfig(low=[0.0], high=[1.0], max_obs_age={"odom": 0.0})
    with pytest.raises(ValueError, match="shape"):
        make().filter([0.0, 0.0, 0.0], 0)
    with pytest.raises(ValueError, match="teleop_hold"):
        make(teleop_hold=float("nan"))
    with pytest.raises(ValueError, match="max_accel must be positive and finite"):
        make(max_accel=np.inf)  # inf would turn the braking distance into NaN steps


def test_passthrough_reports_nothing():
    f = make()
    command, info = f.filter([0.3, -0.2], now_ns=0)
    np.testing.assert_array_equal(command, [0.3, -0.2])
    np.testing.assert_array_equal(info.action, [0.3, -0.2])
    assert not (info.estop or info.stale or info.intervention or info.nonfinite or info.clamped)
    assert not (info.rate_limited or info.accel_limited or info.stopped)


def test_clamp():
    command, info = make().filter([2.0, -0.5], 0)
    np.testing.assert_array_equal(command, [1.0, -0.5])
    assert info.clamped and not info.stopped
    np.testing.assert_array_equal(info.action, [2.0, -0.5])  # the recorded action is the policy's


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_action_becomes_zero(bad):
    f = make(max_delta=0.5)
    f.filter([0.5, 0.5], 0)
    command, info = f.filter([bad, 0.5], 1)
    np.testing.assert_array_equal(command, [0.0, 0.0])  # not rate-limited: a stop goes out at once
    assert info.nonfinite and info.stopped
    command, _ = f.filter([1.0, 1.0], 2)  # the limiter restarts from the stop
    np.testing.assert_array_equal(command, [0.5, 0.5])


def test_nonfinite_observation_becomes_zero():
    f = make()
    for obs in ([0.0, np.nan], {"odom": [1.0], "imu": [np.inf]}):
        command, info = f.filter([0.5, 0.5], 0, obs=obs)
        np.testing.assert_array_equal(command, [0, 0])
        assert info.nonfinite
    assert not f.filter([0.5, 0.5], 0, obs={"odom": [1.0]})[1].nonfinite


def test_nonfinite_zero_is_clipped_into_bounds():
    f = SafetyFilter(SafetyConfig(low=[0.2], high=[1.0], stop="brake", brake_command=[0.2]))
    np.testing.assert_array_equal(f.filter([np.nan], 0)[0], [0.2])


def test_rate_limit():
    f = make(max_delta=[0.25, 0.5])
    out = [f.filter([1.0, -1.0], t) for t in range(5)]
    np.testing.assert_allclose([c for c, _ in out], [[0.25, -0.5], [0.5, -1.0], [0.75, -1.0], [1.0, -1.0], [1, -1]])
    assert [i.rate_limited for _, i in out] == [True, True, True, False, False]
    f.reset([1.0, -1.0])  # e.g. the robot's measured state
    np.testing.assert_allclose(f.filter([0.0, 0.0], 9)[0], [0.75, -0.5])


def test_reset_sanitizes_its_start_command():
    f = make(max_delta=0.5)
    f.reset([np.nan, 3.0])  # e.g. a measured state with a dropped-out sensor
    np.testing.assert_array_equal(f.last, [0.0, 1.0])  # NaN -> 0, clipped into [low, high]
    command, info = f.filter([0.3, 0.3], 0)
    np.testing.assert_array_equal(command, [0.3, 0.5])
    assert not info.nonfinite
    np.testing.assert_array_equal(f.filter([0.3, 0.3], 1)[0], [0.3, 0.3])  # no NaN stays behind
    with pytest.raises(ValueError, match="reset command has shape"):
        f.reset([0.0])


def test_a_nonfinite_command_never_goes_out():
    f = make(max_delta=0.5)
    f.last[:] = np.nan  # a corrupted limiter state, however it came about
    command, info = f.filter([0.3, 0.3], 0)
    np.testing.assert_array_equal(command, [0.0, 0.0])
    assert info.nonfinite and info.stopped
    command, info = f.filter([0.3, 0.3], 1)  # the limiter restarts from the stop
    np.testing.assert_array_equal(command, [0.3, 0.3])
    assert not info.nonfinite


def test_accel_limit_ramps_and_stops_at_target():
    f = SafetyFilter(SafetyConfig(low=[-5.0], high=[5.0], max_delta=1.0, max_accel=0.1))
    path = [0.0] + [float(f.filter([3.0], t)[0][0]) for t in range(40)]
    steps = np.diff(path)
    assert np.all(np.abs(np.diff(steps)) <= 0.1 + 1e-9)  # second difference bounded
    assert np.all(np.abs(steps) <= 1.0 + 1e-9)
    assert abs(path[-1] - 3.0) < 1e-9 and max(path) < 3.0 + 0.05  # arrives, barely overshooting
    command, info = f.filter([-3.0], 41)  # reversing starts gently
    assert info.accel_limited and info.rate_limited and command[0] == pytest.approx(2.9)


def test_stale_observation_zero():
    f = make(max_obs_age=0.1, max_delta=0.5)
    command, info = f.filter([0.5, 0.5], now_ns=S, obs_times=S - S // 20)
    assert not info.stale and command[0] == 0.5
    command, info = f.filter([0.5, 0.5], now_ns=S, obs_times=S - S // 5)
    np.testing.assert_array_equal(command, [0, 0])
    assert info.stale == ("obs",) and info.stopped
    _, info = f.filter([0.5, 0.5], now_ns=S, obs_times=None)  # never received
    assert info.stale == ("obs",)
    _, info = f.filter([0.5, 0.5], now_ns=S, obs_times={"odom": S, "image": S - S, "imu": None})
    assert info.stale == ("image", "imu")
    _, info = f.filter([0.5, 0.5], now_ns=S, obs_times={})  # no receive time at all: stale, not unwatched
    assert info.stale == ("obs",)


def test_stale_per_input_ages_and_brake():
    f = SafetyFilter(
        SafetyConfig(low=[-1, -1], high=[1, 1], max_obs_age={"image": 0.3, "odom": 0.05}, stop="brake",
                     brake_command=[0.0, -1.0])
    )  # fmt: skip
    fresh = {"image": S - S // 5, "odom": S, "debug": 0}  # "debug" is not watched
    command, info = f.filter([0.5, 0.5], S, fresh)
    assert not info.stale and command[1] == 0.5
    command, info = f.filter([0.5, 0.5], S, {"image": S})  # odom missing
    assert info.stale == ("odom",)
    np.testing.assert_array_equal(command, [0.0, -1.0])


def test_estop_latches_until_reset():
    clock = FakeClock()
    with MemoryTransport(clock=clock) as transport:
        f = make(stop="brake", brake_command=[0.0, -0.5])
        subscribe_estop(transport, f, "/estop", LATCHED)
        estop = transport.publisher("/estop", msgs.BOOL, LATCHED)
        assert not f.filter([0.5, 0.5], 0)[1].estop
        estop.publish(msgs.bool_msg(True))
        command, info = f.filter([0.5, 0.5], 1 * S)
        assert info.estop and info.stopped
        np.testing.assert_array_equal(command, [0.0, -0.5])
        estop.publish(msgs.bool_msg(False))  # releasing the button does not unlatch
        command, info = f.filter([0.5, 0.5], 2 * S, teleop=[0.3, 0.3])  # nor does a human command
        assert info.estop and info.intervention
        np.testing.assert_array_equal(command, [0.0, -0.5])
        f.reset_estop()
        command, info = f.filter([0.5, 0.5], 3 * S)
        assert not info.estop and command[0] == 0.5
        late = make()  # a filter that starts after the e-stop was pressed still sees it (latched topic)
        estop.publish(msgs.bool_msg(True))
        subscribe_estop(transport, late, "/estop", LATCHED)
        assert late.estopped


def test_teleop_override_is_an_intervention():
    f = make(teleop_hold=0.5, max_delta=1.0)
    command, info = f.filter([0.5, 0.5], 0, teleop=[-0.2, 3.0])
    np.testing.assert_array_equal(command, [-0.2, 1.0])  # clamped like any command
    assert info.intervention and info.clamped
    np.testing.assert_array_equal(info.action, [-0.2, 3.0])  # recorded: the human's action
    command, info = f.filter([0.5, 0.5], S // 2)  # no new input: the human's command holds
    assert info.intervention and command[0] == -0.2
    command, info = f.filter([0.5, 0.5], S // 2 + 1)  # hold expired: the policy is back
    assert not info.intervention
    np.testing.assert_array_equal(command, [0.5, 0.5])
    np.testing.assert_array_equal(info.action, [0.5, 0.5])


def test_teleop_during_stale_observations_still_stops():
    f = make(max_obs_age=0.1)
    command, info = f.filter([0.5, 0.5], S, obs_times=0, teleop=[0.3, 0.3])
    assert info.stale and info.intervention
    np.testing.assert_array_equal(command, [0, 0])


# --- zero on exit ---------------------------------------------------------------------------------------


@pytest.fixture
def cmd_vel():
    """A publisher on a memory transport and the list of messages that reached /cmd_vel."""
    with MemoryTransport() as transport:
        got = []
        transport.subscribe("/cmd_vel", msgs.TWIST_STAMPED, lambda m, t: got.append(msgs.twist_to_array(m)))
        yield transport.publisher("/cmd_vel", msgs.TWIST_STAMPED), got


def test_zero_on_normal_exit(cmd_vel):
    pub, got = cmd_vel
    with zero_on_exit(pub, interval=0):
        pub.publish(msgs.twist_stamped_from_array([1, 0, 0, 0, 0, 1]))
    assert len(got) == 4 and all(not np.any(g) for g in got[1:])


@pytest.mark.parametrize("error", [RuntimeError("policy crashed"), KeyboardInterrupt()])
def test_zero_on_exception_then_reraise(cmd_vel, error):
    pub, got = cmd_vel
    with pytest.raises(type(error)), zero_on_exit(pub, repeats=5, interval=0):
        pub.publish(msgs.twist_stamped_from_array([1, 0, 0, 0, 0, 1]))
        raise error
    assert len(got) == 6 and not np.any(got[-5:])


def _in_main_thread():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")


def test_zero_on_sigint(cmd_vel):
    _in_main_thread()
    pub, got = cmd_vel
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # what Python installs for Ctrl-C
    try:
        with pytest.raises(KeyboardInterrupt), zero_on_exit(pub, interval=0):
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(got) == 3


def test_zero_on_sigterm_restores_handler(cmd_vel):
    _in_main_thread()
    pub, got = cmd_vel
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info, zero_on_exit(pub, interval=0):
        signal.raise_signal(signal.SIGTERM)
    assert exit_info.value.code == 128 + signal.SIGTERM and len(got) == 3
    assert signal.getsignal(signal.SIGTERM) is before


def test_zero_on_sighup(cmd_vel):
    _in_main_thread()
    pub, got = cmd_vel
    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(SystemExit) as exit_info, zero_on_exit(pub, interval=0):
        signal.raise_signal(signal.SIGHUP)  # the ssh session dropped
    assert exit_info.value.code == 128 + signal.SIGHUP and len(got) == 3
    assert signal.getsignal(signal.SIGHUP) is before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_zeros_skips_none(sig):
    """Ctrl-C (or SIGTERM) again while the zero commands go out: every one of them is still sent."""
    _in_main_thread()

    class Interrupted:
        msg_type, topic = msgs.TWIST, "/cmd_vel"

        def __init__(self):
            self.sent = []

        def publish(self, msg):
            signal.raise_signal(sig)  # delivered from inside publish
            self.sent.append(msg)

    pub = Interrupted()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), zero_on_exit(pub, repeats=4, interval=0):
            raise KeyboardInterrupt  # the first Ctrl-C
        assert len(pub.sent) == 4 and all(not np.any(msgs.twist_to_array(m)) for m in pub.sent)
        assert publish_zero(pub, repeats=2, interval=0) == 2  # on its own too
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, previous)


def test_zero_on_exit_in_a_thread(cmd_vel):
    pub, got = cmd_vel
    errors = []

    def loop():
        try:
            with zero_on_exit(pub, interval=0):
                raise ValueError("in a worker thread")
        except ValueError as exc:
            errors.append(exc)

    worker = threading.Thread(target=loop)
    worker.start()
    worker.join(timeout=5)
    assert len(errors) == 1 and len(got) == 3


def test_failing_publish_does_not_hide_the_original_error(caplog):
    class Broken:
        msg_type, topic = msgs.TWIST, "/cmd_vel"
        calls = 0

        def publish(self, msg):
            Broken.calls += 1
            raise OSError("network down")

    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="original"):
        with zero_on_exit(Broken(), interval=0):
            raise RuntimeError("original")
    assert Broken.calls == 3 and "zero command on /cmd_vel failed" in caplog.text
    assert publish_zero(Broken(), repeats=2, interval=0) == 0


def test_custom_zero_message(cmd_vel):
    pub, got = cmd_vel
    brake = msgs.twist_stamped_from_array([-0.1, 0, 0, 0, 0, 0])
    assert publish_zero(pub, brake, repeats=2, interval=0) == 2
    np.testing.assert_array_equal(got, [[-0.1, 0, 0, 0, 0, 0]] * 2)
