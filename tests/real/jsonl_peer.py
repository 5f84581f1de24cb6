"""What the interop peers share (tests/real/ros2_peer.py, tests/real/cyclone_peer.py): the JSON-lines command loop
and the bookkeeping of received messages. Plain Python only: each peer brings its own middleware."""

from __future__ import annotations

import collections
import json
import sys
import threading
from typing import Any


class PeerBase:
    """A peer's received messages (`expect`, `record`, ``received``) and its command dispatch (`handle`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: dict[str, dict[str, Any]] = {}

    def handle(self, cmd: dict[str, Any]) -> Any:
        op = cmd.pop("op")
        return getattr(self, f"op_{op}")(**cmd)

    def expect(self, topic: str, keep: int) -> None:
        """Start counting ``topic`` and keep its last ``keep`` messages."""
        with self.lock:
            self.received[topic] = {"count": 0, "messages": collections.deque(maxlen=keep)}

    def record(self, topic: str, plain: Any) -> None:
        with self.lock:
            entry = self.received[topic]
            entry["count"] += 1
            entry["messages"].append(plain)

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

    def op_quit(self) -> dict[str, Any]:
        return {"ok": True}

    def close(self) -> None:
        """Release the middleware (the peer's own)."""


def serve(peer: PeerBase, ready: dict[str, Any]) -> int:
    """Answer one JSON line on stdout per command line on stdin until ``quit`` or end of input (a failing command
    answers ``{"error": ...}`` and the peer keeps serving: the test decides); `ready` is the first line's content."""
    print(json.dumps({"ready": True, **ready}), flush=True)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            quit_ = cmd.get("op") == "quit"
            try:
                reply = peer.handle(cmd)
            except Exception as e:
                reply = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(reply), flush=True)
            if quit_:
                break
    finally:
        peer.close()
    return 0
