"""A recorded bag -> robolearn episodes, sampled at the control ticks that `real.recorder.Recorder` logged.

Ticks are the timestamps of ``/rl/action_raw``; every other ``/rl/*`` message of a tick has the same one.
At each tick the observation is either the policy's own vector (``/rl/observation``, the default when it was
recorded) or a concatenation of robot topics and fields, each the latest message received at or before the
tick (`ObsSpec`, e.g. ``/odom:twist.twist.linear.x`` or a whole ``/imu``). A tick is unusable when an input
has not arrived yet or is older than ``max_age``, when its observation is not finite, or when its recorded
reward is not finite; it ends the episode in progress (truncated) without being part of it.

A tick is not learning data when a stop replaced its action (``/rl/safety`` has the e-stop, stale or
non-finite bit) or its ``/rl/mode`` is not a learning mode (e.g. a recovery manoeuvre). As the actor does
(`real.rl.actor`), such a tick ends the episode in progress as its last observation (truncated) and never
starts or continues one: its action is never a training step.

Episodes: consecutive usable ticks with one ``/rl/episode`` id (all one episode when none was recorded).
An episode ends at a tick whose ``/rl/done`` says terminated or truncated, when the id changes, at an
unusable or non-learning tick, and at the end of the bag (all truncate except a recorded "terminated"): an
episode the bag ends mid-way is truncated, a time-out-like cut that learners bootstrap from, so every
episode's last step carries the end flag `Episode.validate` requires.
With ticks k_0..k_T the episode has observations at all T+1 ticks, actions (the sent ``/rl/command``; the
policy's ``/rl/action_raw`` in the ``raw_actions`` extra) and interventions at k_0..k_{T-1}, and rewards
from ``/rl/reward`` at k_1..k_T (the reward of the step that ended at that tick; NaN where none was
recorded).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from real import msgs
from real.recorder import DONE_TERMINATED, DONE_TRUNCATED, LEARN_MODES, RL_TOPICS, SAFETY_STOPPED
from robolearn.data.episodes import Episode, save_episodes
from robolearn.errors import ConfigError, DatasetError

# whole-message vectors for the common types (see real.msgs.convert for the orders)
CONVERTERS = {
    "geometry_msgs/msg/Twist": msgs.twist_to_array,
    "geometry_msgs/msg/TwistStamped": msgs.twist_to_array,
    "ackermann_msgs/msg/AckermannDriveStamped": msgs.ackermann_to_array,
    "sensor_msgs/msg/Imu": msgs.imu_to_array,
    "nav_msgs/msg/Odometry": msgs.odometry_to_array,
    "sensor_msgs/msg/JointState": lambda m: np.concatenate(msgs.joint_state_to_arrays(m)[1:]),
    "std_msgs/msg/Float32MultiArray": lambda m: msgs.float32_multiarray_to_array(m).reshape(-1),
}
_FIELD = re.compile(r"^([A-Za-z_]\w*)(\[(\d+)\])?$")


@dataclasses.dataclass(frozen=True)
class ObsSpec:
    """One observation input: a topic, optionally one field path in it (``twist.twist.linear.x``,
    ``position[2]``). Without a field, the whole message through `CONVERTERS` (or all its numbers)."""

    topic: str
    field: str | None = None

    @classmethod
    def parse(cls, text: str) -> ObsSpec:
        topic, _, field = text.strip().partition(":")
        if not topic.startswith("/"):
            raise ConfigError(f"observation input {text!r} must start with a topic name like /odom")
        if field and not all(_FIELD.match(part) for part in field.split(".")):
            raise ConfigError(f"bad field path {field!r} in {text!r} (use e.g. twist.twist.linear.x or position[0])")
        return cls(topic, field or None)

    @property
    def name(self) -> str:
        return f"{self.topic}:{self.field}" if self.field else self.topic

    def vector(self, msg: Any, msg_type: str) -> np.ndarray:
        """The float64 values this spec takes from one message."""
        if self.field is None:
            convert = CONVERTERS.get(msg_type)
            return np.asarray(convert(msg) if convert else _numbers(msg, self.topic), dtype=np.float64).reshape(-1)
        value = msg
        for part in self.field.split("."):
            name, _, index = _FIELD.match(part).groups()
            try:
                value = getattr(value, name)
                value = value[int(index)] if index is not None else value
            except (AttributeError, IndexError) as e:
                raise DatasetError(f"{msg_type} on {self.topic} has no field {self.field!r} ({e})") from None
        try:
            return np.asarray(value, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise DatasetError(f"field {self.field!r} of {self.topic} is not numeric; name a numeric field") from None


def _numbers(msg: Any, topic: str) -> list[float]:
    """Every numeric value of a message in field order, headers and strings skipped."""
    out: list[float] = []
    for name in getattr(msg, "__dataclass_fields__", {}):
        value = getattr(msg, name)
        if name == "header" or isinstance(value, str):
            continue
        if isinstance(value, bool | int | float | np.number):
            out.append(float(value))
        elif isinstance(value, np.ndarray):
            if value.size > 4096:
                raise DatasetError(f"{topic} has a {value.size}-element field {name!r} (an image?); "
                                   "choose numeric fields with /topic:field")
            out.extend(value.astype(np.float64).reshape(-1).tolist())
        elif hasattr(value, "__dataclass_fields__"):
            out.extend(_numbers(value, topic))
    return out


@dataclasses.dataclass
class _Series:
    """Messages of one topic in time order: times [N] and values (one per message)."""

    times: list[int] = dataclasses.field(default_factory=list)
    values: list[Any] = dataclasses.field(default_factory=list)


def _read(bag: Path, topics: set[str]) -> tuple[dict[str, _Series], dict[str, str]]:
    from rosbags.highlevel import AnyReader
    from rosbags.highlevel.anyreader import AnyReaderError

    from real.bagfile import mcap_complete

    files = [bag] if bag.is_file() else sorted(bag.glob("*.mcap"))
    unfinished = [f.name for f in files if f.suffix == ".mcap" and not mcap_complete(f)]
    if unfinished:  # rosbags may still read some of it; never convert half a bag silently
        raise DatasetError(f"bag {bag} has unfinished files {unfinished} (a recorder killed mid-run?): "
                           "try repair=true")
    reader = AnyReader([bag], default_typestore=msgs.typestore())
    try:
        reader.open()
    except (AnyReaderError, FileNotFoundError, OSError) as e:
        raise DatasetError(f"cannot read bag {bag}: {e} (a recorder killed mid-run? try repair=true)") from e
    try:
        types = {c.topic: c.msgtype for c in reader.connections}
        conns = [c for c in reader.connections if c.topic in topics]
        series: dict[str, _Series] = {t: _Series() for t in topics if t in types}
        for conn, t, raw in reader.messages(connections=conns):
            series[conn.topic].times.append(t)
            series[conn.topic].values.append(reader.deserialize(raw, conn.msgtype))
    finally:
        reader.close()
    return series, types


def bag_to_episodes(bag: str | Path, obs: Sequence[ObsSpec | str] = (), max_age: float | None = None,
                    learn_modes: Sequence[str] = LEARN_MODES) -> list[Episode]:  # fmt: skip
    """Episodes from a bag recorded with `Recorder.record_tick` (see the module docstring); ``learn_modes``: the
    ``/rl/mode`` values that are learning data (ticks recorded without a mode count as learning)."""
    bag = Path(bag)
    specs = [s if isinstance(s, ObsSpec) else ObsSpec.parse(s) for s in obs]
    series, types = _read(bag, set(RL_TOPICS) | {s.topic for s in specs})
    if "/rl/action_raw" not in series or not series["/rl/action_raw"].times:
        raise DatasetError(f"{bag} has no control ticks (/rl/action_raw); was it recorded with record_tick?")
    ticks = np.asarray(series["/rl/action_raw"].times, dtype=np.int64)
    at_tick = {topic: dict(zip(s.times, s.values, strict=True)) for topic, s in series.items()}

    def per_tick(topic: str, get: Any, default: Any) -> list[Any]:
        values = at_tick.get(topic, {})
        return [get(values[t]) if t in values else default for t in ticks.tolist()]

    if specs:
        observations, usable, names = _sample(specs, series, types, ticks, max_age)
    elif "/rl/observation" in series and series["/rl/observation"].times:
        rows = per_tick("/rl/observation", _array, None)
        usable, observations = np.array([r is not None for r in rows]), _rows(rows)
        names = ["/rl/observation"]
    else:
        raise DatasetError(f"{bag} has no /rl/observation; name the observation inputs, e.g. obs=/odom,/imu")
    raw, command = per_tick("/rl/action_raw", _array, None), per_tick("/rl/command", _array, None)
    usable &= np.array([c is not None for c in command])  # a tick cut in half by a crash
    data = {
        "raw": _rows(raw),
        "command": _rows(command),
        "intervention": np.array(per_tick("/rl/intervention", lambda m: bool(m.data), False)),
        "version": np.array(per_tick("/rl/policy_version", lambda m: int(m.data), 0), dtype=np.int64),
        "reward": np.array(per_tick("/rl/reward", lambda m: float(m.data), np.nan), dtype=np.float32),
        "episode": np.array(per_tick("/rl/episode", lambda m: int(m.data), 0 if "/rl/episode" not in series else -1)),
        "done": np.array(per_tick("/rl/done", lambda m: int(m.data), 0)),
        "safety": np.array(per_tick("/rl/safety", lambda m: int(m.data), 0), dtype=np.uint32),
    }
    usable &= np.all(np.isfinite(observations), axis=1)
    usable &= np.isfinite(data["reward"]) | ~np.array(per_tick("/rl/reward", lambda m: True, False), dtype=bool)
    modes = per_tick("/rl/mode", lambda m: str(m.data), None)
    learning = np.array([m is None or m in learn_modes for m in modes], dtype=bool)
    learning &= (data["safety"] & SAFETY_STOPPED) == 0
    meta = {"source": str(bag), "observation_inputs": names, "observation_dim": int(observations.shape[1])}
    segments = _segments(usable, learning, data)
    return [_episode(segment, code, ticks, observations, data, meta) for segment, code in segments]


def _array(msg: Any) -> np.ndarray:
    return msgs.float32_multiarray_to_array(msg).reshape(-1)


def _rows(rows: list[np.ndarray | None]) -> np.ndarray:
    """Stack vectors into [N, D]; missing rows are NaN (those ticks are unusable)."""
    width = max((len(r) for r in rows if r is not None), default=0)
    return np.stack([r if r is not None else np.full(width, np.nan, np.float32) for r in rows]).astype(np.float32)


def _sample(specs: Sequence[ObsSpec], series: dict[str, _Series], types: dict[str, str], ticks: np.ndarray,
            max_age: float | None) -> tuple[np.ndarray, np.ndarray, list[str]]:  # fmt: skip
    """Observation rows at the ticks from the latest message at or before each tick."""
    columns, usable, names = [], np.ones(len(ticks), dtype=bool), []
    for spec in specs:
        if spec.topic not in types:
            raise DatasetError(f"topic {spec.topic} is not in the bag (it has {sorted(types)})")
        s = series[spec.topic]
        if not s.times:
            raise DatasetError(f"topic {spec.topic} has no messages in the bag")
        vectors = [spec.vector(v, types[spec.topic]) for v in s.values]
        width = len(vectors[0])
        if any(len(v) != width for v in vectors):
            raise DatasetError(f"{spec.name} changes size between messages; pick fixed-size fields")
        times = np.asarray(s.times, dtype=np.int64)
        latest = np.searchsorted(times, ticks, side="right") - 1
        ok = latest >= 0
        if max_age is not None:
            ok &= ticks - times[np.maximum(latest, 0)] <= max_age * 1e9
        usable &= ok
        columns.append(np.stack(vectors)[np.maximum(latest, 0)])
        names.append(f"{spec.name}[{width}]")
    return np.concatenate(columns, axis=1).astype(np.float32), usable, names


def _segments(usable: np.ndarray, learning: np.ndarray, data: dict[str, np.ndarray]) -> list[tuple[list[int], int]]:
    """(tick indices, done code of the last tick) of each episode."""
    out, current = [], []
    episode, done = data["episode"], data["done"]
    for i in range(len(usable)):
        if current and (not usable[i] or episode[i] != episode[current[-1]]):
            out.append((current, 0))
            current = []
        if not usable[i] or episode[i] < 0:
            continue
        if not learning[i]:  # a stop or a manoeuvre: the last observation of the episode in progress, if any
            if current:
                out.append(([*current, i], DONE_TRUNCATED))
                current = []
            continue
        current.append(i)
        if done[i]:
            out.append((current, int(done[i])))
            current = []
    if current:
        out.append((current, 0))
    return [(seg, code) for seg, code in out if len(seg) >= 2]


def _episode(segment: list[int], code: int, ticks: np.ndarray, observations: np.ndarray,
             data: dict[str, np.ndarray], meta: dict[str, Any]) -> Episode:  # fmt: skip
    idx, steps, after = np.asarray(segment), np.asarray(segment[:-1]), np.asarray(segment[1:])
    end = np.zeros(len(steps), dtype=bool)
    end[-1] = True
    terminated = code == DONE_TERMINATED
    return Episode(
        observations=observations[idx], actions=data["command"][steps], rewards=data["reward"][after],
        terminations=end & terminated, truncations=end & (not terminated), interventions=data["intervention"][steps],
        extras={"raw_actions": data["raw"][steps], "policy_versions": data["version"][steps],
                "safety": data["safety"][steps], "tick_times_ns": ticks[idx]},
        metadata={**meta, "episode_id": int(data["episode"][idx[0]])},
    )  # fmt: skip


@dataclasses.dataclass
class Bag2DatasetConfig:
    """`robolearn bag2dataset`: a recorded bag's control ticks as a robolearn episode folder."""

    bag: str | None = None          # the rosbag2 folder (required)
    out: str | None = None          # the episode folder to write (required)
    obs: str = ""                   # /topic[:field],...: observations from recorded topics instead of /rl/obs
    max_age: float | None = None    # seconds: older inputs make a tick unusable (null: no limit)
    repair: bool = True             # repair a bag whose recorder did not close it
    modes: str = ",".join(LEARN_MODES)  # tick modes that are training steps


def cmd_bag2dataset(cfg: Bag2DatasetConfig) -> int:
    """Convert `bag` to an episode folder `out` (repairing an unclosed bag first unless repair=false)."""
    from real.bagfile import BagError, mcap_complete, recording_pid, repair_bag

    if not cfg.bag or not cfg.out:
        raise ConfigError("bag2dataset needs bag=<bag folder> and out=<dataset folder>")
    bag, out = Path(cfg.bag), Path(cfg.out)
    specs = [ObsSpec.parse(s) for s in cfg.obs.split(",") if s.strip()]
    modes = [m.strip() for m in cfg.modes.split(",") if m.strip()]
    if not bag.is_dir():
        raise ConfigError(f"bag={bag} is not a rosbag2 folder")
    pid = recording_pid(bag)  # checked first: between two split files a live bag can look complete
    if pid is not None:
        raise BagError(f"{bag} is still being recorded (process {pid}); stop that recorder before converting")
    broken = not (bag / "metadata.yaml").is_file() or not all(mcap_complete(f) for f in bag.glob("*.mcap"))
    if broken and cfg.repair:
        for name, count in repair_bag(bag).items():
            print(f"repaired {name} (recorder did not close it): {count} messages recovered")
    episodes = bag_to_episodes(bag, specs, cfg.max_age, modes)
    if not episodes:
        raise DatasetError(f"{bag} holds no episode of 2 or more usable ticks")
    save_episodes(out, episodes, {"source": str(bag), "observation_inputs": episodes[0].metadata["observation_inputs"]})
    print(f"wrote {len(episodes)} episodes, {sum(len(e) for e in episodes)} steps to {out}")
    return 0
