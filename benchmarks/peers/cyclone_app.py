"""A plain Cyclone DDS application's side of ROS 2 messages: its own types, QoS and conversions, nothing of robolearn's.

What a robot stack built directly on Cyclone DDS has: cyclonedds-python at its default settings, IdlStruct classes
generated from the rosbags type store the way ``idlc -l py`` would emit them for the ROS 2 mapping
(``<pkg>::msg::dds_::<Name>_``, final, sequential member ids), topics ``rt/<name>``, ROS 2's QoS profiles as DDS
QoS, and cyclonedds' own serializer and XTypes type information. Used by the interop test's peer
(tests/real/cyclone_peer.py) and the loop-latency benchmark's car (benchmarks/peers/cyclone_car.py).
"""

# No `from __future__ import annotations`: cyclonedds reads the field annotations of the generated classes.

import functools
from typing import Any

from cyclonedds.core import Policy, Qos
from cyclonedds.idl import IdlStruct, annotations, make_idl_struct, types
from cyclonedds.util import duration
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_typestore

STORE = get_typestore(Stores.LATEST)
BASE = {"bool": bool, "byte": types.byte, "char": types.uint8, "int8": types.int8, "uint8": types.uint8,
        "int16": types.int16, "uint16": types.uint16, "int32": types.int32, "uint32": types.uint32,
        "int64": types.int64, "uint64": types.uint64, "float32": types.float32, "float64": types.float64}
DEFAULTS = {"bool": False, "string": "", "bounded_string": "", "float32": 0.0, "float64": 0.0}
RELIABLE = Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100))
PROFILES = {  # ROS 2's rmw QoS profiles as DDS QoS policies
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


def qos(profile: str) -> Qos:
    """The DDS QoS of a ROS 2 profile: "sensor_data", "default" or "latched"."""
    return Qos(*PROFILES[profile])

