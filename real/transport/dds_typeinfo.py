"""DDS readers and writers that announce no XTypes type information, as rmw_cyclonedds_cpp's do.

Why: ROS 2's two DDS stacks build XTypes type objects for the same .msg differently (Fast DDS leaves the
try-construct bits of collection element flags unset, Cyclone sets TRY_CONSTRUCT1), so no one set of type
identifiers matches both, and each rejects or mis-registers the other's objects (docs/real-robots.md). An
endpoint without type information is matched by type name by both, which is how rmw_cyclonedds_cpp nodes
interoperate with Fast DDS and with Cyclone applications.

How: cyclonedds-python cannot create a topic without type information (its C layer builds the topic's
(de)serializer from it), so the topic keeps it. Cyclone reads an endpoint's type information from the topic's
sertype when the reader or writer is created (``ddsi_set_xqos_topic_and_type``, ``ddsi_type_ref_local``) and
announces what it read. `create_endpoint` sets the size of the sertype's serialized TypeInformation to 0
for that moment: the endpoint then has none, as an rmw_cyclonedds_cpp endpoint. The sertype's layout is that
of cyclonedds 11.0.1 (``struct ddspy_sertype`` in its clayer/pysertype.c, hence the pin) and is checked
against what it must hold before anything is written. Sertypes are shared by the topics of one Python type
in a domain, so topics are created under the same lock (a topic needs the type information present).
"""

from __future__ import annotations

import ctypes as ct
import threading
from collections.abc import Callable
from typing import TypeVar

from cyclonedds.__library__ import library_path
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.topic import Topic

T = TypeVar("T")

_LOCK = threading.Lock()  # topic creation, and endpoint creation with the type information hidden
_LIB = ct.CDLL(str(library_path))  # the libddsc cyclonedds-python's C layer is linked against (same handles)
_LIB.dds_get_entity_sertype.argtypes = [ct.c_int32, ct.POINTER(ct.c_void_p)]
_LIB.dds_get_entity_sertype.restype = ct.c_int32


class _Sertype(ct.Structure):
    """``struct ddsi_sertype`` (Cyclone DDS 11.0.1, ddsi_sertype.h)."""

    _fields_ = [
        ("ops", ct.c_void_p), ("serdata_ops", ct.c_void_p), ("serdata_basehash", ct.c_uint32),
        ("flag_bits", ct.c_uint32), ("allowed_data_representation", ct.c_uint32), ("type_name", ct.c_char_p),
        ("gv", ct.c_void_p), ("flags_refc", ct.c_uint32), ("base_sertype", ct.c_void_p),
        ("sizeof_type", ct.c_uint32), ("data_type_props", ct.c_uint64),
    ]  # fmt: skip


class _PySertype(ct.Structure):
    """``struct ddspy_sertype`` (cyclonedds-python 11.0.1, clayer/pysertype.c), up to the type mapping."""

    _fields_ = [
        ("c_type", _Sertype), ("py_type", ct.c_void_p), ("keyless", ct.c_bool),
        ("v1_key_maxsize_bigger_16", ct.c_bool), ("v2_key_maxsize_bigger_16", ct.c_bool),
        ("typeinfo_ser_data", ct.c_void_p), ("typeinfo_ser_sz", ct.c_uint32),
        ("typemap_ser_data", ct.c_void_p), ("typemap_ser_sz", ct.c_uint32),
    ]  # fmt: skip


def create_topic(participant: DomainParticipant, name: str, data_type: type[IdlStruct]) -> Topic:
    """A cyclonedds Topic, created while no endpoint creation hides its sertype's type information."""
    with _LOCK:
        return Topic(participant, name, data_type)


def _sertype(topic: Topic) -> _PySertype:
    """The topic's sertype, checked to be a cyclonedds-python one laid out as in 11.0.1."""
    address = ct.c_void_p()
    ret = _LIB.dds_get_entity_sertype(topic._ref, ct.byref(address))
    if ret < 0 or not address.value:
        raise RuntimeError(f"no sertype for topic {topic._ref} (dds_get_entity_sertype returned {ret})")
    sertype = _PySertype.from_address(address.value)
    idl = topic.data_type.__idl__
    info = idl._xt_bytedata[0]  # private in cyclonedds 11.0.1: the serialized TypeInformation it passed on
    if (sertype.py_type != id(topic.data_type) or sertype.c_type.type_name != idl.idl_transformed_typename.encode()
            or sertype.typeinfo_ser_sz != len(info) or ct.string_at(sertype.typeinfo_ser_data, len(info)) != info):
        raise RuntimeError("cyclonedds' sertype is not laid out as in cyclonedds 11.0.1 (the pinned version)")
    return sertype


def create_endpoint(topic: Topic, make: Callable[[], T]) -> T:
    """``make()`` (a DataReader or DataWriter on ``topic``), created without type information (see above)."""
    with _LOCK:
        sertype = _sertype(topic)
        size = sertype.typeinfo_ser_sz
        sertype.typeinfo_ser_sz = 0
        try:
            return make()
        finally:
            sertype.typeinfo_ser_sz = size
