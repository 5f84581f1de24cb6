"""`Dataset`: robolearn's one in-memory dataset type for offline RL, stored flat and memory-mappable.

Episodes sit back to back in flat numpy arrays, so a million transitions are a few arrays, not a million
Python objects::

    observations[group]  [N + E, ...]   each episode's T+1 observations (o_0 .. o_T), episodes back to back;
                                        groups as the sim's: "policy", "critic", "pixels", ...
    actions              [N, A] float32
    rewards              [N]    float32
    terminations         [N]    bool    o_{t+1} is terminal: no bootstrap from it
    truncations          [N]    bool    the episode was cut after step t (time-out): bootstrap from o_{t+1}
    infos[name]          [N, ...]       per-step extras (success flags, interventions, raw actions, ...)
    lengths              [E]    int64   T of each episode

(N steps, E episodes.) Every episode ends in exactly one flag on its last step (Minari's EpisodeData rule),
so the flat transition view (`Transitions`, `Dataset.sample`) keeps time-outs as bootstraps: D4RL's
``qlearning_dataset`` drops every time-out transition and fakes ``next_observations`` across episode
boundaries; here ``next_obs`` is always the episode's own o_{t+1} and ``terminated`` is the true
termination only.

On disk (`save` / `load`): a folder of ``.npy`` files (loaded memory-mapped: a 1M-transition dataset opens in
milliseconds and pages in on use) and ``dataset.json`` (format, version, shapes, metadata such as the task,
``ref_min_score`` / ``ref_max_score`` for normalised scores, the collecting policy). Other formats
(Minari, D4RL HDF5, LeRobot v3, robot episode folders) convert to and from this type in
`robolearn.data.formats`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.errors import DatasetError
from robolearn.eval.scores import dataset_reference, normalized_score

FORMAT = "robolearn-dataset"
FORMAT_VERSION = 1
INDEX = "dataset.json"
DEFAULT_GROUP = "policy"
_STEP_FIELDS = ("actions", "rewards", "terminations", "truncations")


@dataclasses.dataclass
class EpisodeData:
    """One episode as arrays (views into the dataset): ``observations[group]`` [T+1, ...], the rest [T, ...]."""

    index: int
    observations: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.actions)


@dataclasses.dataclass
class Dataset:
    """Episodes stored flat (see the module docstring). Build one with `from_episodes`; arrays may be memmaps."""

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    lengths: np.ndarray
    infos: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    source: str = "dataset"  # the file or folder it came from, for error messages
    check_values: dataclasses.InitVar[bool] = True  # scan every float for NaN/inf (load skips it: save did it)

    def __post_init__(self, check_values: bool) -> None:
        if not isinstance(self.observations, Mapping):
            self.observations = {DEFAULT_GROUP: self.observations}
        self.observations = dict(self.observations)
        self.lengths = np.asarray(self.lengths, dtype=np.int64).reshape(-1)
        self.validate(check_values)
        self.step_starts = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)  # [E+1]

    @functools.cached_property
    def obs_index(self) -> np.ndarray:
        """The observation row of each step [N]: its own index plus one extra row per earlier episode."""
        return np.arange(self.num_steps, dtype=np.int64) + np.repeat(
            np.arange(self.num_episodes, dtype=np.int64), self.lengths)

    # --- shape and content checks ------------------------------------------------------------------------

    def validate(self, check_values: bool = True) -> None:
        """Raise `DatasetError` naming the source, field and fix for any inconsistency (and, with
        ``check_values``, any NaN or inf: a full pass over the data)."""
        where = self.source
        if self.lengths.ndim != 1 or len(self.lengths) == 0:
            raise DatasetError(f"{where}: no episodes")
        if (self.lengths < 1).any():
            raise DatasetError(f"{where}: episode {int(np.argmin(self.lengths))} has no steps; drop empty episodes")
        n, e = int(self.lengths.sum()), len(self.lengths)
        self.actions = _as(self.actions, np.float32, where, "actions")
        self.rewards = _as(self.rewards, np.float32, where, "rewards")
        self.terminations = _as(self.terminations, bool, where, "terminations")
        self.truncations = _as(self.truncations, bool, where, "truncations")
        if self.actions.ndim != 2 or len(self.actions) != n:
            raise DatasetError(f"{where}: actions must be [N={n}, A] (N = sum of episode lengths), "
                               f"got {self.actions.shape}")
        for name in ("rewards", "terminations", "truncations"):
            if getattr(self, name).shape != (n,):
                raise DatasetError(f"{where}: {name} must be [N={n}], got {getattr(self, name).shape}")
        if not self.observations:
            raise DatasetError(f"{where}: no observation group")
        for group, obs in self.observations.items():
            if not isinstance(obs, np.ndarray) or obs.ndim < 2 or len(obs) != n + e:
                raise DatasetError(f"{where}: observations[{group!r}] must be [N+E={n + e}, ...] (T+1 per episode), "
                                   f"got {getattr(obs, 'shape', type(obs).__name__)}")
        for name, value in self.infos.items():
            if not isinstance(value, np.ndarray) or value.ndim < 1 or len(value) != n:
                raise DatasetError(f"{where}: infos[{name!r}] must have N={n} rows, got "
                                   f"{getattr(value, 'shape', type(value).__name__)}")
        ends = np.cumsum(self.lengths) - 1
        flags = self.terminations | self.truncations
        if (self.terminations & self.truncations).any():
            step = int(np.argmax(self.terminations & self.truncations))
            raise DatasetError(f"{where}: step {step} is both terminated and truncated; a step ends one way")
        if not flags[ends].all():
            bad = int(np.flatnonzero(~flags[ends])[0])
            raise DatasetError(f"{where}: episode {bad} has no end flag on its last step: set terminations there "
                               "if its final observation is terminal, else truncations (a time-out)")
        if flags.sum() != e:
            inner = np.flatnonzero(flags)
            inner = inner[~np.isin(inner, ends)]
            raise DatasetError(f"{where}: end flags inside episodes (steps {inner[:5].tolist()}); split the data "
                               "into episodes at its terminations and truncations (lengths)")
        if not check_values:
            return
        for name, value in [("actions", self.actions), ("rewards", self.rewards),
                            *((f"observations[{g!r}]", o) for g, o in self.observations.items())]:
            check_finite(value, where, name)

    # --- sizes and episodes ------------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return len(self.lengths)

    @property
    def num_steps(self) -> int:
        return len(self.actions)

    def __len__(self) -> int:
        return self.num_steps

    def episode(self, index: int) -> EpisodeData:
        """Episode ``index`` as views into the flat arrays."""
        if not -self.num_episodes <= index < self.num_episodes:
            raise IndexError(f"episode {index} of {self.num_episodes}")
        index %= self.num_episodes
        s, t = int(self.step_starts[index]), int(self.step_starts[index + 1])
        o = s + index
        return EpisodeData(index, {g: v[o : o + (t - s) + 1] for g, v in self.observations.items()},
                           self.actions[s:t], self.rewards[s:t], self.terminations[s:t], self.truncations[s:t],
                           {k: v[s:t] for k, v in self.infos.items()})

    def episodes(self) -> Iterator[EpisodeData]:
        for i in range(self.num_episodes):
            yield self.episode(i)

    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of each episode [E] (float64)."""
        return np.add.reduceat(self.rewards.astype(np.float64), self.step_starts[:-1])

    def normalized_score(self, returns: float | np.ndarray) -> float | np.ndarray:
        """100 * (return - ref_min) / (ref_max - ref_min) with the metadata's D4RL / Minari reference scores
        (`robolearn.eval.scores`), in float64."""
        reference = dataset_reference(self.metadata)
        if reference is None:
            raise DatasetError(f"{self.source} has no ref_min_score / ref_max_score in its metadata: the task's "
                               "random and expert returns are unknown, so scores cannot be normalised")
        return normalized_score(np.asarray(returns, dtype=np.float64), *reference)

    # --- transitions --------------------------------------------------------------------------------------

    def transitions(self, group: str | None = None) -> Transitions:
        """The flat (o, a, r, o', terminated, truncated) view over every step, time-outs kept."""
        return Transitions(self, group or self.default_group)

    @property
    def default_group(self) -> str:
        return DEFAULT_GROUP if DEFAULT_GROUP in self.observations else next(iter(self.observations))

    def sample(self, batch_size: int, rng: np.random.Generator, group: str | None = None) -> dict[str, np.ndarray]:
        """A uniform batch of transitions (with replacement): see `Transitions.get`."""
        return self.transitions(group).get(rng.integers(0, self.num_steps, batch_size))

    # --- building -----------------------------------------------------------------------------------------

    @classmethod
    def from_episodes(cls, episodes: Iterable[Mapping[str, Any] | EpisodeData], metadata: dict[str, Any] | None = None,
                      source: str = "episodes") -> Dataset:
        """Concatenate episodes given as mappings (``observations`` an array or {group: array} with T+1 rows;
        ``actions``, ``rewards``, ``terminations``, ``truncations`` with T rows; optional ``infos``)."""
        obs: dict[str, list[np.ndarray]] = {}
        steps: dict[str, list[np.ndarray]] = {k: [] for k in _STEP_FIELDS}
        infos: dict[str, list[np.ndarray]] = {}
        lengths = []
        for i, ep in enumerate(episodes):
            ep = dataclasses.asdict(ep) if isinstance(ep, EpisodeData) else ep
            missing = [k for k in ("observations", *_STEP_FIELDS) if k not in ep]
            if missing:
                raise DatasetError(f"{source}: episode {i} lacks {missing}")
            groups = ep["observations"] if isinstance(ep["observations"], Mapping) else {
                DEFAULT_GROUP: ep["observations"]}
            t = len(ep["actions"])
            if i and set(groups) != set(obs):
                raise DatasetError(f"{source}: episode {i} has observation groups {sorted(groups)}, the first had "
                                   f"{sorted(obs)}")
            for g, v in groups.items():
                v = np.asarray(v)
                if len(v) != t + 1:
                    raise DatasetError(f"{source}: episode {i} observations[{g!r}] has {len(v)} rows for {t} steps; "
                                       "an episode holds T+1 observations (the final one included)")
                obs.setdefault(g, []).append(v)
            for k in _STEP_FIELDS:
                steps[k].append(np.asarray(ep[k]).reshape(t, -1) if k == "actions" else np.asarray(ep[k]))
            for k, v in (ep.get("infos") or {}).items():
                infos.setdefault(k, []).append(np.asarray(v))
            lengths.append(t)
        if not lengths:
            raise DatasetError(f"{source}: no episodes")
        incomplete = [k for k, v in infos.items() if len(v) != len(lengths)]
        if incomplete:
            raise DatasetError(f"{source}: infos {incomplete} are missing from some episodes")
        try:
            return cls({g: np.concatenate(v) for g, v in obs.items()},
                       *(np.concatenate(steps[k]) for k in _STEP_FIELDS), np.asarray(lengths),
                       {k: np.concatenate(v) for k, v in infos.items()}, dict(metadata or {}), source)
        except ValueError as e:  # shapes that differ between episodes
            raise DatasetError(f"{source}: episodes do not stack ({e})") from None

    # --- disk ---------------------------------------------------------------------------------------------

    def save(self, folder: str | Path) -> Path:
        """Write the arrays as ``.npy`` and ``dataset.json`` into a new ``folder`` (never overwrites one).

        Written to a temporary sibling and renamed at the end: a crash leaves no half dataset behind.
        """
        folder = Path(folder)
        if folder.exists():
            raise DatasetError(f"{folder} exists already; datasets are never overwritten")
        with staged_folder(folder) as tmp:
            arrays = self._arrays()
            for key, value in arrays.items():
                np.save(tmp / _file_name(key), np.ascontiguousarray(value), allow_pickle=False)
            index = {"format": FORMAT, "version": FORMAT_VERSION, "num_episodes": self.num_episodes,
                     "num_steps": self.num_steps, "arrays": {k: [list(v.shape), str(v.dtype)]
                                                             for k, v in arrays.items()},
                     "metadata": jsonable(self.metadata)}
            (tmp / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True))
        return folder

    def fingerprint(self) -> str:
        """The sha256 of the arrays (each one's name, dtype, shape and bytes, in name order): two datasets with the
        same fingerprint hold the same data, whatever their format, folder or metadata. `robolearn collect suite=`
        records it, so a regenerated dataset can be checked against the one committed results were measured on."""
        digest = hashlib.sha256()
        for key, value in sorted(self._arrays().items()):
            value = np.ascontiguousarray(value)  # saved arrays are; a memory map is read once, not copied
            digest.update(f"{key}:{value.dtype.str}:{value.shape};".encode())
            digest.update(memoryview(value.reshape(-1)).cast("B"))
        return digest.hexdigest()

    def _arrays(self) -> dict[str, np.ndarray]:
        out = {f"observations.{g}": v for g, v in self.observations.items()}
        out.update({k: getattr(self, k) for k in (*_STEP_FIELDS, "lengths")})
        out.update({f"infos.{k}": v for k, v in self.infos.items()})
        return out

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True, check_values: bool = False) -> Dataset:
        """A dataset `save` wrote; arrays memory-mapped unless ``mmap=False``.

        Shapes, flags and the index are checked; the values were checked for NaN/inf when the dataset was
        saved, and the arrays against the index's shapes and dtypes here, so the full pass over the data
        runs only with ``check_values=True`` (e.g. for files copied from elsewhere)."""
        folder = Path(folder)
        try:
            index = json.loads((folder / INDEX).read_text())
        except FileNotFoundError:
            raise DatasetError(f"{folder} has no {INDEX}: not a robolearn dataset") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DatasetError(f"{folder / INDEX} is corrupt ({e}); regenerate the dataset") from None
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            raise DatasetError(f"{folder / INDEX} is not a robolearn dataset index")
        if index.get("version", 0) > FORMAT_VERSION:
            raise DatasetError(f"{folder} has dataset format version {index['version']}; upgrade robolearn")
        arrays = {}
        for key, (shape, dtype) in index.get("arrays", {}).items():
            path = folder / _file_name(key)
            try:
                value = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
            except FileNotFoundError:
                raise DatasetError(f"{path} is missing; the dataset is incomplete") from None
            except (ValueError, OSError, EOFError) as e:
                raise DatasetError(f"{path} is truncated or corrupt ({e}); regenerate the dataset") from None
            if list(value.shape) != list(shape) or str(value.dtype) != dtype:
                raise DatasetError(f"{path} holds {value.dtype}{list(value.shape)}, the index says {dtype}{shape}; "
                                   "the dataset was modified or is corrupt")
            arrays[key] = value
        missing = [k for k in (*_STEP_FIELDS, "lengths") if k not in arrays]
        if missing or not any(k.startswith("observations.") for k in arrays):
            raise DatasetError(f"{folder / INDEX} lists no {missing or 'observations'}; the dataset is incomplete")
        pick = lambda prefix: {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}  # noqa: E731
        return cls(pick("observations."), *(arrays[k] for k in _STEP_FIELDS), arrays["lengths"], pick("infos."),
                   index.get("metadata", {}), str(folder), check_values)


class Transitions:
    """Flat transitions of a `Dataset` over one observation group: ``get(indices)`` gathers a batch.

    Index i is step i: ``obs = o_t``, ``next_obs = o_{t+1}`` of the same episode, ``terminated`` the true
    termination (no bootstrap), ``truncated`` a time-out (bootstrap from ``next_obs``).
    """

    def __init__(self, dataset: Dataset, group: str) -> None:
        if group not in dataset.observations:
            raise DatasetError(f"{dataset.source} has no observation group {group!r} "
                               f"(it has {sorted(dataset.observations)})")
        self.dataset, self.group = dataset, group
        self.obs = dataset.observations[group]

    def __len__(self) -> int:
        return self.dataset.num_steps

    def get(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        d = self.dataset
        rows = d.obs_index[indices]
        return {"obs": self.obs[rows], "actions": d.actions[indices], "rewards": d.rewards[indices],
                "next_obs": self.obs[rows + 1], "terminated": d.terminations[indices],
                "truncated": d.truncations[indices]}

    def arrays(self) -> dict[str, np.ndarray]:
        """Every transition as arrays in memory (a copy), e.g. for a replay buffer."""
        return self.get(np.arange(len(self)))


def to_replay_buffer(dataset: Dataset, groups: Iterable[str] = (DEFAULT_GROUP,), device: str = "cpu",
                     n_step: int = 1, gamma: float = 0.99, extras: dict[str, Any] | None = None) -> Any:
    """A `robolearn.core.buffers.ReplayBuffer` holding every transition, with the observation ``groups`` given
    (n-step returns stop at terminations and bootstrap at time-outs, as the buffer does for online data);
    ``extras``: per-transition tensors [N, ...] each sample carries too (e.g. Monte-Carlo returns).

    Actions are clipped to [-1, 1], the box every robolearn actor outputs and the sims apply (a dataset that
    recorded a Gaussian policy's raw draws holds actions far outside it, on which critics extrapolate wildly);
    a note says how many were clipped."""
    import torch

    from robolearn.core.buffers import ReplayBuffer

    groups = list(groups)
    flats = {g: dataset.transitions(g).arrays() for g in groups}
    first = flats[groups[0]]
    outside = int((np.abs(first["actions"]) > 1.0).sum())
    if outside:
        print(f"note: {dataset.source}: {outside} of {first['actions'].size} action entries lie outside [-1, 1] "
              f"(up to {float(np.abs(first['actions']).max()):.3g}); clipped to it, as the sims apply them")
        first["actions"] = np.clip(first["actions"], -1.0, 1.0)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return ReplayBuffer.from_transitions(
        {g: t(f["obs"]) for g, f in flats.items()}, t(first["actions"]), t(first["rewards"]),
        {g: t(f["next_obs"]) for g, f in flats.items()}, t(first["terminated"]), t(first["truncated"]),
        device=device, n_step=n_step, gamma=gamma, extras=extras,
    )  # fmt: skip


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, atomically (a temporary file beside it, renamed): a crash never leaves half a
    file (suite and benchmark records)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


@contextlib.contextmanager
def staged_folder(path: Path) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write a dataset folder into, renamed to ``path`` when the block ends
    and removed if it raises: a crash never leaves half a dataset under the real name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


READ_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError,
                                                EOFError, MemoryError, OverflowError, RecursionError)
"""What parsing a damaged file raises in numpy, h5py, pyarrow (its errors subclass these) and json."""


@contextlib.contextmanager
def reading(file: Path, what: str, hint: str = "the file is truncated or corrupt: regenerate or re-download the "
            "dataset", errors: tuple[type[BaseException], ...] = READ_ERRORS) -> Iterator[None]:
    """Turn a library's error while reading ``what`` from ``file`` into a DatasetError naming both."""
    try:
        yield
    except DatasetError:
        raise
    except errors as e:
        raise DatasetError(f"{file}: cannot read {what} ({type(e).__name__}: {str(e)[:300]}); {hint}") from None


def read_json(file: Path, what: str, missing: str,
              guard: Callable[[Path, str], contextlib.AbstractContextManager[Any]] = reading) -> Any:
    """The JSON document in ``file``, for the formats' metadata files (Minari's metadata.json, LeRobot's info.json).

    No such file raises a DatasetError with the message ``missing`` (the caller knows what the file's absence
    means: not a dataset folder, an incomplete download); one that does not parse raises the DatasetError of
    ``guard(file, what)`` (default `reading`; a format passes its own to give its own hint). The value is not
    checked: callers check the shape they need.
    """
    file = Path(file)
    if not file.is_file():
        raise DatasetError(missing)
    with guard(file, what):
        return json.loads(file.read_text(encoding="utf-8"))


def _file_name(key: str) -> str:
    """The ``.npy`` file of an array key; group and info names may hold "/" (nested Minari keys): escaped."""
    return urllib.parse.quote(key, safe=".-_") + ".npy"


def _as(value: Any, dtype: Any, where: str, name: str) -> np.ndarray:
    try:
        arr = value if isinstance(value, np.ndarray) and value.dtype == dtype else np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise DatasetError(f"{where}: {name} cannot be read as {np.dtype(dtype).name} ({e})") from None
    return arr


def check_finite(value: np.ndarray, where: str, name: str) -> None:
    """Raise `DatasetError` naming ``where`` and ``name`` at the first row with a NaN or inf (chunked: memmaps)."""
    if not np.issubdtype(value.dtype, np.floating):
        return
    chunk = 1 << 22  # bounded memory on memory-mapped arrays
    flat = value.reshape(len(value), -1)
    for s in range(0, len(flat), max(1, chunk // max(1, flat.shape[1]))):
        part = flat[s : s + max(1, chunk // max(1, flat.shape[1]))]
        if not np.isfinite(part).all():
            row = s + int(np.flatnonzero(~np.isfinite(part).all(axis=1))[0])
            raise DatasetError(f"{where}: {name} has NaN or inf (row {row}); clean or drop those steps")


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars and arrays as plain Python, non-finite floats as strings (for JSON)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value

