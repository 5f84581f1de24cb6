"""A plain Cyclone DDS application with its own ROS 2 types (nothing of robolearn's) for the interop tests.

What a robot stack built directly on Cyclone DDS looks like to robolearn: cyclonedds-python with its default
settings (no compatibility options; tests pass only a loopback ``CYCLONEDDS_URI``), IdlStruct classes generated here
from the rosbags type store the way ``idlc -l py`` would emit them for the ROS 2 mapping (``<pkg>::msg::dds_::<Name>_``,
final, sequential member ids), topics ``rt/<name>``, and cyclonedds' own serializer and XTypes type information.
tests/real/test_real_ros2.py runs it in a subprocess beside the rclpy node (tests/real/ros2_peer.py) and speaks the
same JSON-lines protocol to both (see that script's docstring): ``subscribe``, ``publish``, ``stop``, ``received``,
``quit``. ``graph`` answers an error: a plain DDS application has no ROS graph.

    python tests/real/cyclone_peer.py serve

``ROS_DOMAIN_ID`` selects the domain, as for a ROS 2 node.
"""

# No `from __future__ import annotations`: cyclonedds reads the field annotations of the generated classes.

import collections
import functools
import json
import os
import sys
import threading
import time
from typing import Any

from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct, annotations, make_idl_struct, types
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_typestore

STORE = get_typestore(Stores.LATEST)
BASE = {"bool": bool, "byte": types.byte, "char": types.uint8, "int8": types.int8, "uint8": types.uint8,
        "int16": types.int16, "uint16": types.uint16, "int32": types.int32, "uint32": types.uint32,
        "int64": types.int64, "uint64": types.uint64, "float32": types.float32, "float64": types.float64}
DEFAULTS = {"bool": False, "string": "", "bounded_string": "", "float32": 0.0, "float64": 0.0}
RELIABLE = Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100))
PROFILES = {  # ROS 2's rmw QoS profiles as DDS QoS
    "sensor_data": [Policy.Reliability.BestEffort, Policy.Durability.Volatile, Policy.History.KeepLast(5)],
    "default": [RELIABLE, Policy.Durability.Volatile, Policy.History.KeepLast(10)],
    "latched": [RELIABLE, Policy.Durability.TransientLocal, Policy.History.KeepLast(1)],
}


def field_type(desc: tuple) -> Any:
    """The cyclonedds annotation of one rosbags field description."""
    kind, arg = desc
    if kind == Nodetype.BASE:
        base, bound = arg
        if base in ("string", "bounded_string"):
            return types.bounded_str[bound] if bound else str
        return BASE[base]
    if kind == Nodetype.NAME:
        return idl_class(arg)
    sub, count = arg
    if kind == Nodetype.ARRAY:
        return types.array[field_type(sub), count]
    return types.sequence[field_type(sub), count] if count else types.sequence[field_type(sub)]


@functools.cache
def idl_class(name: str) -> type[IdlStruct]:
    """``pkg/msg/Name`` as a final IdlStruct with sequential ids, named as the ROS 2 DDS mapping names it."""
    pkg, _, short = name.split("/")
    members = {field: field_type(desc) for field, desc in STORE.fielddefs[name][1]}
    cls = make_idl_struct(f"{short}_", f"{pkg}::msg::dds_::{short}_", members)
    annotations.final(cls)
    annotations.autoid("sequential")(cls)
    return cls


def build(desc: tuple, value: Any) -> Any:
    """A field value from its JSON form (None: the field's default)."""
    kind, arg = desc
    if kind == Nodetype.BASE:
        return DEFAULTS.get(arg[0], 0) if value is None else value
    if kind == Nodetype.NAME:
        return message(arg, value or {})
    sub, count = arg
    if value is None:
        value = [None] * count if kind == Nodetype.ARRAY else []
    return [build(sub, v) for v in value]


def message(name: str, plain: dict[str, Any]) -> IdlStruct:
    """An instance of ``name`` from a dict by field name (missing fields take their defaults)."""
    fields = dict(STORE.fielddefs[name][1])
    unknown = set(plain) - set(fields)
    if unknown:
        raise KeyError(f"{name} has no fields {sorted(unknown)}")
    return idl_class(name)(**{f: build(desc, plain.get(f)) for f, desc in fields.items()})


def to_plain(value: Any) -> Any:
    """A JSON-able copy of an IdlStruct instance, a sequence or a primitive."""
    if isinstance(value, IdlStruct):
        return {f: to_plain(getattr(value, f)) for f in value.__dataclass_fields__}
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


class Peer:
    """One participant; `handle` runs one command. Readers are polled on a background thread."""

    def __init__(self) -> None:
        self.participant = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
        self.lock = threading.Lock()
        self.topics: dict[str, Topic] = {}
        self.readers: dict[str, DataReader] = {}
        self.received: dict[str, dict[str, Any]] = {}
        self.writers: dict[str, DataWriter] = {}
        self.periodic: dict[str, threading.Event] = {}
        self.running = True
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.poller.start()

    def handle(self, cmd: dict[str, Any]) -> Any:
        op = cmd.pop("op")
        return getattr(self, f"op_{op}")(**cmd)

    def _topic(self, topic: str, msg_type: str) -> Topic:
        if topic not in self.topics:
            self.topics[topic] = Topic(self.participant, "rt" + topic, idl_class(msg_type))
        return self.topics[topic]

    def _poll(self) -> None:
        while self.running:
            with self.lock:
                readers = list(self.readers.items())
            for topic, reader in readers:
                for sample in reader.take(N=64):
                    plain = to_plain(sample)
                    with self.lock:
                        entry = self.received[topic]
                        entry["count"] += 1
                        entry["messages"].append(plain)
            time.sleep(0.005)

    def op_subscribe(self, topic: str, msg_type: str, qos: str = "default", keep: int = 1) -> dict[str, Any]:
        reader = DataReader(self.participant, self._topic(topic, msg_type), qos=Qos(*PROFILES[qos]))
        with self.lock:
            self.received[topic] = {"count": 0, "messages": collections.deque(maxlen=keep)}
            self.readers[topic] = reader
        return {"ok": True}

    def op_publish(self, topic: str, msg_type: str, msg: dict[str, Any], qos: str = "default", rate_hz: float = 0.0,
                   wait_matched: float = 0.0) -> dict[str, Any]:
        if topic not in self.writers:
            self.writers[topic] = DataWriter(self.participant, self._topic(topic, msg_type), qos=Qos(*PROFILES[qos]))
        writer, sample = self.writers[topic], message(msg_type, msg)
        deadline = time.monotonic() + wait_matched
        while not writer.get_matched_subscriptions() and time.monotonic() < deadline:
            time.sleep(0.01)
        matched = bool(writer.get_matched_subscriptions())
        self.op_stop(topic)
        writer.write(sample)
        if rate_hz > 0:
            stop = self.periodic[topic] = threading.Event()

            def repeat() -> None:
                while not stop.wait(1.0 / rate_hz):
                    writer.write(sample)

            threading.Thread(target=repeat, daemon=True).start()
        return {"ok": True, "matched": matched}

    def op_stop(self, topic: str) -> dict[str, Any]:
        stop = self.periodic.pop(topic, None)
        if stop is not None:
            stop.set()
        return {"ok": True}

    def op_received(self, topics: list[str], reset: bool = False) -> dict[str, Any]:
        out = {}
        with self.lock:
            for topic in topics:
                entry = self.received[topic]
                out[topic] = {"count": entry["count"], "messages": list(entry["messages"])}
                if reset:
                    entry["count"] = 0
                    entry["messages"].clear()
        return out

    def op_graph(self, topics: list[str]) -> dict[str, Any]:
        raise NotImplementedError("a plain DDS application has no ROS graph")

    def op_quit(self) -> dict[str, Any]:
        return {"ok": True}

    def close(self) -> None:
        self.running = False
        for stop in self.periodic.values():
            stop.set()
        self.poller.join(timeout=5.0)


def serve() -> int:
    peer = Peer()
    print(json.dumps({"ready": True, "node": "cyclone_peer"}), flush=True)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            quit_ = cmd.get("op") == "quit"
            try:
                reply = peer.handle(cmd)
            except Exception as e:  # report and keep serving: the test decides
                reply = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(reply), flush=True)
            if quit_:
                break
    finally:
        peer.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["serve"]:
        sys.exit(f"usage: {sys.argv[0]} serve  (commands as JSON lines on stdin; see tests/real/ros2_peer.py)")
    sys.exit(serve())
