"""Payloads between actor and learner: safetensors blobs with a JSON header, cut into bounded frames.

A payload is one safetensors file in memory: the tensors plus ``__metadata__ = {"robolearn": <json>}``
whose JSON names the payload ``kind`` ("transitions" or "parameters") and carries small typed fields
(version, counters, the policy's architecture). Decoding never runs code from the data (no pickle, no
``torch.load``), checks sizes before allocating, and raises `PayloadError` naming what is wrong.

Frames: gRPC messages are capped (`MAX_MESSAGE`, 4 MiB as in LeRobot), so a payload travels as frames of
at most `CHUNK` (2 MiB) data after a 28-byte header ``b"RLF1" | transfer id u64 | index u32 | count u32 |
total u64`` (little endian). `Reassembler` checks order, count (at most what `CHUNK`-sized frames need, plus
one) and total size.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load, save

from robolearn.data.episodes import safetensors_metadata
from robolearn.errors import RobolearnError

MAX_MESSAGE = 4 * 1024 * 1024
CHUNK = 2 * 1024 * 1024
MAX_PAYLOAD = 512 * 1024 * 1024  # refuse larger transfers (a bad or hostile peer)
_FRAME = struct.Struct("<4sQIIQ")
_MAGIC = b"RLF1"
_META_KEY = "robolearn"

# transitions: name -> (dtype, trailing shape rank); every tensor has the batch size B as its first dim
TRANSITION_FIELDS = {
    "obs": (np.float32, 1), "next_obs": (np.float32, 1), "actions": (np.float32, 1), "rewards": (np.float32, 0),
    "terminated": (np.bool_, 0), "truncated": (np.bool_, 0), "interventions": (np.bool_, 0),
    "policy_versions": (np.int64, 0),
}  # fmt: skip


class PayloadError(RobolearnError, ValueError):
    """A message from the network is malformed, too large, or of the wrong kind."""


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    return np.ascontiguousarray(value)


def encode(kind: str, tensors: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> bytes:
    """One payload: ``tensors`` (numpy arrays or torch tensors) and JSON-able ``meta``."""
    header = json.dumps({"kind": kind, **(meta or {})}, sort_keys=True)
    return save({k: _numpy(v) for k, v in tensors.items()}, metadata={_META_KEY: header})


def decode(data: bytes, kind: str | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, tensors)`` of a payload; ``kind`` checks its kind."""
    if len(data) > MAX_PAYLOAD:
        raise PayloadError(f"payload of {len(data)} bytes exceeds the {MAX_PAYLOAD} byte limit")
    try:
        meta = json.loads(safetensors_metadata(data)[_META_KEY])
        tensors = load(data)
    except (KeyError, ValueError, SafetensorError, UnicodeDecodeError) as e:
        raise PayloadError(f"not a robolearn payload ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("kind"), str):
        raise PayloadError("payload header has no kind")
    if kind is not None and meta["kind"] != kind:
        raise PayloadError(f"expected a {kind} payload, got {meta['kind']!r}")
    return meta, tensors


FINITE_FIELDS = ("obs", "next_obs", "actions", "rewards")  # one NaN here poisons every SAC update after it


def check_transitions(tensors: Mapping[str, np.ndarray]) -> int:
    """Validate a transition batch (fields, dtypes, shapes, finite values); returns its size B."""
    missing = sorted(set(TRANSITION_FIELDS) - set(tensors))
    if missing:
        raise PayloadError(f"transition batch lacks {missing}")
    size = len(tensors["rewards"]) if np.ndim(tensors["rewards"]) == 1 else -1
    for name, (dtype, rank) in TRANSITION_FIELDS.items():
        value = tensors[name]
        if value.dtype != dtype or value.ndim != rank + 1 or len(value) != size:
            want = f"[B={size}{', D' if rank else ''}] {np.dtype(dtype)}"
            raise PayloadError(f"transition field {name!r} must be {want}, got {value.shape} {value.dtype}")
    if tensors["obs"].shape != tensors["next_obs"].shape:
        raise PayloadError(f"obs {tensors['obs'].shape} and next_obs {tensors['next_obs'].shape} differ")
    if size < 1:
        raise PayloadError("empty transition batch")
    for name in FINITE_FIELDS:
        value = tensors[name]
        rows = np.flatnonzero(~np.isfinite(value).all(axis=tuple(range(1, value.ndim))))
        if len(rows):
            raise PayloadError(f"transition field {name!r} has NaN/inf values (rows {rows[:10].tolist()})")
    return size


def frames(payload: bytes, transfer_id: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """The frames that carry ``payload`` (at least one, also for an empty payload)."""
    count = max(1, -(-len(payload) // chunk))
    view = memoryview(payload)
    for index in range(count):
        yield _FRAME.pack(_MAGIC, transfer_id, index, count, len(payload)) + view[index * chunk : (index + 1) * chunk]


class Reassembler:
    """Joins frames back into payloads; `feed` returns a payload when its last frame arrives, else None."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._id: int | None = None
        self._parts: list[bytes] = []
        self._count = self._total = 0

    def feed(self, frame: bytes) -> bytes | None:
        if len(frame) < _FRAME.size:
            raise PayloadError(f"frame of {len(frame)} bytes is shorter than its header")
        magic, transfer_id, index, count, total = _FRAME.unpack_from(frame)
        if magic != _MAGIC:
            raise PayloadError("frame has a bad magic number (not a robolearn actor/learner peer?)")
        if total > self.max_payload or count < 1 or index >= count or count > -(-total // CHUNK) + 1:
            raise PayloadError(f"frame header out of range (index {index}, count {count}, total {total})")
        if index == 0:
            self._id, self._parts, self._count, self._total = transfer_id, [], count, total
        elif transfer_id != self._id or index != len(self._parts) or count != self._count:
            raise PayloadError(f"frame {index}/{count} of transfer {transfer_id} arrived out of order")
        self._parts.append(bytes(frame[_FRAME.size :]))
        if sum(map(len, self._parts)) > total:
            raise PayloadError(f"transfer {transfer_id} carries more than the {total} bytes its header said")
        if len(self._parts) < count:
            return None
        payload = b"".join(self._parts)
        self._id, self._parts = None, []
        if len(payload) != total:
            raise PayloadError(f"transfer {transfer_id} carried {len(payload)} bytes, its header said {total}")
        return payload
