"""Robot episodes on disk: one ``.safetensors`` file per episode plus a ``dataset.json`` index.

This is robolearn's in-memory episode format (T+1 observations, T actions/rewards, termination and
truncation flags per step) written without pickle, so a dataset is readable by any safetensors tool.
numpy, safetensors and json only (torch only in `to_replay_buffer`): `real/` writes it from robot
bags (`robolearn bag2dataset`), and the off-policy trainer reads it as offline data
(`runner.offline_data=<folder>`).

Episode file tensors::

    observations   [T+1, D] float32   o_0 .. o_T (o_T is the true final observation)
    actions        [T, A]   float32   the action executed after o_t (the human's during an intervention)
    rewards        [T]      float32   reward for (o_t, a_t) -> o_{t+1}; NaN where none was recorded
    terminations   [T]      bool      o_{t+1} is terminal (no bootstrap); only the last step can be set
    truncations    [T]      bool      the episode was cut after step t (time-out, reset, end of recording)
    interventions  [T]      bool      a human (teleop) chose a_t
    extra/<name>   [T, ...] or [T+1, ...]   anything else (raw policy actions, policy versions, tick times)

and the file's safetensors metadata ``{"robolearn_episode": <json>}`` holds the episode's metadata
(observation and action names, source, format version).

The last step always carries exactly one end flag (earlier steps none): an episode is a whole episode,
so a learner knows whether to bootstrap from o_T, and an n-step return never runs on into the next one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load, save

from robolearn.errors import DatasetError

FORMAT = "robolearn-episode"
FORMAT_VERSION = 1
INDEX = "dataset.json"
_META_KEY = "robolearn_episode"
_CORE = ("observations", "actions", "rewards", "terminations", "truncations", "interventions")


@dataclasses.dataclass
class Episode:
    """One episode: T steps, T+1 observations. Arrays are numpy; see the module docstring for shapes."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    interventions: np.ndarray | None = None
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.observations = np.asarray(self.observations, dtype=np.float32)
        self.actions = np.asarray(self.actions, dtype=np.float32)
        self.rewards = np.asarray(self.rewards, dtype=np.float32)
        self.terminations = np.asarray(self.terminations, dtype=bool)
        self.truncations = np.asarray(self.truncations, dtype=bool)
        steps = len(self.actions)
        if self.interventions is None:
            self.interventions = np.zeros(steps, dtype=bool)
        self.interventions = np.asarray(self.interventions, dtype=bool)
        self.extras = {k: np.asarray(v) for k, v in self.extras.items()}
        self.validate()

    def __len__(self) -> int:
        return len(self.actions)

    def validate(self) -> None:
        """Raise `DatasetError` naming the field when shapes or end flags are inconsistent.

        An episode must end in a flag: without one its last transition would read as the middle of an
        episode, and nothing would say whether to bootstrap from its final observation.
        """
        t = len(self.actions)
        if t < 1 or self.actions.ndim != 2:
            raise DatasetError(f"episode actions must be [T >= 1, A], got {self.actions.shape}")
        if self.observations.ndim != 2 or len(self.observations) != t + 1:
            raise DatasetError(f"episode observations must be [T+1={t + 1}, D], got {self.observations.shape}")
        for name in ("rewards", "terminations", "truncations", "interventions"):
            if getattr(self, name).shape != (t,):
                raise DatasetError(f"episode {name} must be [T={t}], got {getattr(self, name).shape}")
        ends = self.terminations | self.truncations
        if ends[:-1].any():
            raise DatasetError(f"episode ends before its last step (at {np.flatnonzero(ends[:-1]).tolist()})")
        if (self.terminations & self.truncations).any():
            raise DatasetError("a step cannot be both terminated and truncated")
        if not ends[-1]:
            raise DatasetError(f"{self.label} (T={t} steps) has no end flag on its last step: set terminations[-1] if "
                               "o_T is terminal, else truncations[-1] (cut by a time-out, a reset or the end of "
                               "the recording; learners bootstrap from o_T)")
        for name, value in self.extras.items():
            if value.ndim == 0 or len(value) not in (t, t + 1):
                raise DatasetError(f"episode extra {name!r} must have T={t} or T+1 rows, got {value.shape}")

    @property
    def label(self) -> str:
        """The episode's name in messages: its recorded id and source when the metadata holds them."""
        label = "episode"
        if "episode_id" in self.metadata:
            label += f" {self.metadata['episode_id']}"
        if "source" in self.metadata:
            label += f" of {self.metadata['source']}"
        return label

    # --- one file per episode ----------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The episode as one safetensors blob (metadata in the header)."""
        tensors = {name: np.ascontiguousarray(getattr(self, name)) for name in _CORE}
        tensors.update({f"extra/{k}": np.ascontiguousarray(v) for k, v in self.extras.items()})
        meta = {"format": FORMAT, "version": FORMAT_VERSION, **self.metadata}
        return save(tensors, metadata={_META_KEY: json.dumps(meta, sort_keys=True)})

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "episode") -> Episode:
        """Parse `to_bytes` output; a malformed blob raises `DatasetError`."""
        try:
            tensors = load(data)
            meta = json.loads(safetensors_metadata(data).get(_META_KEY, "{}"))
        except (SafetensorError, ValueError, OSError) as e:
            raise DatasetError(f"{source} is not a robolearn episode file ({e})") from e
        missing = [name for name in _CORE if name not in tensors]
        if missing or meta.get("format") != FORMAT:
            raise DatasetError(f"{source} is not a robolearn episode file (missing {missing or 'format tag'})")
        if meta.get("version", 0) > FORMAT_VERSION:
            raise DatasetError(f"{source} has episode format version {meta['version']}; upgrade robolearn")
        meta = {k: v for k, v in meta.items() if k not in ("format", "version")}
        extras = {k[len("extra/") :]: v for k, v in tensors.items() if k.startswith("extra/")}
        try:
            return cls(**{name: tensors[name] for name in _CORE}, extras=extras, metadata=meta)
        except DatasetError as e:
            raise DatasetError(f"{source}: {e}") from None


def safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors blob (its header is 8 bytes of length, then JSON)."""
    if len(data) < 8:
        raise ValueError("too short for a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError("safetensors header length exceeds the data")
    return json.loads(data[8 : 8 + size]).get("__metadata__", {}) or {}


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_episodes(folder: str | Path, episodes: Sequence[Episode], metadata: dict[str, Any] | None = None) -> Path:
    """Write ``episode_000000.safetensors``, ... and ``dataset.json`` into ``folder`` (created; files replaced).

    The index is written last, so a folder with an index always has all its episodes.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, episode in enumerate(episodes):
        name = f"episode_{i:06d}.safetensors"
        _atomic_write(folder / name, episode.to_bytes())
        names.append(name)
    index = {
        "format": FORMAT, "version": FORMAT_VERSION, "episodes": names,
        "lengths": [len(e) for e in episodes], "steps": int(sum(len(e) for e in episodes)),
        **(metadata or {}),
    }  # fmt: skip
    _atomic_write(folder / INDEX, json.dumps(index, indent=2, sort_keys=True).encode())
    return folder


def load_episodes(folder: str | Path) -> tuple[list[Episode], dict[str, Any]]:
    """The episodes listed in ``folder/dataset.json`` and the index's metadata."""
    folder = Path(folder)
    try:
        index = json.loads((folder / INDEX).read_text())
    except FileNotFoundError as e:
        raise DatasetError(f"{folder} has no {INDEX}: not a robolearn episode dataset") from e
    except json.JSONDecodeError as e:
        raise DatasetError(f"{folder / INDEX} is not valid JSON ({e})") from e
    if index.get("format") != FORMAT:
        raise DatasetError(f"{folder / INDEX} is not a robolearn episode index")
    episodes = []
    for name in index.get("episodes", []):
        file = folder / name
        if not file.is_file():
            raise DatasetError(f"episode file {file} listed in {INDEX} is missing")
        episodes.append(Episode.from_bytes(file.read_bytes(), source=str(file)))
    return episodes, index


# --- episodes -> flat transitions -------------------------------------------------------------------------


def to_transitions(episodes: Iterable[Episode], action_key: str = "actions") -> dict[str, np.ndarray]:
    """Flat arrays over all steps, in order: ``obs, actions, rewards, next_obs, terminated, truncated,
    interventions`` (rows: transitions). ``action_key`` picks ``actions`` or an extra (e.g. ``raw_actions``).

    Missing rewards (NaN) raise: label them first (a reward function over the observations).
    """
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminated",
                                                           "truncated", "interventions")}  # fmt: skip
    for episode in episodes:
        actions = episode.actions if action_key == "actions" else episode.extras.get(action_key)
        if actions is None or len(actions) != len(episode):
            raise DatasetError(f"episodes have no per-step {action_key!r} (extras: {sorted(episode.extras)})")
        if np.isnan(episode.rewards).any():
            raise DatasetError("episodes have steps without a recorded reward (NaN); label rewards before training")
        parts["obs"].append(episode.observations[:-1])
        parts["next_obs"].append(episode.observations[1:])
        parts["actions"].append(np.asarray(actions, dtype=np.float32))
        parts["rewards"].append(episode.rewards)
        parts["terminated"].append(episode.terminations)
        parts["truncated"].append(episode.truncations)
        parts["interventions"].append(episode.interventions)
    if not parts["obs"]:
        raise DatasetError("no episodes to turn into transitions")
    return {k: np.concatenate(v) for k, v in parts.items()}
