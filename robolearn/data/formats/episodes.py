"""Robot episode folders (`robolearn.data.episodes`: one safetensors file per episode), e.g. what
``robolearn bag2dataset`` makes of a rosbag2 recording: this is how rosbag2 data reaches offline RL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset
from robolearn.data.episodes import FORMAT, INDEX, load_episodes


def detect(path: Path) -> bool:
    try:
        return json.loads((path / INDEX).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def read(path: Path, **_: Any) -> Dataset:
    """The episodes as a Dataset: observations -> group "policy"; interventions and extras -> infos."""
    episodes, index = load_episodes(path)
    converted = []
    for ep in episodes:
        t = len(ep)
        infos = {"interventions": ep.interventions}
        infos.update({k: v[:t] for k, v in ep.extras.items() if np.asarray(v).ndim >= 1})
        converted.append({"observations": ep.observations, "actions": ep.actions, "rewards": ep.rewards,
                          "terminations": ep.terminations, "truncations": ep.truncations, "infos": infos})
    meta = {k: v for k, v in index.items() if k not in ("format", "version", "episodes", "lengths", "steps")}
    return Dataset.from_episodes(converted, meta, source=str(path))
