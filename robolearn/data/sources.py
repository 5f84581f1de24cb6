"""Where a named dataset is found, and the dataset as training reads it: the one resolution that `dataset=` (train,
finetune, bench cells, chunk-bc) and `runner.offline_data=` share.

A dataset is named by

1. a path, in any format `robolearn.data.formats` reads;
2. a name under ``data/`` (``data/<name>``, ``data/<suite>/<name>``, with or without ``-v0``);
3. a Minari dataset id (``mujoco/halfcheetah/medium-v0``, ``D4RL/pointmaze/umaze-v2``), found where
   ``minari.load_dataset`` looks: ``<root>/<id>/data/`` with root ``$MINARI_DATASETS_PATH``, else
   ``~/.minari/datasets``;
4. a D4RL dataset id (``halfcheetah-medium-v2``, ``antmaze-umaze-v0``, ``maze2d-umaze-v1``), found where D4RL keeps
   its downloads: ``$D4RL_DATASET_DIR`` (else ``~/.d4rl/datasets``) / the file D4RL downloads it to
   (``halfcheetah_medium-v2.hdf5``; any name `robolearn.data.formats.d4rl.d4rl_name` maps to the id) or
   ``<id>.hdf5``.

Nothing is downloaded: a missing dataset is a `ConfigError` that lists where it looked and how to get it.
`load_source` reads it as training does: a Minari Dict observation as the flat "policy" vector a policy sees in
the Gymnasium env (gymnasium.spaces.flatten's layout), and a D4RL file's id kept as ``metadata["d4rl_dataset"]``
(its ``task`` is left to `robolearn.data.standard`, which maps datasets to robolearn tasks).

    path, data = load_source("mujoco/halfcheetah/medium-v0")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from robolearn.data.dataset import DEFAULT_GROUP, Dataset
from robolearn.data.formats.d4rl import SUFFIXES, d4rl_name, download_file, download_url
from robolearn.data.formats.minari import ID_RE, minari_root
from robolearn.errors import ConfigError

_cache: dict[tuple[str, int], tuple[Path, Dataset]] = {}


def d4rl_root() -> Path:
    """Where D4RL keeps downloaded datasets: ``$D4RL_DATASET_DIR``, else ``~/.d4rl/datasets`` (d4rl/offline_env.py)."""
    return Path(os.environ.get("D4RL_DATASET_DIR") or Path.home() / ".d4rl" / "datasets").expanduser()


def resolve_dataset(name: str | os.PathLike[str]) -> Path:
    """The dataset ``name`` denotes: a path, a name under data/, a Minari id or a D4RL id (the module docstring)."""
    text = str(name).strip()
    path = Path(text).expanduser()
    if path.exists():
        return path
    data = Path("data")
    if not path.is_absolute() and not any(c in text for c in "*?["):
        for candidate in (data / text, data / f"{text}-v0", *data.glob(f"*/{text}"), *data.glob(f"*/{text}-v0")):
            if candidate.exists():
                return candidate
    looked = [f"{path} (a path)"]
    if not path.is_absolute():
        looked.append(f"data/{text}[-v0] and data/*/{text}[-v0] (robolearn collect's datasets)")
    hints = []
    d4rl_id = d4rl_name(text)
    if ID_RE.match(text):  # a D4RL id is a valid Minari id too: Minari's folder first, as minari would look
        found = minari_root() / text
        if (found / "data").is_dir():
            return found
        if d4rl_id is None:
            looked.append(f"{found} (Minari id {text!r}; "
                          f"MINARI_DATASETS_PATH={os.environ.get('MINARI_DATASETS_PATH')})")
            hints.append(f"`minari download {text}` fetches a Minari dataset there" + _versions(text))
    if d4rl_id is not None:
        root = d4rl_root()
        found = _d4rl_file(root, d4rl_id)
        if found is not None:
            return found
        file = download_file(d4rl_id) or f"{d4rl_id}.hdf5"
        looked.append(f"{root / file} and {root / (d4rl_id + '.hdf5')} (D4RL {d4rl_id}; "
                      f"D4RL_DATASET_DIR={os.environ.get('D4RL_DATASET_DIR')})")
        url = download_url(d4rl_id)
        hints.append(f"download D4RL's file into {root}" + (f": {url}" if url else " (d4rl/infos.py DATASET_URLS)")
                     + f", or let d4rl do it: gym.make({d4rl_id!r}).get_dataset()")
    hints = hints or ["make one with `robolearn collect` (e.g. `robolearn collect suite=d4rl-like`), or name a Minari "
                      "id (mujoco/halfcheetah/medium-v0) or a D4RL id (halfcheetah-medium-v2)"]
    raise ConfigError(f"dataset {text!r} not found; looked at " + "; ".join(looked) + ". To get it: "
                      + "; ".join(hints) + ". Nothing is downloaded here")


def _versions(dataset_id: str) -> str:
    """A note naming the local versions of a Minari dataset whose asked-for version is missing."""
    match = ID_RE.match(dataset_id)
    if match is None:
        return ""
    folder = minari_root() / (match.group("namespace") or "")
    names = sorted(p.name for p in folder.glob(f"{match.group('name')}-v*") if (p / "data").is_dir())
    return f" (here: {', '.join(names)})" if names else ""


def _d4rl_file(root: Path, d4rl_id: str) -> Path | None:
    """The file in D4RL's folder holding dataset ``d4rl_id``: named as D4RL downloads it, or ``<id>.hdf5``."""
    if not root.is_dir():
        return None
    for file in sorted(root.iterdir()):
        if file.is_file() and file.suffix.lower() in SUFFIXES and d4rl_name(file.name) == d4rl_id:
            return file
    return None


def load_source(name: str | os.PathLike[str]) -> tuple[Path, Dataset]:
    """(where, the dataset) as training reads it (the module docstring). The last dataset read is kept, so the
    train command's steps (its task, its record, its buffer) read it once; changing it on disk reads it again."""
    from robolearn.data.formats import load_dataset

    path = resolve_dataset(name)
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key not in _cache:
        _cache.clear()
        data = load_dataset(path, flatten=True)
        _normalize_metadata(data)
        _cache[key] = (path, data)
    return _cache[key]


def _normalize_metadata(data: Dataset) -> None:
    """A D4RL file names its D4RL id as its ``task``: keep it as ``d4rl_dataset`` only, since it is no robolearn
    task (`robolearn.data.standard` maps it to one)."""
    from sim.tasks import TASKS

    meta = data.metadata
    if meta.get("task") not in TASKS and meta.get("d4rl_dataset") is not None and meta.get("task") == meta.get(
            "d4rl_dataset"):
        del meta["task"]


def policy_size(data: Dataset) -> int | None:
    """How many numbers a "policy" observation of the dataset holds (None: it has no "policy" group)."""
    obs = data.observations.get(DEFAULT_GROUP)
    return None if obs is None else int(obs[0].size)


def dataset_task(name: str | os.PathLike[str]) -> Any:
    """The robolearn task (`robolearn.data.standard.TaskChoice`) the dataset ``name`` trains and scores on; None when
    it names none."""
    from robolearn.data.standard import dataset_task as choose

    path, data = load_source(name)
    return choose(data.metadata, policy_size(data), path)


__all__ = ["d4rl_root", "dataset_task", "load_source", "policy_size", "resolve_dataset"]
