"""LeRobot v3.0's on-disk layout: file paths, info.json / sidecar constants, feature keys and encoder defaults.

Shared by the reader and the writer, so that both agree on every name LeRobot itself uses (the templates and
defaults are lerobot 0.6's); also `detect`, which needs only the layout, and `lerobot_reading`, the error
wrapper every reading step uses.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from pathlib import Path
from typing import Any

from robolearn.data.dataset import READ_ERRORS, reading

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
CODECS = {"libsvtav1": ("libsvtav1", "av1"), "av1": ("libsvtav1", "av1"), "h264": ("libx264", "h264"),
          "hevc": ("libx265", "hevc"), "libaom-av1": ("libaom-av1", "av1")}
SIDECAR_FORMAT = "robolearn-lerobot"
SIDECAR_VERSION = 1
#: the fix for a LeRobot v2.x dataset, formatted with its ``path``
V21_FIX = ("convert it with LeRobot first: python -m lerobot.scripts.convert_dataset_v21_to_v30 "
           "--repo-id=<user/name> --root={path} --push-to-hub=false")


def detect(path: Path) -> bool:
    """A folder whose ``meta/info.json`` has a ``codebase_version`` starting with "v3"."""
    try:
        info = json.loads((Path(path) / INFO_PATH).read_text())
        return str(info.get("codebase_version", "")).startswith("v3")
    except (OSError, ValueError, AttributeError):
        return False


def lerobot_reading(file: Path, what: str) -> contextlib.AbstractContextManager[None]:
    """`reading` with LeRobot's hint, and pyarrow's and the PNG decoder's errors too."""
    import pyarrow as pa

    errors = (*READ_ERRORS, pa.ArrowException, SyntaxError, zlib.error)
    return reading(file, what, "the file is corrupt or not LeRobot v3: regenerate or re-download it", errors)
