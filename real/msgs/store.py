"""The one message representation of real/: rosbags dataclasses from a ROS 2 Humble type store.

Every backend hands callers these dataclasses (numeric arrays and sequences are numpy arrays), so code
above the transport never depends on rclpy or Cyclone DDS. `serialize` / `deserialize` give ROS 2 CDR
(little endian, header ``00 01 00 00``), the bytes rmw_cyclonedds puts on the wire and rosbag2 stores.
ackermann_msgs is not in the Humble store; it is registered from its .msg text.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

# ros-drivers/ackermann_msgs, field order as in the .msg files (the CDR layout follows it).
_ACKERMANN_MSGS = {
    "ackermann_msgs/msg/AckermannDrive": (
        "float32 steering_angle\n"
        "float32 steering_angle_velocity\n"
        "float32 speed\n"
        "float32 acceleration\n"
        "float32 jerk\n"
    ),
    "ackermann_msgs/msg/AckermannDriveStamped": "std_msgs/Header header\nackermann_msgs/AckermannDrive drive\n",
}

# ROS base type -> numpy dtype of rosbags arrays and sequences
NUMPY_DTYPES = {
    "bool": np.bool_, "byte": np.uint8, "char": np.uint8, "int8": np.int8, "uint8": np.uint8,
    "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
    "int64": np.int64, "uint64": np.uint64, "float32": np.float32, "float64": np.float64,
}  # fmt: skip


class UnknownMessageTypeError(KeyError):
    """A message type name that the type store does not know."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@functools.cache
def typestore() -> Typestore:
    """The shared type store: ROS 2 Humble plus ackermann_msgs (built once)."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    for name, text in _ACKERMANN_MSGS.items():
        store.register(get_types_from_msg(text, name))
    return store


def type_name(msg_type: str | type | object) -> str:
    """Canonical ``pkg/msg/Name`` for a name (``pkg/msg/Name`` or ``pkg/Name``), a class or a message."""
    if not isinstance(msg_type, str):
        msg_type = getattr(msg_type, "__msgtype__", None) or repr(msg_type)
    parts = msg_type.split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    name = "/".join(parts)
    if len(parts) != 3 or name not in typestore().fielddefs:
        raise UnknownMessageTypeError(f"unknown ROS message type {msg_type!r} (e.g. 'geometry_msgs/msg/Twist')")
    return name


def msg_class(msg_type: str | type | object) -> type:
    """The rosbags dataclass for a message type."""
    return typestore().types[type_name(msg_type)]


def fields(msg_type: str | type | object) -> list[tuple[str, Any]]:
    """The (name, rosbags field description) pairs of a type, in .msg order."""
    return list(typestore().fielddefs[type_name(msg_type)][1])


def dds_type_name(msg_type: str | type | object) -> str:
    """The DDS type name rmw_cyclonedds uses: ``geometry_msgs/msg/Twist`` -> ``geometry_msgs::msg::dds_::Twist_``."""
    pkg, kind, name = type_name(msg_type).split("/")
    return f"{pkg}::{kind}::dds_::{name}_"


def _zero_value(desc: tuple) -> Any:
    kind, arg = desc
    if kind == Nodetype.BASE:
        base = arg[0]
        if base in ("string", "bounded_string"):
            return ""
        if base not in NUMPY_DTYPES:
            raise TypeError(f"unsupported ROS base type {base!r}")
        return False if base == "bool" else 0.0 if base.startswith("float") else 0
    if kind == Nodetype.NAME:
        return zero_msg(arg)
    (sub_kind, sub_arg), count = arg
    length = count if kind == Nodetype.ARRAY else 0
    if sub_kind == Nodetype.BASE and sub_arg[0] in NUMPY_DTYPES:
        return np.zeros(length, dtype=NUMPY_DTYPES[sub_arg[0]])
    return [_zero_value((sub_kind, sub_arg)) for _ in range(length)]


def zero_msg(msg_type: str | type | object) -> Any:
    """A message with every field zero, empty or false (also the safe "zero command" for a command type)."""
    name = type_name(msg_type)
    return typestore().types[name](**{field: _zero_value(desc) for field, desc in fields(name)})


def serialize(msg: Any, msg_type: str | type | None = None) -> bytes:
    """ROS 2 CDR bytes of a message (rosbags' ``serialize_cdr``, little endian)."""
    return bytes(typestore().serialize_cdr(msg, type_name(msg if msg_type is None else msg_type), little_endian=True))


def deserialize(data: bytes | memoryview, msg_type: str | type) -> Any:
    """The message encoded by ROS 2 CDR bytes (either endianness; up to 3 trailing pad bytes allowed)."""
    return typestore().deserialize_cdr(data, type_name(msg_type))
