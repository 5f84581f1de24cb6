"""meta/stats.json and the episodes' ``stats/<key>/<stat>`` columns: LeRobot's statistics, computed exactly.

Arrays: min, max, mean, std, count and quantiles over all frames. Images: per channel over LeRobot's sample of
each episode's frames, scaled to [0, 1], from exact per-channel histograms (LeRobot itself aggregates
per-episode histogram quantiles into envelopes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset
from robolearn.data.formats.lerobot.features import Feature
from robolearn.data.formats.lerobot.layout import QUANTILES


def _moments(x: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's stat keys over axis 0 of ``x`` [n, ...]; std is the population std, quantiles linear."""
    x = x.astype(np.float64, copy=False)
    out = {"min": x.min(axis=0), "max": x.max(axis=0), "mean": x.mean(axis=0), "std": x.std(axis=0),
           "count": np.array([len(x)], dtype=np.int64)}
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    out.update({name: qs[i] for i, name in enumerate(QUANTILES)})
    return out


def array_stats(values: np.ndarray, starts: np.ndarray, per_episode: list[dict[str, Any]],
                key: str) -> dict[str, np.ndarray]:
    """Stats of a numeric feature over all frames; each episode's (``starts`` [E+1]) into ``per_episode``."""
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


def image_stats(data: Dataset, f: Feature, per_episode: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Stats of an image / video feature over LeRobot's per-episode frame sample; each episode's into
    ``per_episode``."""
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
