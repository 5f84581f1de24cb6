"""Minari's HDF5 storage (``data_format`` "hdf5"), read and written with h5py.

One file ``data/main_data.hdf5`` with a group ``episode_<i>`` per episode: datasets ``observations`` [T+1, ...]
(a sub-group per Dict / Tuple level, Tuple children ``_index_<i>``), ``actions`` [T, ...], ``rewards`` /
``terminations`` / ``truncations`` [T], an optional ``infos`` group (nested dicts as sub-groups) and the
attributes ``id``, ``total_steps`` and the reward summaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import DEFAULT_GROUP, Dataset, reading
from robolearn.data.formats.minari.episode import decode_jpegs, episode_infos, episode_meta
from robolearn.data.formats.minari.layout import HDF5_FILE, STEP_FIELDS
from robolearn.data.formats.minari.spaces import Space, cast
from robolearn.errors import DatasetError


def read_hdf5(data: Path, fmt: str, total: int, obs_space: Space, act_space: Space,
              jpeg: bool) -> Iterator[dict[str, Any]]:
    """The ``total`` episodes of ``data/main_data.hdf5`` as `Dataset.from_episodes` dicts (infos still raw);
    ``fmt`` is unused, for the same signature as `read_arrow`."""
    import h5py

    file = data / HDF5_FILE
    if not file.is_file():
        raise DatasetError(f"{file} is missing; the dataset is incomplete: regenerate or re-download it")
    with reading(file, "the HDF5 file"), h5py.File(file, "r") as h5:
        for i in range(total):
            group = h5.get(f"episode_{i}")
            if not isinstance(group, h5py.Group):
                raise DatasetError(f"{file} has no group episode_{i} but metadata.json lists {total} episodes; the "
                                   "dataset is incomplete: regenerate or re-download it")
            episode: dict[str, Any] = {}
            with reading(file, f"episode_{i}/observations"):
                episode["observations"] = _hdf5_space(group, "observations", obs_space, file, jpeg)
            with reading(file, f"episode_{i}/actions"):
                episode["actions"] = _hdf5_leaf(group, "actions", act_space, file, jpeg)
            for name in STEP_FIELDS:
                with reading(file, f"episode_{i}/{name}"):
                    episode[name] = _hdf5_leaf(group, name, None, file, jpeg)
            with reading(file, f"episode_{i}/infos"):
                infos = group.get("infos")
                episode["infos"] = _hdf5_infos(infos) if isinstance(infos, h5py.Group) else {}
            yield episode


def _hdf5_space(group: Any, name: str, space: Space, file: Path, jpeg: bool,
                names: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Observation groups of an HDF5 episode (Dict levels are sub-groups, Tuple children ``_index_<i>``)."""
    import h5py

    if space.kind not in ("Dict", "Tuple"):
        return {"/".join(names) or DEFAULT_GROUP: _hdf5_leaf(group, name, space, file, jpeg)}
    node = group.get(name)
    if not isinstance(node, h5py.Group):
        raise DatasetError(f"{file}: {group.name}/{name} is missing or not a group as its {space.kind} space needs; "
                           "the file does not match metadata.json's observation_space")
    out = {}
    for key, child in space.children:
        out.update(_hdf5_space(node, f"_index_{key}" if space.kind == "Tuple" else key, child, file, jpeg,
                               (*names, key)))
    return out


def _hdf5_leaf(group: Any, name: str, space: Space | None, file: Path, jpeg: bool) -> np.ndarray:
    """Dataset ``name`` of ``group`` as numbers per row, checked against ``space`` (JPEG frames decoded)."""
    import h5py

    node = group.get(name)
    if not isinstance(node, h5py.Dataset):
        raise DatasetError(f"{file}: {group.name}/{name} is missing or not an array; the file does not match "
                           "metadata.json")
    value = node[()]
    if space is not None and jpeg and space.is_image():
        return decode_jpegs(list(value), space, file, f"{group.name}/{name}")
    value = np.asarray(value)
    if value.dtype.kind not in "biuf" or value.ndim < 1:
        raise DatasetError(f"{file}: {group.name}/{name} holds {value.dtype}{list(value.shape)}, not numbers per step")
    if space is not None and space.kind != "Discrete" and value.shape[1:] != space.shape:
        raise DatasetError(f"{file}: {group.name}/{name} has shape {list(value.shape)}, its space "
                           f"{space.kind}{list(space.shape)} needs [rows, {', '.join(map(str, space.shape))}]")
    return value


def _hdf5_infos(group: Any, prefix: str = "") -> dict[str, np.ndarray | str]:
    """Info arrays by "/"-joined name; an info that is no numeric array maps to the reason it is skipped."""
    import h5py

    out: dict[str, np.ndarray | str] = {}
    for key, node in group.items():
        name = f"{prefix}{key}"
        if isinstance(node, h5py.Group):
            out.update(_hdf5_infos(node, name + "/"))
        elif isinstance(node, h5py.Dataset):
            value = np.asarray(node[()])
            ok = value.dtype.kind in "biuf" and value.ndim >= 1
            out[name] = value if ok else f"{name} is {value.dtype}{list(value.shape)}, not numbers per step"
    return out


def write_hdf5(dataset: Dataset, data: Path, obs_tree: tuple[Space, Any], act_space: Space) -> None:
    """Every episode of ``dataset`` as a group of ``data/main_data.hdf5`` (insertion order kept)."""
    import h5py

    def put(group: Any, name: str, tree: tuple[Space, Any], rows: slice) -> None:
        space, value = tree
        if not isinstance(value, dict):
            group.create_dataset(name, data=cast(space, value[rows]))
            return
        sub = group.create_group(name)
        for key, child in value.items():
            put(sub, f"_index_{key}" if space.kind == "Tuple" else key, child, rows)

    def put_infos(group: Any, tree: dict[str, Any]) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                put_infos(group.create_group(key), value)
            else:
                group.create_dataset(key, data=value)

    with h5py.File(data / HDF5_FILE, "w", track_order=True) as h5:
        for i in range(dataset.num_episodes):
            s, t = int(dataset.step_starts[i]), int(dataset.step_starts[i + 1])
            group = h5.create_group(f"episode_{i}")
            group.attrs.update(episode_meta(dataset, i, s, t))
            put(group, "observations", obs_tree, slice(s + i, t + i + 1))
            group.create_dataset("actions", data=cast(act_space, dataset.actions[s:t]))
            for name in STEP_FIELDS:
                group.create_dataset(name, data=np.asarray(getattr(dataset, name)[s:t]))
            if dataset.infos:
                put_infos(group.create_group("infos"), episode_infos(dataset, s, t))
