"""`read`: a Minari dataset folder as a `Dataset`.

metadata.json is read and checked (data format, episode count, spaces), the episodes come from the storage
backend (`arrow` or `hdf5`), then infos are fitted to one row per step and the metadata mapped (`metadata`).
``flatten=True`` (what training reads, `robolearn.data.sources`) turns a Dict / Tuple observation into the one
group "policy", laid out as ``gymnasium.spaces.flatten`` does (`flatten`), the vector a policy sees in the
dataset's Gymnasium env.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from robolearn.data.dataset import DEFAULT_GROUP, Dataset, read_json
from robolearn.data.formats.minari.arrow import read_arrow
from robolearn.data.formats.minari.flatten import flat_leaves, flat_observation
from robolearn.data.formats.minari.hdf5 import read_hdf5
from robolearn.data.formats.minari.layout import DATA_FORMATS, METADATA, data_dir
from robolearn.data.formats.minari.metadata import read_metadata
from robolearn.data.formats.minari.spaces import Space, parse_space
from robolearn.errors import DatasetError


def read(path: Path, flatten: bool = False, **_: Any) -> Dataset:
    """The Minari dataset at ``path`` (its folder ``<root>/<id>`` or that folder's ``data/``) as a `Dataset`.

    ``flatten``: a Dict / Tuple observation space without a "policy" entry becomes the single float32 group
    "policy" in ``gymnasium.spaces.flatten``'s layout (sorted Dict keys; `metadata["minari"]["flattened"]` lists
    the parts); otherwise each leaf is a group of its own."""
    path = Path(path)
    data = data_dir(path)
    meta = read_json(data / METADATA, "the dataset metadata",
                     f"{path} is not a Minari dataset folder: {data / METADATA} is missing")
    if not isinstance(meta, dict):
        raise DatasetError(f"{data / METADATA} (the dataset metadata) is not a JSON object; the dataset is corrupt")
    fmt = meta.get("data_format")
    if fmt not in DATA_FORMATS:
        raise DatasetError(f"{data / METADATA}: data_format {fmt!r} is not one of {', '.join(DATA_FORMATS)}")
    total = meta.get("total_episodes")
    if not isinstance(total, int) or isinstance(total, bool) or total < 0:
        raise DatasetError(f"{data / METADATA}: total_episodes {total!r} is not a count; the metadata is corrupt")
    obs_space, act_space = _spaces(meta, data / METADATA)
    reader = read_hdf5 if fmt == "hdf5" else read_arrow
    episodes = list(reader(data, fmt, total, obs_space, act_space, bool(meta.get("jpeg_encoding", True))))
    steps = sum(len(ep["actions"]) for ep in episodes)
    if meta.get("total_steps", steps) != steps:
        raise DatasetError(f"{data / METADATA} says total_steps {meta.get('total_steps')!r}, the episodes hold {steps} "
                           "steps; the dataset is incomplete or its metadata stale: regenerate it")
    for ep in episodes:  # a Discrete (or scalar Box) leaf is one number per row: a [T+1, 1] group
        ep["observations"] = {g: v.reshape(len(v), 1) if v.ndim == 1 else v for g, v in ep["observations"].items()}
    skipped = _fit_infos(episodes)
    metadata = read_metadata(meta, skipped)
    if skipped:
        warnings.warn(f"{path}: infos {sorted(skipped)} not read ({'; '.join(skipped.values())})", stacklevel=2)
    dataset = Dataset.from_episodes(episodes, metadata, source=str(path))
    if flatten and obs_space.kind in ("Dict", "Tuple") and DEFAULT_GROUP not in dataset.observations:
        dataset.observations = {DEFAULT_GROUP: flat_observation(obs_space, dataset.observations)}
        metadata["minari"]["flattened"] = ["/".join(names) for names, _ in flat_leaves(obs_space)]
    return dataset


def _spaces(meta: dict[str, Any], where: Path) -> tuple[Space, Space]:
    """The observation and action spaces of metadata.json ``meta``: one flat action space, no Text observations."""
    spaces = {}
    for key in ("observation_space", "action_space"):
        if key not in meta:
            raise DatasetError(f"{where} has no {key} (older Minari datasets rebuild it from env_spec with "
                               "gymnasium); load and re-save it with minari>=0.5")
        spaces[key] = parse_space(meta[key], f"{where} {key}")
    obs_space, act_space = spaces["observation_space"], spaces["action_space"]
    if act_space.kind not in ("Box", "Discrete", "MultiDiscrete", "MultiBinary"):
        raise DatasetError(f"{where}: action_space is a {act_space.kind}; robolearn datasets hold one flat "
                           "action vector per step: flatten the actions into a Box")
    for names, leaf in obs_space.leaves():
        if leaf.kind == "Text":
            raise DatasetError(f"{where}: observation {'/'.join(names) or 'space'} is a Text space; "
                               "robolearn datasets hold arrays: drop or encode it")
    return obs_space, act_space


def _fit_infos(episodes: list[dict[str, Any]]) -> dict[str, str]:
    """Keep the infos that give every episode one row per step (dropping the reset row of T+1-row infos) with
    the same trailing shape; return the skipped names and why."""
    skipped: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for ep in episodes:
        t = len(ep["actions"])
        for name, value in ep["infos"].items():
            if isinstance(value, str):
                skipped.setdefault(name, value)
            elif len(value) not in (t, t + 1):
                skipped.setdefault(name, f"{name} has {len(value)} rows for {t} steps")
            elif shapes.setdefault(name, value.shape[1:]) != value.shape[1:]:
                skipped.setdefault(name, f"{name} changes shape between episodes")
    names = set().union(*(ep["infos"] for ep in episodes)) if episodes else set()
    for name in names - set(skipped):
        if any(name not in ep["infos"] for ep in episodes):
            skipped[name] = f"{name} is missing from some episodes"
    for ep in episodes:
        t = len(ep["actions"])
        ep["infos"] = {k: v[len(v) - t:] for k, v in ep["infos"].items() if k not in skipped}
    return skipped
