"""A Minari Dict / Tuple observation as one flat float32 vector, exactly as ``gymnasium.spaces.flatten`` lays it out.

A policy acting in the dataset's Gymnasium env sees ``gymnasium.spaces.flatten(env.observation_space, obs)``
(D4RL's mazes: ``achieved_goal``, ``desired_goal``, ``observation``), so training on the dataset must see the same
vector. Gymnasium's rules: a Dict's keys in sorted order (a `gymnasium.spaces.Dict` made from a dict, as every
env and Minari's own deserialiser make it, sorts them), a Tuple's entries in order, a Box or MultiBinary leaf
flattened row-major, a Discrete leaf one-hot over its ``n`` values from ``start``.

    flat = flat_observation(space, dataset.observations)        # [rows, flat_size(space)] float32
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np

from robolearn.data.formats.minari.spaces import Space
from robolearn.errors import DatasetError


def flat_leaves(space: Space, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Space]]:
    """(key path, leaf space) in gymnasium's flatten order: Dict keys sorted, Tuple entries in order."""
    if space.kind == "Dict":
        for key, child in sorted(space.children, key=lambda kc: kc[0]):
            yield from flat_leaves(child, (*prefix, key))
    elif space.kind == "Tuple":
        for key, child in space.children:
            yield from flat_leaves(child, (*prefix, key))
    else:
        yield prefix, space


def _leaf_size(space: Space, where: str) -> int:
    if space.kind in ("Box", "MultiBinary"):
        return math.prod(space.shape)
    if space.kind == "Discrete":
        return int(space.raw["n"])
    raise DatasetError(f"{where} is a {space.kind} space, which robolearn does not flatten (Box, MultiBinary, "
                       "Discrete, and Dicts / Tuples of them): convert the dataset's observations to a Box")


def flat_size(space: Space) -> int:
    """The length of the flat vector of ``space`` (gymnasium's ``flatdim``)."""
    return sum(_leaf_size(leaf, "/".join(names) or "observation") for names, leaf in flat_leaves(space))


def flat_observation(space: Space, groups: Mapping[str, np.ndarray]) -> np.ndarray:
    """[rows, flat_size(space)] float32: the observation groups (one per leaf, named by their key path joined with
    "/", as the Minari reader makes them) concatenated in gymnasium's flatten order."""
    parts = []
    for names, leaf in flat_leaves(space):
        name = "/".join(names) or "policy"
        if name not in groups:
            raise DatasetError(f"observation group {name!r} of the observation space is missing (groups: "
                               f"{sorted(groups)}); the dataset does not match its metadata")
        value = np.asarray(groups[name])
        rows = len(value)
        if leaf.kind == "Discrete":
            n, start = _leaf_size(leaf, name), int(leaf.raw.get("start", 0))
            index = value.reshape(rows).astype(np.int64) - start
            onehot = np.zeros((rows, n), np.float32)
            onehot[np.arange(rows), index] = 1.0
            parts.append(onehot)
        else:
            _leaf_size(leaf, name)
            parts.append(value.reshape(rows, -1).astype(np.float32, copy=False))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else np.ascontiguousarray(parts[0])


__all__ = ["flat_leaves", "flat_observation", "flat_size"]
