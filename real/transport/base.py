"""The Transport interface every backend implements, and the ROS 2 QoS profiles.

A transport moves ROS 2 messages (rosbags dataclasses, see `real.msgs`) between this process and the robot:
``publisher(topic, msg_type, qos).publish(msg)``, ``subscribe(topic, msg_type, callback, qos)`` with
``callback(msg, receive_time_ns)``, ``subscribe_raw`` (the CDR bytes, for a recorder), ``now()`` and
``close()``, and ``declare_parameters`` (the process's settings as read-only ROS 2 parameters where the
transport is a ROS 2 node, see `ros_parameters`; a no-op elsewhere). Receive times and ``now()`` use one monotonic
clock (a fake one in tests), so observation ages are ``now() - receive_time_ns``. Header stamps are wall
time and are the caller's business.

Callbacks run on a transport thread (for Cyclone DDS, possibly the publishing thread when both ends are
in one process): keep them short, e.g. store the latest value. An exception in a callback is logged and
the subscription keeps running.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

log = logging.getLogger(__name__)

MessageCallback = Callable[[Any, int], None]
"""``callback(msg, receive_time_ns)``."""
ParameterValue: TypeAlias = bool | int | float | str | list[bool] | list[int] | list[float] | list[str] | None
"""A ROS 2 parameter's value (None: declared but not set)."""
RawCallback = Callable[[bytes, int], None]
"""``callback(cdr_bytes, receive_time_ns)``: ROS 2 CDR including the 4-byte encapsulation header (over DDS
possibly followed by up to 3 zero pad bytes, which rosbags and rosbag2 accept)."""


class Reliability(enum.Enum):
    RELIABLE = "reliable"
    BEST_EFFORT = "best_effort"


class Durability(enum.Enum):
    VOLATILE = "volatile"
    TRANSIENT_LOCAL = "transient_local"


@dataclasses.dataclass(frozen=True)
class QoS:
    """ROS 2 QoS settings that matter for matching and delivery (history is always KEEP_LAST ``depth``)."""

    depth: int = 10
    reliability: Reliability = Reliability.RELIABLE
    durability: Durability = Durability.VOLATILE

    def __post_init__(self) -> None:
        if not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"QoS depth must be a positive int, got {self.depth!r}")
        if not isinstance(self.reliability, Reliability):
            raise TypeError(f"QoS reliability must be a Reliability, got {self.reliability!r}")
        if not isinstance(self.durability, Durability):
            raise TypeError(f"QoS durability must be a Durability, got {self.durability!r}")

    def matches(self, reader: QoS) -> bool:
        """Whether a writer with this (offered) QoS matches a reader's requested QoS (DDS request/offered rule).

        A BEST_EFFORT writer never matches a RELIABLE reader; a VOLATILE writer never matches a
        TRANSIENT_LOCAL reader. Everything else matches.
        """
        if self.reliability is Reliability.BEST_EFFORT and reader.reliability is Reliability.RELIABLE:
            return False
        return not (self.durability is Durability.VOLATILE and reader.durability is Durability.TRANSIENT_LOCAL)


# rmw's profiles (ros2/rmw qos_profiles.h; SYSTEM_DEFAULT as rmw_cyclonedds maps it).
DEFAULT = QoS(10, Reliability.RELIABLE, Durability.VOLATILE)
SENSOR_DATA = QoS(5, Reliability.BEST_EFFORT, Durability.VOLATILE)
SYSTEM_DEFAULT = QoS(1, Reliability.RELIABLE, Durability.VOLATILE)
LATCHED = QoS(1, Reliability.RELIABLE, Durability.TRANSIENT_LOCAL)
PROFILES: dict[str, QoS] = {
    "default": DEFAULT,
    "sensor_data": SENSOR_DATA,
    "system_default": SYSTEM_DEFAULT,
    "latched": LATCHED,
}


def resolve_qos(qos: QoS | str | None) -> QoS:
    """A QoS from a profile name ("default", "sensor_data", "system_default", "latched"), a QoS, or None (default)."""
    if qos is None:
        return DEFAULT
    if isinstance(qos, QoS):
        return qos
    if isinstance(qos, str) and qos.lower() in PROFILES:
        return PROFILES[qos.lower()]
    raise ValueError(f"unknown QoS {qos!r}; use a QoS or one of {sorted(PROFILES)}")


def ros_topic_name(topic: str) -> str:
    """A fully qualified ROS topic name: ``cmd_vel`` -> ``/cmd_vel``; rejects empty names and ``//``."""
    if not isinstance(topic, str) or not topic.strip("/") or "//" in topic or " " in topic:
        raise ValueError(f"invalid ROS topic name {topic!r}")
    return "/" + topic.strip("/")


class Publisher(abc.ABC):
    """Publishes messages of one type on one topic."""

    topic: str
    msg_type: str
    qos: QoS

    @abc.abstractmethod
    def publish(self, msg: Any) -> None:
        """Send one message (a rosbags dataclass of this publisher's type)."""

    @abc.abstractmethod
    def subscriber_count(self) -> int:
        """How many QoS-compatible subscriptions are matched right now."""


class Subscription(abc.ABC):
    """A live subscription; callbacks stop after ``close()``."""

    topic: str
    msg_type: str
    qos: QoS

    @abc.abstractmethod
    def publisher_count(self) -> int:
        """How many publishers are matched right now (QoS-aware where the backend can tell)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop delivering messages."""


class Transport(abc.ABC):
    """A connection to a ROS 2 graph (or a stand-in for one). Use as a context manager to close it."""

    @abc.abstractmethod
    def publisher(self, topic: str, msg_type: str | type, qos: QoS | str | None = None) -> Publisher:
        """A publisher for ``topic`` (e.g. "/cmd_vel") of ``msg_type`` (e.g. "geometry_msgs/msg/Twist")."""

    def subscribe(
        self, topic: str, msg_type: str | type, callback: MessageCallback, qos: QoS | str | None = None
    ) -> Subscription:
        """Call ``callback(msg, receive_time_ns)`` for every message received on ``topic``."""
        return self._subscribe(topic, msg_type, callback, qos, raw=False)

    def subscribe_raw(
        self, topic: str, msg_type: str | type, callback: RawCallback, qos: QoS | str | None = None
    ) -> Subscription:
        """Like `subscribe`, but ``callback(cdr_bytes, receive_time_ns)`` gets the ROS 2 CDR bytes (for recording)."""
        return self._subscribe(topic, msg_type, callback, qos, raw=True)

    @abc.abstractmethod
    def _subscribe(self, topic: str, msg_type: str | type, callback: Callable, qos: QoS | str | None,
                   raw: bool) -> Subscription:
        """The backend's subscription: messages (``raw=False``) or CDR bytes (``raw=True``) to ``callback``."""

    def declare_parameters(self, values: Mapping[str, ParameterValue], description: str = "") -> None:  # noqa: B027
        """Show ``values`` (flat names, see `ros_parameters`) as this node's read-only ROS 2 parameters.

        For ``ros2 param list/get``: what the process runs with, not a way to change it (set once, read-only).
        A ROS 2 node (the rclpy transport) declares them; transports without a node (dds, memory) ignore them.
        """

    @abc.abstractmethod
    def now(self) -> int:
        """The transport's monotonic clock in nanoseconds (receive times use it too)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every publisher, subscription and connection. Idempotent."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_msg(msg: Any, msg_type: str) -> None:
    """Reject a message of the wrong type before it is serialized (rosbags would not always notice)."""
    have = getattr(msg, "__msgtype__", None)
    if have != msg_type:
        raise TypeError(f"expected a {msg_type} message, got {have or type(msg).__name__}")


def guarded(callback: Callable[..., None], topic: str) -> Callable[..., None]:
    """Wrap a user callback so that an exception is logged instead of killing the transport's thread."""

    def call(*args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception("callback for %s raised", topic)

    return call


def ros_parameters(settings: Mapping[str, Any], prefix: str = "") -> dict[str, ParameterValue]:
    """Nested settings as ROS 2 parameter values, by ROS 2's dotted names (``{"safety": {"low": ...}}`` ->
    ``safety.low``).

    Dicts are flattened (an empty one disappears); None and empty lists are "not set"; lists of bools, ints,
    numbers or strings become typed arrays (ints mixed with floats: doubles); any other list (e.g. of dicts)
    a string array with one compact JSON text per element; other scalars their ``str``.
    """
    out: dict[str, ParameterValue] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(ros_parameters(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = _ros_array(list(value))
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out


def _ros_array(items: list[Any]) -> ParameterValue:
    """A list as the ROS 2 array type that holds it (see `ros_parameters`)."""
    if not items:
        return None
    if all(isinstance(v, bool) for v in items) or all(isinstance(v, str) for v in items):
        return items
    if not any(isinstance(v, bool) for v in items):
        if all(isinstance(v, int) for v in items):
            return items
        if all(isinstance(v, (int, float)) for v in items):
            return [float(v) for v in items]
    return [v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), default=str) for v in items]
