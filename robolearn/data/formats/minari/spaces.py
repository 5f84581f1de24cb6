"""Gymnasium spaces as Minari serialises them in metadata.json, parsed and written without gymnasium.

`Space` is the parsed form; `parse_space` reads Minari's JSON, `space_json` writes it back, `new_box` makes the
Box of a new array, and `fits` / `cast` check and convert arrays against a stored space (so that writing a
dataset read from Minari keeps its bounds and Discrete types).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from robolearn.errors import DatasetError


@dataclasses.dataclass(frozen=True)
class Space:
    """A Gymnasium space as Minari serialises it, parsed without gymnasium.

    ``kind``: Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple or Text; ``children`` for Dict (its keys)
    and Tuple ("0", "1", ...); ``raw`` the JSON object it came from.
    """

    kind: str
    shape: tuple[int, ...] = ()
    dtype: np.dtype | None = None
    children: tuple[tuple[str, Space], ...] = ()
    raw: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def leaves(self, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Space]]:
        """(key path, leaf space) of every non-Dict / non-Tuple space, depth first in stored order."""
        if self.kind in ("Dict", "Tuple"):
            for key, child in self.children:
                yield from child.leaves((*prefix, key))
        else:
            yield prefix, self

    def is_image(self) -> bool:
        """Minari's test for spaces it JPEG-encodes: uint8 [H>=32, W>=32(, C)] with bounds 0..255."""
        if self.kind != "Box" or len(self.shape) not in (2, 3) or min(self.shape[:2]) < 32 or self.dtype != np.uint8:
            return False
        try:
            return bool(np.all(np.asarray(self.raw["low"]) == 0) and np.all(np.asarray(self.raw["high"]) == 255))
        except (KeyError, TypeError, ValueError):
            return False


def parse_space(value: Any, where: str) -> Space:
    """A `Space` from Minari's JSON (a string or an already decoded object); DatasetError naming ``where``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise DatasetError(f"{where} is not valid JSON ({e}); the metadata is corrupt") from None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise DatasetError(f"{where} is not a serialised Gymnasium space (no 'type'); the metadata is corrupt")
    kind = value["type"]
    try:
        if kind == "Box":
            shape = _shape(value["shape"])
            return Space(kind, shape, np.dtype(value["dtype"]), raw=value)
        if kind == "Discrete":
            return Space(kind, (), np.dtype(value.get("dtype", "int64")), raw=value)
        if kind == "MultiDiscrete":
            return Space(kind, np.shape(value["nvec"]), np.dtype(value.get("dtype", "int64")), raw=value)
        if kind == "MultiBinary":
            n = value["n"]
            return Space(kind, _shape(n if isinstance(n, list) else [n]), np.dtype(np.int8), raw=value)
        if kind == "Dict":
            subspaces = value["subspaces"]
            if not isinstance(subspaces, dict):
                raise TypeError("subspaces is not an object")
            return Space(kind, children=tuple((str(k), parse_space(v, f"{where}[{k!r}]"))
                                              for k, v in subspaces.items()), raw=value)
        if kind == "Tuple":
            subspaces = value["subspaces"]
            if not isinstance(subspaces, list):
                raise TypeError("subspaces is not a list")
            return Space(kind, children=tuple((str(i), parse_space(v, f"{where}[{i}]"))
                                              for i, v in enumerate(subspaces)), raw=value)
        if kind == "Text":
            return Space(kind, raw=value)
    except (KeyError, TypeError, ValueError) as e:
        raise DatasetError(f"{where}: malformed {kind} space ({type(e).__name__}: {e}); the metadata is corrupt") \
            from None
    raise DatasetError(f"{where}: unknown space type {kind!r}")


def _shape(value: Any) -> tuple[int, ...]:
    """A stored shape: a list of non-negative sizes (ValueError otherwise)."""
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31
                                              for n in value):
        raise ValueError(f"shape {value!r} is not a list of sizes")
    return tuple(value)


def new_box(shape: tuple[int, ...], dtype: np.dtype, what: str) -> Space:
    """A new Box over ``dtype``'s full range (floats -inf..inf, bool False..True, ints their min..max)."""
    if dtype == np.bool_:
        low, high = False, True
    elif np.issubdtype(dtype, np.integer):
        low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    elif np.issubdtype(dtype, np.floating):
        low, high = -math.inf, math.inf
    else:
        raise DatasetError(f"{what} holds {dtype}, which no Gymnasium Box space holds; store numbers or booleans")
    raw = {"type": "Box", "dtype": str(dtype), "shape": list(shape),
           "low": np.full(shape, low).tolist(), "high": np.full(shape, high).tolist()}
    return Space("Box", shape, dtype, raw=raw)


def space_json(space: Space) -> dict[str, Any]:
    """``space`` as Minari's JSON object (Dict / Tuple rebuilt from their children, leaves as stored)."""
    if space.kind == "Dict":
        return {"type": "Dict", "subspaces": {k: space_json(c) for k, c in space.children}}
    if space.kind == "Tuple":
        return {"type": "Tuple", "subspaces": [space_json(c) for _, c in space.children]}
    return space.raw


def fits(space: Space, value: np.ndarray) -> bool:
    """Whether ``value`` [rows, ...] can be written under ``space`` without loss."""
    if space.kind == "Discrete":
        shape_ok = value.shape[1:] in ((), (1,))
    elif space.kind in ("Box", "MultiDiscrete", "MultiBinary"):
        shape_ok = math.prod(value.shape[1:]) == math.prod(space.shape)
    else:
        return False
    if not shape_ok or space.dtype is None:
        return False
    try:
        with np.errstate(all="ignore"):
            return bool(np.array_equal(value.astype(space.dtype).astype(value.dtype), value))
    except (TypeError, ValueError):
        return False


def cast(space: Space, value: np.ndarray) -> np.ndarray:
    """``value`` in ``space``'s dtype and shape (Discrete: [rows])."""
    shape = () if space.kind == "Discrete" else space.shape
    return np.ascontiguousarray(value, dtype=space.dtype).reshape(len(value), *shape)
