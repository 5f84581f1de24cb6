"""Recording a robot run to rosbag2 (MCAP): the robot's topics as received plus what the policy did per tick.

`Recorder` subscribes to robot topics with ``subscribe_raw`` and stores their CDR bytes unchanged; the
control loop calls `Recorder.record_tick` once per tick with the raw policy action, the command that was
sent, the intervention flag and the policy version (optionally reward, episode, done, safety flags, the
runner's mode and the policy's observation). Each tick becomes messages on the ``/rl/*`` topics below, all
stamped with the tick time, so `real.bag2dataset` can rebuild episodes at exactly the control ticks.

Nothing here blocks the caller on disk: callbacks and `record_tick` only enqueue (a full queue, by message
count or by bytes, drops and counts), and one writer thread serializes, writes and flushes every
``flush_interval`` seconds; it also finishes the bag, so a writer stuck on a dead disk is never raced. What
survives a ``kill -9``: every message older than the last flush (at most ``flush_interval`` old) and every
split-off file; run `real.bagfile.repair_bag` (``robolearn bag2dataset`` does it) to get a complete bag.
On return, exception, Ctrl-C (and SIGTERM where the caller turns it into SystemExit, as
`real.safety.zero_on_exit` does) the ``with`` block closes the bag properly.

Times: the bag stores wall-clock nanoseconds. Receive and tick times come on the transport's monotonic
clock and are shifted by one offset taken at start (``time_ns() - transport.now()``), so their order and
spacing are exactly the transport's.

CLI (dispatched by `robolearn.commands.cli`)::

    robolearn record out=run1 topics=/odom,/imu:sensor_msgs/msg/Imu@sensor_data transport=dds
    robolearn bag2dataset bag=run1 out=episodes obs=/odom:twist.twist.linear.x,/imu action=command
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from real import msgs
from real.bagfile import BagWriter
from real.transport.base import (
    DEFAULT,
    PROFILES,
    Durability,
    QoS,
    Reliability,
    Subscription,
    Transport,
    resolve_qos,
    ros_topic_name,
)
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

# What one control tick writes: topic -> message type. All messages of a tick share its timestamp.
RL_TOPICS: dict[str, str] = {
    "/rl/action_raw": "std_msgs/msg/Float32MultiArray",  # the policy's output, before the safety filter
    "/rl/command": "std_msgs/msg/Float32MultiArray",  # the command actually sent (safe; the human's if teleop)
    "/rl/intervention": "std_msgs/msg/Bool",  # a human chose the command
    "/rl/policy_version": "std_msgs/msg/UInt64",  # parameters version that produced the action
    "/rl/reward": "std_msgs/msg/Float64",  # reward of the step that ended at this tick
    "/rl/episode": "std_msgs/msg/Int64",  # episode of this tick's observation; < 0: not in an episode
    "/rl/done": "std_msgs/msg/UInt8",  # DONE_*: this tick's observation ends its episode
    "/rl/safety": "std_msgs/msg/UInt32",  # SAFETY_* bits: what the safety filter did
    "/rl/observation": "std_msgs/msg/Float32MultiArray",  # the policy's observation vector
    "/rl/mode": "std_msgs/msg/String",  # who decided the command (`real.runner.MODES`: policy, recovery, ...)
}
LEARN_MODES = ("policy", "teleop")  # tick modes that are learning data; recovery, stale, estop, fault are not
DONE_NONE, DONE_TERMINATED, DONE_TRUNCATED = 0, 1, 2
_DONE_NAMES = {None: DONE_NONE, "terminated": DONE_TERMINATED, "truncated": DONE_TRUNCATED}
SAFETY_BITS = {"estop": 1, "stale": 2, "intervention": 4, "nonfinite": 8, "clamped": 16, "rate_limited": 32,
               "accel_limited": 64}  # fmt: skip
SAFETY_STOPPED = SAFETY_BITS["estop"] | SAFETY_BITS["stale"] | SAFETY_BITS["nonfinite"]  # a stop replaced the action
_ITEM_OVERHEAD = 128  # bytes a queued item costs besides its payload (tuple, ints), roughly


def safety_flags(info: Any) -> int:
    """The ``/rl/safety`` bitmask of a `real.safety.SafetyInfo` (an int passes through)."""
    if info is None or isinstance(info, int | np.integer):
        return int(info or 0)
    return sum(bit for name, bit in SAFETY_BITS.items() if getattr(info, name, False))


def _done_code(done: int | str | None) -> int:
    if isinstance(done, str | None):
        if done not in _DONE_NAMES:
            raise ValueError(f"done must be None, 'terminated', 'truncated' or 0/1/2, got {done!r}")
        return _DONE_NAMES[done]
    if int(done) not in (DONE_NONE, DONE_TERMINATED, DONE_TRUNCATED):
        raise ValueError(f"done must be 0 (running), 1 (terminated) or 2 (truncated), got {done!r}")
    return int(done)


class Recorder:
    """Records topics and control ticks into a new rosbag2 MCAP bag at ``path``; use as a context manager.

    Args:
        transport: where robot topics come from; its clock times the ticks too.
        path: the bag folder to create.
        topics: (topic, msg_type, qos) to record from the start (`add_topic` adds more later).
        clock_offset_ns: added to transport times to get bag times (default: wall minus transport clock).
        flush_interval: seconds between chunk flushes (what a kill -9 can lose).
        max_bytes, max_duration, compression: file splitting and chunk compression (see `BagWriter`).
        queue_size: messages waiting for the writer thread before new ones are dropped (and counted).
        max_queue_bytes: the same bound in bytes (a stalled disk with camera images would fill the memory
            long before ``queue_size`` messages); an item is counted by its payload plus a little overhead.
    """

    def __init__(self, transport: Transport, path: str | Path,
                 topics: Sequence[tuple[str, str, QoS | str | None]] = (), *, clock_offset_ns: int | None = None,
                 flush_interval: float = 1.0, max_bytes: int | None = None, max_duration: float | None = None,
                 compression: str = "none", queue_size: int = 100_000, max_queue_bytes: int = 256 << 20,
                 custom_data: dict[str, str] | None = None) -> None:  # fmt: skip
        if flush_interval <= 0:
            raise ValueError("flush_interval must be positive")
        self.transport = transport
        self.offset_ns = time.time_ns() - transport.now() if clock_offset_ns is None else int(clock_offset_ns)
        self.flush_interval = flush_interval
        self.bag = BagWriter(path, max_bytes, max_duration, compression, custom_data=custom_data)
        self.path = self.bag.path
        self.dropped = 0
        self.max_queue_bytes = max_queue_bytes
        self.queued_bytes = 0
        self.error: BaseException | None = None
        self.closed = False
        self._queue: queue.Queue[tuple[int, tuple]] = queue.Queue(maxsize=queue_size)  # (bytes, item)
        self._lock = threading.Lock()  # dropped and queued_bytes counters, topic table
        self._qos: dict[str, tuple[str, QoS]] = {t: (ty, DEFAULT) for t, ty in RL_TOPICS.items()}
        self._ids: dict[str, int] = {}  # writer thread only
        self._subscriptions: list[Subscription] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        try:
            for topic, msg_type, qos in topics:
                self.add_topic(topic, msg_type, qos)
        except BaseException:
            self.close()
            raise

    # --- inputs (any thread, never blocking) ---------------------------------------------------------------

    def add_topic(self, topic: str, msg_type: str | type, qos: QoS | str | None = None) -> None:
        """Record ``topic`` as received (raw CDR). ``qos`` is the subscription's and the offered profile noted."""
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        if topic in RL_TOPICS:
            raise ValueError(f"{topic} is written by record_tick; record robot topics under other names")
        with self._lock:
            self._qos[topic] = (name, qos)
        self._subscriptions.append(
            self.transport.subscribe_raw(topic, name, lambda data, t, _topic=topic: self._put((_topic, t, data)), qos)
        )

    def write(self, topic: str, t_ns: int, data: bytes | Any, msg_type: str | None = None,
              qos: QoS | str | None = None) -> None:  # fmt: skip
        """Record one message (CDR bytes, or a rosbags message) at transport time ``t_ns``."""
        if msg_type is not None or topic not in self._qos:
            if msg_type is None:
                raise ValueError(f"first write to {topic} needs its msg_type")
            with self._lock:
                self._qos.setdefault(topic, (msgs.type_name(msg_type), resolve_qos(qos)))
        self._put((topic, t_ns, data))

    def record_tick(self, t_ns: int, raw_action: ArrayLike, command: ArrayLike, intervention: bool,
                    policy_version: int, reward: float | None = None, episode: int | None = None,
                    done: int | str | None = None, safety: Any = None, observation: ArrayLike | None = None,
                    mode: str | None = None) -> None:  # fmt: skip
        """Record one control tick at transport time ``t_ns`` (what the loop computed and sent).

        ``reward`` is the reward of the step that ended at this tick; ``episode`` the episode this tick's
        observation belongs to (< 0: none, e.g. during a reset); ``done`` "terminated"/"truncated" when this
        tick's observation is the last of its episode; ``safety`` a `SafetyInfo` or its bitmask; ``mode``
        who decided the command (the runner's tick mode; `real.bag2dataset` learns only from learning modes).
        """
        tick = (
            np.array(raw_action, dtype=np.float32), np.array(command, dtype=np.float32), bool(intervention),
            int(policy_version), None if reward is None else float(reward),
            None if episode is None else int(episode), _done_code(done),
            None if safety is None else safety_flags(safety),
            None if observation is None else np.array(observation, dtype=np.float32),
            None if mode is None else str(mode),
        )  # fmt: skip
        self._put((None, int(t_ns), tick))

    def on_tick(self, tick: Any, reward: float | None = None, episode: int | None = None,
                done: int | str | None = None) -> None:  # fmt: skip
        """A `real.runner.PolicyRunner` hook (``runner.add_hook(recorder.on_tick)``): records each tick with
        its mode, safety flags and observation.

        Without a policy step (stale inputs) the raw action is NaN. Rewards, episodes and ends are the actor's
        business: `real.rl.actor.Actor` passes them when given this recorder.
        """
        raw = getattr(tick, "raw_action", None)
        raw = np.full(len(tick.command), np.nan) if raw is None else raw
        self.record_tick(tick.time_ns, raw, tick.command, bool(getattr(tick.safety, "intervention", False)),
                         tick.policy_version, reward, episode, done, safety=tick.safety, observation=tick.obs,
                         mode=getattr(tick, "mode", None))  # fmt: skip

    def _put(self, item: tuple) -> None:
        if self.closed:
            return
        size = _ITEM_OVERHEAD + _payload_bytes(item[2])
        with self._lock:
            if self.queued_bytes + size <= self.max_queue_bytes:
                try:
                    self._queue.put_nowait((size, item))
                    self.queued_bytes += size
                    return
                except queue.Full:
                    pass
            self.dropped += 1
            dropped = self.dropped
        if dropped == 1 or dropped % 1000 == 0:
            log.warning("recorder queue full (%d messages or %d MiB): %d messages dropped so far",
                        self._queue.maxsize, self.max_queue_bytes >> 20, dropped)  # fmt: skip

    # --- the writer thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._write_until_stopped()
        finally:  # here, not in close(): close() may give up waiting while a write still hangs
            try:
                self.bag.close()
            except Exception as e:
                self.error = self.error or e
                log.exception("finishing %s failed; run repair_bag on it", self.path)

    def _write_until_stopped(self) -> None:
        last_flush = time.monotonic()
        while not (self._stop.is_set() and self._queue.empty()):
            try:
                size, item = self._queue.get(timeout=min(0.05, self.flush_interval))
                with self._lock:
                    self.queued_bytes -= size
            except queue.Empty:
                item = None
            try:
                if item is not None and self.error is None:
                    self._write(*item)
                if self.error is None and time.monotonic() - last_flush >= self.flush_interval:
                    self.bag.flush()
                    last_flush = time.monotonic()
            except Exception as e:  # e.g. disk full: stop writing, keep the control loop running
                self.error = e
                log.exception("recording to %s failed; no more messages are written", self.path)

    def _write(self, topic: str | None, t_ns: int, data: Any) -> None:
        if topic is None:
            for rl_topic, msg in self._tick_messages(data):
                self._write(rl_topic, t_ns, msg)
            return
        topic_id = self._ids.get(topic)
        if topic_id is None:
            with self._lock:
                msg_type, qos = self._qos[topic]
            topic_id = self._ids[topic] = self.bag.add_topic(topic, msg_type, qos)
        if not isinstance(data, bytes | bytearray | memoryview):
            data = msgs.serialize(data, self.bag.topics[topic_id].msg_type)
        self.bag.write(topic_id, t_ns + self.offset_ns, bytes(data))

    @staticmethod
    def _tick_messages(tick: tuple) -> list[tuple[str, Any]]:
        raw, command, intervention, version, reward, episode, done, safety, observation, mode = tick
        cls = msgs.msg_class
        out = [
            ("/rl/action_raw", msgs.float32_multiarray_from_array(raw)),
            ("/rl/command", msgs.float32_multiarray_from_array(command)),
            ("/rl/intervention", msgs.bool_msg(intervention)),
            ("/rl/policy_version", cls("std_msgs/msg/UInt64")(data=version)),
            ("/rl/done", cls("std_msgs/msg/UInt8")(data=done)),
        ]
        if reward is not None:
            out.append(("/rl/reward", cls("std_msgs/msg/Float64")(data=reward)))
        if episode is not None:
            out.append(("/rl/episode", cls("std_msgs/msg/Int64")(data=episode)))
        if safety is not None:
            out.append(("/rl/safety", cls("std_msgs/msg/UInt32")(data=safety)))
        if observation is not None:
            out.append(("/rl/observation", msgs.float32_multiarray_from_array(observation)))
        if mode is not None:
            out.append(("/rl/mode", cls("std_msgs/msg/String")(data=mode)))
        return out

    # --- closing -------------------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Stop the subscriptions, let the writer thread write what is queued and finish the bag (waiting up
        to ``timeout`` s). Idempotent."""
        if self.closed:
            return
        for sub in self._subscriptions:
            sub.close()
        self._stop.set()
        self._thread.join(timeout)
        self.closed = True
        atexit.unregister(self.close)
        if self._thread.is_alive():  # e.g. a hung disk: the thread finishes the bag if its write ever returns
            log.error("recorder thread did not finish within %.1f s; %s is not finished yet (if the process ends "
                      "first, run repair_bag on it)", timeout, self.path)  # fmt: skip
        if self.dropped:
            log.warning("recording %s dropped %d messages (queue full)", self.path, self.dropped)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def message_count(self) -> int:
        """Messages written so far (the queue may hold more)."""
        return self.bag.message_count


def _payload_bytes(data: Any) -> int:
    """About how much memory a queued payload holds: CDR bytes exactly, a tick's arrays, a message's data array."""
    if isinstance(data, bytes | bytearray | memoryview):
        return memoryview(data).nbytes
    if isinstance(data, tuple):  # a tick
        return sum(v.nbytes for v in data if isinstance(v, np.ndarray))
    return getattr(getattr(data, "data", None), "nbytes", 0)  # e.g. an Image message's pixels


# --- topics on the command line ---------------------------------------------------------------------------


def parse_topics(text: str) -> list[tuple[str, str | None, str | None]]:
    """``/odom,/imu:sensor_msgs/msg/Imu@sensor_data`` -> [(topic, type or None, qos profile or None)]."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        item, _, qos = item.partition("@")
        topic, _, msg_type = item.partition(":")
        if qos and qos.lower() not in PROFILES:
            raise ConfigError(f"unknown QoS profile {qos!r} for {topic}; use one of {', '.join(PROFILES)}")
        out.append((topic, msg_type or None, qos or None))
    if not out:
        raise ConfigError("record needs topics=/a,/b:<pkg/msg/Type>[@qos],...")
    return out


def discover_topics(transport: Transport, topics: Sequence[str], timeout: float = 3.0) -> dict[str, tuple[str, QoS]]:
    """Types and a matching QoS of ``topics`` from their publishers on the graph (dds and rclpy transports).

    Like rosbag2, the subscription is best-effort if any publisher is, and transient-local only if all are.
    """
    from real.transport.dds import DdsTransport

    if isinstance(transport, DdsTransport):
        poll = _dds_publishers(transport)
    elif hasattr(transport, "node"):  # an RclpyTransport (not imported here: that would load rclpy)
        poll = _rclpy_publishers(transport)
    else:
        raise ConfigError("topic types are discovered over transport=dds or rclpy only; give them as "
                          "/topic:pkg/msg/Type")
    found: dict[str, list[tuple[str, bool, bool]]] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and set(found) != set(topics):
            for topic, endpoint in poll(topics):
                found.setdefault(topic, []).append(endpoint)
            time.sleep(0.05)
    finally:
        poll(None)
    missing = sorted(set(topics) - set(found))
    if missing:
        raise ConfigError(f"no publisher of {missing} found within {timeout:.0f} s; give their types as "
                          "/topic:pkg/msg/Type or check ROS_DOMAIN_ID")
    out = {}
    for topic, endpoints in found.items():
        reliable, latched = all(e[1] for e in endpoints), all(e[2] for e in endpoints)
        out[topic] = (endpoints[0][0], QoS(10, Reliability.RELIABLE if reliable else Reliability.BEST_EFFORT,
                                           Durability.TRANSIENT_LOCAL if latched else Durability.VOLATILE))
    return out


EndpointPoll = Callable[[Sequence[str] | None], list[tuple[str, tuple[str, bool, bool]]]]
"""``poll(topics)``: publishers seen as ``(topic, (type, reliable, transient_local))`` (a repeat is harmless);
``poll(None)`` releases what the poll holds."""


def _dds_publishers(transport: Any) -> EndpointPoll:
    """Publications from Cyclone's DCPSPublication built-in topic (each reported once)."""
    from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication
    from cyclonedds.core import Policy

    reader = BuiltinDataReader(transport.participant, BuiltinTopicDcpsPublication)

    def poll(topics: Sequence[str] | None) -> list[tuple[str, tuple[str, bool, bool]]]:
        if topics is None:
            reader.__del__()
            return []
        wanted, out = {"rt" + t: t for t in topics}, []
        for sample in reader.take(N=256):
            if getattr(sample, "topic_name", None) in wanted:
                pkg, kind, _, name = sample.type_name.split("::")
                reliable = sample.qos[Policy.Reliability].__class__ is Policy.Reliability.Reliable
                latched = sample.qos[Policy.Durability] == Policy.Durability.TransientLocal
                out.append((wanted[sample.topic_name], (f"{pkg}/{kind}/{name.rstrip('_')}", reliable, latched)))
        return out

    return poll


def _rclpy_publishers(transport: Any) -> EndpointPoll:
    """Publishers from the rclpy node's graph cache."""
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    def poll(topics: Sequence[str] | None) -> list[tuple[str, tuple[str, bool, bool]]]:
        out = []
        for topic in topics or ():
            for info in transport.node.get_publishers_info_by_topic(topic):
                qos = info.qos_profile
                out.append((topic, (info.topic_type, qos.reliability == ReliabilityPolicy.RELIABLE,
                                    qos.durability == DurabilityPolicy.TRANSIENT_LOCAL)))
        return out

    return poll


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event that Ctrl-C, SIGTERM or SIGHUP set while the block runs (main thread only: elsewhere it only
    ends by duration); the previous handlers are restored afterwards."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


@dataclasses.dataclass
class RecordConfig:
    """`robolearn record`: topics to a rosbag2 (MCAP) folder until Ctrl-C, SIGTERM or `duration`."""

    out: str | None = None          # the bag folder to create (required; recordings never overwrite)
    topics: str = ""                # /a,/b:pkg/msg/T[@qos]: types and QoS are discovered when not given
    transport: str = "auto"         # auto | dds | rclpy | memory
    domain_id: int | None = None    # DDS / ROS domain; null: ROS_DOMAIN_ID or 0
    duration: float | None = None   # seconds; null: until Ctrl-C / SIGTERM
    max_bytes: int | None = None    # split into a new file past this size
    max_duration: float | None = None  # ... or past this many seconds
    compression: str = "none"       # none | lz4 | zstd
    flush: float = 1.0              # seconds between flushes: what a killed recorder can lose


def cmd_record(cfg: RecordConfig) -> int:
    """Record `topics` to `out` until Ctrl-C, SIGTERM or `duration`."""
    from real.deploy import open_transport

    if not cfg.out or not cfg.topics:
        raise ConfigError("record needs out=<bag folder> and topics=/a,/b,...")
    topics = parse_topics(cfg.topics)
    if Path(cfg.out).exists():
        raise ConfigError(f"out={cfg.out} exists already; recordings never overwrite")
    with _stop_on_signals() as stop, open_transport(cfg.transport, cfg.domain_id) as transport:
        unknown = [t for t, ty, _ in topics if ty is None]
        found = discover_topics(transport, unknown) if unknown else {}
        specs = [(t, ty or found[t][0], q or (found[t][1] if t in found else None)) for t, ty, q in topics]
        with Recorder(transport, cfg.out, specs, flush_interval=cfg.flush, max_bytes=cfg.max_bytes,
                      max_duration=cfg.max_duration, compression=cfg.compression) as recorder:
            print(f"recording {', '.join(t for t, _, _ in specs)} to {cfg.out} (Ctrl-C stops)")
            end = None if cfg.duration is None else time.monotonic() + cfg.duration
            while not stop.wait(0.2) and (end is None or time.monotonic() < end):
                pass
    print(f"wrote {recorder.message_count} messages to {cfg.out}" + (f" ({recorder.dropped} dropped)"
                                                                        if recorder.dropped else ""))  # fmt: skip
    return 0
