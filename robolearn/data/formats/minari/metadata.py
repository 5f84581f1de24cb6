"""metadata.json's descriptive fields <-> `Dataset.metadata`, both directions.

Writing keeps robolearn's metadata whole under ``robolearn_metadata`` (Minari ignores the key) and copies what
fits into Minari's own fields; reading returns that metadata when present, else Minari's descriptive fields,
and in both cases the storage / environment fields under ``metadata["minari"]``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from robolearn.data.dataset import Dataset, jsonable
from robolearn.data.formats.minari.layout import ROBOLEARN_KEY
from robolearn.data.formats.minari.spaces import Space, space_json

#: Minari's descriptive metadata fields, copied into `Dataset.metadata` when reading a foreign dataset.
_DESCRIPTIVE = ("algorithm_name", "author", "author_email", "code_permalink", "description", "requirements",
                "ref_min_score", "ref_max_score", "num_episodes_average_score", "combined_datasets")
#: Minari fields that describe the storage or environment: kept under ``metadata["minari"]``.
_TECHNICAL = ("observation_space", "action_space", "env_spec", "eval_env_spec", "minari_version", "data_format",
              "jpeg_encoding")


def read_metadata(meta: dict[str, Any], skipped: dict[str, str]) -> dict[str, Any]:
    """`Dataset.metadata` from metadata.json ``meta``; ``skipped`` (info -> why) is recorded under "minari"."""
    ours = meta.get(ROBOLEARN_KEY)
    if isinstance(ours, dict):  # written here: our metadata, with Minari's reference scores if edited there
        out = dict(ours)
        out.update({k: meta[k] for k in ("ref_min_score", "ref_max_score") if _number(meta.get(k)) is not None})
    else:
        out = {k: meta[k] for k in _DESCRIPTIVE if meta.get(k) is not None}
    if isinstance(meta.get("dataset_id"), str):
        out["dataset_id"] = meta["dataset_id"]
    minari = {k: meta[k] for k in _TECHNICAL if meta.get(k) is not None}
    if skipped:
        minari["skipped_infos"] = skipped
    out["minari"] = minari
    return out


def _descriptive(ours: dict[str, Any]) -> dict[str, Any]:
    """Minari's descriptive fields filled from robolearn's metadata ``ours`` where the values fit them."""
    meta: dict[str, Any] = {}
    algorithm = next((ours[k] for k in ("algorithm_name", "algorithm", "policy") if isinstance(ours.get(k), str)), None)
    if algorithm:
        meta["algorithm_name"] = algorithm
    for key in ("author", "author_email"):
        value = ours.get(key)
        if isinstance(value, str):
            meta[key] = [value]
        elif isinstance(value, list | tuple | set) and all(isinstance(v, str) for v in value):
            meta[key] = sorted(value)
    description = ours.get("description")
    if not isinstance(description, str) and isinstance(ours.get("task"), str):
        description = f"robolearn dataset of task {ours['task']!r}"
    if isinstance(description, str):
        meta["description"] = description
    if isinstance(ours.get("code_permalink"), str):
        meta["code_permalink"] = ours["code_permalink"]
    if isinstance(ours.get("requirements"), list):
        meta["requirements"] = [str(r) for r in ours["requirements"]]
    lo, hi = _number(ours.get("ref_min_score")), _number(ours.get("ref_max_score"))
    if lo is not None and hi is not None:
        meta["ref_min_score"], meta["ref_max_score"] = lo, hi
        if isinstance(ours.get("num_episodes_average_score"), int):
            meta["num_episodes_average_score"] = ours["num_episodes_average_score"]
    return meta


def write_metadata(dataset: Dataset, dataset_id: str, data_format: str, minari_version: str, obs_space: Space,
                   act_space: Space, minari_meta: dict[str, Any]) -> dict[str, Any]:
    """metadata.json for ``dataset`` (less ``dataset_size``, known only once the files are written)."""
    ours = {k: v for k, v in dataset.metadata.items() if k not in ("minari", "dataset_id")}
    meta: dict[str, Any] = {
        "dataset_id": dataset_id, "total_episodes": dataset.num_episodes, "total_steps": dataset.num_steps,
        "data_format": data_format, "jpeg_encoding": False, "minari_version": minari_version,
        "observation_space": json.dumps(space_json(obs_space)), "action_space": json.dumps(space_json(act_space)),
    }
    for key in ("env_spec", "eval_env_spec"):
        if isinstance(minari_meta.get(key), str):
            meta[key] = minari_meta[key]
    meta.update(_descriptive(ours))
    meta[ROBOLEARN_KEY] = json.loads(json.dumps(jsonable(ours), default=str))
    return meta


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None if it is no finite number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    return float(value) if math.isfinite(float(value)) else None
