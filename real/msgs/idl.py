"""Cyclone DDS IdlStruct classes generated from the type store, and dataclass <-> IdlStruct conversion.

The generated classes mirror what rmw_cyclonedds expects: type name ``<pkg>::msg::dds_::<Name>_``, final
extensibility, sequential member ids, members in .msg order, XCDR1. Their ``serialize()`` is byte-identical
to rosbags' CDR (tested for every type real/ uses).

``sensor_msgs/msg/Image.data`` gets a fast path: declared ``sequence[uint8]`` cyclonedds (de)serializes the
pixels one Python call per byte (about 36 ms for 640x480 rgb8); declared ``bytes`` it takes the
BytesMachine path (a few ms) with the same wire layout. A plain ``bytes`` member cannot produce XTypes
type information, so the fast class borrows it (``__idl__._xt_data`` / ``_xt_bytedata``, private
attributes of cyclonedds 11.0.1, hence the pin) from a ``sequence[uint8]`` twin: readers and writers that
use the list-typed class still match it.

Interop with both of ROS 2's DDS stacks at their defaults. Each side compares the XTypes type information the other
announces:

- Fast DDS (rmw_fastrtps, ROS 2's default middleware) matches two endpoints when their complete *or* their minimal
  type identifiers (hashes of the type objects) are equal. It leaves the try-construct bits of collection element
  flags unset.
- Cyclone DDS sets TRY_CONSTRUCT1 there, as the XTypes spec requires, and by default rejects type objects without
  it. A Cyclone application with its own ROS 2 types matches on equal minimal identifiers.

So `_fill_type_data` announces the complete half built Fast DDS's way (equal to what an rclpy node announces) and the
minimal half built Cyclone's way (equal to what any Cyclone application announces for the same .msg definitions).
Tested against both in tests/real/test_real_ros2.py. On its own domains `real.transport.dds` accepts Fast DDS's
element flags (``AllowInvalidTryConstruct``) and matches Fast DDS endpoints by type name
(``IgnoreTypeInformation`` for vendor 1.15), since Cyclone would otherwise compare its minimal type with Fast DDS's
complete one. rmw_cyclonedds_cpp announces no type information at all, so every side matches it by type name.
"""

# No `from __future__ import annotations`: cyclonedds reads the field annotations as real types.

import contextlib
import functools
import threading
import types as pytypes
from collections.abc import Iterator
from typing import Any

import numpy as np
from cyclonedds.idl import IdlStruct, _xt_builder, annotations, make_idl_struct, types
from cyclonedds.idl._support import Endianness
from rosbags.interfaces import Nodetype

from real.msgs.store import NUMPY_DTYPES, dds_type_name, fields, msg_class, type_name

_BASE_TYPES: dict[str, Any] = {
    "bool": bool, "byte": types.byte, "char": types.uint8, "int8": types.int8, "uint8": types.uint8,
    "int16": types.int16, "uint16": types.uint16, "int32": types.int32, "uint32": types.uint32,
    "int64": types.int64, "uint64": types.uint64, "float32": types.float32, "float64": types.float64,
}  # fmt: skip

# Types whose IdlStruct carries `bytes` members (field -> fast path); the rest use plain sequences.
FAST_BYTES_FIELDS: dict[str, tuple[str, ...]] = {"sensor_msgs/msg/Image": ("data",)}


def _idl_field_type(desc: tuple, fast_bytes: bool = False) -> Any:
    """The cyclonedds annotation for one rosbags field description."""
    kind, arg = desc
    if kind == Nodetype.BASE:
        base, bound = arg
        if base in ("string", "bounded_string"):
            return types.bounded_str[bound] if bound else str
        if base not in _BASE_TYPES:
            raise TypeError(f"ROS base type {base!r} has no DDS mapping")
        return _BASE_TYPES[base]
    if kind == Nodetype.NAME:
        return idl_class(arg)
    sub, count = arg
    if fast_bytes:
        return bytes
    if kind == Nodetype.ARRAY:
        return types.array[_idl_field_type(sub), count]
    return types.sequence[_idl_field_type(sub), count] if count else types.sequence[_idl_field_type(sub)]


_XT_LOCK = threading.Lock()
_HASHES: dict[str, dict] = {"cyclone": {}, "fastdds": {}}  # the XTypes builder's per-class hash cache, per style


@contextlib.contextmanager
def _xtypes_style(style: str) -> Iterator[None]:
    """While active, cyclonedds' XTypes builder writes type objects in `style`: "cyclone" (its own: collection element
    flags with TRY_CONSTRUCT1, as the XTypes spec requires and Cyclone validates) or "fastdds" (element flags all
    clear, as Fast DDS writes and hashes them).

    The builder reads ``xt.PlainCollectionHeader`` from its module globals and caches each class's hashes in
    ``XTBuilder._type_hash_db`` (cyclonedds 11.0.1), so it gets a stand-in module and one cache per style.
    """
    real_xt, builder = _xt_builder.xt, _xt_builder.XTBuilder
    stand_in = real_xt
    if style == "fastdds":
        def header(equiv_kind: int, element_flags: Any) -> Any:
            return real_xt.PlainCollectionHeader(equiv_kind=equiv_kind, element_flags=real_xt.MemberFlag())

        stand_in = pytypes.SimpleNamespace(**{k: getattr(real_xt, k) for k in dir(real_xt) if not k.startswith("__")})
        stand_in.PlainCollectionHeader = header
    with _XT_LOCK:
        cache = builder._type_hash_db
        _xt_builder.xt, builder._type_hash_db = stand_in, _HASHES[style]
        try:
            yield
        finally:
            _xt_builder.xt, builder._type_hash_db = real_xt, cache


def _fill_type_data(cls: type[IdlStruct]) -> None:
    """Give `cls` the type information both ROS 2 middlewares match against (see the module docstring).

    Fast DDS matches two endpoints when their complete *or* their minimal type identifiers are equal; Cyclone
    matches equal minimal identifiers and otherwise resolves and validates the other side's type objects. So the
    complete half is built Fast DDS's way (its identifiers equal an rclpy node's) and the minimal half Cyclone's
    (equal to any Cyclone application's, and valid where Cyclone checks it).
    """
    with _xtypes_style("cyclone"):
        info_c, map_c = _xt_builder.XTBuilder.process_type(cls)
    with _xtypes_style("fastdds"):
        info_f, map_f = _xt_builder.XTBuilder.process_type(cls)
    xt = _xt_builder.xt
    if len(map_c.identifier_complete_minimal) != len(map_f.identifier_complete_minimal):
        raise RuntimeError(f"the two XTypes builds of {cls.__name__} list different types")
    info = xt.TypeInformation(minimal=info_c.minimal, complete=info_f.complete)
    mapping = xt.TypeMapping(
        identifier_object_pair_minimal=map_c.identifier_object_pair_minimal,
        identifier_object_pair_complete=map_f.identifier_object_pair_complete,
        identifier_complete_minimal=[
            xt.TypeIdentifierPair(type_identifier1=f.type_identifier1, type_identifier2=c.type_identifier2)
            for f, c in zip(map_f.identifier_complete_minimal, map_c.identifier_complete_minimal, strict=True)])
    idl = cls.__idl__  # private attributes of cyclonedds 11.0.1 (the pin): what Topic() sends
    idl._xt_data = (info, mapping)
    idl._xt_bytedata = tuple(part.serialize(endianness=Endianness.Little, use_version_2=True)[4:]
                             for part in (info, mapping))


def _make(name: str, fast: tuple[str, ...]) -> type[IdlStruct]:
    members = {field: _idl_field_type(desc, field in fast) for field, desc in fields(name)}
    cls = make_idl_struct(dds_type_name(name).rsplit("::", 1)[1], dds_type_name(name), members)
    annotations.final(cls)
    annotations.autoid("sequential")(cls)
    if not fast:  # the fast variant borrows its twin's type information (see `_idl_class`)
        cls.__idl__.populate()
        _fill_type_data(cls)
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
    if not fast:
        return list_idl_class(name)
    cls = _make(name, fast)
    twin = list_idl_class(name).__idl__
    twin.fill_type_data()
    cls.__idl__._xt_data = twin._xt_data  # private in cyclonedds 11.0.1: see the module docstring
    cls.__idl__._xt_bytedata = twin._xt_bytedata
    return cls


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
