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

Modules: `layout` (paths, info.json / sidecar constants, feature keys, `detect`), `features` (which features a
dataset's groups and infos become, and the names they read back as), `columns` (parquet columns and PNG images),
`video` (mp4 encoding and decoding), `stats`, `writer` (`write`), `meta` (info.json, sidecar, episode index and
tasks, read and checked) and `reader` (`read`).
This package exposes the format protocol (`detect`, `read`, `write`) and the layout's public constants.
"""

from __future__ import annotations

from robolearn.data.formats.lerobot.layout import (
    ACTION,
    CHUNK_FILE_PATTERN,
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILES_SIZE_IN_MB,
    DATA_PATH,
    DEFAULT_FEATURES,
    DONE,
    EPISODES_DIR,
    EPISODES_PATH,
    EPISODES_PER_ROW_GROUP,
    FINAL_PREFIX,
    IMAGES_PREFIX,
    INFO_PATH,
    INFO_PREFIX,
    OBS_PREFIX,
    QUANTILES,
    REWARD,
    SIDECAR_FORMAT,
    SIDECAR_PATH,
    SIDECAR_VERSION,
    STATE,
    STATS_PATH,
    SUCCESS,
    TASKS_PATH,
    TRUNCATED,
    VIDEO_ENCODER,
    VIDEO_FILES_SIZE_IN_MB,
    VIDEO_PATH,
    detect,
)
from robolearn.data.formats.lerobot.reader import read
from robolearn.data.formats.lerobot.writer import _file_size_mb as _file_size_mb  # patched by tests: see writer
from robolearn.data.formats.lerobot.writer import write

__all__ = [
    "ACTION", "CHUNK_FILE_PATTERN", "CHUNKS_SIZE", "CODEBASE_VERSION", "DATA_FILES_SIZE_IN_MB", "DATA_PATH",
    "DEFAULT_FEATURES", "DONE", "EPISODES_DIR", "EPISODES_PATH", "EPISODES_PER_ROW_GROUP", "FINAL_PREFIX",
    "IMAGES_PREFIX", "INFO_PATH", "INFO_PREFIX", "OBS_PREFIX", "QUANTILES", "REWARD", "SIDECAR_FORMAT",
    "SIDECAR_PATH", "SIDECAR_VERSION", "STATE", "STATS_PATH", "SUCCESS", "TASKS_PATH", "TRUNCATED",
    "VIDEO_ENCODER", "VIDEO_FILES_SIZE_IN_MB", "VIDEO_PATH", "detect", "read", "write",
]
