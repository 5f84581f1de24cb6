"""The safety filter: the last step before any command is published, for every policy and every robot.

`SafetyFilter.filter` is pure bookkeeping on numpy arrays, driven by the caller's clock (ns), so every rule
is unit-testable without a robot. Per tick, in priority order:

1. E-stop: once a ``std_msgs/Bool`` true arrives (`on_estop_msg`) the stop command is sent until
   `reset_estop()`; a later false does not unlatch.
2. Stale observations: an input older than ``max_obs_age`` (or never received) -> stop command.
3. Teleop override: a human command replaces the policy action and holds for ``teleop_hold`` seconds after
   the last one; reported as an intervention, and the recorded action is the human's.
4. NaN/inf in the chosen action (or in ``obs``) -> the zero command (clipped into [low, high]).
5. Clamp to ``[low, high]``.
6. Rate limit ``|a_t - a_{t-1}| <= max_delta`` and, optionally, ``|second difference| <= max_accel``,
   braking early so that a ramp stops at its target instead of overshooting.

Stop commands (rules 1, 2, 4) are sent as they are, not rate-limited, and the limiter restarts from them.
A last guard treats a command that came out non-finite anyway (a corrupted limiter state) like rule 4.
`zero_on_exit` publishes zero commands when a control loop ends for any reason (return, exception,
Ctrl-C, SIGTERM, SIGHUP).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from real.transport.base import Publisher, QoS, Subscription, Transport

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SafetyConfig:
    """Limits for one action vector. Scalars broadcast over the action's dimensions.

    Attributes:
        low, high: bounds of the command (physical or normalized units, as the adapter publishes them).
        max_delta: largest change per tick of each dimension (rate limit); None for none.
        max_accel: largest change of that change per tick (second difference); None for none.
        max_obs_age: seconds after which an observation is stale: one value for all inputs (then no receive
            time at all counts as stale), or per input name (inputs not named are not checked); None
            disables the watchdog.
        stop: the command on e-stop and stale inputs: "zero" or "brake" (then ``brake_command``).
        brake_command: the braking command (e.g. full reverse torque or a hold pose), inside [low, high].
        teleop_hold: seconds a teleop command keeps overriding the policy after it was last given.
    """

    low: ArrayLike
    high: ArrayLike
    max_delta: ArrayLike | None = None
    max_accel: ArrayLike | None = None
    max_obs_age: float | Mapping[str, float] | None = None
    stop: Literal["zero", "brake"] = "zero"
    brake_command: ArrayLike | None = None
    teleop_hold: float = 0.5

    def __post_init__(self) -> None:
        low, high = np.asarray(self.low, dtype=np.float64), np.asarray(self.high, dtype=np.float64)
        if low.ndim != 1 or low.shape != high.shape or not np.all(low <= high):
            raise ValueError(f"need 1-d low <= high of one shape, got {self.low!r} / {self.high!r}")
        for name in ("max_delta", "max_accel"):
            value = getattr(self, name)
            limit = None if value is None else np.asarray(value, dtype=np.float64)
            if limit is not None and not np.all((limit > 0) & np.isfinite(limit)):  # inf would make NaN steps
                raise ValueError(f"{name} must be positive and finite (None: no limit), got {value!r}")
        if self.stop not in ("zero", "brake"):
            raise ValueError(f"stop must be 'zero' or 'brake', got {self.stop!r}")
        if self.stop == "brake" and self.brake_command is None:
            raise ValueError("stop='brake' needs a brake_command")
        if not self.teleop_hold >= 0:  # also rejects NaN
            raise ValueError(f"teleop_hold must be >= 0, got {self.teleop_hold!r}")
        ages = self.max_obs_age.values() if isinstance(self.max_obs_age, Mapping) else [self.max_obs_age]
        if any(age is not None and not age > 0 for age in ages):
            raise ValueError(f"max_obs_age must be positive, got {self.max_obs_age!r}")
        stop = self.stop_command
        if stop.shape != low.shape or not np.all((low <= stop) & (stop <= high)):
            raise ValueError(f"the {self.stop} command {stop} must lie within [low, high]")

    @property
    def dim(self) -> int:
        return len(np.asarray(self.low))

    @property
    def stop_command(self) -> np.ndarray:
        """The command sent on e-stop and stale inputs."""
        if self.stop == "brake":
            return np.asarray(self.brake_command, dtype=np.float64).reshape(-1)
        return np.zeros(len(np.asarray(self.low)))


@dataclasses.dataclass
class SafetyInfo:
    """What the filter did on one tick (all false: the policy action went out unchanged)."""

    estop: bool = False
    stale: tuple[str, ...] = ()  # the stale inputs ("obs" for a single receive time)
    intervention: bool = False  # a teleop command replaced the policy action
    nonfinite: bool = False
    clamped: bool = False
    rate_limited: bool = False
    accel_limited: bool = False
    action: np.ndarray | None = None  # the action to record: the human's during an intervention, else the policy's

    @property
    def stopped(self) -> bool:
        """Whether a stop command replaced the action."""
        return self.estop or bool(self.stale) or self.nonfinite


class SafetyFilter:
    """Applies a `SafetyConfig` tick by tick; holds the e-stop latch, teleop hold and limiter state."""

    def __init__(self, config: SafetyConfig) -> None:
        self.config = config
        self.low = np.asarray(config.low, dtype=np.float64)
        self.high = np.asarray(config.high, dtype=np.float64)
        self._estop = threading.Event()  # set from a transport thread, read by the control loop
        self.reset()

    # --- state -------------------------------------------------------------------------------------

    def reset(self, command: ArrayLike | None = None) -> None:
        """Restart the limiter from ``command`` (default: the zero command, robot at rest); keeps the e-stop.

        ``command`` is typically measured robot state, so it is sanitized: NaN/inf entries become 0 and the
        result is clipped into [low, high] (a NaN start would otherwise pass through every later command).
        """
        last = np.zeros(self.config.dim) if command is None else np.array(command, dtype=np.float64).reshape(-1)
        if last.shape != self.low.shape:
            raise ValueError(f"reset command has shape {last.shape}, the limits {self.low.shape}")
        self.restart_limiter(last)
        self.teleop_command: np.ndarray | None = None
        self.teleop_time_ns: int | None = None

    def restart_limiter(self, command: ArrayLike) -> None:
        """Restart only the rate/accel limiter from ``command`` (sanitized like `reset`; teleop and e-stop kept),
        e.g. from what the robot holds after a stop."""
        last = np.array(command, dtype=np.float64).reshape(-1)
        if last.shape != self.low.shape:
            raise ValueError(f"limiter command has shape {last.shape}, the limits {self.low.shape}")
        if not np.all(np.isfinite(last)):
            log.warning("safety filter limiter restarted from a non-finite command %s: using 0 there", last)
        self.last = np.clip(np.where(np.isfinite(last), last, 0.0), self.low, self.high)
        self.last_delta = np.zeros(self.config.dim)

    @property
    def estopped(self) -> bool:
        return self._estop.is_set()

    def engage_estop(self) -> None:
        """Latch the e-stop (idempotent)."""
        if not self._estop.is_set():
            log.warning("e-stop engaged")
        self._estop.set()

    def reset_estop(self) -> None:
        """Release the e-stop: the only way to unlatch it."""
        self._estop.clear()
        log.warning("e-stop reset")

    def on_estop_msg(self, msg: Any, receive_time_ns: int = 0) -> None:
        """Subscription callback for a ``std_msgs/Bool`` e-stop topic: true latches, false is ignored."""
        if bool(msg.data):
            self.engage_estop()

    # --- the filter --------------------------------------------------------------------------------

    def filter(
        self,
        action: ArrayLike,
        now_ns: int,
        obs_times: Mapping[str, int | None] | int | None = None,
        teleop: ArrayLike | None = None,
        obs: ArrayLike | Mapping[str, ArrayLike] | None = None,
    ) -> tuple[np.ndarray, SafetyInfo]:
        """The command to publish for a policy ``action`` at ``now_ns``, and what the filter did.

        Args:
            action: the policy's action (any finite or non-finite values).
            now_ns: the current time on the clock of ``obs_times`` (e.g. ``transport.now()``).
            obs_times: receive times (ns) of the inputs the action was computed from, by name, or the one
                receive time; None entries mean never received. Ignored when ``max_obs_age`` is None.
            teleop: a human command given this tick, or None.
            obs: the observation(s) the action was computed from, checked for NaN/inf.
        """
        info = SafetyInfo()
        policy_action = np.asarray(action, dtype=np.float64).reshape(-1)
        if policy_action.shape != self.low.shape:
            raise ValueError(f"action has shape {policy_action.shape}, the limits {self.low.shape}")
        chosen = self._choose(policy_action, now_ns, teleop, info)
        info.action = chosen.copy()
        info.estop = self.estopped
        info.stale = self.stale(now_ns, obs_times)
        if info.estop or info.stale:
            return self._stop(self.config.stop_command), info
        info.nonfinite = not np.all(np.isfinite(chosen)) or not _all_finite(obs)
        if info.nonfinite:
            return self._stop(self._fault_command()), info
        clamped = np.clip(chosen, self.low, self.high)
        info.clamped = bool(np.any(clamped != chosen))
        command = self._limit(clamped, info)
        if not np.all(np.isfinite(command)):  # last guard: never publish NaN, never keep it as limiter state
            log.error("safety filter produced a non-finite command %s (limiter state %s); stopping", command, self.last)
            info.nonfinite = True
            return self._stop(self._fault_command()), info
        self.last_delta, self.last = command - self.last, command
        return command.copy(), info

    def _fault_command(self) -> np.ndarray:
        """Rule 4's command: zero, clipped into [low, high]."""
        return np.clip(np.zeros(self.config.dim), self.low, self.high)

    def _choose(self, action: np.ndarray, now_ns: int, teleop: ArrayLike | None, info: SafetyInfo) -> np.ndarray:
        if teleop is not None:
            self.teleop_command = np.asarray(teleop, dtype=np.float64).reshape(-1)
            if self.teleop_command.shape != self.low.shape:
                raise ValueError(f"teleop command has shape {self.teleop_command.shape}, the limits {self.low.shape}")
            self.teleop_time_ns = now_ns
        held = self.teleop_time_ns is not None and now_ns - self.teleop_time_ns <= self.config.teleop_hold * 1e9
        info.intervention = bool(held)
        return self.teleop_command.copy() if held else action

    def stale(self, now_ns: int, obs_times: Mapping[str, int | None] | int | None) -> tuple[str, ...]:
        """The inputs older than their `max_obs_age` at ``now_ns`` (or never received): the watchdog's rule."""
        max_age = self.config.max_obs_age
        if max_age is None:
            return ()
        if not isinstance(obs_times, Mapping):
            obs_times = {"obs": obs_times}
        elif not obs_times and not isinstance(max_age, Mapping):
            obs_times = {"obs": None}  # no receive time at all must not switch the watchdog off
        if isinstance(max_age, Mapping):
            ages = {name: (obs_times.get(name), limit) for name, limit in max_age.items()}
        else:
            ages = {name: (t, max_age) for name, t in obs_times.items()}
        return tuple(name for name, (t, limit) in ages.items() if t is None or now_ns - t > limit * 1e9)

    def _stop(self, command: np.ndarray) -> np.ndarray:
        self.last, self.last_delta = command.copy(), np.zeros(self.config.dim)
        return command.copy()

    def _limit(self, target: np.ndarray, info: SafetyInfo) -> np.ndarray:
        error = target - self.last
        step = error
        if self.config.max_delta is not None:
            max_delta = np.broadcast_to(np.asarray(self.config.max_delta, dtype=np.float64), error.shape)
            step = np.clip(error, -max_delta, max_delta)
            info.rate_limited = bool(np.any(step != error))
        if self.config.max_accel is not None:
            accel = np.broadcast_to(np.asarray(self.config.max_accel, dtype=np.float64), error.shape)
            # Largest step v from which the rest of the way can still be covered braking by `accel` per tick
            # (v + (v - a) + ... = v (v + a) / 2a <= |error|): aim no faster, so ramps end at the target.
            braking = (np.sqrt(accel**2 + 8 * accel * np.abs(error)) - accel) / 2
            wanted = np.sign(step) * np.minimum(np.abs(step), braking)
            limited = np.clip(wanted, self.last_delta - accel, self.last_delta + accel)
            if self.config.max_delta is not None:
                limited = np.clip(limited, -max_delta, max_delta)
            info.accel_limited = bool(np.any(np.abs(limited - step) > 1e-12))
            step = limited
        reached = step == error  # land exactly on the target (last + (target - last) may be off by an ulp)
        return np.clip(np.where(reached, target, self.last + step), self.low, self.high)


def _all_finite(obs: ArrayLike | Mapping[str, ArrayLike] | None) -> bool:
    if obs is None:
        return True
    values = obs.values() if isinstance(obs, Mapping) else [obs]
    return all(np.all(np.isfinite(np.asarray(v, dtype=np.float64))) for v in values)


# --- on the transport: the e-stop topic, zero commands on exit ----------------------------------------


def subscribe_estop(
    transport: Transport, safety: SafetyFilter, topic: str = "/estop", qos: QoS | str | None = None
) -> Subscription:
    """Latch ``safety``'s e-stop from a ``std_msgs/Bool`` topic.

    The default QoS is reliable, so the e-stop publisher must be RELIABLE too: a best-effort one does not
    match and its presses never arrive. Matching is asynchronous (DDS discovery), so this cannot check it
    here; check ``publisher_count()`` of the returned subscription after a grace period (about a second)
    and warn or refuse to start when it is 0.
    """
    return transport.subscribe(topic, "std_msgs/msg/Bool", safety.on_estop_msg, qos)


_CLEANUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[dict[int, Any]]:
    """In the main thread, ignore Ctrl-C, SIGTERM and SIGHUP for the duration (a second Ctrl-C must not cut
    the zero commands short), then restore the handlers. Elsewhere (signals only reach the main thread) a no-op.

    Yields the handlers it will restore (signal -> handler); the caller may change them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _CLEANUP_SIGNALS}
    try:
        yield previous
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def publish_zero(publisher: Publisher, zero_msg: Any = None, repeats: int = 3, interval: float = 0.01) -> int:
    """Publish ``zero_msg`` (default: the all-zero message of the publisher's type) ``repeats`` times.

    Never raises an ``Exception``: a failure is logged and counted. In the main thread SIGINT, SIGTERM and
    SIGHUP are ignored meanwhile, so a repeated Ctrl-C cannot skip zero commands. Returns how many
    publishes succeeded.
    """
    with _signals_ignored():
        if zero_msg is None:
            from real import msgs

            try:
                zero_msg = msgs.zero_msg(publisher.msg_type)
            except Exception:
                log.exception("no zero message for %s", getattr(publisher, "msg_type", publisher))
                return 0
        sent = 0
        for i in range(repeats):
            try:
                publisher.publish(zero_msg)
                sent += 1
            except Exception:
                log.exception("publishing the zero command on %s failed", getattr(publisher, "topic", publisher))
            if i + 1 < repeats and interval > 0:
                time.sleep(interval)
    return sent


@contextlib.contextmanager
def zero_on_exit(
    publisher: Publisher, zero_msg: Any = None, repeats: int = 3, interval: float = 0.01
) -> Iterator[None]:
    """Publish zero commands when the block ends: normally, on an exception, Ctrl-C, SIGTERM or SIGHUP; then
    re-raise.

    In the main thread SIGTERM and SIGHUP (an ssh session dropping) are turned into ``SystemExit`` for the
    duration of the block (their default handlers would kill the process without running this cleanup), Ctrl-C
    raises ``KeyboardInterrupt`` even where the process inherited it ignored, and
    all three signals are ignored while the zeros go out (see `publish_zero`); the previous handlers are
    restored afterwards.
    """
    main_thread = threading.current_thread() is threading.main_thread()
    exits = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _raise_system_exit) for sig in exits} if main_thread else {}
    if main_thread and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started with Ctrl-C ignored (inherited: a background job of a non-interactive shell, or a parent that
        # ignored it for a moment), Python raises no KeyboardInterrupt, and `ros2 launch`'s SIGINT would be lost.
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        with _signals_ignored() as restore:
            restore.update(previous)  # afterwards: the handlers from before the block, not the SystemExit ones
            sent = publish_zero(publisher, zero_msg, repeats, interval)
            log.info("sent %d/%d zero commands on exit", sent, repeats)


def _raise_system_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


