"""Minari datasets on disk (Farama's offline-RL format), read and written with pyarrow / h5py / json only.

The ``minari`` package is not needed at run time: this module reads and writes Minari's storage layout
(learned from minari 0.5.4's ``MinariStorage``, ``ArrowStorage`` and ``HDF5Storage``) directly, and the tests
check the files against the real package. A dataset with id ``ns/sub/name-v0`` lives in
``$MINARI_DATASETS_PATH/ns/sub/name-v0/`` (default root ``~/.minari/datasets``; `dataset_dir` gives it)::

    <root>/ns/namespace_metadata.json          namespace folders (``{}`` unless the namespace has a description)
    <root>/ns/sub/name-v0/data/metadata.json   dataset metadata (below)
      data_format "arrow" or "parquet":   data/<i>/part-0.arrow (or .parquet), data/<i>/metadata.json per episode i
      data_format "hdf5":                 data/main_data.hdf5 with one group episode_<i> per episode

``metadata.json``: ``dataset_id``, ``total_episodes``, ``total_steps``, ``data_format``, ``minari_version``,
``observation_space`` / ``action_space`` (Gymnasium spaces as JSON strings: Box, Discrete, MultiDiscrete,
MultiBinary, Dict, Tuple), ``jpeg_encoding`` (image Boxes stored as JPEG bytes; missing means true), optional
``env_spec``, ``eval_env_spec``, ``algorithm_name``, ``author`` / ``author_email`` (lists),
``code_permalink``, ``description``, ``requirements``, ``ref_min_score`` / ``ref_max_score`` (for
``minari.get_normalized_score``), ``num_episodes_average_score``, ``dataset_size`` (MB).

One episode of T steps. Arrow: a table of T+1 rows, columns ``observations`` (T+1 real rows), ``actions``,
``rewards``, ``terminations``, ``truncations`` (T real rows + one zero row of padding) and optional ``infos``;
a Box leaf is a fixed-size list column of its flattened shape, a Discrete leaf a plain integer column, a Dict
(or Tuple, fields "0", "1", ...) a struct column. HDF5: datasets ``observations`` [T+1, ...] (a group per Dict
/ Tuple level, Tuple children ``_index_<i>``), ``actions`` [T, ...], ``rewards`` / ``terminations`` /
``truncations`` [T] and an optional ``infos`` group; episode attributes ``id``, ``total_steps``, ``seed``.
Minari's data collector records T+1 infos per episode: the reset's info, then each step's. Nested info dicts
are struct fields (arrow) or sub-groups (HDF5).

Mapping to `Dataset`:

- observations: a Box space is group ``"policy"``; a Dict (or Tuple) space gives one group per leaf, nested
  keys joined with ``"/"`` (``{"arm": {"qpos": ...}}`` -> ``"arm/qpos"``). Writing reverses this: a dataset
  with only group ``"policy"`` is written as a Box, anything else as a (nested) Dict. A Discrete leaf reads as
  [T+1, 1].
- actions: one Box (or Discrete / MultiDiscrete / MultiBinary) space, read as [T, A] float32; Dict actions are
  refused.
- infos: ``Dataset.infos[k][t]`` is the info of step t, i.e. Minari's ``infos[k][t + 1]``. Reading drops the
  reset row of T+1-row infos (T-row infos are taken as they are); writing prepends a zero row for the reset,
  as Minari's arrow layout needs T+1 rows. Only numeric / bool arrays are kept; others are skipped with a
  warning and listed in ``metadata["minari"]["skipped_infos"]``.
- metadata: written in full as ``robolearn_metadata`` (an extra key that Minari ignores) and copied to
  Minari's own fields where they fit (``ref_min_score`` / ``ref_max_score``, ``algorithm_name`` (or
  ``algorithm`` / ``policy``), ``author``, ``description`` (or the ``task``), ...). Reading a dataset written
  here returns that metadata; reading any other Minari dataset returns Minari's descriptive fields. Either
  way ``dataset_id`` is added and ``metadata["minari"]`` keeps the spaces and env specs, so writing the
  dataset again keeps its space bounds, Discrete types and environment.

Writing stores images raw (``jpeg_encoding: false``: lossless); reading decodes JPEG-encoded images (Pillow).
New Box spaces get the widest bounds of their dtype (``-inf``..``inf`` for floats). ``minari_version``
defaults to "0.5.0", the first Minari with this layout, so that every Minari 0.5.x accepts the files (each
refuses versions newer than itself); the tests check them against minari 0.5.4.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import DEFAULT_GROUP, Dataset, jsonable, reading, staged_folder
from robolearn.errors import DatasetError

METADATA = "metadata.json"
HDF5_FILE = "main_data.hdf5"
NAMESPACE_METADATA = "namespace_metadata.json"
DATA_FORMATS = ("arrow", "parquet", "hdf5")
MINARI_VERSION = "0.5.0"
ROBOLEARN_KEY = "robolearn_metadata"
#: Minari's descriptive metadata fields, copied into `Dataset.metadata` when reading a foreign dataset.
_DESCRIPTIVE = ("algorithm_name", "author", "author_email", "code_permalink", "description", "requirements",
                "ref_min_score", "ref_max_score", "num_episodes_average_score", "combined_datasets")
#: Minari fields that describe the storage or environment: kept under ``metadata["minari"]``.
_TECHNICAL = ("observation_space", "action_space", "env_spec", "eval_env_spec", "minari_version", "data_format",
              "jpeg_encoding")
# dataset ids as Minari parses them, (namespace/)name-v<version>; Minari needs the version
_ID_RE = re.compile(r"^(?:(?P<namespace>[-_\w][-_\w/]*[-_\w]+)/)?(?P<name>[-_\w]+?)-v(?P<version>\d+)$")


# --- spaces --------------------------------------------------------------------------------------------------


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
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31
                                              for n in value):
        raise ValueError(f"shape {value!r} is not a list of sizes")
    return tuple(value)


def _box(shape: tuple[int, ...], dtype: np.dtype, what: str) -> Space:
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


def _space_json(space: Space) -> dict[str, Any]:
    if space.kind == "Dict":
        return {"type": "Dict", "subspaces": {k: _space_json(c) for k, c in space.children}}
    if space.kind == "Tuple":
        return {"type": "Tuple", "subspaces": [_space_json(c) for _, c in space.children]}
    return space.raw


# --- detect / read -----------------------------------------------------------------------------------------


def dataset_dir(dataset_id: str, root: str | Path | None = None) -> Path:
    """Where Minari keeps ``dataset_id``: ``root`` (default ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``)
    joined with the id."""
    if root is None:
        root = os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets"
    return Path(root) / dataset_id


def _data_dir(path: Path) -> Path:
    """The ``data`` folder (holding ``metadata.json``) of a dataset folder, or ``path`` if it is that folder."""
    return path / "data" if (path / "data").is_dir() else path


def detect(path: Path) -> bool:
    """A Minari dataset folder (``<id>/`` or its ``data/``): ``metadata.json`` with Minari's storage keys."""
    try:
        meta = json.loads((_data_dir(Path(path)) / METADATA).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("data_format") in DATA_FORMATS and "total_episodes" in meta


def read(path: Path, **_: Any) -> Dataset:
    """The Minari dataset at ``path`` (its folder ``<root>/<id>`` or that folder's ``data/``) as a `Dataset`."""
    path = Path(path)
    data = _data_dir(path)
    meta = _read_json(data / METADATA, "the dataset metadata", f"{path} is not a Minari dataset folder")
    fmt = meta.get("data_format")
    if fmt not in DATA_FORMATS:
        raise DatasetError(f"{data / METADATA}: data_format {fmt!r} is not one of {', '.join(DATA_FORMATS)}")
    total = meta.get("total_episodes")
    if not isinstance(total, int) or isinstance(total, bool) or total < 0:
        raise DatasetError(f"{data / METADATA}: total_episodes {total!r} is not a count; the metadata is corrupt")
    spaces = {}
    for key in ("observation_space", "action_space"):
        if key not in meta:
            raise DatasetError(f"{data / METADATA} has no {key} (older Minari datasets rebuild it from env_spec with "
                               "gymnasium); load and re-save it with minari>=0.5")
        spaces[key] = parse_space(meta[key], f"{data / METADATA} {key}")
    obs_space, act_space = spaces["observation_space"], spaces["action_space"]
    if act_space.kind not in ("Box", "Discrete", "MultiDiscrete", "MultiBinary"):
        raise DatasetError(f"{data / METADATA}: action_space is a {act_space.kind}; robolearn datasets hold one flat "
                           "action vector per step: flatten the actions into a Box")
    for names, leaf in obs_space.leaves():
        if leaf.kind == "Text":
            raise DatasetError(f"{data / METADATA}: observation {'/'.join(names) or 'space'} is a Text space; "
                               "robolearn datasets hold arrays: drop or encode it")
    jpeg = bool(meta.get("jpeg_encoding", True))
    reader = _read_hdf5 if fmt == "hdf5" else _read_arrow
    episodes = list(reader(data, fmt, total, obs_space, act_space, jpeg))
    steps = sum(len(ep["actions"]) for ep in episodes)
    if meta.get("total_steps", steps) != steps:
        raise DatasetError(f"{data / METADATA} says total_steps {meta.get('total_steps')!r}, the episodes hold {steps} "
                           "steps; the dataset is incomplete or its metadata stale: regenerate it")
    for ep in episodes:  # a Discrete (or scalar Box) leaf is one number per row: a [T+1, 1] group
        ep["observations"] = {g: v.reshape(len(v), 1) if v.ndim == 1 else v for g, v in ep["observations"].items()}
    skipped = _fit_infos(episodes)
    metadata = _read_metadata(meta, skipped)
    if skipped:
        warnings.warn(f"{path}: infos {sorted(skipped)} not read ({'; '.join(skipped.values())})", stacklevel=2)
    return Dataset.from_episodes(episodes, metadata, source=str(path))


def _read_json(file: Path, what: str, missing: str) -> dict[str, Any]:
    try:
        value = json.loads(file.read_text())
    except FileNotFoundError:
        raise DatasetError(f"{missing}: {file} is missing") from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"{file} ({what}) is unreadable or corrupt ({e}); regenerate or re-download the dataset") \
            from None
    if not isinstance(value, dict):
        raise DatasetError(f"{file} ({what}) is not a JSON object; the dataset is corrupt")
    return value


def _read_metadata(meta: dict[str, Any], skipped: dict[str, str]) -> dict[str, Any]:
    ours = meta.get(ROBOLEARN_KEY)
    if isinstance(ours, dict):  # written here: our metadata, with Minari's reference scores if edited there
        out = dict(ours)
        out.update({k: meta[k] for k in ("ref_min_score", "ref_max_score") if _number(meta.get(k)) is not None})
    else:
        out = {k: meta[k] for k in _DESCRIPTIVE if meta.get(k) is not None}
    if isinstance(meta.get("dataset_id"), str):
        out["dataset_id"] = meta["dataset_id"]
    minari = {k: meta[k] for k in _TECHNICAL if meta.get(k) is not None}
    if skipped:
        minari["skipped_infos"] = skipped
    out["minari"] = minari
    return out




def _read_arrow(data: Path, fmt: str, total: int, obs_space: Space, act_space: Space,
                jpeg: bool) -> Iterator[dict[str, Any]]:
    for i in range(total):
        folder = data / str(i)
        files = sorted(p for p in folder.glob("*") if p.is_file() and p.name != METADATA
                       and not p.name.startswith(("_", "."))) if folder.is_dir() else []
        if not files:
            raise DatasetError(f"{folder} holds no {fmt} file but metadata.json lists {total} episodes; the dataset "
                               "is incomplete: regenerate or re-download it")
        file = files[0] if len(files) == 1 else folder
        with reading(file, f"episode {i}"):
            yield _arrow_episode(files, fmt, file, obs_space, act_space, jpeg)


def _arrow_episode(files: list[Path], fmt: str, file: Path, obs_space: Space, act_space: Space,
                   jpeg: bool) -> dict[str, Any]:
    """One episode from its arrow / parquet files (Minari writes one, ``part-0``; a dataset of several is read
    as their concatenation, as pyarrow.dataset would)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for part in files:
        if fmt == "parquet":
            tables.append(pq.read_table(part))
        else:
            with pa.OSFile(str(part)) as source:  # read, not memory-mapped: a file changed later cannot fault
                tables.append(pa.ipc.open_file(source).read_all())
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    table.validate(full=True)
    missing = [c for c in ("observations", "actions", "rewards", "terminations", "truncations")
               if c not in table.column_names]
    if missing:
        raise DatasetError(f"{file} has no column {missing[0]!r}; the file is not a Minari episode")
    if table.num_rows < 1:
        raise DatasetError(f"{file} has no rows; drop the episode or regenerate the dataset")
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    t = table.num_rows - 1  # T+1 rows: the step columns carry one row of padding
    episode = {"observations": _arrow_space(columns["observations"], obs_space, file, jpeg),
               "actions": _arrow_leaf(columns["actions"], act_space, file, "actions", jpeg)[:t]}
    for name in ("rewards", "terminations", "truncations"):
        episode[name] = _arrow_leaf(columns[name], None, file, name, jpeg)[:t]
    episode["infos"] = _arrow_infos(columns["infos"], file) if "infos" in columns else {}
    return episode


def _arrow_space(array: Any, space: Space, file: Path, jpeg: bool,
                 names: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Observation groups (key path joined with "/"; a bare space is "policy") of an arrow column."""
    field = "/".join(("observations", *names))
    if space.kind not in ("Dict", "Tuple"):
        return {"/".join(names) or DEFAULT_GROUP: _arrow_leaf(array, space, file, field, jpeg)}
    if not _is_struct(array):
        raise DatasetError(f"{file}: {field} is {array.type}, its {space.kind} space needs a struct; the file does "
                           "not match metadata.json's observation_space")
    children = dict(zip([f.name for f in array.type], array.flatten(), strict=True))
    out = {}
    for key, child in space.children:
        if key not in children:
            raise DatasetError(f"{file}: {field} has no field {key!r}; the file does not match metadata.json's "
                               "observation_space")
        out.update(_arrow_space(children[key], child, file, jpeg, (*names, key)))
    return out


def _is_struct(array: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_struct(array.type)


def _arrow_leaf(array: Any, space: Space | None, file: Path, field: str, jpeg: bool) -> np.ndarray:
    """A numpy array [rows, *space.shape] from a fixed-size list (Box & co.), plain (Discrete, step fields) or
    binary (JPEG images) arrow column."""
    import pyarrow as pa

    if array.null_count:
        raise DatasetError(f"{file}: {field} has {array.null_count} missing values; the file is corrupt or not a "
                           "Minari episode")
    if space is not None and jpeg and space.is_image():
        if not (pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type)):
            raise DatasetError(f"{file}: {field} is {array.type}, not the JPEG bytes of its image space")
        return _decode_jpegs(array.to_pylist(), space, file, field)
    if space is not None and space.kind != "Discrete":
        size = math.prod(space.shape)
        if not pa.types.is_fixed_size_list(array.type) or array.type.list_size != size:
            raise DatasetError(f"{file}: {field} is {array.type}, its space {space.kind}{list(space.shape)} needs "
                               f"fixed-size lists of {size}; the file does not match metadata.json")
        values = array.flatten()
        return _numeric(values, file, field).reshape(len(array), *space.shape)
    return _numeric(array, file, field)


def _numeric(array: Any, file: Path, field: str) -> np.ndarray:
    import pyarrow as pa

    kind = array.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise DatasetError(f"{file}: {field} is {kind}, not numbers or booleans")
    with reading(file, field):
        return np.asarray(array.to_numpy(zero_copy_only=False))


def _arrow_infos(array: Any, file: Path, prefix: str = "") -> dict[str, np.ndarray | str]:
    """Info arrays by "/"-joined name; an info that is no numeric array maps to the reason it is skipped."""
    import pyarrow as pa

    out: dict[str, np.ndarray | str] = {}
    if not _is_struct(array):
        return {prefix or "infos": f"is {array.type}, not a struct of infos"}
    for field, child in zip(array.type, array.flatten(), strict=True):
        name = f"{prefix}{field.name}"
        if _is_struct(child):
            out.update(_arrow_infos(child, file, name + "/"))
            continue
        kind = child.type
        try:
            if pa.types.is_fixed_size_list(kind):
                value = _numeric(child.flatten(), file, f"infos/{name}").reshape(len(child), -1)
                shape = (field.metadata or {}).get(b"shape")  # b"" for one number per step
                if shape is not None:
                    value = value.reshape(len(child), *(int(n) for n in shape.split(b",") if n))
            else:
                value = _numeric(child, file, f"infos/{name}")
        except (DatasetError, ValueError) as e:
            out[name] = f"{name} {str(e).split(': ', 1)[-1]}"
            continue
        out[name] = value if not child.null_count else f"{name} has missing values"
    return out


def _read_hdf5(data: Path, fmt: str, total: int, obs_space: Space, act_space: Space,
               jpeg: bool) -> Iterator[dict[str, Any]]:
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
            for name in ("rewards", "terminations", "truncations"):
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
    import h5py

    node = group.get(name)
    if not isinstance(node, h5py.Dataset):
        raise DatasetError(f"{file}: {group.name}/{name} is missing or not an array; the file does not match "
                           "metadata.json")
    value = node[()]
    if space is not None and jpeg and space.is_image():
        return _decode_jpegs(list(value), space, file, f"{group.name}/{name}")
    value = np.asarray(value)
    if value.dtype.kind not in "biuf" or value.ndim < 1:
        raise DatasetError(f"{file}: {group.name}/{name} holds {value.dtype}{list(value.shape)}, not numbers per step")
    if space is not None and space.kind != "Discrete" and value.shape[1:] != space.shape:
        raise DatasetError(f"{file}: {group.name}/{name} has shape {list(value.shape)}, its space "
                           f"{space.kind}{list(space.shape)} needs [rows, {', '.join(map(str, space.shape))}]")
    return value


def _hdf5_infos(group: Any, prefix: str = "") -> dict[str, np.ndarray | str]:
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


def _decode_jpegs(frames: list[Any], space: Space, file: Path, field: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise DatasetError(f"{file}: {field} is JPEG-encoded; install Pillow to read it") from None
    out = np.empty((len(frames), *space.shape), dtype=np.uint8)
    for i, frame in enumerate(frames):
        with reading(file, f"{field} frame {i} (JPEG)"):
            data = frame if isinstance(frame, bytes) else np.asarray(frame, dtype=np.uint8).tobytes()
            image = np.asarray(Image.open(io.BytesIO(data)), dtype=np.uint8)
            out[i] = image.reshape(space.shape)
    return out


def _fit_infos(episodes: list[dict[str, Any]]) -> dict[str, str]:
    """Keep the infos that give every episode one row per step (dropping the reset row of T+1-row infos) with
    the same trailing shape; return the skipped names and why."""
    skipped: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for ep in episodes:
        t = len(ep["actions"])
        for name, value in ep["infos"].items():
            if isinstance(value, str):
                skipped.setdefault(name, value)
            elif len(value) not in (t, t + 1):
                skipped.setdefault(name, f"{name} has {len(value)} rows for {t} steps")
            elif shapes.setdefault(name, value.shape[1:]) != value.shape[1:]:
                skipped.setdefault(name, f"{name} changes shape between episodes")
    names = set().union(*(ep["infos"] for ep in episodes)) if episodes else set()
    for name in names - set(skipped):
        if any(name not in ep["infos"] for ep in episodes):
            skipped[name] = f"{name} is missing from some episodes"
    for ep in episodes:
        t = len(ep["actions"])
        ep["infos"] = {k: v[len(v) - t:] for k, v in ep["infos"].items() if k not in skipped}
    return skipped


# --- write ------------------------------------------------------------------------------------------------


def write(dataset: Dataset, path: Path, dataset_id: str | None = None, data_format: str = "arrow",
          minari_version: str = MINARI_VERSION, **_: Any) -> Path:
    """Write ``dataset`` as the Minari dataset folder ``path`` (``<root>/<namespace...>/<name>-v<N>``).

    ``dataset_id`` defaults to the folder's name; a namespaced id (``"pendulum/expert-v0"``) must match the
    path's last parts, so that ``minari.load_dataset(dataset_id)`` with ``MINARI_DATASETS_PATH=<root>`` finds
    it (`dataset_dir` builds such a path). ``data_format``: "arrow" (Minari's default), "parquet" or "hdf5".
    The folder must not exist; files are written to a hidden sibling and renamed, so a failure leaves nothing.
    """
    path = Path(path)
    dataset_id = path.name if dataset_id is None else dataset_id
    match = _ID_RE.match(dataset_id)
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
            _write_hdf5(dataset, data, obs_tree, act_space)
        else:
            _write_arrow(dataset, data, data_format, obs_tree, act_space)
        size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 1e6
        meta = _write_metadata(dataset, dataset_id, data_format, minari_version, obs_space, act_space, minari_meta)
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
    fresh = {g: _box(v.shape[1:], v.dtype, f"{dataset.source}: observations[{g!r}]") for g, v in groups.items()}
    if stored is not None:
        try:
            space = parse_space(stored, "metadata['minari']['observation_space']")
        except DatasetError:
            space = None
        if space is not None:
            leaves = {"/".join(n) if n else DEFAULT_GROUP: leaf for n, leaf in space.leaves()}
            if set(leaves) == set(groups) and all(_fits(leaves[g], groups[g]) for g in groups):
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


def _fits(space: Space, value: np.ndarray) -> bool:
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


def _cast(space: Space, value: np.ndarray) -> np.ndarray:
    """``value`` in ``space``'s dtype and shape (Discrete: [rows])."""
    shape = () if space.kind == "Discrete" else space.shape
    return np.ascontiguousarray(value, dtype=space.dtype).reshape(len(value), *shape)


def _action_space(dataset: Dataset, stored: Any) -> Space:
    if stored is not None:
        try:
            space = parse_space(stored, "metadata['minari']['action_space']")
        except DatasetError:
            space = None
        if space is not None and _fits(space, dataset.actions):
            return space
    return _box(dataset.actions.shape[1:], dataset.actions.dtype, f"{dataset.source}: actions")


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


def _episode_infos(dataset: Dataset, s: int, t: int) -> dict[str, Any]:
    """One episode's infos with T+1 rows (a zero row for the reset first), nested on "/"."""
    nested: dict[str, Any] = {}
    for name, value in dataset.infos.items():
        rows = np.asarray(value[s:t])
        node = nested
        *parents, last = name.split("/")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = np.concatenate([np.zeros_like(rows[:1]), rows])
    return nested


def _episode_meta(dataset: Dataset, i: int, s: int, t: int) -> dict[str, Any]:
    rewards = dataset.rewards[s:t].astype(np.float64)
    return {"id": i, "total_steps": t - s, "rewards_sum": float(rewards.sum()), "rewards_mean": float(rewards.mean()),
            "rewards_std": float(rewards.std()), "rewards_max": float(rewards.max()),
            "rewards_min": float(rewards.min())}


def _write_arrow(dataset: Dataset, data: Path, fmt: str, obs_tree: tuple[Space, Any], act_space: Space) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def leaf(space: Space, value: np.ndarray, pad: int) -> Any:
        value = _cast(space, value)
        value = np.concatenate([value, np.zeros((pad, *value.shape[1:]), value.dtype)]) if pad else value
        if space.kind == "Discrete":
            return pa.array(value)
        flat = value.reshape(len(value), -1)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), list_size=flat.shape[1])

    def struct(tree: tuple[Space, Any], rows: slice) -> Any:
        space, value = tree
        if isinstance(value, dict):
            return pa.StructArray.from_arrays([struct(v, rows) for v in value.values()], names=list(value))
        return leaf(space, value[rows], 0)

    def info_struct(tree: dict[str, Any]) -> Any:
        arrays, fields = [], []
        for key, value in tree.items():
            if isinstance(value, dict):
                array = info_struct(value)
                field = pa.field(key, array.type)
            elif value.ndim == 1:
                array = pa.array(value)
                field = pa.field(key, array.type)
            else:
                flat = value.reshape(len(value), -1)
                array = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), list_size=flat.shape[1])
                field = pa.field(key, array.type, metadata={"shape": ",".join(map(str, value.shape[1:]))})
            arrays.append(array)
            fields.append(field)
        return pa.StructArray.from_arrays(arrays, fields=fields)

    for i in range(dataset.num_episodes):
        s, t = int(dataset.step_starts[i]), int(dataset.step_starts[i + 1])
        obs_rows = slice(s + i, t + i + 1)
        columns = {"observations": struct(obs_tree, obs_rows), "actions": leaf(act_space, dataset.actions[s:t], 1)}
        for name in ("rewards", "terminations", "truncations"):
            value = np.asarray(getattr(dataset, name)[s:t])
            columns[name] = pa.array(np.concatenate([value, np.zeros(1, value.dtype)]))
        if dataset.infos:
            columns["infos"] = info_struct(_episode_infos(dataset, s, t))
        table = pa.Table.from_pydict(columns)
        folder = data / str(i)
        folder.mkdir()
        if fmt == "parquet":
            pq.write_table(table, folder / "part-0.parquet")
        else:
            with pa.ipc.new_file(str(folder / "part-0.arrow"), table.schema) as writer:
                writer.write_table(table)
        (folder / METADATA).write_text(json.dumps(_episode_meta(dataset, i, s, t)))


def _write_hdf5(dataset: Dataset, data: Path, obs_tree: tuple[Space, Any], act_space: Space) -> None:
    import h5py

    def put(group: Any, name: str, tree: tuple[Space, Any], rows: slice) -> None:
        space, value = tree
        if not isinstance(value, dict):
            group.create_dataset(name, data=_cast(space, value[rows]))
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
            group.attrs.update(_episode_meta(dataset, i, s, t))
            put(group, "observations", obs_tree, slice(s + i, t + i + 1))
            group.create_dataset("actions", data=_cast(act_space, dataset.actions[s:t]))
            for name in ("rewards", "terminations", "truncations"):
                group.create_dataset(name, data=np.asarray(getattr(dataset, name)[s:t]))
            if dataset.infos:
                put_infos(group.create_group("infos"), _episode_infos(dataset, s, t))


def _write_metadata(dataset: Dataset, dataset_id: str, data_format: str, minari_version: str, obs_space: Space,
                    act_space: Space, minari_meta: dict[str, Any]) -> dict[str, Any]:
    ours = {k: v for k, v in dataset.metadata.items() if k not in ("minari", "dataset_id")}
    meta: dict[str, Any] = {
        "dataset_id": dataset_id, "total_episodes": dataset.num_episodes, "total_steps": dataset.num_steps,
        "data_format": data_format, "jpeg_encoding": False, "minari_version": minari_version,
        "observation_space": json.dumps(_space_json(obs_space)), "action_space": json.dumps(_space_json(act_space)),
    }
    for key in ("env_spec", "eval_env_spec"):
        if isinstance(minari_meta.get(key), str):
            meta[key] = minari_meta[key]
    algorithm = next((ours[k] for k in ("algorithm_name", "algorithm", "policy") if isinstance(ours.get(k), str)), None)
    if algorithm:
        meta["algorithm_name"] = algorithm
    for key in ("author", "author_email"):
        value = ours.get(key)
        if isinstance(value, str):
            meta[key] = [value]
        elif isinstance(value, list | tuple | set) and all(isinstance(v, str) for v in value):
            meta[key] = sorted(value)
    description = ours.get("description")
    if not isinstance(description, str) and isinstance(ours.get("task"), str):
        description = f"robolearn dataset of task {ours['task']!r}"
    if isinstance(description, str):
        meta["description"] = description
    if isinstance(ours.get("code_permalink"), str):
        meta["code_permalink"] = ours["code_permalink"]
    if isinstance(ours.get("requirements"), list):
        meta["requirements"] = [str(r) for r in ours["requirements"]]
    lo, hi = _number(ours.get("ref_min_score")), _number(ours.get("ref_max_score"))
    if lo is not None and hi is not None:
        meta["ref_min_score"], meta["ref_max_score"] = lo, hi
        if isinstance(ours.get("num_episodes_average_score"), int):
            meta["num_episodes_average_score"] = ours["num_episodes_average_score"]
    meta[ROBOLEARN_KEY] = json.loads(json.dumps(jsonable(ours), default=str))
    return meta


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    return float(value) if math.isfinite(float(value)) else None


__all__ = ["DATA_FORMATS", "Space", "dataset_dir", "detect", "parse_space", "read", "write"]
