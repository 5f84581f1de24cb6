"""Reading meta/: info.json (checked), robolearn's sidecar, the episode index (meta/episodes) and the tasks.

Each is checked as it is read, so that a broken dataset fails with the file, the field and the fix before any
frame data is loaded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robolearn.data.dataset import read_json
from robolearn.data.formats.lerobot.columns import column_array
from robolearn.data.formats.lerobot.layout import (
    EPISODES_DIR,
    INFO_PATH,
    SIDECAR_FORMAT,
    SIDECAR_PATH,
    SIDECAR_VERSION,
    TASKS_PATH,
    V21_FIX,
    lerobot_reading,
)
from robolearn.errors import DatasetError

if TYPE_CHECKING:
    import pyarrow as pa


def _read_meta_json(file: Path, what: str) -> Any:
    """A JSON file of meta/; missing means an incomplete dataset."""
    return read_json(file, what, f"{file} is missing: not a complete LeRobot v3 dataset ({what}); re-download or "
                                 "regenerate it", lerobot_reading)


def _check_features(where: Path, features: Any) -> None:
    """Each feature of info.json has a dtype string and a shape of positive sizes; images have three."""
    if not isinstance(features, dict) or not features:
        raise DatasetError(f"{where}: no features; fix meta/info.json")
    for key, spec in features.items():
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if (not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str) or not isinstance(shape, list)
                or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n < 2**31 for n in shape)):
            raise DatasetError(f"{where}: features[{key!r}] needs a dtype string and a shape list of positive "
                               f"integers, got {spec!r:.200}; fix meta/info.json")
        if spec["dtype"] in ("image", "video") and len(shape) != 3:
            raise DatasetError(f"{where}: features[{key!r}] is an {spec['dtype']} of shape {shape}; images are "
                               "[height, width, channels] (or channels first); fix meta/info.json")


def read_info(root: Path) -> dict[str, Any]:
    """meta/info.json, checked: a v3 codebase_version (v1/v2 refused with the conversion command), a positive
    fps, well-formed features and path templates."""
    where = root / INFO_PATH
    info = _read_meta_json(where, "the dataset's schema")
    if not isinstance(info, dict):
        raise DatasetError(f"{where} is not a JSON object; regenerate the dataset")
    version = info.get("codebase_version")
    if not isinstance(version, str):
        raise DatasetError(f"{where} has no codebase_version; not a LeRobot dataset")
    if version.startswith(("v1", "v2")):
        raise DatasetError(f"{root} is a LeRobot {version} dataset; this reader takes v3.0: "
                           + V21_FIX.format(path=root))
    if not version.startswith("v3"):
        raise DatasetError(f"{where}: codebase_version {version!r} is not v3.x; this reader takes LeRobot v3.0")
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps) or fps <= 0:
        raise DatasetError(f"{where}: fps {fps!r} is not a positive number; fix meta/info.json")
    _check_features(where, info.get("features"))
    for name in ("data_path", "video_path"):
        if info.get(name) is not None and not isinstance(info[name], str):
            raise DatasetError(f"{where}: {name} is not a path template; fix meta/info.json")
    return info


def load_sidecar(root: Path, features: Mapping[str, Any]) -> dict[str, Any] | None:
    """meta/robolearn.json (group and info names, metadata), checked against ``features``; None if absent."""
    file = root / SIDECAR_PATH
    if not file.exists():
        return None
    sidecar = _read_meta_json(file, "robolearn's group names and metadata")
    fix = f"delete {file} to read the folder as plain LeRobot data"
    if not isinstance(sidecar, dict) or sidecar.get("format") != SIDECAR_FORMAT:
        raise DatasetError(f"{file} is not robolearn's LeRobot sidecar; {fix}")
    if not isinstance(sidecar.get("version"), int) or sidecar["version"] > SIDECAR_VERSION:
        raise DatasetError(f"{file} has version {sidecar.get('version')!r}; upgrade robolearn or {fix}")
    for name in ("groups", "infos"):
        mapping = sidecar.get(name)
        if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in mapping.items()):
            raise DatasetError(f"{file}: {name} is not a name -> feature map; {fix}")
        unknown = sorted(v for v in mapping.values() if v not in features)
        if unknown:
            raise DatasetError(f"{file}: {name} names features {unknown} that meta/info.json lacks; {fix}")
    if not isinstance(sidecar.get("metadata"), dict):
        raise DatasetError(f"{file}: metadata is not an object; {fix}")
    return sidecar


@dataclass
class EpisodeIndex:
    """meta/episodes: the index columns sorted by episode_index, the other columns as read (file row order)."""

    where: Path  # the episodes file (or folder, when there are several) for error messages
    index: np.ndarray  # episode_index, sorted
    length: np.ndarray
    data_chunk: np.ndarray
    data_file: np.ndarray
    order: np.ndarray  # row of each sorted episode in ``columns``
    columns: dict[str, pa.ChunkedArray]

    def numbers(self, key: str, shape: Sequence[int] = (1,)) -> np.ndarray:
        """Column ``key`` as an array [E, *shape] in episode order."""
        with lerobot_reading(self.where, f"episodes column {key!r}"):
            values = column_array(self.columns[key], len(self.order), shape, self.where, key)
        return values[self.order]

    def objects(self, key: str) -> list[Any]:
        """Column ``key`` as Python objects in episode order (PNG bytes, task lists)."""
        with lerobot_reading(self.where, f"episodes column {key!r}"):
            values = self.columns[key].to_pylist()
        return [values[i] for i in self.order]


_INDEX_COLUMNS = ("episode_index", "length", "data/chunk_index", "data/file_index")


def _episode_tables(root: Path, wanted: Sequence[str]) -> tuple[Path, list[pa.Table]]:
    """Every meta/episodes parquet file's ``wanted`` columns (those it has), and the place to name in errors."""
    import pyarrow.parquet as pq

    files = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise DatasetError(f"{root / EPISODES_DIR} has no parquet files: the episode index is missing; re-download "
                           "or regenerate the dataset")
    tables = []
    for file in files:
        with lerobot_reading(file, "the episodes metadata"):
            names = set(pq.read_schema(file).names)
            missing = [k for k in _INDEX_COLUMNS if k not in names]
            if missing:
                raise DatasetError(f"{file}: no {missing} columns; regenerate meta/episodes")
            tables.append(pq.read_table(file, columns=[k for k in wanted if k in names]))
    return (files[0] if len(files) == 1 else root / EPISODES_DIR), tables


def read_episode_index(root: Path, wanted: Sequence[str]) -> EpisodeIndex:
    """meta/episodes/*/*.parquet (all files, as LeRobot's ``load_episodes``), the columns ``wanted`` that exist."""
    import pyarrow as pa

    where, tables = _episode_tables(root, wanted)
    columns: dict[str, pa.ChunkedArray] = {}
    for key in set.intersection(*(set(t.column_names) for t in tables)):
        with lerobot_reading(where, f"episodes column {key!r}"):
            columns[key] = pa.chunked_array([t.column(key).combine_chunks() for t in tables])
    rows = sum(t.num_rows for t in tables)
    ints = {}
    for key in _INDEX_COLUMNS:
        with lerobot_reading(where, f"episodes column {key!r}"):
            values = column_array(columns[key], rows, (1,), where, key)[:, 0]
        if values.dtype.kind not in "iu":
            raise DatasetError(f"{where}: episodes column {key!r} is not integer; regenerate meta/episodes")
        ints[key] = values.astype(np.int64)
    order = np.argsort(ints["episode_index"], kind="stable")
    episodes = EpisodeIndex(where, *(ints[k][order] for k in _INDEX_COLUMNS), order, columns)
    if len(np.unique(episodes.index)) != rows:
        raise DatasetError(f"{where}: episode_index repeats; regenerate meta/episodes")
    if (episodes.length < 1).any():
        bad = int(episodes.index[np.argmin(episodes.length)])
        raise DatasetError(f"{where}: episode {bad} has length < 1; drop it or regenerate meta/episodes")
    if "dataset_from_index" in columns and "dataset_to_index" in columns:
        span = episodes.numbers("dataset_to_index")[:, 0] - episodes.numbers("dataset_from_index")[:, 0]
        if (span != episodes.length).any():
            bad = int(episodes.index[np.argmax(span != episodes.length)])
            raise DatasetError(f"{where}: episode {bad} spans dataset_from_index..dataset_to_index of a different "
                               "length than its length column; regenerate meta/episodes")
    return episodes


def read_tasks(root: Path, info: Mapping[str, Any], episodes: EpisodeIndex) -> list[str]:
    """The dataset's task strings (meta/tasks.parquet, by task_index), else the episodes' ``tasks`` lists."""
    import pyarrow.parquet as pq

    file = root / TASKS_PATH
    if file.is_file():
        with lerobot_reading(file, "the task list"):
            table = pq.read_table(file)
            text = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
            if text is None or "task_index" not in table.column_names:
                raise DatasetError(f"{file}: no task / task_index columns; regenerate meta/tasks.parquet")
            index = column_array(table.column("task_index"), table.num_rows, (1,), file, "task_index")[:, 0]
            strings = [str(t) for t in table.column(text).to_pylist()]
            return [strings[i] for i in np.argsort(index, kind="stable")]
    if isinstance(info.get("total_tasks"), int) and info["total_tasks"] > 0:
        raise DatasetError(f"{file} is missing (info.json counts {info['total_tasks']} tasks); re-download the dataset")
    if "tasks" in episodes.columns:
        return sorted({str(t) for tasks in episodes.objects("tasks") for t in (tasks or [])})
    return []
