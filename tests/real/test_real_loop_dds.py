"""The whole loop over Cyclone DDS on loopback: `robolearn fake-robot` in its own process, the runner here at 50 Hz.

One test, in phases: the demo-lap controller drives the fake car for a few seconds; an e-stop latches (false does
not release it); killing the fake car (the observation publisher) gives stop commands within the watchdog age.
A unique DDS domain keeps it apart from other tests; every wait is bounded. Timing bounds allow for a loaded
machine (2 busy cores under xdist): they add the ticks' own measured lateness instead of fixed margins.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import next_dds_domain as dds_domain  # one domain-id scheme for every DDS test
from test_real_runner import rc_config

from real import msgs
from real.deploy import build_runner, load_deploy_policy

RATE = 50.0
PERIOD = 1 / RATE
MAX_AGE = 3 * PERIOD  # the rc_car config's watchdog: 3 periods


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def start_fake_car(domain: int, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "robolearn", "fake-robot", "robot=rc_car", "transport=dds",
           f"domain_id={domain}", f"rate_hz={RATE:g}", "seed=1", "domain_randomization=false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 90
    output = []
    while time.monotonic() < deadline:
        try:
            output.append(lines.get(timeout=1))
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if output[-1].startswith("fake rc car ready"):
            return proc
    proc.kill()
    raise AssertionError("the fake robot did not start:\n" + "".join(output[-30:]))


def late_s(ticks: list) -> float:
    """The worst wake-up lateness plus skipped deadlines of ``ticks``, in seconds (load on this machine)."""
    return max((t.lateness_ns / 1e9 + t.missed * PERIOD for t in ticks), default=0.0)


def test_fake_car_and_runner_over_dds(monkeypatch):
    from real.transport.dds import LOOPBACK_CONFIG, DdsTransport

    domain = dds_domain()
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_CONFIG)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CYCLONEDDS_URI": LOOPBACK_CONFIG, "JAX_PLATFORMS": "cpu"}
    proc = start_fake_car(domain, env)
    transport, operator = DdsTransport(domain), DdsTransport(domain)
    ticks: list = []
    commands: list[tuple[int, np.ndarray]] = []
    operator.subscribe("/ackermann_cmd", msgs.ACKERMANN_DRIVE_STAMPED,
                       lambda m, t: commands.append((t, msgs.ackermann_to_array(m))))
    estop = operator.publisher("/estop", msgs.BOOL)
    policy, _ = load_deploy_policy(policy="sim.tasks.rc_car_control:demo_lap_policy")
    runner = build_runner(rc_config(rate_hz=RATE, **{"adapter.course.points": None}), transport, policy, {})
    runner.add_hook(ticks.append)
    loop = threading.Thread(target=runner.run, kwargs={"duration": 60}, daemon=True)
    try:
        loop.start()
        # 1. driving: fresh observations, commands reach the car, progress along the course
        wait_for(lambda: ticks and ticks[-1].mode == "policy", 30, "fresh observations from the fake car")
        first = len(ticks)
        time.sleep(2.5)
        driving = ticks[first:]
        deadlines = [(t.time_ns - t.lateness_ns) for t in driving]
        covered = len(driving) + sum(t.missed for t in driving[1:])  # every deadline ticked or counted as missed
        assert round((deadlines[-1] - deadlines[0]) / 1e9 * RATE) + 1 == covered >= 0.9 * 2.5 * RATE
        assert {t.mode for t in driving} <= {"policy", "stale"}  # stale only when the loaded fake car is late
        assert sum(t.mode == "policy" for t in driving) >= 0.8 * len(driving)
        assert driving[-1].status["checkpoints_passed"] >= 2 and driving[-1].obs[0] > 0.5  # moving forward
        periods = np.array([t.period_ns for t in driving[1:]]) / 1e6
        assert np.median(periods) == pytest.approx(1e3 * PERIOD, abs=1.0)
        assert len(commands) >= 0.8 * len(driving)

        # 2. e-stop: latched within a tick or two; a later false does not release it
        mark, sent = len(ticks), time.monotonic_ns()
        estop.publish(msgs.bool_msg(True))
        wait_for(lambda: ticks[-1].mode == "estop", 1.0, "the e-stop")
        # the first e-stop tick after the publish; it may have started just before it (the message came mid-tick)
        stopped = next(t for t in ticks[mark:] if t.mode == "estop")
        until = [t for t in ticks[mark:] if t.time_ns <= stopped.time_ns]
        assert (stopped.time_ns - sent) / 1e9 <= 2 * PERIOD + 0.1 + late_s(until)  # + DDS delivery under load
        estop.publish(msgs.bool_msg(False))
        mark = len(ticks)
        time.sleep(0.3)
        assert all(t.mode == "estop" for t in ticks[mark:]) and np.all(commands[-1][1] == 0)
        runner.safety.reset_estop()
        wait_for(lambda: ticks[-1].mode == "policy", 1.0, "the policy after the e-stop reset")

        # 3. the observation publisher dies: stop commands within the watchdog age
        killed = time.monotonic_ns()  # the transport's clock (ticks' time_ns)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_for(lambda: ticks[-1].mode == "stale", 2.0, "the stale watchdog")
        stale = next(t for t in ticks if t.mode == "stale" and t.time_ns > killed)  # not a load-induced earlier one
        last_odom = max(t.obs_times["odom"] for t in ticks if t.obs_times["odom"] is not None)
        until = [t for t in ticks if killed <= t.time_ns <= stale.time_ns]
        assert 0 < (stale.time_ns - last_odom) / 1e9 <= MAX_AGE + 3 * PERIOD + late_s(until)
        assert np.all(stale.command == 0)
        wait_for(lambda: commands[-1][0] > stale.time_ns, 1.0, "the stop command on the wire")
        assert np.all(commands[-1][1] == 0)
    finally:
        runner.stop()
        loop.join(timeout=5)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        runner.close()
        transport.close()
        operator.close()
    assert not loop.is_alive()
