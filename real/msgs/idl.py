"""Cyclone DDS IdlStruct classes generated from the type store, and dataclass <-> IdlStruct conversion.

The generated classes mirror what rmw_cyclonedds expects: type name ``<pkg>::msg::dds_::<Name>_``, final
extensibility, sequential member ids, members in .msg order, XCDR1. Their ``serialize()`` is byte-identical
to rosbags' CDR (tested for every type real/ uses).

Type information: cyclonedds-python builds a topic's (de)serializer from the class's XTypes type information
(``__idl__._xt_data`` / ``_xt_bytedata``, private attributes of cyclonedds 11.0.1, hence the pin), and Cyclone keeps
those type objects in its type library. Its TypeLookup service answers other participants' requests from that
library, including requests a Fast DDS node addresses to another node; Fast DDS takes the first reply, and a partial
one (types without collections hash the same on both stacks, e.g. Header) leaves its endpoint unmatched
(docs/real-robots.md). So every wire class carries the type information of a private twin (`_private_class`): the
same layout, with type names under `PRIVATE_SCOPE` and suffixed member names, hence complete and minimal type
identifiers that no other participant has or asks for. The endpoints announce none of it
(`real.transport.dds_typeinfo`); peers match them by type name, as they match rmw_cyclonedds_cpp's.

``sensor_msgs/msg/Image.data`` gets a fast path: declared ``sequence[uint8]`` cyclonedds (de)serializes the
pixels one Python call per byte (about 36 ms for 640x480 rgb8); declared ``bytes`` it takes the
BytesMachine path (a few ms) with the same wire layout. A plain ``bytes`` member cannot produce XTypes
type information; both Image classes take theirs from the private twin, which declares ``sequence[uint8]``.
"""

# No `from __future__ import annotations`: cyclonedds reads the field annotations as real types.

import functools
from typing import Any

import numpy as np
from cyclonedds.idl import IdlStruct, annotations, make_idl_struct, types
from rosbags.interfaces import Nodetype

from real.msgs.store import NUMPY_DTYPES, dds_type_name, fields, msg_class, type_name

_BASE_TYPES: dict[str, Any] = {
    "bool": bool, "byte": types.byte, "char": types.uint8, "int8": types.int8, "uint8": types.uint8,
    "int16": types.int16, "uint16": types.uint16, "int32": types.int32, "uint32": types.uint32,
    "int64": types.int64, "uint64": types.uint64, "float32": types.float32, "float64": types.float64,
}  # fmt: skip

PRIVATE_SCOPE = "robolearn_private"
"""Prefixes the type names and suffixes the member names of the type-information twins (`_private_class`)."""

# Types whose IdlStruct carries `bytes` members (field -> fast path); the rest use plain sequences.
FAST_BYTES_FIELDS: dict[str, tuple[str, ...]] = {"sensor_msgs/msg/Image": ("data",)}


def _idl_field_type(desc: tuple, fast_bytes: bool = False, private: bool = False) -> Any:
    """The cyclonedds annotation for one rosbags field description (nested types: `_private_class`'s if ``private``)."""
    kind, arg = desc
    if kind == Nodetype.BASE:
        base, bound = arg
        if base in ("string", "bounded_string"):
            return types.bounded_str[bound] if bound else str
        if base not in _BASE_TYPES:
            raise TypeError(f"ROS base type {base!r} has no DDS mapping")
        return _BASE_TYPES[base]
    if kind == Nodetype.NAME:
        return _private_class(arg) if private else idl_class(arg)
    sub, count = arg
    if fast_bytes:
        return bytes
    element = _idl_field_type(sub, private=private)
    if kind == Nodetype.ARRAY:
        return types.array[element, count]
    return types.sequence[element, count] if count else types.sequence[element]


def _struct(type_name_: str, members: dict[str, Any]) -> type[IdlStruct]:
    """A final IdlStruct with sequential member ids, as the ROS 2 DDS mapping declares messages."""
    cls = make_idl_struct(type_name_.rsplit("::", 1)[1], type_name_, members)
    annotations.final(cls)
    annotations.autoid("sequential")(cls)
    return cls


@functools.cache
def _private_class(name: str) -> type[IdlStruct]:
    """The type-information twin of message type ``name``: its layout, under names no other participant uses.

    Its type and member names carry `PRIVATE_SCOPE`, so the hashes of its type objects, complete and minimal, are
    robolearn's own (see the module docstring). Its nested types are twins too.
    """
    members = {f"{field}_{PRIVATE_SCOPE}": _idl_field_type(desc, private=True) for field, desc in fields(name)}
    cls = _struct(f"{PRIVATE_SCOPE}::{dds_type_name(name)}", members)
    cls.__idl__.fill_type_data()
    return cls


def _make(name: str, fast: tuple[str, ...]) -> type[IdlStruct]:
    cls = _struct(dds_type_name(name), {field: _idl_field_type(desc, field in fast) for field, desc in fields(name)})
    twin = _private_class(name).__idl__
    cls.__idl__._xt_data = twin._xt_data  # private attributes of cyclonedds 11.0.1: see the module docstring
    cls.__idl__._xt_bytedata = twin._xt_bytedata
    return cls


def list_idl_class(msg_type: str | type | object) -> type[IdlStruct]:
    """The plain generated class, every sequence a ``sequence[...]`` (what `idlc -l py` would emit)."""
    return _list_idl_class(type_name(msg_type))


@functools.cache
def _list_idl_class(name: str) -> type[IdlStruct]:
    return _make(name, ())


@functools.cache
def _idl_class(name: str) -> type[IdlStruct]:
    fast = FAST_BYTES_FIELDS.get(name, ())
    return _make(name, fast) if fast else list_idl_class(name)


def idl_class(msg_type: str | type | object) -> type[IdlStruct]:
    """The IdlStruct class used on the wire for a message type (the fast variant where there is one)."""
    return _idl_class(type_name(msg_type))


def _to_idl_value(value: Any, desc: tuple, fast_bytes: bool) -> Any:
    kind, arg = desc
    if kind == Nodetype.BASE:
        return value
    if kind == Nodetype.NAME:
        return to_idl(value, arg)
    if fast_bytes:
        return np.ascontiguousarray(value, dtype=np.uint8).tobytes()
    (sub_kind, sub_arg), _ = arg
    if sub_kind == Nodetype.NAME:
        return [to_idl(item, sub_arg) for item in value]
    return value.tolist() if isinstance(value, np.ndarray) else list(value)


def to_idl(msg: Any, msg_type: str | type | None = None, *, fast: bool = True) -> IdlStruct:
    """The IdlStruct instance holding the same values as a rosbags message (``fast=False``: the list-typed twin)."""
    name = type_name(msg if msg_type is None else msg_type)
    fast_fields = FAST_BYTES_FIELDS.get(name, ()) if fast else ()
    values = {f: _to_idl_value(getattr(msg, f), desc, f in fast_fields) for f, desc in fields(name)}
    return (idl_class(name) if fast else list_idl_class(name))(**values)


def _from_idl_value(value: Any, desc: tuple) -> Any:
    kind, arg = desc
    if kind == Nodetype.BASE:
        return value
    if kind == Nodetype.NAME:
        return from_idl(value, arg)
    (sub_kind, sub_arg), _ = arg
    if sub_kind == Nodetype.NAME:
        return [from_idl(item, sub_arg) for item in value]
    if sub_arg[0] in ("string", "bounded_string"):
        return list(value)
    dtype = np.dtype(NUMPY_DTYPES[sub_arg[0]])
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(value, dtype=dtype).copy()
    return np.asarray(value, dtype=dtype)


def from_idl(sample: Any, msg_type: str | type | None = None) -> Any:
    """The rosbags message holding the same values as an IdlStruct instance (of either Image variant)."""
    name = type_name(msg_type) if msg_type is not None else _name_of_idl(sample)
    values = {f: _from_idl_value(getattr(sample, f), desc) for f, desc in fields(name)}
    return msg_class(name)(**values)


def _name_of_idl(sample: Any) -> str:
    pkg, kind, _, name = type(sample).__idl_typename__.replace(".", "::").split("::")
    return type_name(f"{pkg}/{kind}/{name[:-1]}")
