"""rclpy transport, used when ROS 2 is installed (``import rclpy`` works).

Messages stay rosbags dataclasses: publishers send ROS 2 CDR bytes (``Publisher.publish`` accepts serialized
bytes) and subscriptions are created with ``raw=True`` and decoded with rosbags, so no conversion between
message classes is needed. rclpy's SIGINT handler is disabled: it would shut the context down before a
zero command could be published on Ctrl-C (see `real.safety.zero_on_exit`). Not tested here (no ROS 2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from rosidl_runtime_py.utilities import get_message

from real import msgs
from real.transport.base import (
    Durability,
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


class _RclpyPublisher(Publisher):
    def __init__(self, pub: Any, topic: str, msg_type: str, qos: QoS) -> None:
        self.pub, self.topic, self.msg_type, self.qos = pub, topic, msg_type, qos

    def publish(self, msg: Any) -> None:
        check_msg(msg, self.msg_type)
        self.pub.publish(msgs.serialize(msg, self.msg_type))

    def subscriber_count(self) -> int:
        return self.pub.get_subscription_count()


class _RclpySubscription(Subscription):
    def __init__(self, transport: RclpyTransport, sub: Any, topic: str, msg_type: str, qos: QoS) -> None:
        self.transport, self.sub, self.topic, self.msg_type, self.qos = transport, sub, topic, msg_type, qos

    def publisher_count(self) -> int:
        return self.transport.node.count_publishers(self.topic)  # not QoS-aware

    def close(self) -> None:
        if self.sub is not None:
            self.transport.node.destroy_subscription(self.sub)
            self.sub = None


class RclpyTransport(Transport):
    """One rclpy node in its own context, spun by a background executor thread."""

    def __init__(self, domain_id: int | None = None, node_name: str = "robolearn") -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(node_name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, name="rclpy-spin", daemon=True)
        self._thread.start()
        self.closed = False

    def publisher(self, topic: str, msg_type: str | type, qos: QoS | str | None = None) -> Publisher:
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        pub = self.node.create_publisher(get_message(name), topic, rclpy_qos(qos))
        return _RclpyPublisher(pub, topic, name, qos)

    def _subscribe(self, topic: str, msg_type: str | type, callback: Callable, qos: Any, raw: bool) -> Subscription:
        topic, name, qos = ros_topic_name(topic), msgs.type_name(msg_type), resolve_qos(qos)
        user = guarded(callback, topic)

        def on_bytes(data: bytes) -> None:
            now = self.now()
            user(data if raw else msgs.deserialize(data, name), now)

        sub = self.node.create_subscription(get_message(name), topic, on_bytes, rclpy_qos(qos), raw=True)
        return _RclpySubscription(self, sub, topic, name, qos)

    def now(self) -> int:
        return time.monotonic_ns()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.executor.shutdown()
        self._thread.join(timeout=2.0)
        self.node.destroy_node()
        self.context.try_shutdown()
