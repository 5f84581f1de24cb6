"""Observations from ROS topics: named inputs, a latest-value cache, and slots that fill the policy's vector.

A deploy config names its inputs (topic, message type, QoS, maximum age) and lists one *slot* per entry of the
policy's observation vector, in order. A slot reads one number from one of three sources:

- ``<input>.<field path>``: a field of the input's latest message, e.g. ``odom.twist.twist.linear.x``;
  sequence fields take an index, by position (``joints.position[2]``) or, for a JointState-like message whose
  ``name`` list labels them, by name (``joints.position[elbow]``);
- ``robot.<feature>``: a value the robot adapter derives (e.g. the RC car's vector to the next checkpoint);
- ``action[i]``: entry i of the previous command (the runner's own output, normalized).

``reduce: mean`` averages an input field over the messages received during the last control period (the
latest value when none arrived); ``minus`` subtracts a second source (e.g. goal minus gripper); ``scale`` and
``offset`` apply last. The policy's own normalization travels inside the checkpoint, so slots carry raw units.

`InputCache` is written by transport threads and read by the control loop: it keeps each input's latest
message and receive time (the safety watchdog's input) and, where asked, every message of the current period.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from robolearn.errors import ConfigError

PERIOD_BUFFER = 256  # messages kept per input per control period (a 1 kHz IMU at 4 Hz control still fits)
_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[[^\]]+\])*)$")


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One subscribed topic.

    Attributes:
        name: the input's name in slots (``odom`` in ``odom.twist.twist.linear.x``).
        topic, msg_type, qos: what to subscribe to (QoS profile name; follow the robot's publisher).
        max_age: seconds after which the input is stale (no policy step, stop command); None = the runner's
            default (a few control periods); 0 = never stale once received (e.g. a latched goal).
        keep_period: keep every message of the control period (for averages), not only the latest.
    """

    name: str
    topic: str
    msg_type: str
    qos: str = "sensor_data"
    max_age: float | None = None
    keep_period: bool = False

    @classmethod
    def from_dict(cls, name: str, cfg: Mapping[str, Any]) -> InputSpec:
        known = {f.name for f in dataclasses.fields(cls)} - {"name"}
        unknown = set(cfg) - known - {"type"}
        if unknown:
            raise ConfigError(f"input {name!r}: unknown keys {sorted(unknown)}; valid: topic, type, qos, max_age")
        if not cfg.get("topic") or not cfg.get("type"):
            raise ConfigError(f"input {name!r} needs a topic and a type (e.g. type: nav_msgs/msg/Odometry)")
        max_age = cfg.get("max_age")
        if max_age is not None and not float(max_age) >= 0:
            raise ConfigError(f"input {name!r}: max_age must be >= 0 seconds, got {max_age!r}")
        return cls(name, str(cfg["topic"]), str(cfg["type"]), str(cfg.get("qos") or "sensor_data"),
                   None if max_age is None else float(max_age), bool(cfg.get("keep_period", False)))


@dataclasses.dataclass
class Received:
    """An input as the control loop sees it at one tick."""

    msg: Any = None  # the latest message, None if none ever arrived
    time_ns: int | None = None  # its receive time on the transport's clock
    period: list[Any] = dataclasses.field(default_factory=list)  # messages since the previous tick (if kept)
    count: int = 0  # messages received in total


class InputCache:
    """Latest message and receive time of every input, filled by subscription callbacks (thread-safe)."""

    def __init__(self, specs: Iterable[InputSpec]) -> None:
        self.specs = {s.name: s for s in specs}
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[Any, int | None, int]] = {name: (None, None, 0) for name in self.specs}
        self._period: dict[str, collections.deque] = {
            name: collections.deque(maxlen=PERIOD_BUFFER) for name, s in self.specs.items() if s.keep_period
        }

    def keep_period(self, name: str) -> None:
        """Also keep every message of the control period for input ``name``."""
        self._period.setdefault(name, collections.deque(maxlen=PERIOD_BUFFER))

    def on_message(self, name: str, msg: Any, receive_time_ns: int) -> None:
        """Store one received message (the subscription callback)."""
        with self._lock:
            self._latest[name] = (msg, receive_time_ns, self._latest[name][2] + 1)
            if name in self._period:
                self._period[name].append(msg)

    def subscribe(self, transport: Any) -> list[Any]:
        """Subscribe every input on ``transport``; returns the subscriptions."""
        subs = []
        for spec in self.specs.values():
            callback = _Forward(self, spec.name)
            subs.append(transport.subscribe(spec.topic, spec.msg_type, callback, spec.qos))
        return subs

    def take(self) -> dict[str, Received]:
        """A snapshot of every input; starts a new period (the per-period lists restart empty)."""
        with self._lock:
            out = {}
            for name, (msg, t, count) in self._latest.items():
                period = list(self._period[name]) if name in self._period else []
                out[name] = Received(msg, t, period, count)
            for buffer in self._period.values():
                buffer.clear()
        return out


class _Forward:
    """A subscription callback bound to one input name (a named callable rather than a closure, for tracebacks)."""

    def __init__(self, cache: InputCache, name: str) -> None:
        self.cache, self.name = cache, name

    def __call__(self, msg: Any, receive_time_ns: int) -> None:
        self.cache.on_message(self.name, msg, receive_time_ns)


# --- field paths and slots -------------------------------------------------------------------------------


class FieldPath:
    """A parsed ``<input>.<field>.<field>[index]`` path; `get` reads it from a message as a float."""

    def __init__(self, text: str) -> None:
        self.text = text
        parts = text.split(".")
        if len(parts) < 2:
            raise ConfigError(f"field path {text!r} needs an input and a field, e.g. odom.twist.twist.linear.x")
        self.input = parts[0]
        self.steps: list[tuple[str, str | int | None]] = []
        for part in parts[1:]:
            m = _STEP.match(part)
            if not m:
                raise ConfigError(f"bad field {part!r} in {text!r}: use names, optionally with [index] or [name]")
            self.steps.append((m.group(1), None))
            for index in re.findall(r"\[([^\]]+)\]", m.group(2)):
                index = index.strip()
                self.steps.append(("[]", int(index) if re.fullmatch(r"-?\d+", index) else index))

    def get(self, msg: Any) -> float:
        value, parent = msg, msg
        for field, index in self.steps:
            if field != "[]":
                if not hasattr(value, field):
                    raise ConfigError(f"{self.text}: {type(value).__name__} has no field {field!r}")
                parent, value = value, getattr(value, field)
            elif isinstance(index, int):
                value = value[index]
            else:  # by name: the parent's `name` list labels the sequence (sensor_msgs/JointState)
                names = list(getattr(parent, "name", []))
                if index not in names:
                    raise ConfigError(f"{self.text}: no {index!r} among the message's names {names}")
                value = value[names.index(index)]
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.text} is not a number ({type(value).__name__}); index into it") from None


@dataclasses.dataclass(frozen=True)
class Slot:
    """One observation entry (see the module docstring)."""

    name: str
    source: str
    reduce: str = "latest"
    minus: str | None = None
    scale: float = 1.0
    offset: float = 0.0

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> Slot:
        cfg = dict(cfg)
        if "from" in cfg:
            cfg["source"] = cfg.pop("from")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(cfg) - known
        if unknown or "name" not in cfg or "source" not in cfg:
            raise ConfigError(f"observation slot {cfg}: needs name and from; optional reduce, minus, scale, offset"
                              + (f" (unknown {sorted(unknown)})" if unknown else ""))
        if cfg.get("reduce", "latest") not in ("latest", "mean"):
            raise ConfigError(f"slot {cfg['name']!r}: reduce must be 'latest' or 'mean', got {cfg['reduce']!r}")
        return cls(str(cfg["name"]), str(cfg["source"]), str(cfg.get("reduce", "latest")),
                   None if cfg.get("minus") is None else str(cfg["minus"]), float(cfg.get("scale", 1.0)),
                   float(cfg.get("offset", 0.0)))


class _Source:
    """One readable source: an input field, a robot feature or a previous action entry."""

    def __init__(self, text: str, slot: str, inputs: Mapping[str, InputSpec], features: Iterable[str] | None,
                 num_actions: int, mean: bool) -> None:
        self.kind, self.text, self.mean = "", text, mean
        action = re.fullmatch(r"action\[(\d+)\]", text)
        if action:
            self.kind, self.index = "action", int(action.group(1))
            if self.index >= num_actions:
                raise ConfigError(f"slot {slot!r}: {text} is out of range for {num_actions} actions")
        elif text.startswith("robot."):
            self.kind, self.feature = "robot", text[len("robot."):]
            if features is not None and self.feature not in features:
                raise ConfigError(f"slot {slot!r}: the robot adapter offers no {self.feature!r}; "
                                  f"it offers {sorted(features)}")
        else:
            self.kind, self.path = "field", FieldPath(text)
            if self.path.input not in inputs:
                raise ConfigError(f"slot {slot!r}: {text!r} reads input {self.path.input!r}, which is not among "
                                  f"the inputs {sorted(inputs)}")
        if mean and self.kind != "field":
            raise ConfigError(f"slot {slot!r}: reduce: mean applies to input fields, not {text!r}")

    def read(self, snapshot: Mapping[str, Received], features: Mapping[str, float], prev: np.ndarray) -> float:
        if self.kind == "action":
            return float(prev[self.index])
        if self.kind == "robot":
            return float(features[self.feature])
        got = snapshot[self.path.input]
        if self.mean and got.period:
            return float(np.mean([self.path.get(m) for m in got.period]))
        if got.msg is None:
            return float("nan")
        return self.path.get(got.msg)


class ObservationBuilder:
    """Builds the policy's observation vector from an `InputCache` snapshot, robot features and the last command."""

    def __init__(self, slots: Iterable[Slot], inputs: Mapping[str, InputSpec], num_actions: int,
                 features: Iterable[str] | None = None) -> None:
        self.slots = list(slots)
        if not self.slots:
            raise ConfigError("the deploy config's observation lists no slots")
        names = [s.name for s in self.slots]
        if len(set(names)) != len(names):
            raise ConfigError(f"observation slot names repeat: {names}")
        features = None if features is None else set(features)
        self._sources = [
            (_Source(s.source, s.name, inputs, features, num_actions, s.reduce == "mean"),
             None if s.minus is None else _Source(s.minus, s.name, inputs, features, num_actions, s.reduce == "mean"),
             s.scale, s.offset)
            for s in self.slots
        ]
        self.inputs_used = sorted({src.path.input for pair in self._sources for src in pair[:2]
                                   if src is not None and src.kind == "field"})
        self.averaged_inputs = sorted({src.path.input for pair in self._sources for src in pair[:2]
                                       if src is not None and src.kind == "field" and src.mean})

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slots]

    def __len__(self) -> int:
        return len(self.slots)

    def build(self, snapshot: Mapping[str, Received], features: Mapping[str, float], prev_action: np.ndarray
              ) -> np.ndarray:
        """The observation (float32); NaN where an input has never been received."""
        out = np.empty(len(self._sources), dtype=np.float32)
        for i, (source, minus, scale, offset) in enumerate(self._sources):
            value = source.read(snapshot, features, prev_action)
            if minus is not None:
                value -= minus.read(snapshot, features, prev_action)
            out[i] = value * scale + offset
        return out
