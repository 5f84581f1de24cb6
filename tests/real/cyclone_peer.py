"""A plain Cyclone DDS application with its own ROS 2 types (nothing of robolearn's) for the interop tests.

What a robot stack built directly on Cyclone DDS looks like to robolearn: cyclonedds-python with its default
settings (no compatibility options; tests pass only a loopback ``CYCLONEDDS_URI``), its own types generated from the
rosbags type store, topics ``rt/<name>``, and cyclonedds' own serializer and XTypes type information
(benchmarks/peers/cyclone_app.py).
tests/real/test_real_ros2.py runs it in a subprocess beside the rclpy node (tests/real/ros2_peer.py) and speaks the
same JSON-lines protocol to both (see that script's docstring): ``subscribe``, ``publish``, ``stop``, ``received``,
``quit``. ``graph`` answers an error: a plain DDS application has no ROS graph.

    python tests/real/cyclone_peer.py serve

``ROS_DOMAIN_ID`` selects the domain, as for a ROS 2 node.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: the Cyclone application's types
from jsonl_peer import PeerBase, serve  # noqa: E402

from benchmarks.peers.cyclone_app import idl_class, message, to_plain  # noqa: E402
from benchmarks.peers.cyclone_app import qos as qos_  # noqa: E402


class Peer(PeerBase):
    """One participant; `handle` runs one command. Readers are polled on a background thread."""

    def __init__(self) -> None:
        super().__init__()
        self.participant = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
        self.topics: dict[str, Topic] = {}
        self.readers: dict[str, DataReader] = {}
        self.writers: dict[str, DataWriter] = {}
        self.periodic: dict[str, threading.Event] = {}
        self.running = True
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.poller.start()

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
                    self.record(topic, to_plain(sample))
            time.sleep(0.005)

    def op_subscribe(self, topic: str, msg_type: str, qos: str = "default", keep: int = 1) -> dict[str, Any]:
        reader = DataReader(self.participant, self._topic(topic, msg_type), qos=qos_(qos))
        self.expect(topic, keep)
        with self.lock:
            self.readers[topic] = reader
        return {"ok": True}

    def op_publish(self, topic: str, msg_type: str, msg: dict[str, Any], qos: str = "default", rate_hz: float = 0.0,
                   wait_matched: float = 0.0) -> dict[str, Any]:
        if topic not in self.writers:
            self.writers[topic] = DataWriter(self.participant, self._topic(topic, msg_type), qos=qos_(qos))
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

    def op_graph(self, topics: list[str]) -> dict[str, Any]:
        raise NotImplementedError("a plain DDS application has no ROS graph")

    def close(self) -> None:
        self.running = False
        for stop in self.periodic.values():
            stop.set()
        self.poller.join(timeout=5.0)


if __name__ == "__main__":
    if sys.argv[1:] != ["serve"]:
        sys.exit(f"usage: {sys.argv[0]} serve  (commands as JSON lines on stdin; see tests/real/ros2_peer.py)")
    sys.exit(serve(Peer(), {"node": "cyclone_peer"}))
