"""rosbag2 (version 9) bags with MCAP storage, written from raw CDR bytes, split by size or duration.

What ``ros2 bag record -s mcap`` writes, readable by ``ros2 bag``, rosbags, Foxglove and the ``mcap`` tools:
a folder with ``<name>_0.mcap``, ``<name>_1.mcap``, ... (profile ``ros2``, ``cdr`` messages, ``ros2msg``
schemas from the rosbags type store, the offered QoS profiles and type hash in each channel's metadata)
and ``metadata.yaml``. Messages are written as received, never re-serialized.

Crash safety. `BagWriter.flush` ends the MCAP chunk in progress and hands it to the OS, so after a
``kill -9`` everything up to the last flush is in the file; a file is complete (summary, footer) only once
it is split off or closed, and ``metadata.yaml`` is rewritten at every split and at close. `repair_bag`
turns what a killed recorder left (a file without footer, stale ``metadata.yaml``) into a complete bag,
keeping every whole chunk (``ros2 bag reindex`` plus ``mcap recover`` in one step). While a `BagWriter`
has the bag open it holds an exclusive ``flock`` on ``<bag>/.recording`` (released by the kernel when the
process dies), and `repair_bag` refuses to touch a bag whose lock is held: replacing the file under a live
recorder would lose everything it writes afterwards.

The ``mcap`` library writes the files; ``rosbags`` supplies message definitions and the QoS format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.util
import io
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mcap.exceptions import McapError
from mcap.reader import make_reader
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType, Writer
from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2.metadata import dump_qos_v9
from ruamel.yaml import YAML

from real import msgs
from real.transport.base import QoS, Reliability, resolve_qos
from robolearn.errors import RobolearnError

log = logging.getLogger(__name__)

VERSION = 9
LOCK_FILE = ".recording"  # flock'ed by the BagWriter that has the bag open; holds its pid
COMPRESSIONS = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}


class BagError(RobolearnError, RuntimeError):
    """A bag cannot be written or repaired (exists already, not a bag, unknown topic)."""


def ros_qos(qos: QoS | str | None) -> Qos:
    """rosbags' QoS record for one of our QoS settings (KEEP_LAST, durations unspecified)."""
    qos = resolve_qos(qos)
    zero = QosTime(0, 0)
    reliable = qos.reliability is Reliability.RELIABLE
    return Qos(
        history=QosHistory.KEEP_LAST, depth=qos.depth,
        reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        durability=QosDurability[qos.durability.name], deadline=zero, lifespan=zero,
        liveliness=QosLiveliness.AUTOMATIC, liveliness_lease_duration=zero, avoid_ros_namespace_conventions=False,
    )  # fmt: skip


def _yaml_text(data: Any) -> str:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


@dataclasses.dataclass
class _Topic:
    name: str
    msg_type: str
    qos: list[Qos]
    count: int = 0  # messages in the whole bag
    type_hash: str = ""  # RIHS01; from the type store unless given

    def __post_init__(self) -> None:
        if not self.type_hash:
            self.type_hash = msgs.typestore().hash_rihs01(self.msg_type)

    def channel_metadata(self) -> dict[str, str]:
        return {"offered_qos_profiles": _yaml_text(dump_qos_v9(self.qos)).strip(), "topic_type_hash": self.type_hash}


@dataclasses.dataclass
class _File:
    path: Path
    start: int = 2**63 - 1
    end: int = 0
    count: int = 0


class BagWriter:
    """Writes one rosbag2 MCAP bag; not thread-safe (the `Recorder` calls it from one thread).

    Args:
        path: the bag folder to create (must not exist).
        max_bytes: start a new file once the current one holds this many bytes (None: never).
        max_duration: start a new file once the current one spans this many seconds (None: never).
        compression: chunk compression, "none", "lz4" or "zstd" (zstd needs the ``zstandard`` package).
        chunk_size: bytes per MCAP chunk before it is written out (flushes end chunks earlier).
        custom_data: string key/values for ``metadata.yaml``'s ``custom_data``.
    """

    def __init__(self, path: str | Path, max_bytes: int | None = None, max_duration: float | None = None,
                 compression: str = "none", chunk_size: int = 1 << 20,
                 custom_data: dict[str, str] | None = None) -> None:  # fmt: skip
        self.path = Path(path)
        if compression not in COMPRESSIONS:
            raise BagError(f"unknown compression {compression!r}; use one of {sorted(COMPRESSIONS)}")
        if compression == "zstd" and importlib.util.find_spec("zstandard") is None:
            raise BagError("compression='zstd' needs the zstandard package (pip install zstandard); or use lz4")
        if max_bytes is not None and max_bytes <= 0 or max_duration is not None and max_duration <= 0:
            raise BagError("max_bytes and max_duration must be positive (or None)")
        if self.path.exists():
            raise BagError(f"{self.path} exists already; a recording never overwrites one")
        self.path.mkdir(parents=True)
        self._lock = open(self.path / LOCK_FILE, "w")  # held (and locked) until close
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new folder: nobody else can hold it
        self._lock.write(f"{os.getpid()}\n")
        self._lock.flush()
        self.max_bytes, self.max_duration = max_bytes, max_duration
        self.compression, self.chunk_size = compression, chunk_size
        self.custom_data = dict(custom_data or {})
        self.topics: list[_Topic] = []
        self.files: list[_File] = []
        self.closed = False
        self._stream: Any = None
        self._writer: Writer | None = None
        self._channels: dict[int, int] = {}  # topic index -> channel id in the current file
        self._open_file()

    # --- files -------------------------------------------------------------------------------------------

    def _open_file(self) -> None:
        file = _File(self.path / f"{self.path.name}_{len(self.files)}.mcap")
        self.files.append(file)
        self._stream = open(file.path, "xb")  # closed in _close_file
        self._writer = Writer(self._stream, chunk_size=self.chunk_size, compression=COMPRESSIONS[self.compression])
        self._writer.start(profile="ros2", library="robolearn.real.bagfile")
        self._channels = {}
        for index in range(len(self.topics)):
            self._register(index)
        self._write_metadata()

    def _register(self, index: int) -> None:
        topic = self.topics[index]
        msgdef, _ = msgs.typestore().generate_msgdef(topic.msg_type, ros_version=2)
        schema = self._writer.register_schema(topic.msg_type, "ros2msg", msgdef.encode())
        self._channels[index] = self._writer.register_channel(topic.name, "cdr", schema, topic.channel_metadata())

    def _close_file(self) -> None:
        writer, self._writer = self._writer, None
        writer.add_metadata("rosbag2", {"serialized_metadata": _yaml_text(self._info()).strip()})
        writer.finish()
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self._stream.close()

    def _split_due(self, t_ns: int) -> bool:
        file = self.files[-1]
        if not file.count:
            return False
        if self.max_bytes is not None and self._stream.tell() >= self.max_bytes:
            return True
        return self.max_duration is not None and t_ns - file.start >= self.max_duration * 1e9

    # --- writing -----------------------------------------------------------------------------------------

    def add_topic(self, topic: str, msg_type: str | type, qos: QoS | str | Sequence[QoS] | None = None) -> int:
        """Declare a topic (its offered QoS profile(s)); returns the id that `write` takes."""
        if self.closed:
            raise BagError("bag is closed")
        name = msgs.type_name(msg_type)
        profiles = [ros_qos(q) for q in qos] if isinstance(qos, list | tuple) else [ros_qos(qos)]
        for index, have in enumerate(self.topics):
            if have.name == topic:
                if have.msg_type != name:
                    raise BagError(f"topic {topic} is recorded as {have.msg_type}, not {name}")
                return index
        self.topics.append(_Topic(topic, name, profiles))
        self._register(len(self.topics) - 1)
        return len(self.topics) - 1

    def write(self, topic_id: int, t_ns: int, data: bytes) -> None:
        """Append one message (ROS 2 CDR bytes) received at ``t_ns`` (ns since the epoch)."""
        if self.closed:
            raise BagError("bag is closed")
        if self._split_due(t_ns):
            self._close_file()
            self._open_file()
        self._writer.add_message(self._channels[topic_id], log_time=t_ns, data=data, publish_time=t_ns)
        file = self.files[-1]
        file.start, file.end, file.count = min(file.start, t_ns), max(file.end, t_ns), file.count + 1
        self.topics[topic_id].count += 1

    def flush(self, fsync: bool = False) -> None:
        """Write out the chunk in progress (it survives a kill -9 from now on); ``fsync`` also survives power loss."""
        if self.closed:
            return
        self._writer.flush()
        if fsync:
            os.fsync(self._stream.fileno())

    def close(self) -> None:
        """Finish the current file and write the final ``metadata.yaml``. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self._close_file()
            self._write_metadata()
        finally:
            (self.path / LOCK_FILE).unlink(missing_ok=True)
            self._lock.close()  # releases the flock

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- metadata.yaml -----------------------------------------------------------------------------------

    def _info(self) -> dict[str, Any]:
        return bag_info(self.topics, self.files, self.compression, self.custom_data)

    def _write_metadata(self) -> None:
        write_metadata(self.path, self._info())

    @property
    def message_count(self) -> int:
        return sum(t.count for t in self.topics)


def bag_info(topics: Iterable[_Topic], files: Sequence[_File], compression: str = "none",
             custom_data: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The ``rosbag2_bagfile_information`` mapping of ``metadata.yaml`` (version 9)."""
    counted = [f for f in files if f.count]
    start = min((f.start for f in counted), default=0)
    end = max((f.end for f in counted), default=0)
    return {
        "version": VERSION,
        "storage_identifier": "mcap",
        "relative_file_paths": [f.path.name for f in files],
        "duration": {"nanoseconds": end - start},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(f.count for f in files),
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": t.name, "type": t.msg_type, "serialization_format": "cdr",
                    "offered_qos_profiles": dump_qos_v9(t.qos),
                    "type_description_hash": t.type_hash,
                },
                "message_count": t.count,
            }
            for t in topics
        ],  # fmt: skip
        # rosbag2 records storage compression in the MCAP chunks, not here ("" = not file/message mode)
        "compression_format": "",
        "compression_mode": "",
        "files": [
            {
                "path": f.path.name,
                "starting_time": {"nanoseconds_since_epoch": f.start if f.count else 0},
                "duration": {"nanoseconds": f.end - f.start if f.count else 0},
                "message_count": f.count,
            }
            for f in files
        ],
        "custom_data": dict(custom_data or {}) or None,
        "ros_distro": "robolearn",
    }


def write_metadata(folder: Path, info: dict[str, Any]) -> None:
    """Atomically (re)write ``folder/metadata.yaml``."""
    tmp = folder / "metadata.yaml.tmp"
    tmp.write_text(_yaml_text({"rosbag2_bagfile_information": info}), "utf8")
    os.replace(tmp, folder / "metadata.yaml")


# --- after a crash ---------------------------------------------------------------------------------------


def mcap_complete(path: Path) -> bool:
    """Whether an MCAP file ends with a footer (it was finished, not cut off)."""
    try:
        with open(path, "rb") as f:
            f.seek(-8, os.SEEK_END)
            return f.read(8) == b"\x89MCAP0\r\n"
    except OSError:
        return False


def _salvage(path: Path) -> tuple[dict[int, Schema], dict[int, Channel], list[Message]]:
    """Every schema, channel and message of the whole records in ``path`` (a cut-off tail is skipped)."""
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    messages: list[Message] = []
    with open(path, "rb") as f:
        try:
            for record in StreamReader(f, skip_magic=False).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel):
                    channels[record.id] = record
                elif isinstance(record, Message):
                    messages.append(record)
        except (McapError, EOFError, ValueError, OSError) as e:  # the cut-off record
            log.info("%s: stopped at a cut-off record (%s)", path.name, type(e).__name__)
    return schemas, channels, messages


def recording_pid(path: str | Path) -> str | None:
    """The pid noted by the `BagWriter` that has the bag at ``path`` open right now (its lock is held), else None."""
    try:
        lock = open(Path(path) / LOCK_FILE)
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock.read().strip() or "?"
        return None  # a lock file left by a killed recorder (closing the file drops our lock)


def repair_bag(path: str | Path) -> dict[str, int]:
    """Make a bag left by a killed recorder readable: rewrite each MCAP file without footer from its whole
    records, then rebuild ``metadata.yaml`` from the files. Returns ``{file name: messages recovered}`` for
    the files it rewrote. A complete bag is left as it is (only ``metadata.yaml`` is rebuilt). Refuses a bag
    that a recorder still has open.
    """
    folder = Path(path)
    pid = recording_pid(folder)
    if pid is not None:
        raise BagError(f"{folder} is still being recorded (process {pid}); stop that recorder before repairing")
    files = sorted(folder.glob("*.mcap"), key=lambda p: (len(p.name), p.name))
    if not files:
        raise BagError(f"{folder} holds no .mcap files; not an MCAP rosbag2 bag")
    repaired: dict[str, int] = {}
    for file in files:
        if mcap_complete(file):
            continue
        schemas, channels, messages = _salvage(file)
        tmp = file.with_name(file.name + ".repair")
        with open(tmp, "wb") as out:
            writer = Writer(out, compression=CompressionType.NONE)
            writer.start(profile="ros2", library="robolearn.real.bagfile (repaired)")
            for schema in schemas.values():
                writer.register_schema(schema.name, schema.encoding, schema.data)
            for channel in channels.values():  # ids are assigned in order: keep the original ones
                writer.register_channel(channel.topic, channel.message_encoding, channel.schema_id, channel.metadata)
            for m in messages:
                writer.add_message(m.channel_id, m.log_time, m.data, m.publish_time, m.sequence)
            writer.finish()
        os.replace(tmp, file)
        repaired[file.name] = len(messages)
        log.warning("repaired %s: %d messages recovered", file, len(messages))
    custom_data = None
    if (folder / "metadata.yaml").is_file():
        with contextlib.suppress(Exception):  # keep what the recorder wrote, if it is readable
            old = YAML(typ="safe").load((folder / "metadata.yaml").read_text())
            custom_data = old["rosbag2_bagfile_information"].get("custom_data")
    write_metadata(folder, _rebuild_info(files, custom_data))
    (folder / LOCK_FILE).unlink(missing_ok=True)  # left by the killed recorder
    return repaired


def _rebuild_info(files: Sequence[Path], custom_data: dict[str, str] | None) -> dict[str, Any]:
    from rosbags.rosbag2.metadata import parse_qos

    topics: dict[str, _Topic] = {}
    infos = []
    for path in files:
        info = _File(path)
        with open(path, "rb") as f:
            summary = make_reader(f).get_summary()
        if summary is None:
            raise BagError(f"{path} has no summary; cannot rebuild metadata.yaml")
        for cid, channel in summary.channels.items():
            schema = summary.schemas.get(channel.schema_id)
            if channel.topic not in topics:
                qos = parse_qos(channel.metadata.get("offered_qos_profiles", ""))
                type_hash = channel.metadata.get("topic_type_hash") or "-"
                topics[channel.topic] = _Topic(channel.topic, schema.name if schema else "", qos, 0, type_hash)
            topic = topics[channel.topic]
            topic.count += summary.statistics.channel_message_counts.get(cid, 0) if summary.statistics else 0
        if summary.statistics and summary.statistics.message_count:
            info.count = summary.statistics.message_count
            info.start, info.end = summary.statistics.message_start_time, summary.statistics.message_end_time
        infos.append(info)
    return bag_info(topics.values(), infos, custom_data=custom_data)
