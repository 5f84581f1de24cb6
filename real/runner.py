"""`PolicyRunner`: a robolearn policy on a robot, at a fixed rate, behind the safety filter.

Each tick, on an absolute deadline (`real.timing`):

1. snapshot the inputs (latest message and receive time per topic, plus the period's messages where kept);
2. the robot adapter derives its features and bookkeeping (course progress, stuck/crash detection);
3. build the observation from the config's slots; if a watched input is stale or missing, no policy step;
4. otherwise the policy acts (clipped to [-1, 1]); an adapter manoeuvre (recovery) may replace it;
5. `SafetyFilter` (latched e-stop, stale watchdog, teleop override, NaN, clamp, rate limit) gives the command;
6. the adapter turns it into the robot's message, which is published: on stops the filter's stop command
   (zero or brake) through `adapter.stop_msg` (an arm holds its measured pose), stamped now;
7. the `Tick` record goes to `on_tick` and the hooks; timing goes to `LoopStats`, published and logged every
   ``stats.interval_s``.

`run` wraps the loop in `zero_on_exit`: the same stop message goes out when the loop ends for any reason. About
a second after starting it warns once when no e-stop publisher or no command subscriber is matched;
``require_estop: true`` keeps the robot stopped (mode "stale", input ``estop_link``) until an e-stop publisher is.

Hooks for an actor (on-robot learning): `add_hook(fn)` (or override `on_tick`) receives every `Tick` with the
observation, the raw policy action, the command sent, the `SafetyInfo` (intervention, recorded human
action), the mode and the adapter's status (progress, events), on the control thread right after publishing:
keep it short (queue the transition). Override `act` to sample instead of taking the mean. `swap_policy`
installs new parameters (or a new module) between two ticks, from any thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from real import msgs
from real.observation import InputCache, InputSpec, ObservationBuilder, Received, Slot
from real.robots import RobotAdapter, make_adapter
from real.robots.base import check_keys
from real.safety import SafetyConfig, SafetyFilter, SafetyInfo, subscribe_estop, zero_on_exit
from real.timing import LoopStats, next_deadline, sleep_until
from real.transport import Publisher, Transport
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

NEVER_STALE = 1e9  # seconds: the watchdog age of inputs configured with max_age 0
MODES = ("policy", "recovery", "teleop", "stale", "estop", "fault")
RUNNER_KEYS = ("robot", "rate_hz", "device", "spin_ms", "inputs", "observation", "command", "safety", "estop",
               "teleop", "stats", "adapter", "require_estop")
ESTOP_LINK = "estop_link"  # the watchdog's pseudo-input under require_estop: stale until an e-stop publisher matches
LINK_GRACE_S = 1.0  # seconds of running before the e-stop and command links are checked (DDS discovery)


@dataclasses.dataclass
class RunnerConfig:
    """A deploy config's runner part (configs/robot/<robot>.yaml; see configs/deploy.yaml for the comments)."""

    robot: str
    inputs: dict[str, InputSpec]
    observation: list[Slot]
    rate_hz: float = 50.0
    device: str = "cpu"
    spin_ms: float = 0.2
    command: dict[str, Any] = dataclasses.field(default_factory=dict)
    safety: dict[str, Any] = dataclasses.field(default_factory=dict)
    estop: dict[str, Any] | None = None
    teleop: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    adapter: dict[str, Any] = dataclasses.field(default_factory=dict)
    require_estop: bool = False

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> RunnerConfig:
        check_keys(cfg, RUNNER_KEYS, "deploy config")
        for key in ("robot", "inputs", "observation", "command"):
            if not cfg.get(key):
                raise ConfigError(f"deploy config needs {key!r}")
        rate = float(cfg.get("rate_hz", 50.0))
        if not 0 < rate <= 10_000:
            raise ConfigError(f"rate_hz must be in (0, 10000], got {rate}")
        inputs = {name: InputSpec.from_dict(name, spec or {}) for name, spec in dict(cfg["inputs"]).items()}
        command = dict(cfg["command"])
        check_keys(command, ("topic", "qos", "stamp"), "command")
        if not command.get("topic"):
            raise ConfigError("command.topic is required (e.g. /ackermann_cmd)")
        stamp = command.get("stamp", "now")
        if stamp not in ("now", "zero") and stamp not in inputs:
            raise ConfigError(f"command.stamp must be now, zero or an input name (to copy its header stamp), "
                              f"got {stamp!r}")
        for key, valid in (("estop", ("topic", "qos")), ("teleop", ("topic", "qos")),
                           ("stats", ("topic", "interval_s"))):
            check_keys(cfg.get(key) or {}, valid, key)
        require_estop = bool(cfg.get("require_estop") or False)
        if require_estop and not _topic(cfg.get("estop")):
            raise ConfigError("require_estop: true needs an estop topic")
        if ESTOP_LINK in inputs:
            raise ConfigError(f"{ESTOP_LINK!r} is reserved; rename that input")
        return cls(robot=str(cfg["robot"]), inputs=inputs, observation=[Slot.from_dict(s) for s in cfg["observation"]],
                   rate_hz=rate, device=str(cfg.get("device", "cpu")), spin_ms=float(cfg.get("spin_ms", 0.2)),
                   command=command, safety=dict(cfg.get("safety") or {}), estop=_topic(cfg.get("estop")),
                   teleop=_topic(cfg.get("teleop")), stats=_topic(cfg.get("stats")),
                   adapter=dict(cfg.get("adapter") or {}), require_estop=require_estop)

    def safety_config(self, num_actions: int, max_ages: Mapping[str, float]) -> SafetyConfig:
        """The `SafetyConfig`: rates per second become per-tick limits at ``rate_hz``."""
        s = dict(self.safety)
        check_keys(s, ("low", "high", "max_rate", "max_accel", "max_obs_age_periods", "stop", "brake_command",
                       "teleop_hold"), "safety")
        low = s.get("low", [-1.0] * num_actions)
        high = s.get("high", [1.0] * num_actions)
        per_tick = 1.0 / self.rate_hz
        max_rate, max_accel = s.get("max_rate"), s.get("max_accel")
        try:
            return SafetyConfig(
                low=low, high=high,
                max_delta=None if max_rate is None else np.asarray(max_rate, dtype=np.float64) * per_tick,
                max_accel=None if max_accel is None else np.asarray(max_accel, dtype=np.float64) * per_tick**2,
                max_obs_age=dict(max_ages), stop=s.get("stop", "zero"), brake_command=s.get("brake_command"),
                teleop_hold=float(s.get("teleop_hold", 0.5)),
            )  # fmt: skip
        except ValueError as e:
            raise ConfigError(f"safety: {e}") from e


def _topic(cfg: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A topic section, or None when absent or its topic is empty (disabled)."""
    return dict(cfg) if cfg and cfg.get("topic") else None


@dataclasses.dataclass
class Tick:
    """Everything one control tick did (what an actor stores, what a log line shows)."""

    index: int
    time_ns: int  # tick start on the transport's clock
    mode: str  # one of MODES: who decided the command
    obs: np.ndarray  # the observation (NaN where an input never arrived)
    raw_action: np.ndarray | None  # the policy's output before clipping; None without a policy step
    action: np.ndarray  # what the runner asked the safety filter for (policy clipped, or a manoeuvre)
    command: np.ndarray  # what went out, normalized (after the safety filter)
    msg: Any  # the published message (None if nothing was sent)
    safety: SafetyInfo
    status: dict[str, Any]  # the adapter's progress and events
    obs_times: dict[str, int | None]  # receive times of the watched inputs
    policy_version: int
    period_ns: int | None = None  # since the previous tick's start
    lateness_ns: int = 0  # tick start minus its deadline
    compute_ns: int = 0  # tick start to published
    missed: int = 0  # deadlines skipped before this tick (overruns)


class _StopPublisher(Publisher):
    """Publishes the runner's stop message, built when sent (an arm holds where it is at exit time)."""

    def __init__(self, publisher: Publisher, stop_msg: Callable[[], Any]) -> None:
        self.publisher, self.stop_msg = publisher, stop_msg
        self.topic, self.msg_type, self.qos = publisher.topic, publisher.msg_type, publisher.qos

    def publish(self, msg: Any = None) -> None:
        stop = self.stop_msg()
        if stop is not None:
            self.publisher.publish(stop)

    def subscriber_count(self) -> int:
        return self.publisher.subscriber_count()


class PolicyRunner:
    """Runs ``policy`` (``policy({"policy": obs[1, D]}) -> actions[1, A]``) on ``transport`` as ``config`` says."""

    def __init__(self, config: RunnerConfig, policy: Callable[[Any], Any], transport: Transport,
                 adapter: RobotAdapter | None = None, run_config: Mapping[str, Any] | None = None) -> None:
        self.config, self.transport, self.clock = config, transport, transport.now
        self.adapter = adapter or make_adapter(config.robot, config.adapter, config.rate_hz, run_config)
        self.period_ns = round(1e9 / config.rate_hz)
        self.spin_ns = int(config.spin_ms * 1e6)
        self.num_actions = self.adapter.num_actions
        self.builder = ObservationBuilder(config.observation, config.inputs, self.num_actions, self.adapter.features)
        self.adapter.check(self.builder.names)
        missing = [name for name in self.adapter.inputs if name not in config.inputs]
        if missing:
            raise ConfigError(f"the {config.robot} adapter reads inputs {missing}, which the config does not define")
        self.watched = sorted(set(self.builder.inputs_used) | set(self.adapter.inputs))
        self.max_age = {name: self._max_age(config.inputs[name]) for name in self.watched}
        if config.require_estop:
            self.max_age[ESTOP_LINK] = NEVER_STALE
        self.safety = SafetyFilter(config.safety_config(self.num_actions, self.max_age))
        self.inputs = InputCache(config.inputs.values())
        for name in (*self.builder.averaged_inputs, *self.adapter.period_inputs):
            self.inputs.keep_period(name)

        self.device = torch.device(config.device)
        self.policy = policy
        self.policy_version = 0
        self._pending: tuple[Any, dict[str, torch.Tensor] | None, int | None] | None = None
        self._policy_lock = threading.Lock()
        self._check_policy()

        self.hooks: list[Callable[[Tick], None]] = []
        self.prev_command = np.zeros(self.num_actions)
        self.tick_index = 0
        self.last_tick: Tick | None = None
        self.stats = LoopStats(self.period_ns, window=100_000)  # the whole run (its last 100k ticks)
        self.interval_stats = LoopStats(self.period_ns)  # since the last report
        self._prev_start: int | None = None
        self._stop = threading.Event()
        self._teleop: np.ndarray | None = None
        self._teleop_lock = threading.Lock()
        self.bad_teleop = 0  # teleop messages dropped (not convertible to an action)
        self._hook_errors = 0
        self._reseed_limiter = True  # restart the limiter from the adapter's hold (startup, after stops)
        self._estop_linked = False

        command = config.command
        self.publisher = transport.publisher(command["topic"], self.adapter.command_type, command.get("qos"))
        self.stats_publisher = (transport.publisher(config.stats["topic"], msgs.FLOAT32_MULTI_ARRAY, "default")
                                if config.stats else None)
        self.subscriptions = self.inputs.subscribe(transport)
        self.estop_subscription = None
        if config.estop:
            self.estop_subscription = subscribe_estop(transport, self.safety, config.estop["topic"],
                                                      config.estop.get("qos"))
            self.subscriptions.append(self.estop_subscription)
        if config.teleop:
            self.subscriptions.append(transport.subscribe(config.teleop["topic"], self.adapter.command_type,
                                                          self._on_teleop, config.teleop.get("qos")))

    # --- policy ------------------------------------------------------------------------------------------

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The policy's raw action for one observation (override to sample, e.g. in an actor)."""
        return self._forward(self.policy, obs)

    def _forward(self, policy: Callable[[Any], Any], obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0)
        with torch.inference_mode():
            out = policy({"policy": x})
        return out.detach().to("cpu", torch.float64).numpy().reshape(-1)

    def _check_policy(self, policy: Callable[[Any], Any] | None = None) -> None:
        """One dry run on a zero observation (of ``policy``, default the installed one through `act`): the
        policy must take len(observation) and give num_actions, else `ConfigError`."""
        zeros = np.zeros(len(self.builder), dtype=np.float32)
        try:
            out = self.act(zeros) if policy is None else self._forward(policy, zeros)
        except RuntimeError as e:
            raise ConfigError(f"the policy does not take the deploy config's {len(self.builder)}-entry "
                              f"observation ({', '.join(self.builder.names)}): {e}") from e
        reset = getattr(self.policy if policy is None else policy, "reset", None)
        if callable(reset):  # an action-chunk policy queued the dry run's chunk: the robot must not run it
            reset()
        if out.shape != (self.num_actions,):
            raise ConfigError(f"the policy gives {out.size} actions; the {self.config.robot} adapter needs "
                              f"{self.num_actions}")

    def swap_policy(self, policy: Any = None, state_dict: Mapping[str, torch.Tensor] | None = None,
                    version: int | None = None) -> None:
        """Install a new policy module or new parameters before the next tick (thread-safe).

        A ``state_dict`` is checked against the current policy now (names and shapes; a `ValueError` here
        rather than a failure inside the control loop) and copied in between two ticks. A new ``policy``
        module is moved to the runner's device, put in eval mode and dry-run like the first one (`ConfigError`).
        """
        if policy is None and state_dict is None:
            raise ValueError("swap_policy needs a policy or a state_dict")
        if isinstance(policy, torch.nn.Module):
            policy = policy.to(self.device).eval()
        if state_dict is not None:
            target = policy if policy is not None else self.policy
            current = target.state_dict()
            wrong = sorted(set(current) ^ set(state_dict))
            bad = [k for k in current if k in state_dict and tuple(state_dict[k].shape) != tuple(current[k].shape)]
            if wrong or bad:
                raise ValueError(f"state_dict does not fit the policy: keys {wrong[:5]} differ, shapes of {bad[:5]}")
            state_dict = {k: v.detach().to("cpu").clone() for k, v in state_dict.items()}
        if policy is not None and state_dict is None:
            self._check_policy(policy)  # (with a state_dict the module changes before its first use: skipped)
        with self._policy_lock:
            self._pending = (policy, state_dict, version)

    def _apply_pending_policy(self) -> None:
        with self._policy_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        policy, state_dict, version = pending
        if policy is not None:
            self.policy = policy
        if state_dict is not None:
            self.policy.load_state_dict(state_dict)
        self.policy_version = self.policy_version + 1 if version is None else int(version)

    # --- the tick ----------------------------------------------------------------------------------------

    def tick(self, now_ns: int | None = None, deadline_ns: int | None = None, missed: int = 0) -> Tick:
        """Run one control step now (``now_ns`` defaults to the transport's clock) and return its record."""
        start = self.clock() if now_ns is None else int(now_ns)
        self._apply_pending_policy()
        snapshot = self.inputs.take()
        obs_times = {name: snapshot[name].time_ns for name in self.watched}
        if self.config.require_estop:  # no e-stop publisher matched yet: stale, stopped
            obs_times[ESTOP_LINK] = start if self._estop_link_up() else None
        stale = self.safety.stale(start, obs_times)  # the filter's own rule, so both agree
        features = self.adapter.update(snapshot, start)
        if self._reseed_limiter:  # e.g. the arm's gripper resumes from its held opening, not from 0 (half-open)
            hold = self.adapter.hold_command()
            if hold is not None:
                self.safety.restart_limiter(hold)
                self._reseed_limiter = False
        obs = self.builder.build(snapshot, features, self.prev_command)
        raw, mode = None, "policy"
        if stale:  # no policy step on stale or missing inputs; the filter sends the stop command
            action, mode = np.zeros(self.num_actions), "stale"
        else:
            raw = self.act(obs)
            action = np.where(np.isfinite(raw), np.clip(raw, -1.0, 1.0), np.nan)  # inf must not clip to +-1: fault
            manoeuvre = self.adapter.override(start)
            if manoeuvre is not None:
                action, mode = manoeuvre
        command, info = self.safety.filter(action, start, obs_times, self._take_teleop(), None if stale else obs)
        if info.estop:
            mode = "estop"
        elif info.stale:
            mode = "stale"
        elif info.nonfinite:
            mode = "fault"
        elif info.intervention:
            mode = "teleop"
        if info.stopped:  # the filter's stop command (zero or brake), stamped now (a stale input's stamp is old)
            msg = self.adapter.stop_msg(command, self._stamp(None))
            self._reseed_limiter = True
        else:
            msg = self.adapter.command_msg(command, self._stamp(snapshot))
        if msg is not None:
            self.publisher.publish(msg)
        self.prev_command = command
        self.adapter.after_tick(mode, command, start)
        done = self.clock() if now_ns is None else start
        period = None if self._prev_start is None else start - self._prev_start
        self._prev_start = start
        lateness = 0 if deadline_ns is None else start - deadline_ns
        tick = Tick(self.tick_index, start, mode, obs, raw, np.asarray(action, dtype=np.float64), command, msg, info,
                    self.adapter.status(), obs_times, self.policy_version, period, lateness, done - start, missed)
        self.tick_index += 1
        for stats in (self.stats, self.interval_stats):
            stats.record(period, lateness, done - start, missed, mode)
        self.last_tick = tick
        self._log_events(tick)
        self.on_tick(tick)
        return tick

    def _max_age(self, spec: InputSpec) -> float:
        """Seconds before ``spec`` is stale: its own max_age (0 = never), else some control periods."""
        if spec.max_age is not None:
            return NEVER_STALE if spec.max_age == 0 else spec.max_age
        periods = float(self.config.safety.get("max_obs_age_periods", 3))
        return periods * self.period_ns / 1e9

    def _stamp(self, snapshot: Mapping[str, Received] | None) -> int:
        """The command's header stamp as ``command.stamp`` says; without a ``snapshot`` (stops) an input's
        stamp becomes now."""
        how = self.config.command.get("stamp", "now")
        if how == "zero":
            return 0
        if how == "now" or snapshot is None:
            return time.time_ns()
        msg = snapshot[how].msg  # copy an input's header stamp (ties a command to the observation it answers)
        return msgs.stamp_ns(msg.header.stamp) if msg is not None and hasattr(msg, "header") else 0

    def _stop_msg(self) -> Any:
        """The stop message of the exit path: the filter's stop command through the adapter, as on stop ticks."""
        return self.adapter.stop_msg(self.safety.config.stop_command, self._stamp(None))

    def _estop_link_up(self) -> bool:
        """Whether an e-stop publisher has matched (once seen, kept: a lost link does not unlatch anything)."""
        if not self._estop_linked and self.estop_subscription is not None:
            self._estop_linked = self.estop_subscription.publisher_count() > 0
        return self._estop_linked

    def check_links(self) -> list[str]:
        """Warn (and return the warnings) when no e-stop publisher or no command subscriber is matched."""
        problems = []
        if self.estop_subscription is not None and self.estop_subscription.publisher_count() == 0:
            problems.append(f"no e-stop publisher on {self.config.estop['topic']} (a RELIABLE one is needed)"
                            + ("; staying stopped until one matches" if self.config.require_estop else ""))
        if self.publisher.subscriber_count() == 0:
            problems.append(f"nobody subscribes to the commands on {self.publisher.topic}")
        for problem in problems:
            log.warning("%s", problem)
        return problems

    def _on_teleop(self, msg: Any, receive_time_ns: int) -> None:
        """Convert a teleop message here, on the transport's thread: a malformed one is dropped (logged,
        counted in ``bad_teleop``) instead of raising inside the control tick."""
        try:
            action = np.asarray(self.adapter.teleop_action(msg), dtype=np.float64).reshape(-1)
            if action.shape != (self.num_actions,):
                raise ValueError(f"{action.size} values, need {self.num_actions}")
        except Exception as e:
            self.bad_teleop += 1
            if self.bad_teleop <= 10 or self.bad_teleop % 1000 == 0:
                log.warning("dropped a teleop message (%d so far): %s", self.bad_teleop, e)
            return
        with self._teleop_lock:
            self._teleop = action

    def _take_teleop(self) -> np.ndarray | None:
        with self._teleop_lock:
            got, self._teleop = self._teleop, None
        return got

    def _log_events(self, tick: Tick) -> None:
        event = tick.status.get("event")
        if event:
            log.warning("tick %d: %s detected, recovery manoeuvre", tick.index, event)
        if tick.status.get("passed_now") and tick.status.get("lap_times") and tick.status.get("next_checkpoint") == 1:
            log.info("lap %d in %.2f s", len(tick.status["lap_times"]), tick.status["lap_times"][-1])

    # --- hooks -------------------------------------------------------------------------------------------

    def add_hook(self, hook: Callable[[Tick], None]) -> None:
        """Call ``hook(tick)`` after every tick, on the control thread (keep it short)."""
        self.hooks.append(hook)

    def on_tick(self, tick: Tick) -> None:
        """Called after every tick; runs the hooks. An exception in a hook is logged, not raised: the loop and
        its safety filter keep running."""
        for hook in self.hooks:
            try:
                hook(tick)
            except Exception:
                self._hook_errors += 1
                if self._hook_errors <= 10 or self._hook_errors % 1000 == 0:
                    log.exception("tick hook %r raised (%d so far)", hook, self._hook_errors)

    # --- the loop ----------------------------------------------------------------------------------------

    def run(self, duration: float | None = None, max_ticks: int | None = None) -> dict[str, float]:
        """Tick on absolute deadlines until `stop`, ``duration`` seconds or ``max_ticks``; the robot's stop
        message goes out at the end whatever ends it. Returns the run's timing summary."""
        self._stop.clear()
        interval = (self.config.stats or {}).get("interval_s", 5.0)
        interval_ns = int(float(interval) * 1e9)
        with zero_on_exit(_StopPublisher(self.publisher, self._stop_msg)):
            start = deadline = self.clock()
            end = None if duration is None else start + int(duration * 1e9)
            check_links_at: int | None = start + int(LINK_GRACE_S * 1e9)
            last_report, missed, ticks = start, 0, 0
            while not self._stop.is_set() and (max_ticks is None or ticks < max_ticks):
                if end is not None and deadline >= end:
                    break
                sleep_until(deadline, self.clock, self.spin_ns)
                now = self.clock()
                self.tick(deadline_ns=deadline, missed=missed)
                ticks += 1
                if now - last_report >= interval_ns:
                    self.report()
                    last_report = now
                if check_links_at is not None and now >= check_links_at:
                    self.check_links()
                    check_links_at = None
                deadline, missed = next_deadline(deadline, self.clock(), self.period_ns)
        summary = self.stats.summary()
        log.info("runner stopped after %d ticks: %s", ticks, _format(summary))
        return summary

    def stop(self) -> None:
        """Make `run` return after the current tick (from any thread or a signal handler)."""
        self._stop.set()

    def report(self) -> dict[str, float]:
        """Publish and log the timing statistics since the last report, then start a new interval."""
        summary = self.interval_stats.summary()
        if self.stats_publisher is not None:
            try:  # statistics must never end control
                self.stats_publisher.publish(self.interval_stats.message())
            except Exception:
                log.exception("publishing the loop statistics failed")
        level = logging.WARNING if summary["missed_ticks"] or summary["rate_hz"] < 0.95 * self.config.rate_hz \
            else logging.INFO
        log.log(level, "loop %s", _format(summary))
        self.interval_stats.reset()
        return summary

    def close(self) -> None:
        """Stop, then drop the subscriptions (the transport stays open: the caller owns it)."""
        self.stop()
        for sub in self.subscriptions:
            sub.close()


def _format(summary: Mapping[str, float]) -> str:
    return (f"{summary['rate_hz']:.1f} Hz, period p50/p99 {summary['period_p50_ms']:.2f}/"
            f"{summary['period_p99_ms']:.2f} ms, jitter p99 {summary['jitter_p99_ms']:.3f} ms, compute p50/p99 "
            f"{summary['compute_p50_ms']:.3f}/{summary['compute_p99_ms']:.3f} ms, "
            f"missed {summary['missed_ticks']:.0f}, stale {summary['stale_ticks']:.0f}, "
            f"estop {summary['estop_ticks']:.0f}")
