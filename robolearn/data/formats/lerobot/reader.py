"""`read`: a LeRobot v3 dataset folder as a `Dataset` (the mapping is in the package docstring).

Steps: meta/info.json and the sidecar (`meta`), the schema (which features are observations, images, videos),
the episode index, the frame data of every parquet file the index points at, sorted into (episode, frame) order
and checked, then each part of the `Dataset`: observations (with the final observation of each episode),
actions, rewards, episode ends, infos and metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset
from robolearn.data.formats.lerobot.columns import column_array, decode_png, image_hwc
from robolearn.data.formats.lerobot.features import group_names, info_names
from robolearn.data.formats.lerobot.layout import (
    ACTION,
    DATA_PATH,
    DONE,
    FINAL_PREFIX,
    INFO_PATH,
    OBS_PREFIX,
    REWARD,
    TRUNCATED,
    lerobot_reading,
)
from robolearn.data.formats.lerobot.meta import EpisodeIndex, load_sidecar, read_episode_index, read_info, read_tasks
from robolearn.data.formats.lerobot.video import decode_video
from robolearn.errors import DatasetError


def read(path: Path, rewards: str = "error", ends: str = "truncation", exclude: Sequence[str] = (),
         **_: Any) -> Dataset:
    """A LeRobot v3 dataset folder as a `Dataset` (see the package docstring for the mapping).

    ``rewards``: "error" (default) raises a DatasetError when there is no ``next.reward``; "zeros" reads such
    a (demonstration) dataset with zero rewards. ``ends``: how an episode ends when the data has no
    ``next.done`` ("truncation", a time-out, or "termination"). ``exclude``: feature keys not to read (e.g. a
    depth camera).
    """
    root = Path(path)
    if rewards not in ("error", "zeros"):
        raise DatasetError(f"rewards={rewards!r}: use 'error' or 'zeros'")
    if ends not in ("truncation", "termination"):
        raise DatasetError(f"ends={ends!r}: use 'truncation' or 'termination'")
    if not root.is_dir():
        raise DatasetError(f"{root} is not a folder; a LeRobot v3 dataset is a folder with meta/info.json")
    info = read_info(root)
    sidecar = load_sidecar(root, info["features"])
    schema = _schema(root, info, exclude)
    episodes = _read_episodes(root, info, schema)
    frames = _sort_frames(episodes, *_read_data_files(root, info, schema, episodes))
    observations, repeated = _observations(root, info, schema, episodes, frames, sidecar)
    actions = frames.finite(ACTION).reshape(frames.n_total, -1).astype(np.float32)
    reward = _rewards(root, schema, frames, rewards)
    terminations, truncations = _ends(frames.column, schema.numeric, frames.step_starts, ends, frames.where)
    infos = _infos(schema, frames, sidecar)
    metadata = _metadata(root, info, schema, episodes, frames, sidecar, infos)
    if repeated:
        metadata["lerobot_final_observation"] = ("repeated last frame: LeRobot stores no final observation "
                                                 f"({', '.join(repeated)})")
    return Dataset(observations, actions, reward, terminations, truncations, episodes.length, infos, metadata,
                   str(root))


@dataclass
class _Schema:
    """The features read (info.json's, less ``exclude``) and what each is for."""

    features: dict[str, dict[str, Any]]
    numeric: set[str]  # per-frame numbers in the parquet files
    videos: list[str]  # mp4 features
    images: list[str]  # PNG features in the parquet files
    obs_keys: list[str]  # observation.* features of any of those kinds

    @property
    def parquet_keys(self) -> list[str]:
        """The columns to read from the data files."""
        return [k for k in self.features if (k in self.numeric or k in self.images)]


def _schema(root: Path, info: Mapping[str, Any], exclude: Sequence[str]) -> _Schema:
    """The `_Schema` of ``info``; a DatasetError for depth videos and missing action or default columns."""
    features: dict[str, dict[str, Any]] = {k: v for k, v in info["features"].items() if k not in set(exclude)}
    depth = [k for k, v in features.items() if v["dtype"] == "video" and isinstance(v.get("info"), dict)
             and (v["info"].get("is_depth_map") or v["info"].get("video.is_depth_map"))]
    if depth:
        raise DatasetError(f"{root}: depth videos {depth} are not supported; read(..., exclude={depth})")
    numeric = {k for k, v in features.items() if v["dtype"] not in ("video", "image", "string", "language")}
    videos = [k for k, v in features.items() if v["dtype"] == "video"]
    images = [k for k, v in features.items() if v["dtype"] == "image"]
    obs_keys = [k for k in features if k.startswith(OBS_PREFIX) and (k in numeric or k in videos or k in images)]
    if ACTION not in numeric:
        raise DatasetError(f"{root / INFO_PATH}: no numeric 'action' feature; robolearn datasets need actions")
    for key in ("episode_index", "frame_index") + (("timestamp",) if videos else ()):
        if key not in numeric:
            raise DatasetError(f"{root / INFO_PATH}: no {key!r} feature (one of LeRobot's default columns); fix "
                               "meta/info.json or regenerate the dataset")
    return _Schema(features, numeric, videos, images, obs_keys)


def _read_episodes(root: Path, info: Mapping[str, Any], schema: _Schema) -> EpisodeIndex:
    """The episode index with the columns this read needs, checked against info.json's totals."""
    video_cols = [f"videos/{k}/{n}" for k in schema.videos for n in ("chunk_index", "file_index", "from_timestamp")]
    episodes = read_episode_index(root, ["episode_index", "length", "data/chunk_index", "data/file_index", "tasks",
                                         "dataset_from_index", "dataset_to_index", *video_cols,
                                         *(FINAL_PREFIX + k for k in schema.obs_keys)])
    for name, value in (("total_episodes", len(episodes.index)), ("total_frames", int(episodes.length.sum()))):
        if isinstance(info.get(name), int) and info[name] != value:
            raise DatasetError(f"{root / INFO_PATH}: {name} is {info[name]}, meta/episodes holds {value}; the dataset "
                               "is incomplete or its info.json stale: re-download or fix it")
    return episodes


def _read_data_files(root: Path, info: Mapping[str, Any], schema: _Schema,
                     episodes: EpisodeIndex) -> tuple[dict[str, np.ndarray], np.ndarray, list[Path]]:
    """data/: every file the episodes point at, only the columns used. Returns each column over all files' rows
    (file order), the file number of each row and the files."""
    import pyarrow.parquet as pq

    template = info.get("data_path") or DATA_PATH
    files = sorted({(int(c), int(f)) for c, f in zip(episodes.data_chunk, episodes.data_file, strict=True)})
    parquet_keys = schema.parquet_keys
    per_key: dict[str, list[np.ndarray]] = {k: [] for k in parquet_keys}
    file_of_row: list[np.ndarray] = []
    data_files: list[Path] = []
    for number, (chunk, file_index) in enumerate(files):
        with lerobot_reading(root / INFO_PATH, "data_path"):
            file = root / template.format(chunk_index=chunk, file_index=file_index)
        data_files.append(file)
        if not file.is_file():
            raise DatasetError(f"{file} is missing (meta/episodes points at it); re-download the dataset")
        with lerobot_reading(file, "frame data"):
            names = set(pq.read_schema(file).names)
            missing = [k for k in parquet_keys if k not in names]
            if missing:
                raise DatasetError(f"{file}: no columns {missing}, which meta/info.json declares; fix info.json or "
                                   "regenerate the data")
            table = pq.read_table(file, columns=parquet_keys)
            for key in parquet_keys:
                per_key[key].append(_table_column(table, key, schema, file))
            file_of_row.append(np.full(table.num_rows, number))
    return {k: np.concatenate(v) for k, v in per_key.items()}, np.concatenate(file_of_row), data_files


def _table_column(table: Any, key: str, schema: _Schema, file: Path) -> np.ndarray:
    """One column of a data file: PNG bytes (objects) for an image feature, else numbers [rows, *shape]."""
    if key in schema.images:
        column = table.column(key).combine_chunks()
        if column.type.num_fields == 0 or column.type.get_field_index("bytes") < 0:
            raise DatasetError(f"{file}: image column {key!r} is not struct<bytes, path>; regenerate it")
        return np.asarray(column.field("bytes").to_pylist(), dtype=object)
    return column_array(table.column(key), table.num_rows, schema.features[key]["shape"], file, key)


@dataclass
class _Frames:
    """The frame data of the episodes meta/episodes lists, sorted into (episode, frame) order by ``order``."""

    arrays: dict[str, np.ndarray]  # each column, rows in file order
    row_file: np.ndarray  # file number of each row
    files: list[Path]
    episode: np.ndarray  # episode_index of each row
    frame: np.ndarray  # frame_index of each row
    order: np.ndarray  # the rows in (episode, frame) order, only the listed episodes
    step_starts: np.ndarray  # [E+1] the first frame of each episode in that order

    @property
    def n_total(self) -> int:
        """N, the number of frames (steps)."""
        return int(self.step_starts[-1])

    def column(self, key: str) -> np.ndarray:
        """Column ``key`` in (episode, frame) order."""
        return self.arrays[key][self.order]

    def file_of(self, row: int) -> Path:
        """The data file of sorted frame ``row``."""
        return self.files[self.row_file[self.order[row]]]

    def where(self, row: int) -> tuple[Path, int]:
        """(data file, episode) of sorted frame ``row``, for error messages."""
        return self.file_of(row), int(self.episode[self.order[row]])

    def finite(self, key: str) -> np.ndarray:
        """`column`, with a DatasetError naming the file, episode and frame of a NaN or inf."""
        values = self.column(key)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            bad = int(self.order[np.argmax(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))])
            raise DatasetError(f"{self.files[self.row_file[bad]]}: column {key!r} has NaN or inf (episode "
                               f"{int(self.episode[bad])}, frame {int(self.frame[bad])}); clean or drop those frames")
        return values


def _sort_frames(episodes: EpisodeIndex, arrays: dict[str, np.ndarray], row_file: np.ndarray,
                 data_files: list[Path]) -> _Frames:
    """Rows in (episode, frame) order, only the episodes meta/episodes lists; each episode must hold exactly its
    length of frames, numbered 0..length-1."""
    ep_ids, lengths = episodes.index, episodes.length
    ep_col = arrays["episode_index"].reshape(-1).astype(np.int64)
    frame_col = arrays["frame_index"].reshape(-1).astype(np.int64)
    order = np.lexsort((frame_col, ep_col))
    order = order[np.isin(ep_col[order], ep_ids)]
    ep_sorted, frame_sorted = ep_col[order], frame_col[order]
    first = np.searchsorted(ep_sorted, ep_ids, side="left")
    counts = np.searchsorted(ep_sorted, ep_ids, side="right") - first
    if (counts != lengths).any():
        i = int(np.flatnonzero(counts != lengths)[0])
        raise DatasetError(f"{data_files[0].parent.parent}: episode {int(ep_ids[i])} has {int(counts[i])} frames in "
                           f"the data files, meta/episodes says length {int(lengths[i])}; the dataset is incomplete "
                           "or corrupt: re-download or regenerate it")
    step_starts = np.concatenate([[0], np.cumsum(lengths)])
    expected = np.arange(int(lengths.sum())) - np.repeat(step_starts[:-1], lengths)
    if not np.array_equal(frame_sorted, expected):
        row = int(order[np.argmax(frame_sorted != expected)])
        raise DatasetError(f"{data_files[row_file[row]]}: frame_index of episode {int(ep_col[row])} is not "
                           "0..length-1 (frames missing or repeated); regenerate the data")
    return _Frames(arrays, row_file, data_files, ep_col, frame_col, order, step_starts)


def _observations(root: Path, info: Mapping[str, Any], schema: _Schema, episodes: EpisodeIndex, frames: _Frames,
                  sidecar: Mapping[str, Any] | None) -> tuple[dict[str, np.ndarray], list[str]]:
    """Observation groups [N+E, ...]: each episode's T frames and its final observation; also the features whose
    final observation is the last frame repeated (no ``final/<key>`` column: data LeRobot wrote)."""
    n_total, e_total = frames.n_total, len(episodes.index)
    obs_rows = np.arange(n_total) + np.repeat(np.arange(e_total), episodes.length)
    final_rows = frames.step_starts[1:] + np.arange(e_total)
    names = group_names(schema.obs_keys, sidecar)
    observations: dict[str, np.ndarray] = {}
    repeated: list[str] = []
    video_frames = _read_videos(root, info, schema.features, schema.videos, episodes,
                                frames.column("timestamp") if schema.videos else None, float(info["fps"]))
    for key in schema.obs_keys:
        if key in schema.videos:
            values = video_frames[key]
        elif key in schema.images:
            hwc = image_hwc(schema.features[key])
            values = np.stack([decode_png(b, hwc, frames.file_of(i), key) for i, b in enumerate(frames.column(key))])
        else:
            values = frames.finite(key)
        final = _final_observations(key, values, schema, episodes, frames.step_starts)
        if final is None:
            final = values[frames.step_starts[1:] - 1]
            repeated.append(key)
        group = np.empty((n_total + e_total, *values.shape[1:]), dtype=values.dtype)
        group[obs_rows] = values
        group[final_rows] = final
        observations[names[key]] = group
    if not observations:
        raise DatasetError(f"{root / INFO_PATH}: no observation.* features; robolearn datasets need observations")
    return observations, repeated


def _final_observations(key: str, values: np.ndarray, schema: _Schema, episodes: EpisodeIndex,
                        step_starts: np.ndarray) -> np.ndarray | None:
    """Each episode's final observation of feature ``key`` from its ``final/<key>`` column (PNG bytes for images
    and videos, numbers otherwise), or None without that column."""
    final_key = FINAL_PREFIX + key
    if final_key not in episodes.columns:
        return None
    if key in schema.videos or key in schema.images:
        return np.stack([decode_png(b, values.shape[1:], episodes.where, final_key)
                         for b in episodes.objects(final_key)])
    final = episodes.numbers(final_key, values.shape[1:]).astype(values.dtype)
    if final.dtype.kind == "f" and not np.isfinite(final).all():
        raise DatasetError(f"{episodes.where}: {final_key!r} has NaN or inf; regenerate meta/episodes")
    return final


def _rewards(root: Path, schema: _Schema, frames: _Frames, rewards: str) -> np.ndarray:
    """next.reward [N] float32; zeros without it when ``rewards="zeros"``, else a DatasetError."""
    n_total = frames.n_total
    if REWARD in schema.numeric:
        reward = frames.finite(REWARD).reshape(n_total, -1)
        if reward.shape[1] != 1:
            raise DatasetError(f"{root / INFO_PATH}: next.reward has shape {schema.features[REWARD]['shape']}, not [1]")
        return reward[:, 0].astype(np.float32)
    if rewards == "zeros":
        return np.zeros(n_total, np.float32)
    raise DatasetError(f"{root}: no 'next.reward' feature (a LeRobot demonstration dataset records no rewards); "
                       "label rewards first (add a next.reward column), or read(..., rewards='zeros') for "
                       "imitation learning")


def _infos(schema: _Schema, frames: _Frames, sidecar: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Every other numeric per-frame feature as an info [N, ...] ([N] for shape [1])."""
    n_total = frames.n_total
    return {name: frames.column(key).reshape(n_total, *schema.features[key]["shape"])
            if tuple(schema.features[key]["shape"]) != (1,) else frames.column(key).reshape(n_total)
            for key, name in info_names(schema.numeric, schema.obs_keys, sidecar)}


def _metadata(root: Path, info: Mapping[str, Any], schema: _Schema, episodes: EpisodeIndex, frames: _Frames,
              sidecar: Mapping[str, Any] | None, infos: dict[str, np.ndarray]) -> dict[str, Any]:
    """The sidecar's metadata, else LeRobot's task(s), fps and robot type; with several tasks and no sidecar,
    each frame's task_index is added to ``infos``."""
    tasks = read_tasks(root, info, episodes)
    if sidecar is not None:
        return dict(sidecar["metadata"])
    metadata = {"task": tasks[0] if len(tasks) == 1 else tasks, "fps": info["fps"]}
    if info.get("robot_type"):
        metadata["robot_type"] = info["robot_type"]
    if len(tasks) > 1 and "task_index" in schema.numeric:
        infos.setdefault("task_index", frames.column("task_index").reshape(frames.n_total))
    return metadata


def _ends(column: Callable[[str], np.ndarray], numeric: set[str], step_starts: np.ndarray, ends: str,
          where: Callable[[int], tuple[Path, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Terminations and truncations [N] from next.done / next.truncated (see the package docstring)."""
    n = int(step_starts[-1])
    last = step_starts[1:] - 1
    done = column(DONE).reshape(n, -1)[:, 0].astype(bool) if DONE in numeric else None
    trunc = column(TRUNCATED).reshape(n, -1)[:, 0].astype(bool) if TRUNCATED in numeric else None
    for flags, key in ((done, DONE), (trunc, TRUNCATED)):
        if flags is None:
            continue
        inner = flags.copy()
        inner[last] = False
        if inner.any():
            file, ep = where(int(np.argmax(inner)))
            raise DatasetError(f"{file}: {key} is true inside episode {ep}, before its last frame; split the episode "
                               "there, or clear the flag (lerobot_eval's padded last frame?)")
    terminations = np.zeros(n, bool)
    truncations = np.zeros(n, bool)
    if done is None and trunc is None:
        (truncations if ends == "truncation" else terminations)[last] = True
        return terminations, truncations
    cut = trunc[last] if trunc is not None else np.zeros(len(last), bool)
    ended = done[last] if done is not None else cut
    terminal = ended & ~cut if done is not None else np.full(len(last), ends == "termination") & ~cut
    terminations[last] = terminal
    truncations[last] = ~terminal
    return terminations, truncations


def _read_videos(root: Path, info: Mapping[str, Any], features: Mapping[str, Any], videos: Sequence[str],
                 episodes: EpisodeIndex, timestamps: np.ndarray | None, fps: float) -> dict[str, np.ndarray]:
    """Each video feature's frames [N, H, W, C] in (episode, frame) order: LeRobot's lookup, the frame at
    ``from_timestamp`` (the episode's start in its file) + the frame's ``timestamp``."""
    if not videos:
        return {}
    template = info.get("video_path")
    if not template:
        raise DatasetError(f"{root / INFO_PATH}: video features {list(videos)} but no video_path; fix meta/info.json")
    ts = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if not np.isfinite(ts).all():
        raise DatasetError(f"{root}: the timestamp column has NaN or inf; regenerate the data")
    lengths = episodes.length
    episode_of_row = np.repeat(np.arange(len(lengths)), lengths)
    out: dict[str, np.ndarray] = {}
    for key in videos:
        needed = [f"videos/{key}/{n}" for n in ("chunk_index", "file_index", "from_timestamp")]
        missing = [c for c in needed if c not in episodes.columns]
        if missing:
            raise DatasetError(f"{episodes.where}: no {missing} columns for video {key!r}; regenerate meta/episodes")
        chunk, file_index = episodes.numbers(needed[0])[:, 0], episodes.numbers(needed[1])[:, 0]
        start = episodes.numbers(needed[2])[:, 0].astype(np.float64)
        if not np.isfinite(start).all():
            raise DatasetError(f"{episodes.where}: {needed[2]} has NaN or inf; regenerate meta/episodes")
        frame_numbers = np.rint((start[episode_of_row] + ts) * fps).astype(np.int64)
        hwc = image_hwc(features[key])
        frames = np.empty((len(ts), *hwc), dtype=np.uint8)
        for c, f in sorted({(int(c), int(f)) for c, f in zip(chunk, file_index, strict=True)}):
            with lerobot_reading(root / INFO_PATH, "video_path"):
                file = root / template.format(video_key=key, chunk_index=c, file_index=f)
            if not file.is_file():
                raise DatasetError(f"{file} is missing (meta/episodes points at it); re-download the dataset")
            rows = np.flatnonzero(((chunk == c) & (file_index == f))[episode_of_row])
            frames[rows] = decode_video(file, frame_numbers[rows], hwc)
        out[key] = frames
    return out
