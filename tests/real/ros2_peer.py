"""A plain ROS 2 node (rclpy and the generated message classes only, nothing of robolearn's) for the interop tests.

tests/real/test_real_ros2.py and test_real_ros2_node.py run it in a subprocess as "the other ROS 2 node" (Fast DDS,
ROS 2's default middleware):

    python tests/real/ros2_peer.py serve

It reads one JSON command per line on stdin and answers each with one JSON line on stdout (``{"error": ...}`` when
a command fails; the node keeps running). Messages travel as plain JSON: a dict per message, the ROS field names
as keys, arrays as lists. Commands (``qos``: "sensor_data", "default" or "latched", ROS 2's own profiles):

- ``{"op": "subscribe", "topic": "/odom", "msg_type": "nav_msgs/msg/Odometry", "qos": "sensor_data", "keep": 1}``:
  count the messages on ``topic`` and keep the last ``keep`` of them.
- ``{"op": "publish", "topic", "msg_type", "qos", "msg": {...}, "rate_hz": 0, "wait_matched": 0}``: publish ``msg``
  once (``rate_hz`` 0) or every ``1 / rate_hz`` s from a timer until ``stop``; first wait up to ``wait_matched``
  seconds for a matched subscription. One publisher per topic, reused by later ``publish`` commands.
- ``{"op": "stop", "topic"}``: stop a periodic publisher (the publisher itself stays).
- ``{"op": "received", "topics": [...], "reset": false}``: ``{topic: {"count": n, "messages": [...]}}``; with
  ``reset`` the counts and kept messages start over.
- ``{"op": "graph", "topics": [...]}``: the publishers and subscriptions the ROS graph shows on each topic, with
  their type and QoS: ``{topic: {"publishers": [{"type", "reliability", "durability", "node"}], ...}}``.
- ``{"op": "params", "node": "/robolearn_deploy", "change": {}, "wait": 10}``: another node's ROS 2
  parameters through its standard parameter services (what ``ros2 param list/get/describe/set`` call), once
  they are up (within ``wait`` s; each call then within ``wait`` s too): ``{"values": {name: value},
  "read_only": {name: bool}, "description": {name: text}, "changed": {name: {"successful": bool, "reason":
  text}}}``, values as JSON (arrays as lists, "not set" as null). ``change`` (name -> value) tries to set those
  parameters and ``changed`` reports what the node answered.
- ``{"op": "quit"}``.

The node spins on a background thread; stdin is read on the main thread. ``ROS_DOMAIN_ID`` and
``ROS_AUTOMATIC_DISCOVERY_RANGE`` come from the environment, as for any ROS 2 node.
"""

from __future__ import annotations

import array
import importlib
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from jsonl_peer import PeerBase, serve
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter, parameter_value_to_python
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

PROFILES = {
    "sensor_data": qos_profile_sensor_data,  # best effort, volatile, depth 5
    "default": QoSProfile(depth=10),  # reliable, volatile
    "latched": QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL),
}
_MSG_TYPE = re.compile(r"^(?:sequence<)?(\w+)/(?:msg/)?(\w+)")  # "std_msgs/Header", "sequence<std_msgs/X>"


def message_class(type_name: str) -> type:
    """The generated class of ``pkg/msg/Name`` (or rosidl's ``pkg/Name`` field type spelling)."""
    match = _MSG_TYPE.match(type_name)
    if match is None:
        raise ValueError(f"not a message type: {type_name!r}")
    return getattr(importlib.import_module(f"{match[1]}.msg"), match[2])


def to_plain(value: Any) -> Any:
    """A JSON-able copy of a message (dict), a sequence of them, an array, or a primitive."""
    if hasattr(value, "get_fields_and_field_types"):
        return {name: to_plain(getattr(value, name)) for name in value.get_fields_and_field_types()}
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, (list, tuple, array.array)):
        return [to_plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays (fixed-size fields) and scalars
        return value.tolist()
    return value


def fill(msg: Any, plain: dict[str, Any]) -> Any:
    """Set ``msg``'s fields from a `to_plain` dict (missing keys keep their defaults); returns ``msg``."""
    types = msg.get_fields_and_field_types()
    for name, value in plain.items():
        if name not in types:
            raise KeyError(f"{type(msg).__name__} has no field {name!r}")
        kind = types[name]
        if "/" in kind and kind.startswith("sequence<"):
            element = message_class(kind)
            setattr(msg, name, [fill(element(), v) for v in value])
        elif "/" in kind:
            fill(getattr(msg, name), value)
        else:
            setattr(msg, name, value)
    return msg


class Peer(PeerBase):
    """The node and its endpoints; `handle` runs one command."""

    def __init__(self) -> None:
        super().__init__()
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("ros2_peer", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.subscriptions: dict[str, Any] = {}
        self.publishers: dict[str, Any] = {}
        self.timers: dict[str, Any] = {}
        self.param_clients: dict[str, AsyncParameterClient] = {}
        self.spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self.spinner.start()

    def op_subscribe(self, topic: str, msg_type: str, qos: str = "default", keep: int = 1) -> dict[str, Any]:
        self.expect(topic, keep)
        self.subscriptions[topic] = self.node.create_subscription(
            message_class(msg_type), topic, lambda msg: self.record(topic, to_plain(msg)), PROFILES[qos])
        return {"ok": True}

    def op_publish(self, topic: str, msg_type: str, msg: dict[str, Any], qos: str = "default", rate_hz: float = 0.0,
                   wait_matched: float = 0.0) -> dict[str, Any]:
        cls = message_class(msg_type)
        if topic not in self.publishers:
            self.publishers[topic] = self.node.create_publisher(cls, topic, PROFILES[qos])
        pub = self.publishers[topic]
        message = fill(cls(), msg)
        matched = self._wait(lambda: pub.get_subscription_count() > 0, wait_matched)
        self.op_stop(topic)
        if rate_hz > 0:
            self.timers[topic] = self.node.create_timer(1.0 / rate_hz, lambda: pub.publish(message))
        pub.publish(message)
        return {"ok": True, "matched": matched}

    def op_stop(self, topic: str) -> dict[str, Any]:
        timer = self.timers.pop(topic, None)
        if timer is not None:
            self.node.destroy_timer(timer)
        return {"ok": True}

    def op_graph(self, topics: list[str]) -> dict[str, Any]:
        def describe(infos: list) -> list[dict[str, Any]]:
            return [{"type": info.topic_type, "node": info.node_name,
                     "reliability": info.qos_profile.reliability.name, "durability": info.qos_profile.durability.name}
                    for info in infos]

        return {topic: {"publishers": describe(self.node.get_publishers_info_by_topic(topic)),
                        "subscriptions": describe(self.node.get_subscriptions_info_by_topic(topic))}
                for topic in topics}

    def op_params(self, node: str, change: dict[str, Any] | None = None, wait: float = 10.0) -> dict[str, Any]:
        if node not in self.param_clients:  # one client per node, reused
            self.param_clients[node] = AsyncParameterClient(self.node, node)
        client = self.param_clients[node]
        if not client.wait_for_services(wait):
            raise TimeoutError(f"no parameter services of {node} within {wait} s")
        names = list(self._result(client.list_parameters(), wait).result.names)
        values = self._result(client.get_parameters(names), wait).values
        described = self._result(client.describe_parameters(names), wait).descriptors
        out: dict[str, Any] = {
            "values": {n: to_plain(parameter_value_to_python(v)) for n, v in zip(names, values, strict=True)},
            "read_only": {d.name: d.read_only for d in described},
            "description": {d.name: d.description for d in described},
            "changed": {},
        }
        if change:
            params = [Parameter(name, value=value) for name, value in change.items()]
            results = self._result(client.set_parameters(params), wait).results
            out["changed"] = {p.name: {"successful": r.successful, "reason": r.reason}
                          for p, r in zip(params, results, strict=True)}
        return out

    @staticmethod
    def _result(future: Any, timeout: float) -> Any:
        """A service call's response (the node spins on its own thread), or TimeoutError."""
        if not Peer._wait(future.done, timeout):
            raise TimeoutError(f"no service response within {timeout} s")
        return future.result()

    @staticmethod
    def _wait(condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self) -> None:
        self.executor.shutdown()
        self.spinner.join(timeout=5.0)
        self.node.destroy_node()
        self.context.try_shutdown()


if __name__ == "__main__":
    if sys.argv[1:] != ["serve"]:
        sys.exit(f"usage: {sys.argv[0]} serve  (commands as JSON lines on stdin; see the docstring)")
    sys.exit(serve(Peer(), {"node": "/ros2_peer"}))
