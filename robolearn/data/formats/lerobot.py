"""LeRobotDataset v3.0 (huggingface/lerobot) <-> `Dataset`: the layout LeRobot records, read and written.

Layout (paths are LeRobot's templates; what ``LeRobotDataset.create`` + ``save_episode`` write in lerobot 0.6)::

    meta/info.json                             codebase_version "v3.0", fps (int), features {key: dtype, shape, names,
                                               info}, total_episodes / total_frames / total_tasks, chunks_size,
                                               data_files_size_in_mb, video_files_size_in_mb, data_path and
                                               video_path templates, robot_type, splits {"train": "0:E"}
    meta/stats.json                            per feature: min, max, mean, std, count, q01, q10, q50, q90, q99
    meta/tasks.parquet                         task strings (pandas index "task") -> task_index
    meta/episodes/chunk-000/file-000.parquet   one row per episode: episode_index, tasks, length,
                                               data/chunk_index, data/file_index, dataset_from_index,
                                               dataset_to_index, videos/<key>/{chunk_index, file_index,
                                               from_timestamp, to_timestamp}, stats/<key>/<stat>,
                                               meta/episodes/chunk_index, meta/episodes/file_index
    data/chunk-000/file-000.parquet            one row per frame, episodes back to back, one row group each;
                                               a new file (file-001, ...; chunk-001 after chunks_size files) once
                                               a file reaches data_files_size_in_mb
    videos/<key>/chunk-000/file-000.mp4        each camera's frames, episodes back to back (AV1 / yuv420p, GOP 2,
                                               CRF 30: LeRobot's encoder defaults); an episode is the span
                                               [from_timestamp, to_timestamp) of its file
    meta/robolearn.json                        robolearn's own (LeRobot ignores it): observation group and info
                                               names, the dataset's metadata

Frame mapping. An episode of T steps becomes T frames, as LeRobot's RL recorder (``gym_manipulator``) and
``ReplayBuffer.to_lerobot_dataset`` write them: frame t holds the observation o_t, the action a_t taken there and
the outcome of that step (``next.reward`` r_t, ``next.done`` = the episode ended after this step, terminated or
truncated, ``next.truncated`` = it ended by a time-out). The final observation o_T, which no frame holds, goes
into the episode's row of ``meta/episodes`` as ``final/<feature>`` (a vector, or PNG bytes for an image). Why
not T+1 frames with a padding action on the last (as ``lerobot_eval`` does)? Every LeRobot consumer would then
train on an action that was never taken (behaviour cloning learns it, stats.json counts it) and see one
transition too many; with T frames LeRobot's readers get exactly the N transitions, and robolearn gets o_T back
losslessly. Per-step data: observation groups -> ``observation.state`` (the default group, "policy") and
``observation.<group>`` (other arrays); uint8 [H, W, 3] groups -> ``observation.images.<group>``, dtype "video"
(mp4, lossy) or with ``video=False`` dtype "image" (PNG in the parquet, lossless; also used for 1-channel images);
``infos["success"]`` -> ``next.success``; other infos (interventions, raw actions, ...) ->
``complementary_info.<name>``, the prefix LeRobot's replay buffer reads them from. Stats are exact: mean/std/
min/max/quantiles over all frames (images: per channel over LeRobot's per-episode frame sample, scaled to [0, 1]);
LeRobot itself aggregates per-episode histogram quantiles into envelopes.

Reading takes the same layout, also as LeRobot writes it (no ``meta/robolearn.json``): the episode's final
observation is then its last frame repeated (LeRobot stores none; its own replay buffer does the same); without
``next.reward`` (demonstrations) ``read`` raises a DatasetError unless ``rewards="zeros"``; an episode's end is a
time-out when ``next.truncated`` says so or its last frame has ``next.done`` false, a termination when
``next.done`` is true, and ``ends`` ("truncation" by default: lerobot-record ends episodes on a timer) when there
is no ``next.done`` at all. Videos decode through imageio-ffmpeg's ffmpeg. LeRobot v2.x datasets are refused
with the command that converts them.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robolearn.data.dataset import DEFAULT_GROUP, READ_ERRORS, Dataset, jsonable, reading, staged_folder
from robolearn.errors import DatasetError

if TYPE_CHECKING:
    import pyarrow as pa

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
SIDECAR_PATH = "meta/robolearn.json"
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE_PATTERN + ".parquet"
CHUNKS_SIZE = 1000  # LeRobot's DEFAULT_CHUNK_SIZE: files per chunk folder
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
EPISODES_PER_ROW_GROUP = 10  # LeRobot buffers 10 episodes' metadata per parquet write

STATE = "observation.state"
OBS_PREFIX = "observation."
IMAGES_PREFIX = "observation.images."
ACTION = "action"
REWARD, DONE, TRUNCATED, SUCCESS = "next.reward", "next.done", "next.truncated", "next.success"
INFO_PREFIX = "complementary_info."
FINAL_PREFIX = "final/"
#: the per-frame columns LeRobot adds to every dataset (``lerobot.utils.constants.DEFAULT_FEATURES``)
DEFAULT_FEATURES: dict[str, str] = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64",
                                    "index": "int64", "task_index": "int64"}
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
#: LeRobot's ``VideoEncoderConfig`` defaults (``lerobot.configs.video``)
VIDEO_ENCODER: dict[str, Any] = {"vcodec": "libsvtav1", "pix_fmt": "yuv420p", "g": 2, "crf": 30, "preset": 12,
                                 "fast_decode": 0}
#: LeRobot vcodec -> (ffmpeg encoder, codec name LeRobot's probe records as video.codec)
_CODECS = {"libsvtav1": ("libsvtav1", "av1"), "av1": ("libsvtav1", "av1"), "h264": ("libx264", "h264"),
           "hevc": ("libx265", "hevc"), "libaom-av1": ("libaom-av1", "av1")}
SIDECAR_FORMAT = "robolearn-lerobot"
SIDECAR_VERSION = 1
_V21_FIX = ("convert it with LeRobot first: python -m lerobot.scripts.convert_dataset_v21_to_v30 "
            "--repo-id=<user/name> --root={path} --push-to-hub=false")


# --- detection --------------------------------------------------------------------------------------------


def detect(path: Path) -> bool:
    """A folder whose ``meta/info.json`` has a ``codebase_version`` starting with "v3"."""
    try:
        info = json.loads((Path(path) / INFO_PATH).read_text())
        return str(info.get("codebase_version", "")).startswith("v3")
    except (OSError, ValueError, AttributeError):
        return False


# --- writing ----------------------------------------------------------------------------------------------


@dataclass
class _Feature:
    """One LeRobot feature written from the dataset."""

    key: str
    kind: str  # "array" (parquet numbers), "image" (PNG in the parquet) or "video" (mp4)
    values: np.ndarray  # [N, ...] per step, or [N+E, ...] for an observation group (``per_obs``)
    per_obs: bool
    dtype: str
    shape: tuple[int, ...]

    def episode(self, data: Dataset, ep: int) -> np.ndarray:
        s, t = int(data.step_starts[ep]), int(data.step_starts[ep + 1])
        return self.values[s + ep : t + ep] if self.per_obs else self.values[s:t]

    def frames(self, data: Dataset) -> np.ndarray:
        """Every frame's value [N, ...] (observation groups without the final observations)."""
        return self.values[data.obs_index] if self.per_obs else np.asarray(self.values)

    def spec(self) -> dict[str, Any]:
        if self.kind == "array":
            return {"dtype": self.dtype, "shape": list(self.shape), "names": None}
        return {"dtype": self.kind, "shape": list(self.shape), "names": ["height", "width", "channels"],
                "info": {"is_depth_map": False}}


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
    if encoder["vcodec"] not in _CODECS:
        raise DatasetError(f"video_encoder vcodec {encoder['vcodec']!r} is not one LeRobot decodes; use one of "
                           f"{sorted(_CODECS)}")
    if min(chunks_size, data_files_size_in_mb, video_files_size_in_mb) <= 0:
        raise DatasetError("chunks_size, data_files_size_in_mb and video_files_size_in_mb must be positive")
    features, groups, infos = _plan(dataset, video)
    with staged_folder(path) as tmp:
        _write(dataset, tmp, features, rate, task, video, encoder, chunks_size, data_files_size_in_mb,
               video_files_size_in_mb, robot_type if robot_type is not None else dataset.metadata.get("robot_type"))
        sidecar = {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "groups": groups, "infos": infos,
                   "metadata": jsonable(dataset.metadata)}
        (tmp / SIDECAR_PATH).write_text(json.dumps(sidecar, indent=4, ensure_ascii=False))
    return path


def _resolve_fps(dataset: Dataset, fps: float | None) -> int:
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


def _plan(dataset: Dataset, video: bool) -> tuple[list[_Feature], dict[str, str], dict[str, str]]:
    """The features to write, in LeRobot's order, with the group -> key and info -> key maps."""
    src = dataset.source
    obs_feats: list[_Feature] = []
    groups: dict[str, str] = {}
    default = dataset.default_group
    for group, values in dataset.observations.items():
        image = values.dtype == np.uint8 and values.ndim == 4 and values.shape[-1] in (1, 3)
        if image:
            key = IMAGES_PREFIX + group
            kind = "video" if video and values.shape[-1] == 3 else "image"
            h, w = values.shape[1:3]
            if kind == "video" and (h % 2 or w % 2):
                raise DatasetError(f"{src}: observations[{group!r}] is {h}x{w}; yuv420p video needs an even height "
                                   "and width: crop or pad the images, or write(..., video=False) for PNG frames")
        else:
            key = STATE if group == default and values.ndim == 2 else OBS_PREFIX + group
            kind = "array"
        obs_feats.append(_Feature(key, kind, values, True, values.dtype.name, tuple(values.shape[1:])))
        groups[group] = key
    step_feats = [_Feature(ACTION, "array", dataset.actions, False, "float32", tuple(dataset.actions.shape[1:])),
                  _Feature(REWARD, "array", dataset.rewards, False, "float32", (1,)),
                  _Feature(DONE, "array", dataset.terminations | dataset.truncations, False, "bool", (1,)),
                  _Feature(TRUNCATED, "array", dataset.truncations, False, "bool", (1,))]
    infos: dict[str, str] = {}
    for name, values in dataset.infos.items():
        if values.dtype.kind not in "biuf":
            raise DatasetError(f"{src}: infos[{name!r}] has dtype {values.dtype}; LeRobot columns hold numbers and "
                               "bools: encode it as numbers or drop it")
        key = SUCCESS if name == "success" and values.ndim == 1 else INFO_PREFIX + name
        step_feats.append(_Feature(key, "array", values, False, values.dtype.name, tuple(values.shape[1:]) or (1,)))
        infos[name] = key
    features = obs_feats + step_feats
    keys = [f.key for f in features]
    clash = sorted({k for k in keys if keys.count(k) > 1} | (set(keys) & set(DEFAULT_FEATURES)))
    if clash:
        raise DatasetError(f"{src}: observation groups / infos map to the same LeRobot feature {clash}; rename them")
    slashed = [k for k in keys if "/" in k]
    if slashed:
        raise DatasetError(f"{src}: LeRobot feature names cannot contain '/' ({slashed}); rename those groups/infos")
    return features, groups, infos


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """LeRobot's ``update_chunk_file_indices``."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def _write(data: Dataset, root: Path, features: list[_Feature], fps: int, task: str, video: bool,
           encoder: dict[str, Any], chunks_size: int, data_mb: float, video_mb: float, robot_type: str | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    e_total = data.num_episodes
    parquet_feats = [f for f in features if f.kind != "video"]
    video_feats = [f for f in features if f.kind == "video"]
    rows: list[dict[str, Any]] = [{"episode_index": ep, "tasks": [task], "length": int(data.lengths[ep])}
                                  for ep in range(e_total)]

    # data/: one row group per episode, a new file when this one reaches data_mb
    hf_meta = json.dumps({"info": {"features": {
        **{f.key: _hf_feature(f.kind, f.dtype, f.shape) for f in parquet_feats},
        **{k: _hf_feature("array", dtype, (1,)) for k, dtype in DEFAULT_FEATURES.items()}}}}).encode()
    writer: pq.ParquetWriter | None = None
    chunk, file, file_bytes = 0, 0, 0
    try:
        for ep in range(e_total):
            s, t = int(data.step_starts[ep]), int(data.step_starts[ep + 1])
            cols: dict[str, pa.Array] = {}
            for f in parquet_feats:
                values = f.episode(data, ep)
                cols[f.key] = _png_column(values) if f.kind == "image" else _array_column(values, f.shape)
            frame_index = np.arange(t - s, dtype=np.int64)
            cols["timestamp"] = pa.array((frame_index / fps).astype(np.float32))
            cols["frame_index"] = pa.array(frame_index)
            cols["episode_index"] = pa.array(np.full(t - s, ep, dtype=np.int64))
            cols["index"] = pa.array(np.arange(s, t, dtype=np.int64))
            cols["task_index"] = pa.array(np.zeros(t - s, dtype=np.int64))
            table = pa.table(cols).replace_schema_metadata({b"huggingface": hf_meta})
            if writer is not None and file_bytes + table.nbytes >= data_mb * 2**20:
                writer.close()
                writer = None
                chunk, file = _next_file(chunk, file, chunks_size)
            if writer is None:
                target = root / DATA_PATH.format(chunk_index=chunk, file_index=file)
                target.parent.mkdir(parents=True, exist_ok=True)
                writer = pq.ParquetWriter(target, table.schema, compression="snappy", use_dictionary=True)
                file_bytes = 0
            writer.write_table(table)
            file_bytes += table.nbytes
            rows[ep].update({"data/chunk_index": chunk, "data/file_index": file, "dataset_from_index": s,
                             "dataset_to_index": t})
    finally:
        if writer is not None:
            writer.close()

    # videos/<key>/: each camera's frames back to back, a new file when this one reaches video_mb
    video_info: dict[str, dict[str, Any]] = {}
    for f in video_feats:
        video_info[f.key] = _write_video_feature(data, root, f, fps, encoder, chunks_size, video_mb, rows)

    # stats: exact over all frames (images: LeRobot's per-episode frame sample)
    default_values = {"timestamp": np.concatenate([np.arange(n) / fps for n in data.lengths]).astype(np.float32),
                      "frame_index": np.concatenate([np.arange(n) for n in data.lengths]),
                      "episode_index": np.repeat(np.arange(e_total), data.lengths),
                      "index": np.arange(data.num_steps), "task_index": np.zeros(data.num_steps, np.int64)}
    stats: dict[str, dict[str, np.ndarray]] = {}
    episode_stats: list[dict[str, dict[str, np.ndarray]]] = [{} for _ in range(e_total)]
    for f in features:
        if f.kind == "array":
            stats[f.key] = _array_stats(f.frames(data), data.step_starts, episode_stats, f.key)
        else:
            stats[f.key] = _image_stats(data, f, episode_stats)
    for key, values in default_values.items():
        stats[key] = _array_stats(values, data.step_starts, episode_stats, key)
    for ep in range(e_total):
        for key, feature_stats in episode_stats[ep].items():
            for name, value in feature_stats.items():
                rows[ep][f"stats/{key}/{name}"] = value.tolist()
        rows[ep]["meta/episodes/chunk_index"] = 0
        rows[ep]["meta/episodes/file_index"] = 0
        for f in features:  # the final observation o_T, which no frame holds
            if f.per_obs:
                final = f.values[int(data.step_starts[ep + 1]) + ep]
                rows[ep][FINAL_PREFIX + f.key] = _png(final) if f.kind != "array" else final.tolist()

    episodes = pa.Table.from_pylist(rows)
    target = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    target.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(target, episodes.schema, compression="snappy", use_dictionary=True) as ep_writer:
        for start in range(0, e_total, EPISODES_PER_ROW_GROUP):
            ep_writer.write_table(episodes.slice(start, EPISODES_PER_ROW_GROUP))
    _write_tasks(root, [task])

    spec: dict[str, Any] = {}
    for f in features:
        spec[f.key] = f.spec()
        if f.kind == "video":
            spec[f.key]["info"] = {**video_info[f.key], "is_depth_map": False}
    spec.update({k: {"dtype": dtype, "shape": [1], "names": None} for k, dtype in DEFAULT_FEATURES.items()})
    info = {"codebase_version": CODEBASE_VERSION, "fps": fps, "features": spec, "total_episodes": e_total,
            "total_frames": data.num_steps, "total_tasks": 1, "chunks_size": chunks_size,
            "data_files_size_in_mb": data_mb, "video_files_size_in_mb": video_mb, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if video else None, "robot_type": robot_type,
            "splits": {"train": f"0:{e_total}"}}
    (root / INFO_PATH).write_text(json.dumps(info, indent=4, ensure_ascii=False))
    (root / STATS_PATH).write_text(json.dumps({k: {n: v.tolist() for n, v in s.items()} for k, s in stats.items()},
                                              indent=4, ensure_ascii=False))


def _hf_feature(kind: str, dtype: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """The ``datasets`` (4.x) feature of a column, as the parquet's ``huggingface`` schema metadata records it, so
    that ``datasets.load_dataset("parquet")`` (the Hub viewer) sees images as images."""
    if kind == "image":
        return {"_type": "Image"}
    feature: dict[str, Any] = {"dtype": dtype, "_type": "Value"}
    if shape == (1,):
        return feature
    for size in reversed(shape):
        feature = {"feature": feature, "length": size, "_type": "List"}
    return feature


def _array_column(values: np.ndarray, shape: tuple[int, ...]) -> pa.Array:
    """A parquet column as LeRobot's HF features store it: a scalar for shape (1,), else fixed-size lists."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if shape == (1,):
        return pa.array(values.reshape(-1))
    column = pa.array(values.reshape(-1))
    for size in reversed(shape):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return column


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buffer, format="PNG")
    return buffer.getvalue()


def _png_column(images: np.ndarray) -> pa.Array:
    """``datasets.Image()`` storage: struct<bytes, path> with the PNG bytes and no path (LeRobot embeds images)."""
    import pyarrow as pa

    encoded = pa.array([_png(im) for im in images], type=pa.binary())
    return pa.StructArray.from_arrays([encoded, pa.nulls(len(images), pa.string())], names=["bytes", "path"])


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


def _file_size_mb(path: Path) -> float:
    try:
        return path.stat().st_size / 2**20
    except OSError:
        return 0.0


def _write_video_feature(data: Dataset, root: Path, f: _Feature, fps: int, encoder: dict[str, Any],
                         chunks_size: int, video_mb: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Encode one camera's frames, episodes back to back; fill the episodes' videos/<key>/* columns."""
    h, w, c = f.shape
    chunk, file, frames_in_file = 0, 0, 0
    current: _VideoEncoder | None = None
    target = root
    try:
        for ep in range(data.num_episodes):
            frames = f.episode(data, ep)  # T frames; o_T goes to the episodes metadata
            if current is not None and frames_in_file and _file_size_mb(target) >= video_mb:
                current.close()
                current = None
                chunk, file = _next_file(chunk, file, chunks_size)
            if current is None:
                target = root / VIDEO_PATH.format(video_key=f.key, chunk_index=chunk, file_index=file)
                current = _VideoEncoder(target, h, w, fps, encoder)
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
    info: dict[str, Any] = {"video.height": h, "video.width": w, "video.codec": _CODECS[encoder["vcodec"]][1],
                            "video.pix_fmt": encoder["pix_fmt"], "video.fps": fps, "video.channels": c,
                            "has_audio": False}
    for name in ("g", "crf", "preset", "fast_decode"):
        info[f"video.{name}"] = encoder[name]
    info.update({"video.video_backend": "pyav", "video.extra_options": {}})
    return info


def _ffmpeg() -> str:
    try:
        import imageio_ffmpeg
    except ImportError:
        raise DatasetError("LeRobot videos need ffmpeg: pip install imageio-ffmpeg (or write(..., video=False); "
                           "read(..., exclude=[<video keys>]))") from None
    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError as e:
        raise DatasetError(f"no ffmpeg executable ({e}); pip install imageio-ffmpeg") from None


class _VideoEncoder:
    """One mp4 file: raw RGB frames piped into ffmpeg with LeRobot's encoder settings."""

    def __init__(self, path: Path, height: int, width: int, fps: int, encoder: dict[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        codec = _CODECS[encoder["vcodec"]][0]
        options = ["-g", str(encoder["g"])] if encoder.get("g") is not None else []
        if encoder.get("crf") is not None:
            options += ["-crf", str(encoder["crf"])]
        if codec == "libsvtav1":
            if encoder.get("preset") is not None:
                options += ["-preset", str(encoder["preset"])]
            options += ["-svtav1-params", f"fast-decode={max(0, min(2, int(encoder.get('fast_decode') or 0)))}"]
        elif codec in ("libx264", "libx265"):
            if encoder.get("preset") is not None:
                options += ["-preset", str(encoder["preset"])]
            if encoder.get("fast_decode"):
                options += ["-tune", "fastdecode"]
        cmd = [_ffmpeg(), "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo",
               "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-framerate", str(fps), "-i", "-", "-an",
               "-c:v", codec, "-pix_fmt", str(encoder["pix_fmt"]), *options, str(path)]
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, "SVT_LOG": os.environ.get("SVT_LOG", "1")}  # SVT-AV1 prints its banner otherwise
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.log, env=env)

    def write(self, frames: np.ndarray) -> None:
        try:
            self.proc.stdin.write(np.ascontiguousarray(frames, dtype=np.uint8).tobytes())
        except (BrokenPipeError, OSError):
            self.close()
            raise DatasetError(f"ffmpeg stopped encoding {self.path}") from None

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        rc = self.proc.wait()
        self.log.seek(0)
        message = self.log.read().decode(errors="replace").strip()
        self.log.close()
        if rc != 0:
            raise DatasetError(f"ffmpeg failed encoding {self.path} (exit {rc}): {message[-600:]}; try "
                               "video_encoder={'vcodec': 'h264'} or write(..., video=False)")


# --- stats ------------------------------------------------------------------------------------------------


def _moments(x: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's stat keys over axis 0 of ``x`` [n, ...]; std is the population std, quantiles linear."""
    x = x.astype(np.float64, copy=False)
    out = {"min": x.min(axis=0), "max": x.max(axis=0), "mean": x.mean(axis=0), "std": x.std(axis=0),
           "count": np.array([len(x)], dtype=np.int64)}
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    out.update({name: qs[i] for i, name in enumerate(QUANTILES)})
    return out


def _array_stats(values: np.ndarray, starts: np.ndarray, per_episode: list[dict[str, Any]],
                 key: str) -> dict[str, np.ndarray]:
    x = np.asarray(values).reshape(len(values), -1) if np.asarray(values).ndim == 1 else np.asarray(values)
    for ep in range(len(starts) - 1):
        per_episode[ep][key] = _moments(x[starts[ep] : starts[ep + 1]])
    return _moments(x)


def _sample_indices(length: int) -> np.ndarray:
    """LeRobot's ``sample_indices``: about length**0.75 frames (100 to 10000), evenly spread."""
    minimum = min(100, length)
    count = max(minimum, min(int(length**0.75), 10_000))
    return np.round(np.linspace(0, length - 1, count)).astype(int)


def _count_stats(counts: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 pixels from their histograms ``counts`` [C, 256], scaled to [0, 1], (C, 1, 1)."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    total = counts.sum(axis=1).astype(np.float64)
    mean = counts @ levels / total
    std = np.sqrt(np.maximum(counts @ levels**2 / total - mean**2, 0.0))
    nonzero = counts > 0
    lo = np.argmax(nonzero, axis=1)
    hi = 255 - np.argmax(nonzero[:, ::-1], axis=1)
    cum = np.cumsum(counts, axis=1)
    out = {"min": lo / 255.0, "max": hi / 255.0, "mean": mean, "std": std}
    for name, q in QUANTILES.items():  # np.quantile's linear rule, exact on the histogram
        values = []
        for c in range(len(counts)):
            pos = q * (cum[c, -1] - 1)
            below = int(math.floor(pos))
            above = min(below + 1, int(cum[c, -1]) - 1)
            v_lo, v_hi = np.searchsorted(cum[c], [below, above], side="right")
            values.append((v_lo + (v_hi - v_lo) * (pos - below)) / 255.0)
        out[name] = np.asarray(values)
    result = {k: np.asarray(v, dtype=np.float64).reshape(-1, 1, 1) for k, v in out.items()}
    result["count"] = np.array([frames], dtype=np.int64)
    return {k: result[k] for k in ("min", "max", "mean", "std", "count", *QUANTILES)}


def _image_stats(data: Dataset, f: _Feature, per_episode: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    channels = f.shape[-1]
    total = np.zeros((channels, 256), dtype=np.int64)
    sampled = 0
    for ep in range(data.num_episodes):
        frames = f.episode(data, ep)
        frames = frames[_sample_indices(len(frames))]
        h, w = frames.shape[1:3]
        if max(h, w) >= 300:  # LeRobot's auto_downsample_height_width
            step = int(w / 150) if w > h else int(h / 150)
            frames = frames[:, ::step, ::step]
        counts = np.stack([np.bincount(frames[..., c].ravel(), minlength=256) for c in range(channels)])
        per_episode[ep][f.key] = _count_stats(counts, len(frames))
        total += counts
        sampled += len(frames)
    return _count_stats(total, sampled)


# --- reading ----------------------------------------------------------------------------------------------


def _reading(file: Path, what: str) -> contextlib.AbstractContextManager[None]:
    """`reading` with LeRobot's hint, and pyarrow's and the PNG decoder's errors too."""
    import pyarrow as pa

    errors = (*READ_ERRORS, pa.ArrowException, SyntaxError, zlib.error)
    return reading(file, what, "the file is corrupt or not LeRobot v3: regenerate or re-download it", errors)


def _read_json(file: Path, what: str) -> Any:
    if not file.is_file():
        raise DatasetError(f"{file} is missing: not a complete LeRobot v3 dataset ({what}); re-download or "
                           "regenerate it")
    with _reading(file, what):
        return json.loads(file.read_text(encoding="utf-8"))


def _check_info(root: Path, info: Any) -> dict[str, Any]:
    where = root / INFO_PATH
    if not isinstance(info, dict):
        raise DatasetError(f"{where} is not a JSON object; regenerate the dataset")
    version = info.get("codebase_version")
    if not isinstance(version, str):
        raise DatasetError(f"{where} has no codebase_version; not a LeRobot dataset")
    if version.startswith(("v1", "v2")):
        raise DatasetError(f"{root} is a LeRobot {version} dataset; this reader takes v3.0: "
                           + _V21_FIX.format(path=root))
    if not version.startswith("v3"):
        raise DatasetError(f"{where}: codebase_version {version!r} is not v3.x; this reader takes LeRobot v3.0")
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps) or fps <= 0:
        raise DatasetError(f"{where}: fps {fps!r} is not a positive number; fix meta/info.json")
    features = info.get("features")
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
    for name in ("data_path", "video_path"):
        if info.get(name) is not None and not isinstance(info[name], str):
            raise DatasetError(f"{where}: {name} is not a path template; fix meta/info.json")
    return info


def _load_sidecar(root: Path, features: Mapping[str, Any]) -> dict[str, Any] | None:
    file = root / SIDECAR_PATH
    if not file.exists():
        return None
    sidecar = _read_json(file, "robolearn's group names and metadata")
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


def _numpy(column: pa.ChunkedArray | pa.Array, rows: int, shape: Sequence[int], file: Path, key: str) -> np.ndarray:
    """A (possibly nested-list) arrow column as an array [rows, *shape]; shape mismatches name the file and key."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    while True:
        if arr.null_count:
            raise DatasetError(f"{file}: column {key!r} has missing values (nulls); fill or drop those frames")
        if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
            arr = arr.flatten()
        else:
            break
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type)):
        raise DatasetError(f"{file}: column {key!r} holds {arr.type}, not numbers; fix meta/info.json's features")
    values = arr.to_numpy(zero_copy_only=False)
    size = int(np.prod(shape))
    if values.size != rows * size:
        per = values.size / rows if rows else values.size
        raise DatasetError(f"{file}: column {key!r} holds {per:g} values per row, meta/info.json features[{key!r}] "
                           f"has shape {list(shape)}; fix info.json or regenerate the data")
    return values.reshape(rows, *shape)


def _decode_png(blob: Any, hwc: tuple[int, int, int], file: Path, key: str) -> np.ndarray:
    from PIL import Image

    if not isinstance(blob, bytes | bytearray):
        raise DatasetError(f"{file}: {key!r} holds no image bytes (a path-only image?); embed the images")
    try:
        with Image.open(io.BytesIO(blob)) as im:
            im.load()
            image = np.asarray(im.convert("RGB") if hwc[2] == 3 else im.convert("L"), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, zlib.error, Image.DecompressionBombError) as e:
        raise DatasetError(f"{file}: an image of {key!r} is corrupt ({type(e).__name__}: {e}); regenerate it") from None
    image = image.reshape(*image.shape[:2], -1)
    if image.shape != hwc:
        raise DatasetError(f"{file}: an image of {key!r} is {image.shape}, meta/info.json says {hwc} (H, W, C); fix "
                           "info.json or regenerate the images")
    return image


def _hwc(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """(height, width, channels) of an image/video feature stored (H, W, C) or channels first."""
    shape = spec["shape"]
    names = spec.get("names")
    if isinstance(names, list) and names and str(names[0]).startswith("channel"):
        c, h, w = shape
    elif shape[-1] in (1, 3) or shape[0] not in (1, 3):
        h, w, c = shape
    else:
        c, h, w = shape
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    h = info.get("video.height", h) if isinstance(info.get("video.height"), int) else h
    w = info.get("video.width", w) if isinstance(info.get("video.width"), int) else w
    return int(h), int(w), int(c)


def _decode_video(file: Path, frame_numbers: np.ndarray, hwc: tuple[int, int, int]) -> np.ndarray:
    """The frames ``frame_numbers`` (0-based, in decoding order at the stream's rate) of ``file`` [n, H, W, C]."""
    h, w, c = hwc
    if c not in (1, 3):
        raise DatasetError(f"{file}: {c}-channel video is not supported; read(..., exclude=[<its key>])")
    out = np.empty((len(frame_numbers), h, w, c), dtype=np.uint8)
    order = np.argsort(frame_numbers, kind="stable")
    wanted = frame_numbers[order]
    if len(wanted) and wanted[0] < 0:
        raise DatasetError(f"{file}: episodes metadata points before the video's start (negative timestamp)")
    size = h * w * c
    cmd = [_ffmpeg(), "-nostdin", "-hide_banner", "-nostats", "-loglevel", "info", "-i", str(file), "-map", "0:v:0",
           "-f", "rawvideo", "-pix_fmt", "rgb24" if c == 3 else "gray", "-"]
    pos = frame = 0
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        try:
            while pos < len(wanted):
                buf = proc.stdout.read(size)
                if len(buf) < size:
                    break
                while pos < len(wanted) and wanted[pos] == frame:
                    out[order[pos]] = np.frombuffer(buf, dtype=np.uint8).reshape(h, w, c)
                    pos += 1
                frame += 1
        finally:
            proc.stdout.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        log.seek(0)
        message = log.read().decode(errors="replace")
    sizes = {(int(a), int(b)) for a, b in re.findall(r"Video: [^\n]*?, (\d+)x(\d+)[ ,\[]", message)}
    if sizes - {(w, h)}:
        raise DatasetError(f"{file} holds {sorted(sizes)[0][0]}x{sorted(sizes)[0][1]} frames, meta/info.json says "
                           f"{w}x{h} (video.width x video.height); fix info.json")
    if pos < len(wanted):
        tail = message.strip().splitlines()[-1:] or [""]
        raise DatasetError(f"{file}: decoded {frame} frames but the episodes need frame {int(wanted[pos])}; the video "
                           f"is truncated or corrupt ({tail[0][:200]}); re-download or regenerate it")
    return out


@dataclass
class _Episodes:
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
        with _reading(self.where, f"episodes column {key!r}"):
            values = _numpy(self.columns[key], len(self.order), shape, self.where, key)
        return values[self.order]

    def objects(self, key: str) -> list[Any]:
        """Column ``key`` as Python objects in episode order (PNG bytes, task lists)."""
        with _reading(self.where, f"episodes column {key!r}"):
            values = self.columns[key].to_pylist()
        return [values[i] for i in self.order]


def _read_episodes(root: Path, wanted: Sequence[str]) -> _Episodes:
    """meta/episodes/*/*.parquet (all files, as LeRobot's ``load_episodes``), the columns ``wanted`` that exist."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise DatasetError(f"{root / EPISODES_DIR} has no parquet files: the episode index is missing; re-download "
                           "or regenerate the dataset")
    required = ("episode_index", "length", "data/chunk_index", "data/file_index")
    tables = []
    for file in files:
        with _reading(file, "the episodes metadata"):
            names = set(pq.read_schema(file).names)
            missing = [k for k in required if k not in names]
            if missing:
                raise DatasetError(f"{file}: no {missing} columns; regenerate meta/episodes")
            tables.append(pq.read_table(file, columns=[k for k in wanted if k in names]))
    where = files[0] if len(files) == 1 else root / EPISODES_DIR
    columns: dict[str, pa.ChunkedArray] = {}
    for key in set.intersection(*(set(t.column_names) for t in tables)):
        with _reading(where, f"episodes column {key!r}"):
            columns[key] = pa.chunked_array([t.column(key).combine_chunks() for t in tables])
    rows = sum(t.num_rows for t in tables)
    ints = {}
    for key in required:
        with _reading(where, f"episodes column {key!r}"):
            values = _numpy(columns[key], rows, (1,), where, key)[:, 0]
        if values.dtype.kind not in "iu":
            raise DatasetError(f"{where}: episodes column {key!r} is not integer; regenerate meta/episodes")
        ints[key] = values.astype(np.int64)
    order = np.argsort(ints["episode_index"], kind="stable")
    episodes = _Episodes(where, *(ints[k][order] for k in required), order, columns)
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


def read(path: Path, rewards: str = "error", ends: str = "truncation", exclude: Sequence[str] = (),
         **_: Any) -> Dataset:
    """A LeRobot v3 dataset folder as a `Dataset` (see the module docstring for the mapping).

    ``rewards``: "error" (default) raises a DatasetError when there is no ``next.reward``; "zeros" reads such
    a (demonstration) dataset with zero rewards. ``ends``: how an episode ends when the data has no
    ``next.done`` ("truncation", a time-out, or "termination"). ``exclude``: feature keys not to read (e.g. a
    depth camera).
    """
    import pyarrow.parquet as pq

    root = Path(path)
    if rewards not in ("error", "zeros"):
        raise DatasetError(f"rewards={rewards!r}: use 'error' or 'zeros'")
    if ends not in ("truncation", "termination"):
        raise DatasetError(f"ends={ends!r}: use 'truncation' or 'termination'")
    if not root.is_dir():
        raise DatasetError(f"{root} is not a folder; a LeRobot v3 dataset is a folder with meta/info.json")
    info = _check_info(root, _read_json(root / INFO_PATH, "the dataset's schema"))
    fps = float(info["fps"])
    features: dict[str, dict[str, Any]] = {k: v for k, v in info["features"].items() if k not in set(exclude)}
    sidecar = _load_sidecar(root, info["features"])
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
    video_cols = [f"videos/{k}/{n}" for k in videos for n in ("chunk_index", "file_index", "from_timestamp")]
    episodes = _read_episodes(root, ["episode_index", "length", "data/chunk_index", "data/file_index", "tasks",
                                     "dataset_from_index", "dataset_to_index", *video_cols,
                                     *(FINAL_PREFIX + k for k in obs_keys)])
    ep_ids, lengths = episodes.index, episodes.length
    e_total, n_total = len(ep_ids), int(lengths.sum())
    for name, value in (("total_episodes", e_total), ("total_frames", n_total)):
        if isinstance(info.get(name), int) and info[name] != value:
            raise DatasetError(f"{root / INFO_PATH}: {name} is {info[name]}, meta/episodes holds {value}; the dataset "
                               "is incomplete or its info.json stale: re-download or fix it")

    # data/: every file the episodes point at, only the columns used
    template = info.get("data_path") or DATA_PATH
    files = sorted({(int(c), int(f)) for c, f in zip(episodes.data_chunk, episodes.data_file, strict=True)})
    parquet_keys = [k for k in features if (k in numeric or k in images)]
    per_key: dict[str, list[np.ndarray]] = {k: [] for k in parquet_keys}
    file_of_row: list[np.ndarray] = []
    data_files: list[Path] = []
    for number, (chunk, file_index) in enumerate(files):
        with _reading(root / INFO_PATH, "data_path"):
            file = root / template.format(chunk_index=chunk, file_index=file_index)
        data_files.append(file)
        if not file.is_file():
            raise DatasetError(f"{file} is missing (meta/episodes points at it); re-download the dataset")
        with _reading(file, "frame data"):
            names = set(pq.read_schema(file).names)
            missing = [k for k in parquet_keys if k not in names]
            if missing:
                raise DatasetError(f"{file}: no columns {missing}, which meta/info.json declares; fix info.json or "
                                   "regenerate the data")
            table = pq.read_table(file, columns=parquet_keys)
            for key in parquet_keys:
                if key in images:
                    column = table.column(key).combine_chunks()
                    if column.type.num_fields == 0 or column.type.get_field_index("bytes") < 0:
                        raise DatasetError(f"{file}: image column {key!r} is not struct<bytes, path>; regenerate it")
                    per_key[key].append(np.asarray(column.field("bytes").to_pylist(), dtype=object))
                else:
                    per_key[key].append(_numpy(table.column(key), table.num_rows, features[key]["shape"], file, key))
            file_of_row.append(np.full(table.num_rows, number))
    arrays = {k: np.concatenate(v) for k, v in per_key.items()}
    row_file = np.concatenate(file_of_row)

    # rows in (episode, frame) order, only the episodes meta/episodes lists
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
    expected = np.arange(n_total) - np.repeat(step_starts[:-1], lengths)
    if not np.array_equal(frame_sorted, expected):
        row = int(order[np.argmax(frame_sorted != expected)])
        raise DatasetError(f"{data_files[row_file[row]]}: frame_index of episode {int(ep_col[row])} is not 0..length-1 "
                           "(frames missing or repeated); regenerate the data")

    def column(key: str) -> np.ndarray:
        return arrays[key][order]

    def finite(key: str) -> np.ndarray:
        values = column(key)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            bad = int(order[np.argmax(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))])
            raise DatasetError(f"{data_files[row_file[bad]]}: column {key!r} has NaN or inf (episode "
                               f"{int(ep_col[bad])}, frame {int(frame_col[bad])}); clean or drop those frames")
        return values

    # observation groups: T frames + the final observation per episode
    obs_rows = np.arange(n_total) + np.repeat(np.arange(e_total), lengths)
    final_rows = step_starts[1:] + np.arange(e_total)
    names = _group_names(obs_keys, sidecar)
    observations: dict[str, np.ndarray] = {}
    repeated: list[str] = []
    video_frames = _read_videos(root, info, features, videos, episodes, column("timestamp") if videos else None, fps)
    for key in obs_keys:
        if key in videos:
            frames = video_frames[key]
        elif key in images:
            hwc = _hwc(features[key])
            blobs = column(key)
            frames = np.stack([_decode_png(b, hwc, data_files[row_file[order[i]]], key) for i, b in enumerate(blobs)])
        else:
            frames = finite(key)
        final_key = FINAL_PREFIX + key
        if final_key not in episodes.columns:
            final = frames[step_starts[1:] - 1]
            repeated.append(key)
        elif key in videos or key in images:
            final = np.stack([_decode_png(b, frames.shape[1:], episodes.where, final_key)
                              for b in episodes.objects(final_key)])
        else:
            final = episodes.numbers(final_key, frames.shape[1:]).astype(frames.dtype)
            if final.dtype.kind == "f" and not np.isfinite(final).all():
                raise DatasetError(f"{episodes.where}: {final_key!r} has NaN or inf; regenerate meta/episodes")
        group = np.empty((n_total + e_total, *frames.shape[1:]), dtype=frames.dtype)
        group[obs_rows] = frames
        group[final_rows] = final
        observations[names[key]] = group
    if not observations:
        raise DatasetError(f"{root / INFO_PATH}: no observation.* features; robolearn datasets need observations")

    actions = finite(ACTION).reshape(n_total, -1).astype(np.float32)
    if REWARD in numeric:
        reward = finite(REWARD).reshape(n_total, -1)
        if reward.shape[1] != 1:
            raise DatasetError(f"{root / INFO_PATH}: next.reward has shape {features[REWARD]['shape']}, not [1]")
        reward = reward[:, 0].astype(np.float32)
    elif rewards == "zeros":
        reward = np.zeros(n_total, np.float32)
    else:
        raise DatasetError(f"{root}: no 'next.reward' feature (a LeRobot demonstration dataset records no rewards); "
                           "label rewards first (add a next.reward column), or read(..., rewards='zeros') for "
                           "imitation learning")
    terminations, truncations = _ends(column, numeric, step_starts, ends, lambda row: (
        data_files[row_file[order[row]]], int(ep_sorted[row])))

    info_names = _info_names(numeric, obs_keys, sidecar)
    infos = {name: column(key).reshape(n_total, *features[key]["shape"])
             if tuple(features[key]["shape"]) != (1,) else column(key).reshape(n_total) for key, name in info_names}
    tasks = _read_tasks(root, info, episodes)
    if sidecar is not None:
        metadata = dict(sidecar["metadata"])
    else:
        metadata = {"task": tasks[0] if len(tasks) == 1 else tasks, "fps": info["fps"]}
        if info.get("robot_type"):
            metadata["robot_type"] = info["robot_type"]
        if len(tasks) > 1 and "task_index" in numeric:
            infos.setdefault("task_index", column("task_index").reshape(n_total))
    if repeated:
        metadata["lerobot_final_observation"] = ("repeated last frame: LeRobot stores no final observation "
                                                 f"({', '.join(repeated)})")
    return Dataset(observations, actions, reward, terminations, truncations, lengths, infos, metadata, str(root))


def _group_names(obs_keys: Sequence[str], sidecar: Mapping[str, Any] | None) -> dict[str, str]:
    """LeRobot feature -> observation group: the sidecar's names, else observation.state -> "policy",
    observation.images.<cam> -> <cam>, observation.<name> -> <name>."""
    known = {v: k for k, v in (sidecar or {}).get("groups", {}).items()}
    names: dict[str, str] = {}
    for key in obs_keys:
        if key in known:
            name = known[key]
        elif key == STATE:
            name = DEFAULT_GROUP
        elif key.startswith(IMAGES_PREFIX):
            name = key[len(IMAGES_PREFIX) :]
        else:
            name = key[len(OBS_PREFIX) :]
        if name in names.values():
            name = key
        names[key] = name
    return names


def _info_names(numeric: set[str], obs_keys: Sequence[str], sidecar: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(feature, info name) of every numeric per-frame feature that is not an observation, action, reward or end."""
    known = {v: k for k, v in (sidecar or {}).get("infos", {}).items()}
    used = {ACTION, REWARD, DONE, TRUNCATED, *DEFAULT_FEATURES, *obs_keys}
    out: list[tuple[str, str]] = []
    for key in sorted(numeric - used):
        if key in known:
            name = known[key]
        elif key == SUCCESS:
            name = "success"
        elif key.startswith(INFO_PREFIX):
            name = key[len(INFO_PREFIX) :]
        else:
            name = key
        if name in {n for _, n in out}:
            name = key
        out.append((key, name))
    return out


def _ends(column: Any, numeric: set[str], step_starts: np.ndarray, ends: str,
          where: Any) -> tuple[np.ndarray, np.ndarray]:
    """Terminations and truncations [N] from next.done / next.truncated (see the module docstring)."""
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


def _read_tasks(root: Path, info: Mapping[str, Any], episodes: _Episodes) -> list[str]:
    """The dataset's task strings (meta/tasks.parquet, by task_index), else the episodes' ``tasks`` lists."""
    import pyarrow.parquet as pq

    file = root / TASKS_PATH
    if file.is_file():
        with _reading(file, "the task list"):
            table = pq.read_table(file)
            text = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
            if text is None or "task_index" not in table.column_names:
                raise DatasetError(f"{file}: no task / task_index columns; regenerate meta/tasks.parquet")
            index = _numpy(table.column("task_index"), table.num_rows, (1,), file, "task_index")[:, 0]
            strings = [str(t) for t in table.column(text).to_pylist()]
            return [strings[i] for i in np.argsort(index, kind="stable")]
    if isinstance(info.get("total_tasks"), int) and info["total_tasks"] > 0:
        raise DatasetError(f"{file} is missing (info.json counts {info['total_tasks']} tasks); re-download the dataset")
    if "tasks" in episodes.columns:
        return sorted({str(t) for tasks in episodes.objects("tasks") for t in (tasks or [])})
    return []


def _read_videos(root: Path, info: Mapping[str, Any], features: Mapping[str, Any], videos: Sequence[str],
                 episodes: _Episodes, timestamps: np.ndarray | None, fps: float) -> dict[str, np.ndarray]:
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
        hwc = _hwc(features[key])
        frames = np.empty((len(ts), *hwc), dtype=np.uint8)
        for c, f in sorted({(int(c), int(f)) for c, f in zip(chunk, file_index, strict=True)}):
            with _reading(root / INFO_PATH, "video_path"):
                file = root / template.format(video_key=key, chunk_index=c, file_index=f)
            if not file.is_file():
                raise DatasetError(f"{file} is missing (meta/episodes points at it); re-download the dataset")
            rows = np.flatnonzero(((chunk == c) & (file_index == f))[episode_of_row])
            frames[rows] = _decode_video(file, frame_numbers[rows], hwc)
        out[key] = frames
    return out
