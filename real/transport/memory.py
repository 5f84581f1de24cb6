"""In-process transport for unit tests: synchronous, deterministic, optionally on a fake clock.

``publish`` serializes the message to ROS 2 CDR and every matched subscription decodes its own copy, in
subscription order, before ``publish`` returns; so a wrong message type fails at once and subscribers never
share objects. Matching follows DDS: same topic and type, and the writer's QoS satisfies the reader's
(a BEST_EFFORT writer never reaches a RELIABLE reader; TRANSIENT_LOCAL readers get the last ``depth``
messages of TRANSIENT_LOCAL writers on subscribing). Transports that share a `MemoryBus` see each other,
like two nodes on one ROS graph.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from real import msgs
from real.transport.base import (
    Durability,
    Publisher,
    QoS,
    Subscription,
    Transport,
    check_msg,
    guarded,
    resolve_qos,
    ros_topic_name,
)


class FakeClock:
    """A settable monotonic clock in nanoseconds, for deterministic tests."""

    def __init__(self, start_ns: int = 0) -> None:
        self.ns = int(start_ns)

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> int:
        """Move forward by ``seconds`` (never backwards) and return the new time."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        self.ns += round(seconds * 1e9)
        return self.ns


class MemoryBus:
    """The shared graph of in-memory publishers and subscriptions."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.types: dict[str, str] = {}  # topic -> message type
        self.writers: list[_MemoryPublisher] = []
        self.readers: list[_MemorySubscription] = []

    def claim(self, topic: str, msg_type: str) -> None:
        """Fix a topic's type on first use; a different type later is an error (DDS would silently not match)."""
        with self.lock:
            have = self.types.setdefault(topic, msg_type)
        if have != msg_type:
            raise TypeError(f"topic {topic} carries {have}, not {msg_type}")


class _MemoryPublisher(Publisher):
    def __init__(self, transport: MemoryTransport, topic: str, msg_type: str, qos: QoS) -> None:
        self.transport, self.topic, self.msg_type, self.qos = transport, topic, msg_type, qos
        self.history: collections.deque[bytes] = collections.deque(maxlen=qos.depth)

    def publish(self, msg: Any) -> None:
        if self.transport.closed:
            raise RuntimeError("publish on a closed transport")
        check_msg(msg, self.msg_type)
        data = msgs.serialize(msg, self.msg_type)
        if self.qos.durability is Durability.TRANSIENT_LOCAL:
            self.history.append(data)
        now = self.transport.now()
        with self.transport.bus.lock:
            readers = [r for r in self.transport.bus.readers if r.accepts(self)]
        for reader in readers:
            reader.deliver(data, now)

    def subscriber_count(self) -> int:
        with self.transport.bus.lock:
            return sum(r.accepts(self) for r in self.transport.bus.readers)


class _MemorySubscription(Subscription):
    def __init__(
        self, transport: MemoryTransport, topic: str, msg_type: str, qos: QoS, callback: Callable, raw: bool
    ) -> None:
        self.transport, self.topic, self.msg_type, self.qos = transport, topic, msg_type, qos
        self.callback, self.raw, self.closed = guarded(callback, topic), raw, False

    def accepts(self, writer: _MemoryPublisher) -> bool:
        return (
            not self.closed
            and not writer.transport.closed
            and writer.topic == self.topic
            and writer.msg_type == self.msg_type
            and writer.qos.matches(self.qos)
        )

    def deliver(self, data: bytes, receive_time_ns: int) -> None:
        if not self.closed:
            self.callback(data if self.raw else msgs.deserialize(data, self.msg_type), receive_time_ns)

    def publisher_count(self) -> int:
        with self.transport.bus.lock:
            return sum(self.accepts(w) for w in self.transport.bus.writers)

    def close(self) -> None:
        self.closed = True
        with self.transport.bus.lock:
            if self in self.transport.bus.readers:
                self.transport.bus.readers.remove(self)


class MemoryTransport(Transport):
    """In-process transport. ``clock`` returns monotonic ns (default ``time.monotonic_ns``; see `FakeClock`)."""

    def __init__(self, bus: MemoryBus | None = None, clock: Callable[[], int] | None = None) -> None:
        self.bus = bus or MemoryBus()
        self.clock = clock or time.monotonic_ns
        self.closed = False
        self._mine: list[Any] = []

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("transport is closed")

    def publisher(self, topic: str, msg_type: str | type, qos: QoS | str | None = None) -> Publisher:
        self._check_open()
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        self.bus.claim(topic, name)
        pub = _MemoryPublisher(self, topic, name, qos)
        with self.bus.lock:
            self.bus.writers.append(pub)
        self._mine.append(pub)
        return pub

    def _subscribe(self, topic: str, msg_type: str | type, callback: Callable, qos: Any, raw: bool) -> Subscription:
        self._check_open()
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        self.bus.claim(topic, name)
        sub = _MemorySubscription(self, topic, name, qos, callback, raw)
        with self.bus.lock:
            self.bus.readers.append(sub)
            backlog = []
            if qos.durability is Durability.TRANSIENT_LOCAL:
                backlog = [(w, list(w.history)) for w in self.bus.writers if sub.accepts(w)]
        self._mine.append(sub)
        now = self.now()
        for _, history in backlog:
            for data in history[-qos.depth :]:
                sub.deliver(data, now)
        return sub

    def now(self) -> int:
        return int(self.clock())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self.bus.lock:
            for item in self._mine:
                if isinstance(item, _MemorySubscription):
                    item.close()
                elif item in self.bus.writers:
                    self.bus.writers.remove(item)
        self._mine.clear()


