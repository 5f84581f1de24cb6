"""Minari's arrow and parquet storage (``data_format`` "arrow" / "parquet"), read and written with pyarrow.

One folder ``data/<i>/`` per episode: ``part-0.arrow`` (or ``.parquet``), a table of T+1 rows (observations
T+1 real rows, the step columns T real rows and one zero row of padding, optional ``infos``), and the episode's
``metadata.json``. A Box leaf is a fixed-size list column of its flattened shape, a Discrete leaf a plain
integer column, a Dict / Tuple a struct column; nested info dicts are struct fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import DEFAULT_GROUP, Dataset, reading
from robolearn.data.formats.minari.episode import decode_jpegs, episode_infos, episode_meta
from robolearn.data.formats.minari.layout import METADATA, STEP_FIELDS
from robolearn.data.formats.minari.spaces import Space, cast
from robolearn.errors import DatasetError

# --- reading -------------------------------------------------------------------------------------------------


def read_arrow(data: Path, fmt: str, total: int, obs_space: Space, act_space: Space,
               jpeg: bool) -> Iterator[dict[str, Any]]:
    """The ``total`` episodes under ``data`` as `Dataset.from_episodes` dicts (infos still raw: the
    reader fits them to one row per step); ``jpeg``: image spaces hold JPEG bytes."""
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
    missing = [c for c in ("observations", "actions", *STEP_FIELDS) if c not in table.column_names]
    if missing:
        raise DatasetError(f"{file} has no column {missing[0]!r}; the file is not a Minari episode")
    if table.num_rows < 1:
        raise DatasetError(f"{file} has no rows; drop the episode or regenerate the dataset")
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    t = table.num_rows - 1  # T+1 rows: the step columns carry one row of padding
    episode = {"observations": _arrow_space(columns["observations"], obs_space, file, jpeg),
               "actions": _arrow_leaf(columns["actions"], act_space, file, "actions", jpeg)[:t]}
    for name in STEP_FIELDS:
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
    """Whether an arrow array is a struct (a Dict / Tuple level, or a dict of infos)."""
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
        return decode_jpegs(array.to_pylist(), space, file, field)
    if space is not None and space.kind != "Discrete":
        size = math.prod(space.shape)
        if not pa.types.is_fixed_size_list(array.type) or array.type.list_size != size:
            raise DatasetError(f"{file}: {field} is {array.type}, its space {space.kind}{list(space.shape)} needs "
                               f"fixed-size lists of {size}; the file does not match metadata.json")
        values = array.flatten()
        return _numeric(values, file, field).reshape(len(array), *space.shape)
    return _numeric(array, file, field)


def _numeric(array: Any, file: Path, field: str) -> np.ndarray:
    """A flat arrow array of numbers or booleans as numpy; a DatasetError naming ``field`` otherwise."""
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


# --- writing -------------------------------------------------------------------------------------------------


def _leaf_array(space: Space, value: np.ndarray, pad: int) -> Any:
    """A leaf's rows in its space's dtype, ``pad`` zero rows appended: a plain column (Discrete) or fixed-size
    lists of the flattened shape."""
    import pyarrow as pa

    value = cast(space, value)
    value = np.concatenate([value, np.zeros((pad, *value.shape[1:]), value.dtype)]) if pad else value
    if space.kind == "Discrete":
        return pa.array(value)
    flat = value.reshape(len(value), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), list_size=flat.shape[1])


def _struct_array(tree: tuple[Space, Any], rows: slice) -> Any:
    """The observation column of ``rows``: a struct per Dict / Tuple level of ``tree`` (the writer's ``_tree``)."""
    import pyarrow as pa

    space, value = tree
    if isinstance(value, dict):
        return pa.StructArray.from_arrays([_struct_array(v, rows) for v in value.values()], names=list(value))
    return _leaf_array(space, value[rows], 0)


def _info_struct(tree: dict[str, Any]) -> Any:
    """The infos column: a struct of the nested infos, multi-dimensional ones as fixed-size lists whose field
    metadata keeps the shape."""
    import pyarrow as pa

    arrays, fields = [], []
    for key, value in tree.items():
        if isinstance(value, dict):
            array = _info_struct(value)
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


def write_arrow(dataset: Dataset, data: Path, fmt: str, obs_tree: tuple[Space, Any], act_space: Space) -> None:
    """Every episode of ``dataset`` as ``data/<i>/part-0.<fmt>`` and its ``metadata.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(dataset.num_episodes):
        s, t = int(dataset.step_starts[i]), int(dataset.step_starts[i + 1])
        obs_rows = slice(s + i, t + i + 1)
        columns = {"observations": _struct_array(obs_tree, obs_rows),
                   "actions": _leaf_array(act_space, dataset.actions[s:t], 1)}
        for name in STEP_FIELDS:
            value = np.asarray(getattr(dataset, name)[s:t])
            columns[name] = pa.array(np.concatenate([value, np.zeros(1, value.dtype)]))
        if dataset.infos:
            columns["infos"] = _info_struct(episode_infos(dataset, s, t))
        table = pa.Table.from_pydict(columns)
        folder = data / str(i)
        folder.mkdir()
        if fmt == "parquet":
            pq.write_table(table, folder / "part-0.parquet")
        else:
            with pa.ipc.new_file(str(folder / "part-0.arrow"), table.schema) as writer:
                writer.write_table(table)
        (folder / METADATA).write_text(json.dumps(episode_meta(dataset, i, s, t)))
