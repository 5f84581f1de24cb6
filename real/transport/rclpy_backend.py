"""rclpy transport: a ROS 2 node (whatever RMW it loads, Fast DDS by default) in its own context.

Messages stay rosbags dataclasses: publishers send ROS 2 CDR bytes (rclpy's ``Publisher.publish`` accepts
serialized bytes) and subscriptions are created with ``raw=True`` and decoded with rosbags, so no conversion
between message classes is needed. rclpy still needs each type's generated Python package (its type
support) to create an endpoint: ``ros-<pkg>`` wheels or a ROS 2 install. A type without one (ackermann_msgs
has no wheel) is a clear error naming the way out: ``transport=dds``, which carries its own definitions.

The node's ROS 2 parameters are what the process declares with `declare_parameters` (``robolearn deploy``: its
settings), read-only: ``ros2 param list/get`` read them through rclpy's standard parameter services, and a set
is refused (the process reads its settings once, at start). Parameter overrides from the command line are
ignored for the same reason.

rclpy's SIGINT handler is disabled: it would shut the context down before a zero command could be published
on Ctrl-C (see `real.safety.zero_on_exit`). Tested against rclpy nodes in other processes and against the
DDS transport (tests/test_real_ros2.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSCompatibility,
    QoSProfile,
    ReliabilityPolicy,
    qos_check_compatible,
)
from rclpy.signals import SignalHandlerOptions

from real import msgs
from real.transport.base import (
    Durability,
    ParameterValue,
    Publisher,
    QoS,
    Reliability,
    Subscription,
    Transport,
    check_msg,
    guarded,
    resolve_qos,
    ros_topic_name,
)

log = logging.getLogger(__name__)


def rclpy_qos(qos: QoS) -> QoSProfile:
    """The rclpy QoSProfile for a QoS."""
    reliable = qos.reliability is Reliability.RELIABLE
    transient_local = qos.durability is Durability.TRANSIENT_LOCAL
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=qos.depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if transient_local else DurabilityPolicy.VOLATILE,
    )


def message_class(msg_type: str) -> type:
    """The generated rclpy message class of ``pkg/msg/Name``, or a RuntimeError saying what to install."""
    pkg, kind, name = msg_type.split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    except (ImportError, AttributeError):
        raise RuntimeError(
            f"transport 'rclpy' needs the Python package of {msg_type} (pip install ros-{pkg.replace('_', '-')} "
            f"or a ROS 2 install with it); use transport=dds, which carries its own definition of every message "
            f"type, or a command type that has one"
        ) from None


def _matched(infos: list, qos: QoSProfile, we_publish: bool) -> int:
    """How many of the graph's endpoints (``TopicEndpointInfo``) are QoS-compatible with ours."""
    count = 0
    for info in infos:
        pub, sub = (qos, info.qos_profile) if we_publish else (info.qos_profile, qos)
        if qos_check_compatible(pub, sub)[0] is not QoSCompatibility.ERROR:
            count += 1
    return count


class _RclpyPublisher(Publisher):
    def __init__(self, transport: RclpyTransport, pub: Any, topic: str, msg_type: str, qos: QoS) -> None:
        self.transport, self.pub, self.topic, self.msg_type, self.qos = transport, pub, topic, msg_type, qos

    def publish(self, msg: Any) -> None:
        if self.transport.closed:
            raise RuntimeError("publish on a closed transport")
        check_msg(msg, self.msg_type)
        self.pub.publish(msgs.serialize(msg, self.msg_type))

    def subscriber_count(self) -> int:
        return self.pub.get_subscription_count()


class _RclpySubscription(Subscription):
    def __init__(self, transport: RclpyTransport, sub: Any, topic: str, msg_type: str, qos: QoS) -> None:
        self.transport, self.sub, self.topic, self.msg_type, self.qos = transport, sub, topic, msg_type, qos

    def publisher_count(self) -> int:
        if self.sub is None or self.transport.closed:
            return 0
        return _matched(self.transport.node.get_publishers_info_by_topic(self.topic), rclpy_qos(self.qos), False)

    def close(self) -> None:
        sub, self.sub = self.sub, None
        if sub is not None and not self.transport.closed:
            self.transport.node.destroy_subscription(sub)


class RclpyTransport(Transport):
    """One rclpy node in its own context, spun by a background executor thread.

    ``node_name`` defaults to ``robolearn_<pid>`` (ROS 2 warns about two nodes of one name).
    """

    def __init__(self, domain_id: int | None = None, node_name: str | None = None) -> None:
        self.closed = True
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
        try:
            self.node = rclpy.create_node(node_name or f"robolearn_{os.getpid()}", context=self.context)
        except Exception:
            self.context.try_shutdown()
            raise
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="rclpy-spin", daemon=True)
        self.closed = False
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # the context was shut down under the executor: close() is on its way
            if not self.closed:
                raise

    def publisher(self, topic: str, msg_type: str | type, qos: QoS | str | None = None) -> Publisher:
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        if self.closed:
            raise RuntimeError("transport is closed")
        pub = self.node.create_publisher(message_class(name), topic, rclpy_qos(qos))
        return _RclpyPublisher(self, pub, topic, name, qos)

    def _subscribe(self, topic: str, msg_type: str | type, callback: Callable, qos: Any, raw: bool) -> Subscription:
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        if self.closed:
            raise RuntimeError("transport is closed")
        user = guarded(callback, topic)

        def on_bytes(data: bytes) -> None:
            now = self.now()
            if raw:
                user(data, now)
                return
            try:
                msg = msgs.deserialize(data, name)
            except Exception:  # a foreign writer with a different definition of the type
                log.exception("dropping an undecodable %s message on %s", name, topic)
                return
            user(msg, now)

        sub = self.node.create_subscription(message_class(name), topic, on_bytes, rclpy_qos(qos), raw=True)
        return _RclpySubscription(self, sub, topic, name, qos)

    def declare_parameters(self, values: Mapping[str, ParameterValue], description: str = "") -> None:
        if self.closed:
            raise RuntimeError("transport is closed")
        self.node.declare_parameters("", [
            (name, value, ParameterDescriptor(description=description, read_only=True, dynamic_typing=value is None))
            for name, value in values.items()
        ], ignore_override=True)  # fmt: skip

    def topic_types(self) -> dict[str, list[str]]:
        """The graph's topics and their types, ``{"/odom": ["nav_msgs/msg/Odometry"], ...}``."""
        return dict(self.node.get_topic_names_and_types())

    def now(self) -> int:
        return time.monotonic_ns()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.executor.shutdown(timeout_sec=2.0)  # bounded, as the join below: a close never hangs the process
        self._thread.join(timeout=2.0)
        self.node.destroy_node()
        self.context.try_shutdown()
