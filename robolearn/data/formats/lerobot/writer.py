"""`write`: a `Dataset` as a LeRobot v3.0 dataset folder.

Steps, in the order LeRobot's own recorder leaves its files: the frame parquet files (data/), each camera's
mp4 files (videos/), the stats (meta/stats.json and the episodes' stats columns), meta/episodes, meta/tasks,
meta/info.json and robolearn's sidecar. Every step appends to one row per episode (``rows``), which becomes
meta/episodes at the end.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset, jsonable, staged_folder
from robolearn.data.formats.lerobot.columns import array_column, encode_png, hf_feature, png_column
from robolearn.data.formats.lerobot.features import Feature, plan_features
from robolearn.data.formats.lerobot.layout import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    CODECS,
    DATA_FILES_SIZE_IN_MB,
    DATA_PATH,
    DEFAULT_FEATURES,
    EPISODES_PATH,
    EPISODES_PER_ROW_GROUP,
    FINAL_PREFIX,
    INFO_PATH,
    SIDECAR_FORMAT,
    SIDECAR_PATH,
    SIDECAR_VERSION,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_ENCODER,
    VIDEO_FILES_SIZE_IN_MB,
    VIDEO_PATH,
)
from robolearn.data.formats.lerobot.stats import array_stats, image_stats
from robolearn.data.formats.lerobot.video import VideoEncoder, video_feature_info
from robolearn.errors import DatasetError

#: meta/episodes rows, one per episode, filled in by each writing step
Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class _Settings:
    """What `write` resolved from its arguments and the dataset's metadata."""

    fps: int
    task: str
    video: bool
    encoder: dict[str, Any]
    chunks_size: int
    data_mb: float
    video_mb: float
    robot_type: str | None


def write(dataset: Dataset, path: Path, fps: float | None = None, task: str | None = None, video: bool = True,
          video_encoder: Mapping[str, Any] | None = None, robot_type: str | None = None,
          chunks_size: int = CHUNKS_SIZE, data_files_size_in_mb: float = DATA_FILES_SIZE_IN_MB,
          video_files_size_in_mb: float = VIDEO_FILES_SIZE_IN_MB, **_: Any) -> Path:
    """Write ``dataset`` as a LeRobot v3.0 dataset folder at ``path`` (never over an existing one).

    ``fps``: the control rate (an integer, as LeRobot stores it; default the metadata's ``fps`` /
    ``control_rate`` / ``env.policy_dt``). ``task``: the natural-language task of every episode (default the
    metadata's ``task``). ``video``: RGB groups as mp4 (LeRobot's default, lossy) or, if False, PNG images in the
    parquet (lossless). ``video_encoder`` overrides LeRobot's encoder settings (``vcodec`` libsvtav1 / h264 /
    hevc / libaom-av1, ``pix_fmt``, ``g``, ``crf``, ``preset``, ``fast_decode``). Written to a temporary sibling
    and renamed at the end: a crash leaves no half dataset behind.
    """
    import pyarrow as pa  # noqa: F401  (fail early and clearly when pyarrow is missing)

    path = Path(path)
    if path.exists():
        raise DatasetError(f"{path} exists already; datasets are never overwritten")
    rate = _resolve_fps(dataset, fps)
    task = str(task if task is not None else dataset.metadata.get("task") or "robolearn dataset")
    encoder = {**VIDEO_ENCODER, **dict(video_encoder or {})}
    if encoder["vcodec"] not in CODECS:
        raise DatasetError(f"video_encoder vcodec {encoder['vcodec']!r} is not one LeRobot decodes; use one of "
                           f"{sorted(CODECS)}")
    if min(chunks_size, data_files_size_in_mb, video_files_size_in_mb) <= 0:
        raise DatasetError("chunks_size, data_files_size_in_mb and video_files_size_in_mb must be positive")
    features, groups, infos = plan_features(dataset, video)
    settings = _Settings(rate, task, video, encoder, chunks_size, data_files_size_in_mb, video_files_size_in_mb,
                         robot_type if robot_type is not None else dataset.metadata.get("robot_type"))
    with staged_folder(path) as tmp:
        _write(dataset, tmp, features, settings)
        sidecar = {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "groups": groups, "infos": infos,
                   "metadata": jsonable(dataset.metadata)}
        (tmp / SIDECAR_PATH).write_text(json.dumps(sidecar, indent=4, ensure_ascii=False))
    return path


def _resolve_fps(dataset: Dataset, fps: float | None) -> int:
    """The integer frame rate to store: ``fps``, else the metadata's control rate; a DatasetError if none is an
    integer (LeRobot's timestamps are frame_index / fps)."""
    given = fps is not None
    if fps is None:
        meta = dataset.metadata
        env = meta.get("env") if isinstance(meta.get("env"), Mapping) else {}
        dt = env.get("policy_dt") or meta.get("policy_dt") or meta.get("dt")
        fps = meta.get("fps") or meta.get("control_rate") or (1.0 / float(dt) if dt else None)
    if fps is None:
        raise DatasetError(f"{dataset.source}: no frame rate in the metadata (fps, control_rate, env.policy_dt); "
                           "give write(..., fps=<control rate in Hz>)")
    try:
        value = float(fps)
    except (TypeError, ValueError):
        raise DatasetError(f"{dataset.source}: fps {fps!r} is not a number") from None
    if not math.isfinite(value) or value <= 0 or abs(value - round(value)) > 1e-6 * max(1.0, value):
        where = "fps=" if given else "the metadata's control rate "
        raise DatasetError(f"{dataset.source}: {where}{fps!r} is not a positive integer; LeRobot v3 stores an "
                           "integer fps (timestamps are frame_index / fps): give write(..., fps=<integer Hz>)")
    return int(round(value))


def _write(data: Dataset, root: Path, features: list[Feature], settings: _Settings) -> None:
    """Every file but the sidecar, into ``root``."""
    rows: Rows = [{"episode_index": ep, "tasks": [settings.task], "length": int(data.lengths[ep])}
                  for ep in range(data.num_episodes)]
    _write_data_files(data, root, [f for f in features if f.kind != "video"], settings, rows)
    # videos/<key>/: each camera's frames back to back, a new file when this one reaches video_mb
    video_info = {f.key: _write_video_feature(data, root, f, settings, rows) for f in features if f.kind == "video"}
    stats = _stats(data, features, settings.fps, rows)
    _fill_episode_rows(data, features, rows)
    _write_episodes(root, rows)
    _write_tasks(root, [settings.task])
    _write_info(data, root, features, video_info, settings)
    (root / STATS_PATH).write_text(json.dumps({k: {n: v.tolist() for n, v in s.items()} for k, s in stats.items()},
                                              indent=4, ensure_ascii=False))


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """LeRobot's ``update_chunk_file_indices``."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def _frame_table(data: Dataset, ep: int, parquet_feats: list[Feature], fps: int, hf_meta: bytes) -> Any:
    """Episode ``ep``'s frames as one arrow table: its features' columns and LeRobot's default columns."""
    import pyarrow as pa

    s, t = int(data.step_starts[ep]), int(data.step_starts[ep + 1])
    cols: dict[str, pa.Array] = {}
    for f in parquet_feats:
        values = f.episode(data, ep)
        cols[f.key] = png_column(values) if f.kind == "image" else array_column(values, f.shape)
    frame_index = np.arange(t - s, dtype=np.int64)
    cols["timestamp"] = pa.array((frame_index / fps).astype(np.float32))
    cols["frame_index"] = pa.array(frame_index)
    cols["episode_index"] = pa.array(np.full(t - s, ep, dtype=np.int64))
    cols["index"] = pa.array(np.arange(s, t, dtype=np.int64))
    cols["task_index"] = pa.array(np.zeros(t - s, dtype=np.int64))
    return pa.table(cols).replace_schema_metadata({b"huggingface": hf_meta})


def _write_data_files(data: Dataset, root: Path, parquet_feats: list[Feature], settings: _Settings,
                      rows: Rows) -> None:
    """data/: one row group per episode, a new file when this one reaches ``data_mb``; fills the episodes'
    data/* and dataset_*_index columns."""
    import pyarrow.parquet as pq

    hf_meta = json.dumps({"info": {"features": {
        **{f.key: hf_feature(f.kind, f.dtype, f.shape) for f in parquet_feats},
        **{k: hf_feature("array", dtype, (1,)) for k, dtype in DEFAULT_FEATURES.items()}}}}).encode()
    writer: pq.ParquetWriter | None = None
    chunk, file, file_bytes = 0, 0, 0
    try:
        for ep in range(data.num_episodes):
            table = _frame_table(data, ep, parquet_feats, settings.fps, hf_meta)
            if writer is not None and file_bytes + table.nbytes >= settings.data_mb * 2**20:
                writer.close()
                writer = None
                chunk, file = _next_file(chunk, file, settings.chunks_size)
            if writer is None:
                target = root / DATA_PATH.format(chunk_index=chunk, file_index=file)
                target.parent.mkdir(parents=True, exist_ok=True)
                writer = pq.ParquetWriter(target, table.schema, compression="snappy", use_dictionary=True)
                file_bytes = 0
            writer.write_table(table)
            file_bytes += table.nbytes
            rows[ep].update({"data/chunk_index": chunk, "data/file_index": file,
                             "dataset_from_index": int(data.step_starts[ep]),
                             "dataset_to_index": int(data.step_starts[ep + 1])})
    finally:
        if writer is not None:
            writer.close()


def _file_size_mb(path: Path) -> float:
    """The size of ``path`` in MiB (0 while ffmpeg has not created it yet)."""
    try:
        return path.stat().st_size / 2**20
    except OSError:
        return 0.0


def _video_file_full(path: Path, video_mb: float) -> bool:
    """Whether the mp4 being written has reached ``video_mb``. The size is looked up on the package as
    ``lerobot._file_size_mb`` (this module's `_file_size_mb` unless replaced there), the name it had when the
    format was one module, so that a test can make every file count as full by patching that one name."""
    file_size_mb = getattr(sys.modules[__package__], "_file_size_mb", _file_size_mb)
    return file_size_mb(path) >= video_mb


def _write_video_feature(data: Dataset, root: Path, f: Feature, settings: _Settings, rows: Rows) -> dict[str, Any]:
    """Encode one camera's frames, episodes back to back; fill the episodes' videos/<key>/* columns."""
    h, w, _ = f.shape
    fps = settings.fps
    chunk, file, frames_in_file = 0, 0, 0
    current: VideoEncoder | None = None
    target = root
    try:
        for ep in range(data.num_episodes):
            frames = f.episode(data, ep)  # T frames; o_T goes to the episodes metadata
            if current is not None and frames_in_file and _video_file_full(target, settings.video_mb):
                current.close()
                current = None
                chunk, file = _next_file(chunk, file, settings.chunks_size)
            if current is None:
                target = root / VIDEO_PATH.format(video_key=f.key, chunk_index=chunk, file_index=file)
                current = VideoEncoder(target, h, w, fps, settings.encoder)
                frames_in_file = 0
            start = frames_in_file
            current.write(frames)
            frames_in_file += len(frames)
            rows[ep].update({f"videos/{f.key}/chunk_index": chunk, f"videos/{f.key}/file_index": file,
                             f"videos/{f.key}/from_timestamp": start / fps,
                             f"videos/{f.key}/to_timestamp": frames_in_file / fps})
    finally:
        if current is not None:
            current.close()
    return video_feature_info(f.shape, fps, settings.encoder)


def _stats(data: Dataset, features: list[Feature], fps: int, rows: Rows) -> dict[str, dict[str, np.ndarray]]:
    """meta/stats.json's content: exact over all frames (images: LeRobot's per-episode frame sample); each
    episode's own stats go into its row as ``stats/<key>/<stat>``."""
    e_total = data.num_episodes
    default_values = {"timestamp": np.concatenate([np.arange(n) / fps for n in data.lengths]).astype(np.float32),
                      "frame_index": np.concatenate([np.arange(n) for n in data.lengths]),
                      "episode_index": np.repeat(np.arange(e_total), data.lengths),
                      "index": np.arange(data.num_steps), "task_index": np.zeros(data.num_steps, np.int64)}
    stats: dict[str, dict[str, np.ndarray]] = {}
    episode_stats: list[dict[str, dict[str, np.ndarray]]] = [{} for _ in range(e_total)]
    for f in features:
        if f.kind == "array":
            stats[f.key] = array_stats(f.frames(data), data.step_starts, episode_stats, f.key)
        else:
            stats[f.key] = image_stats(data, f, episode_stats)
    for key, values in default_values.items():
        stats[key] = array_stats(values, data.step_starts, episode_stats, key)
    for ep in range(e_total):
        for key, feature_stats in episode_stats[ep].items():
            for name, value in feature_stats.items():
                rows[ep][f"stats/{key}/{name}"] = value.tolist()
    return stats


def _fill_episode_rows(data: Dataset, features: list[Feature], rows: Rows) -> None:
    """The rest of each episode's row: where its metadata lives, and its final observation o_T (which no frame
    holds: a vector, or PNG bytes for an image) as ``final/<key>``."""
    for ep in range(data.num_episodes):
        rows[ep]["meta/episodes/chunk_index"] = 0
        rows[ep]["meta/episodes/file_index"] = 0
        for f in features:
            if f.per_obs:
                final = f.values[int(data.step_starts[ep + 1]) + ep]
                rows[ep][FINAL_PREFIX + f.key] = encode_png(final) if f.kind != "array" else final.tolist()


def _write_episodes(root: Path, rows: Rows) -> None:
    """meta/episodes/chunk-000/file-000.parquet, in row groups of LeRobot's size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    episodes = pa.Table.from_pylist(rows)
    target = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    target.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(target, episodes.schema, compression="snappy", use_dictionary=True) as ep_writer:
        for start in range(0, len(rows), EPISODES_PER_ROW_GROUP):
            ep_writer.write_table(episodes.slice(start, EPISODES_PER_ROW_GROUP))


def _write_tasks(root: Path, tasks: list[str]) -> None:
    """``meta/tasks.parquet`` as pandas writes LeRobot's DataFrame(task_index, index=Index(tasks, name="task"))."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {"index_columns": ["task"], "column_indexes": [
        {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
         "metadata": {"encoding": "UTF-8"}}], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None}],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.3.3"}
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    pq.write_table(table, root / TASKS_PATH)


def _write_info(data: Dataset, root: Path, features: list[Feature], video_info: dict[str, dict[str, Any]],
                settings: _Settings) -> None:
    """meta/info.json: the schema (features with their video info), counts, sizes and path templates."""
    spec: dict[str, Any] = {}
    for f in features:
        spec[f.key] = f.spec()
        if f.kind == "video":
            spec[f.key]["info"] = {**video_info[f.key], "is_depth_map": False}
    spec.update({k: {"dtype": dtype, "shape": [1], "names": None} for k, dtype in DEFAULT_FEATURES.items()})
    e_total = data.num_episodes
    info = {"codebase_version": CODEBASE_VERSION, "fps": settings.fps, "features": spec, "total_episodes": e_total,
            "total_frames": data.num_steps, "total_tasks": 1, "chunks_size": settings.chunks_size,
            "data_files_size_in_mb": settings.data_mb, "video_files_size_in_mb": settings.video_mb,
            "data_path": DATA_PATH, "video_path": VIDEO_PATH if settings.video else None,
            "robot_type": settings.robot_type, "splits": {"train": f"0:{e_total}"}}
    (root / INFO_PATH).write_text(json.dumps(info, indent=4, ensure_ascii=False))
