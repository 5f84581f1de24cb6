"""What the arrow / parquet and HDF5 backends share about one episode: its JPEG frames decoded on reading, and
its infos (nested, with the reset row) and summary attributes on writing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset, reading
from robolearn.data.formats.minari.spaces import Space
from robolearn.errors import DatasetError


def decode_jpegs(frames: list[Any], space: Space, file: Path, field: str) -> np.ndarray:
    """Minari's JPEG-encoded image frames (bytes, or uint8 arrays of them) as [rows, *space.shape] uint8."""
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


def episode_infos(dataset: Dataset, s: int, t: int) -> dict[str, Any]:
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


def episode_meta(dataset: Dataset, i: int, s: int, t: int) -> dict[str, Any]:
    """Episode ``i``'s (steps ``s:t``) attributes as Minari stores them: id, total_steps and reward summaries."""
    rewards = dataset.rewards[s:t].astype(np.float64)
    return {"id": i, "total_steps": t - s, "rewards_sum": float(rewards.sum()), "rewards_mean": float(rewards.mean()),
            "rewards_std": float(rewards.std()), "rewards_max": float(rewards.max()),
            "rewards_min": float(rewards.min())}
