"""`write`: a `Dataset` as a Minari dataset folder.

The spaces to write are chosen first (the stored ones from ``metadata["minari"]`` while they still fit the
arrays, else new Boxes / a Dict of them), the infos checked, then the storage backend (`arrow` or `hdf5`)
writes the episodes and metadata.json follows (`metadata`), all into a hidden sibling renamed at the end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import DEFAULT_GROUP, Dataset, staged_folder
from robolearn.data.formats.minari.arrow import write_arrow
from robolearn.data.formats.minari.hdf5 import write_hdf5
from robolearn.data.formats.minari.layout import (
    DATA_FORMATS,
    ID_RE,
    METADATA,
    MINARI_VERSION,
    NAMESPACE_METADATA,
    folder_id,
)
from robolearn.data.formats.minari.metadata import write_metadata
from robolearn.data.formats.minari.spaces import Space, fits, new_box, parse_space
from robolearn.errors import DatasetError


def write(dataset: Dataset, path: Path, dataset_id: str | None = None, data_format: str = "arrow",
          minari_version: str = MINARI_VERSION, **_: Any) -> Path:
    """Write ``dataset`` as the Minari dataset folder ``path`` (``<root>/<namespace...>/<name>-v<N>``).

    ``dataset_id`` defaults to the id Minari lists the folder under (`folder_id`): its path below the Minari root
    (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``), so ``<root>/point-mass/random-v0`` is
    ``point-mass/random-v0``; elsewhere the folder's name (below existing namespace folders). A namespaced id
    (``"pendulum/expert-v0"``) must match the path's last parts, so that ``minari.load_dataset(dataset_id)`` with
    ``MINARI_DATASETS_PATH=<root>`` finds it (`dataset_dir` builds such a path). ``data_format``: "arrow"
    (Minari's default), "parquet" or "hdf5". The folder must not exist; files are written to a hidden sibling and
    renamed, so a failure leaves nothing.
    """
    path = Path(path)
    dataset_id = folder_id(path) if dataset_id is None else dataset_id
    match = ID_RE.match(dataset_id)
    if not match:
        raise DatasetError(f"{dataset_id!r} is not a Minari dataset id; use (namespace/)name-v<version>, e.g. "
                           "'pendulum/expert-v0'")
    parts = dataset_id.split("/")
    if list(path.parts[-len(parts):]) != parts:
        raise DatasetError(f"{path} does not end in the dataset id {dataset_id!r}; Minari finds a dataset at "
                           "<MINARI_DATASETS_PATH>/<dataset_id>: write to dataset_dir(dataset_id, root)")
    if data_format not in DATA_FORMATS:
        raise DatasetError(f"data_format {data_format!r} is not one of {', '.join(DATA_FORMATS)}")
    if path.exists():
        raise DatasetError(f"{path} exists already; datasets are never overwritten")
    minari_meta = dataset.metadata.get("minari") if isinstance(dataset.metadata.get("minari"), dict) else {}
    obs_space, obs_tree = _observation_space(dataset, minari_meta.get("observation_space"))
    act_space = _action_space(dataset, minari_meta.get("action_space"))
    _check_infos(dataset)

    with staged_folder(path) as tmp:
        data = tmp / "data"
        data.mkdir()
        if data_format == "hdf5":
            write_hdf5(dataset, data, obs_tree, act_space)
        else:
            write_arrow(dataset, data, data_format, obs_tree, act_space)
        size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 1e6
        meta = write_metadata(dataset, dataset_id, data_format, minari_version, obs_space, act_space, minari_meta)
        meta["dataset_size"] = round(size, 1)
        (data / METADATA).write_text(json.dumps(meta))
    namespace = match.group("namespace")
    if namespace:  # Minari marks namespace folders with a metadata file
        for depth in range(1, len(parts)):
            marker = path.parents[depth - 1] / NAMESPACE_METADATA
            if not marker.exists():
                marker.write_text("{}")
    return path


def _observation_space(dataset: Dataset, stored: Any) -> tuple[Space, tuple[Space, Any]]:
    """The observation space to write (the stored one if it still fits the arrays) and its `_tree`."""
    groups = dataset.observations
    for group in groups:
        if not group or any(not part for part in group.split("/")):
            raise DatasetError(f"{dataset.source}: observation group {group!r} has an empty part; rename it")
    fresh = {g: new_box(v.shape[1:], v.dtype, f"{dataset.source}: observations[{g!r}]") for g, v in groups.items()}
    if stored is not None:
        try:
            space = parse_space(stored, "metadata['minari']['observation_space']")
        except DatasetError:
            space = None
        if space is not None:
            leaves = {"/".join(n) if n else DEFAULT_GROUP: leaf for n, leaf in space.leaves()}
            if set(leaves) == set(groups) and all(fits(leaves[g], groups[g]) for g in groups):
                return space, _tree(space, groups)
    if set(groups) == {DEFAULT_GROUP}:
        space = fresh[DEFAULT_GROUP]
        return space, _tree(space, groups)
    nested: dict[str, Any] = {}
    for group in groups:
        node = nested
        *parents, last = group.split("/")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise DatasetError(f"observation groups {key!r} and {group!r} clash: a Minari Dict space cannot hold "
                                   "both an array and a sub-space under one key; rename one")
        if last in node:
            raise DatasetError(f"observation groups {group!r} and its sub-groups clash; rename one")
        node[last] = fresh[group]

    def build(node: dict[str, Any]) -> Space:
        return Space("Dict", children=tuple((k, build(v) if isinstance(v, dict) else v) for k, v in node.items()))

    space = build(nested)
    return space, _tree(space, groups)


def _tree(space: Space, groups: Mapping[str, np.ndarray], names: tuple[str, ...] = ()) -> tuple[Space, Any]:
    """(space, array) for a leaf, (space, {key: subtree}) for a Dict / Tuple level."""
    if space.kind in ("Dict", "Tuple"):
        return space, {key: _tree(child, groups, (*names, key)) for key, child in space.children}
    return space, groups["/".join(names) or DEFAULT_GROUP]



def _action_space(dataset: Dataset, stored: Any) -> Space:
    """The action space to write: the stored one if it still fits the actions, else a new Box."""
    if stored is not None:
        try:
            space = parse_space(stored, "metadata['minari']['action_space']")
        except DatasetError:
            space = None
        if space is not None and fits(space, dataset.actions):
            return space
    return new_box(dataset.actions.shape[1:], dataset.actions.dtype, f"{dataset.source}: actions")


def _check_infos(dataset: Dataset) -> None:
    """Infos Minari can hold: numbers or booleans, names that nest on "/" without clashes."""
    for name, value in dataset.infos.items():
        if value.dtype.kind not in "biuf":
            raise DatasetError(f"{dataset.source}: infos[{name!r}] holds {value.dtype}; Minari infos written here "
                               "must be numbers or booleans: convert or drop it")
        if not name or any(not part for part in name.split("/")):
            raise DatasetError(f"{dataset.source}: info name {name!r} has an empty part; rename it")
    names = set(dataset.infos)
    for name in names:
        if any(other.startswith(name + "/") for other in names):
            raise DatasetError(f"{dataset.source}: infos {name!r} and {name!r}/... clash (a Minari info is either an "
                               "array or a dict of infos); rename one")
