"""Fixed-rate pacing on absolute deadlines, and the control loop's timing statistics.

A loop that sleeps ``dt`` after its work runs at ``dt + work`` (unitree's deploy script notes this); here
tick k is due at ``start + k * period`` whatever the work took, and a tick that overruns skips the deadlines
it missed (counted) instead of bursting to catch up. `LoopStats` keeps a window of per-tick samples and
reports p50/p99/max of the period, its jitter (|period - nominal|), the wake-up lateness (tick start minus
deadline) and the compute time (tick start to command published), plus counters, as ros2_control's
controller manager and LeRobot report them.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import numpy as np

STAT_NAMES = (
    "ticks", "rate_hz",
    "period_p50_ms", "period_p99_ms", "period_max_ms",
    "jitter_p50_ms", "jitter_p99_ms", "jitter_max_ms",
    "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms",
    "compute_p50_ms", "compute_p99_ms", "compute_max_ms",
    "missed_ticks", "stale_ticks", "estop_ticks", "intervention_ticks", "recovery_ticks", "fault_ticks",
)  # fmt: skip
"""The order of `LoopStats.summary` values in the published Float32MultiArray."""


def sleep_until(deadline_ns: int, clock: Callable[[], int] = time.monotonic_ns, spin_ns: int = 0) -> None:
    """Sleep until ``clock() >= deadline_ns``; the last ``spin_ns`` are busy-waited (tighter wake-ups)."""
    remaining = deadline_ns - clock()
    if remaining > spin_ns:
        time.sleep((remaining - spin_ns) / 1e9)
    while clock() < deadline_ns:
        pass


def next_deadline(deadline_ns: int, now_ns: int, period_ns: int) -> tuple[int, int]:
    """The deadline after ``deadline_ns`` that is still ahead of ``now_ns``, and how many were skipped."""
    following = deadline_ns + period_ns
    if now_ns < following:
        return following, 0
    missed = (now_ns - following) // period_ns + 1
    return following + missed * period_ns, int(missed)


class LoopStats:
    """Per-tick timing samples (the last ``window`` ticks) and counters, since creation or the last `reset`."""

    COUNTERS = ("missed_ticks", "stale_ticks", "estop_ticks", "intervention_ticks", "recovery_ticks", "fault_ticks")

    def __init__(self, period_ns: int, window: int = 10_000) -> None:
        self.period_ns = int(period_ns)
        self.period = collections.deque(maxlen=window)
        self.lateness = collections.deque(maxlen=window)
        self.compute = collections.deque(maxlen=window)
        self.ticks = 0
        self.total_ticks = 0
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self.totals = dict.fromkeys(self.COUNTERS, 0)

    def record(self, period_ns: int | None, lateness_ns: int, compute_ns: int, missed: int = 0,
               mode: str = "policy") -> None:
        """One tick: its period (None for the first), wake-up lateness, compute time, skipped deadlines, mode."""
        if period_ns is not None:
            self.period.append(period_ns)
        self.lateness.append(lateness_ns)
        self.compute.append(compute_ns)
        self.ticks += 1
        self.total_ticks += 1
        counts = {"missed_ticks": missed, "stale_ticks": mode == "stale", "estop_ticks": mode == "estop",
                  "intervention_ticks": mode == "teleop", "recovery_ticks": mode == "recovery",
                  "fault_ticks": mode == "fault"}
        for name, n in counts.items():
            self.counters[name] += int(n)
            self.totals[name] += int(n)

    def summary(self) -> dict[str, float]:
        """Timing statistics (milliseconds) over the sample window and the counters since the last `reset`."""
        out: dict[str, float] = {"ticks": float(self.ticks)}
        period = np.asarray(self.period, dtype=np.float64) / 1e6
        out["rate_hz"] = float(1e3 / np.mean(period)) if period.size else float("nan")
        jitter = np.abs(period - self.period_ns / 1e6)
        for name, values in (("period", period), ("jitter", jitter),
                             ("lateness", np.asarray(self.lateness, dtype=np.float64) / 1e6),
                             ("compute", np.asarray(self.compute, dtype=np.float64) / 1e6)):
            p50, p99, top = (np.percentile(values, 50), np.percentile(values, 99), values.max()) if values.size else (
                float("nan"),) * 3
            out.update({f"{name}_p50_ms": float(p50), f"{name}_p99_ms": float(p99), f"{name}_max_ms": float(top)})
        out.update({k: float(v) for k, v in self.counters.items()})
        return {name: out[name] for name in STAT_NAMES}

    def reset(self) -> None:
        """Start a new reporting interval: clear the samples and counters (``totals`` keep counting)."""
        self.ticks = 0
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self.period.clear()
        self.lateness.clear()
        self.compute.clear()

    def message(self) -> object:
        """The summary as a std_msgs/Float32MultiArray; its one dimension's label lists `STAT_NAMES`, comma-joined."""
        from real.msgs import float32_multiarray_from_array

        summary = self.summary()
        return float32_multiarray_from_array([summary[k] for k in STAT_NAMES], [",".join(STAT_NAMES)])
