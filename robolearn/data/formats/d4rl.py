"""D4RL HDF5 files (the layout ``d4rl.get_dataset()`` reads) to and from `Dataset`.

A D4RL file is flat, one row per step, episodes back to back, and stores no episode lengths::

    observations       [N, ...]  o_t of each step (the final observation of an episode is NOT a row)
    actions            [N, A]
    rewards            [N]       (or [N, 1])
    terminals          [N]       o_{t+1} is terminal
    timeouts           [N]       the episode was cut after step t (time limit); missing in old v0 files
    next_observations  [N, ...]  o_{t+1}: only in some files (gym-mujoco v2 has it, antmaze does not)
    infos/*            [N, ...]  per-step extras (qpos, qvel, goal, action_log_probs, ...)
    metadata/*                   scalars (``metadata/algorithm``, ``metadata/iteration``) and policy weights

Reading (`read`): episodes end at ``terminals | timeouts``; a row that is both counts as terminated. Each
episode then needs its T+1 observations o_0 .. o_T:

- with ``next_observations``: o_T is ``next_observations`` of the episode's last row, so every step is kept.
  A row i whose ``next_observations[i]`` differs from ``observations[i + 1]`` without a flag (a cut in the data,
  e.g. a wrapped replay buffer) also ends its episode, as a truncation (bootstrap from the stored o_{t+1}).
- without it, o_T of an episode is unknown (row t+1 is already the next episode's reset):

  * an episode that timed out loses its last step and ends, truncated, at the step before, whose next
    observation (the dropped row's o_t) is stored. That is exact: a time-out is an arbitrary cut, so the shorter
    episode is as true as the longer one; only the dropped step's reward and action are lost.
  * an episode that terminated keeps its last step (``terminal_obs="repeat"``, the default): its o_T is
    filled with a copy of o_{T-1}. A terminated transition never bootstraps from o_T, so no value target reads
    the copy (only code that uses o_T for something else, e.g. a dynamics model, would see it); the terminal
    reward (antmaze's goal reward sits there) and the termination itself stay true. ``terminal_obs="drop"``
    instead drops that step too and moves the termination to the step before (which claims o_{T-1} was
    terminal and loses the final reward: an approximation, off by default).
  * a one-step episode whose step is dropped disappears.

  Every dropped step and repeated observation is counted in a warning and in ``metadata["d4rl_conversion"]``.
- a trailing unfinished segment (rows after the file's last flag: most D4RL files stop mid-episode because
  collection stopped at N steps) is an episode that ends in a truncation: bootstrap, since it did not
  terminate. Without ``next_observations`` its last row is dropped like a time-out's.
- without ``timeouts`` (old v0 files) episode ends other than terminals are unknown: pass
  ``max_episode_steps`` (the env's time limit) and a time-out is put every that many steps since the last end,
  as D4RL's ``qlearning_dataset`` and ``sequence_dataset`` do; otherwise it is an error.
- per-step ``infos/*`` (numbers, N rows; nested names joined with "/") keep the rows of the kept steps;
  others are left out and listed. Scalar ``metadata/*`` values go into ``Dataset.metadata``; array ones
  (D4RL stores the collecting policy's weights there) are left out.

What D4RL's ``qlearning_dataset`` does differently: it ignores ``next_observations`` and sets
``next_observations[i] = observations[i + 1]`` for every row, so a terminal row's "next observation" is the next
episode's reset; it *skips* every time-out row (with ``terminate_on_end=True`` it keeps it, not done, with that
reset as its next observation: a bootstrap across episodes); it always drops the file's last row; and it keeps
a terminal row (its fake next observation is harmless there: no bootstrap). So its data never bootstraps past a
time limit. Here a time-out is a truncation (bootstrap from the true o_{t+1}) and ``next_obs`` never crosses
into another episode.

Reference scores: D4RL normalises a return as 100 * (return - ref_min) / (ref_max - ref_min) with the
reference returns in ``d4rl/infos.py`` (``REF_MIN_SCORE`` / ``REF_MAX_SCORE``: the random policy's and an
expert's average return); `robolearn.eval.d4rl_reference` holds them (`REF_SCORES`, re-exported here) for the
gym-mujoco, antmaze, maze2d, adroit and kitchen datasets, and `download_file` / `download_url` say where D4RL puts
and gets each file. `read` finds the dataset's name in ``env=``, else in ``metadata/task`` (or ``env_name`` /
``dataset_id``) inside the file, else in the file name (a D4RL id such as ``hopper-medium-v2.hdf5`` or the file
name D4RL downloads, e.g. ``hopper_medium-v2.hdf5`` or ``Ant_maze_u-maze_..._sparse_fixed.hdf5``), and puts
``task`` (and ``d4rl_dataset``: the D4RL id), ``ref_min_score`` and ``ref_max_score`` into the metadata, so
``Dataset.normalized_score`` gives D4RL's numbers. Reference scores stored in the file's metadata take
precedence over the table. ``env=`` for a different task than the file's ``metadata/task`` is an error.

Writing (`write`, ``robolearn collect format=d4rl``): the same layout, with ``next_observations`` (so reading
back is lossless and no step is dropped), bool ``terminals`` / ``timeouts``, ``infos/<name>`` and
``metadata/<key>`` (strings and numbers as scalars, other values as JSON strings with the attribute
``json=True``; ``robolearn_version`` and ``observation_group`` added). A D4RL file holds one observation array,
so one observation group is written: ``group=`` (default: the dataset's default group, "policy"); the others
are left out with a warning. The group's name is stored in ``metadata/observation_group`` and restored on read.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import robolearn
from robolearn.data.dataset import DEFAULT_GROUP, Dataset, check_finite, jsonable
from robolearn.errors import DatasetError
from robolearn.eval.d4rl_reference import ADROIT, GYM_MUJOCO, GYM_MUJOCO_DATASETS, REF_SCORES
from robolearn.eval.scores import d4rl_reference

SUFFIXES = (".hdf5", ".h5")
_REQUIRED = ("observations", "actions", "rewards", "terminals")
_TOP = (*_REQUIRED, "timeouts", "next_observations")
_TASK_KEYS = ("task", "env_name", "dataset_id")
TERMINAL_OBS = ("repeat", "drop")

# --- D4RL names, files and reference scores --------------------------------------------------------------

#: Where D4RL's ``DATASET_URLS`` (d4rl/infos.py, d4rl/gym_mujoco/__init__.py) point: ``<URL_BASE>/<folder>/<file>``.
URL_BASE = "http://rail.eecs.berkeley.edu/datasets/offline_rl"
_ANTMAZE = {"umaze": ("u-maze", False, False), "umaze-diverse": ("u-maze", True, True),
            "medium-play": ("big-maze", True, False), "medium-diverse": ("big-maze", True, True),
            "large-play": ("hardest-maze", True, False), "large-diverse": ("hardest-maze", True, True)}
_KITCHEN_FILES = {"complete": "mini_kitchen_microwave_kettle_light_slider-v0",
                  "partial": "kitchen_microwave_kettle_light_slider-v0",
                  "mixed": "kitchen_microwave_kettle_bottomburner_light-v0"}


def _files() -> dict[str, str]:
    """D4RL dataset id -> ``<folder>/<file stem>`` of its download (the file D4RL keeps in D4RL_DATASET_DIR)."""
    files = {"maze2d-open-v0": "maze2d/maze2d-open-sparse", "maze2d-open-dense-v0": "maze2d/maze2d-open-dense"}
    for maze in ("umaze", "medium", "large"):
        files[f"maze2d-{maze}-v1"] = f"maze2d/maze2d-{maze}-sparse-v1"
        files[f"maze2d-{maze}-dense-v1"] = f"maze2d/maze2d-{maze}-dense-v1"
    for env in GYM_MUJOCO:
        for dset in GYM_MUJOCO_DATASETS[0]:  # v0: medium-replay is <env>_mixed (walker2d's walker_mixed)
            stem = {"medium-replay": "mixed"}.get(dset, dset.replace("-", "_"))
            robot = "walker" if stem == "mixed" and env == "walker2d" else env
            files[f"{env}-{dset}-v0"] = f"gym_mujoco/{robot}_{stem}"
        for version in (1, 2):
            for dset in GYM_MUJOCO_DATASETS[version]:
                files[f"{env}-{dset}-v{version}"] = f"gym_mujoco_v{version}/{env}_{dset.replace('-', '_')}-v{version}"
    for task in ADROIT:
        files.update({f"{task}-human-v0": f"hand_dapg/{task}-v0_demos_clipped",
                      f"{task}-cloned-v0": f"hand_dapg/{task}-demos-v0-bc-combined",
                      f"{task}-expert-v0": f"hand_dapg/{task}-v0_expert_clipped"})
        files.update({f"{task}-{dset}-v1": f"hand_dapg_v1/{task}-{dset}-v1" for dset in ("human", "cloned", "expert")})
    for name, (maze, multistart, multigoal) in _ANTMAZE.items():
        stem = f"Ant_maze_{maze}_noisy_multistart_{multistart}_multigoal_{multigoal}_sparse"
        files[f"antmaze-{name}-v0"] = f"ant_maze_new/{stem}"
        files[f"antmaze-{name}-v2"] = f"ant_maze_v2/{stem}_fixed"
    files.update({f"kitchen-{name}-v0": f"kitchen/{stem}" for name, stem in _KITCHEN_FILES.items()})
    return files


_FILES = _files()
#: downloaded file stem (lower case) -> D4RL dataset id
_FILE_NAMES = {path.rsplit("/", 1)[1].lower(): name for name, path in _FILES.items()}


def d4rl_name(name: str | os.PathLike[str]) -> str | None:
    """The D4RL dataset id that ``name`` (an id, a file name or path as D4RL downloads it) denotes, or None."""
    stem = Path(str(name).strip()).name
    if stem.lower().endswith(SUFFIXES):
        stem = stem.rsplit(".", 1)[0]
    stem = stem.lower()
    if stem in _FILE_NAMES:
        return _FILE_NAMES[stem]
    key = stem.replace("_", "-")
    return key if key in REF_SCORES else None


def download_file(name: str) -> str | None:
    """The file name D4RL downloads dataset id ``name`` to (``halfcheetah_medium-v2.hdf5``), None if unknown."""
    path = _FILES.get(name)
    return None if path is None else path.rsplit("/", 1)[1] + ".hdf5"


def download_url(name: str) -> str | None:
    """The URL D4RL downloads dataset id ``name`` from (d4rl/infos.py ``DATASET_URLS``), None if unknown."""
    path = _FILES.get(name)
    return None if path is None else f"{URL_BASE}/{path}.hdf5"


def reference_scores(name: str | os.PathLike[str]) -> tuple[float, float] | None:
    """D4RL's (ref_min_score, ref_max_score) for a dataset id or file name, None where D4RL has none."""
    key = d4rl_name(name)
    return None if key is None else d4rl_reference(key)


def _same_task(a: str, b: str) -> bool:
    canon = lambda s: d4rl_name(s) or s.strip().lower().replace("_", "-")  # noqa: E731
    return canon(a) == canon(b)


# --- detect / read ------------------------------------------------------------------------------------------


def detect(path: Path) -> bool:
    """An .hdf5 / .h5 file with ``observations`` and ``actions`` datasets at its top level."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() not in SUFFIXES:
        return False
    try:
        with h5py.File(path, "r") as f:
            return all(isinstance(f.get(k), h5py.Dataset) for k in ("observations", "actions"))
    except Exception:  # not HDF5 or damaged: not this format
        return False


def read(path: Path, env: str | None = None, *, terminal_obs: str = "repeat", max_episode_steps: int | None = None,
         group: str | None = None, **_: Any) -> Dataset:
    """The D4RL file at ``path`` as a `Dataset` (see the module docstring for the mapping).

    ``env``: the task / D4RL dataset id (``"hopper-medium-v2"``, for the reference scores); it goes before the
    file's name and must agree with the file's ``metadata/task``. ``terminal_obs``: "repeat" or "drop", for
    terminated episodes in files without ``next_observations``. ``max_episode_steps``: the time limit, for files
    without ``timeouts``. ``group``: the observation group's name (default: the file's
    ``metadata/observation_group``, else "policy").
    """
    path = Path(path)
    if terminal_obs not in TERMINAL_OBS:
        raise DatasetError(f"terminal_obs={terminal_obs!r}: use one of {', '.join(TERMINAL_OBS)}")
    raw, infos, meta, skipped = _load(path)
    where = str(path)
    n = len(raw["observations"])
    flat = raw["observations"].ndim == 1  # one number per step: a [N, 1] group
    obs = raw["observations"].reshape(n, 1) if flat else raw["observations"]
    next_obs = raw.get("next_observations")
    if next_obs is not None and flat:
        next_obs = next_obs.reshape(n, 1)
    actions = raw["actions"].reshape(n, -1)
    rewards = raw["rewards"].reshape(n)
    for name, value in (("observations", obs), ("next_observations", next_obs), ("actions", actions),
                        ("rewards", rewards)):
        if value is not None:
            check_finite(value, where, name)
    terminals = _flags(raw["terminals"], where, "terminals")
    if "timeouts" in raw:
        timeouts = _flags(raw["timeouts"], where, "timeouts") & ~terminals  # both: the termination is the truth
    elif max_episode_steps is not None:
        if max_episode_steps < 1:
            raise DatasetError(f"max_episode_steps={max_episode_steps}: give the env's time limit (>= 1)")
        timeouts = _derived_timeouts(terminals, int(max_episode_steps))
    else:
        raise DatasetError(f"{where} has no timeouts dataset (an old D4RL v0 file?): episode ends other than "
                           "terminals are unknown; pass max_episode_steps= (the env's time limit, e.g. 1000 for "
                           "gym-mujoco) to put a time-out every that many steps, as D4RL's qlearning_dataset did")

    notes: dict[str, Any] = {}
    if next_obs is not None:
        out = _with_next_observations(obs, next_obs, terminals, timeouts, notes)
    else:
        out = _without_next_observations(obs, terminals, timeouts, terminal_obs, where, notes)
    observations, keep, term, trunc, lengths = out
    if skipped:
        notes["skipped_infos"] = skipped
    _warn(where, notes)

    stored_group = meta.pop("observation_group", None)
    group = group or str(stored_group or DEFAULT_GROUP)
    meta.update(_task_and_scores(path, env, meta))
    if notes:
        meta["d4rl_conversion"] = notes
    return Dataset({group: observations}, actions[keep], rewards[keep], term[keep], trunc[keep], lengths,
                   {k: v[keep] for k, v in infos.items()}, meta, where)


def _load(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any], list[str]]:
    """(top-level arrays, per-step infos, scalar metadata, names of infos left out), checked; errors named."""
    if not path.is_file():
        raise DatasetError(f"{path} does not exist or is not a file")
    if path.stat().st_size == 0:
        raise DatasetError(f"{path} is empty (0 bytes): the download or write did not finish; fetch or write it "
                           "again")
    try:
        with h5py.File(path, "r") as f:
            handles = _top_level(f, path)
            raw = {k: ds[()] for k, ds in handles.items()}
            infos, skipped = _infos(f, len(raw["observations"]))
            meta = _metadata(f)
    except DatasetError:
        raise
    except Exception as e:  # h5py raises OSError, KeyError, RuntimeError, ... on damaged files
        raise DatasetError(f"{path} is not a readable HDF5 file: truncated or corrupt ({type(e).__name__}: {e}); "
                           "download or write it again") from None
    return raw, infos, meta, skipped


def _top_level(f: h5py.File, path: Path) -> dict[str, h5py.Dataset]:
    """The top-level datasets, their dtypes and row counts checked before anything is read."""
    missing = [k for k in _REQUIRED if not isinstance(f.get(k), h5py.Dataset)]
    if missing:
        groups = [k for k in missing if k in f]
        raise DatasetError(f"{path}: no {', '.join(missing)} dataset at the top level (it has {sorted(f.keys())}"
                           f"{'; ' + ', '.join(groups) + ' is a group' if groups else ''}): a D4RL file holds "
                           "observations, actions, rewards, terminals and timeouts arrays; is it a D4RL dataset?")
    handles = {k: f[k] for k in _TOP if isinstance(f.get(k), h5py.Dataset)}
    for name, ds in handles.items():
        kind = ds.dtype.kind
        if kind not in "biuf":
            what = "strings" if kind in "SUO" else f"{ds.dtype} values"
            raise DatasetError(f"{path}: {name} holds {what} (dtype {ds.dtype}); D4RL stores numbers there: "
                               "regenerate the file")
        if ds.ndim == 0:
            raise DatasetError(f"{path}: {name} is a scalar; it needs one row per step")
    n = handles["observations"].shape[0]
    if n == 0:
        raise DatasetError(f"{path} holds no steps (observations has 0 rows)")
    for name, ds in handles.items():
        if ds.shape[0] != n:
            raise DatasetError(f"{path}: {name} has {ds.shape[0]} rows, observations {n}; every top-level array "
                               "has one row per step: the file is truncated or mixes datasets, regenerate it")
        if name in ("rewards", "terminals", "timeouts") and ds.shape not in ((n,), (n, 1)):
            raise DatasetError(f"{path}: {name} must be [N] (one value per step), got {ds.shape}")
    if handles["actions"].ndim > 2:
        raise DatasetError(f"{path}: actions must be [N, A], got {handles['actions'].shape}")
    if "next_observations" in handles and handles["next_observations"].shape != handles["observations"].shape:
        raise DatasetError(f"{path}: next_observations is {handles['next_observations'].shape}, observations "
                           f"{handles['observations'].shape}; they must match (o_t and o_t+1 per row)")
    return handles


def _infos(f: h5py.File, n: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per-step ``infos/*`` arrays (numbers, bools or bytes with N rows) and the names of the others."""
    infos: dict[str, np.ndarray] = {}
    skipped: list[str] = []
    group = f.get("infos")
    if not isinstance(group, h5py.Group):
        return infos, skipped

    def visit(name: str, item: Any) -> None:
        if not isinstance(item, h5py.Dataset):
            return
        if item.dtype.kind in "biufS" and item.ndim >= 1 and item.shape[0] == n:
            infos[name] = item[()]
        else:
            skipped.append(name)

    group.visititems(visit)
    return infos, skipped


def _metadata(f: h5py.File) -> dict[str, Any]:
    """Scalar ``metadata/*`` values (strings decoded, ``json``-marked ones parsed); arrays are left out."""
    meta: dict[str, Any] = {}
    group = f.get("metadata")
    if not isinstance(group, h5py.Group):
        return meta

    def visit(name: str, item: Any) -> None:
        if not isinstance(item, h5py.Dataset) or item.ndim != 0:
            return  # arrays: D4RL keeps the collecting policy's weights under metadata/policy/*
        value = item[()]
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif isinstance(value, np.generic):
            value = value.item()
        if item.attrs.get("json", False) and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        meta[name] = value

    group.visititems(visit)
    return meta


def _flags(value: np.ndarray, where: str, name: str) -> np.ndarray:
    """A 0/1 array (bool, int or float, as D4RL files vary) as bool; other values are an error."""
    value = np.asarray(value).reshape(-1)
    if value.dtype == bool:
        return value.view(np.uint8) != 0  # any nonzero byte is true, whatever h5py put in the bool
    bad = ~((value == 0) | (value == 1))
    if bad.any():
        row = int(np.argmax(bad))
        raise DatasetError(f"{where}: {name} holds {value[row].item()!r} at row {row}; {name} are flags (0 or 1): "
                           "the file is damaged or not D4RL")
    return value == 1


def _derived_timeouts(terminals: np.ndarray, limit: int) -> np.ndarray:
    """A time-out every ``limit`` steps since the file's start or the last terminal (D4RL's episode_step)."""
    rows = np.arange(len(terminals))
    last_terminal = np.maximum.accumulate(np.where(terminals, rows, -1))
    start = np.concatenate([[0], last_terminal[:-1] + 1])
    return ((rows - start + 1) % limit == 0) & ~terminals


def _same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: a and b equal (floats: up to rounding, as IQL's own check does with 1e-6)."""
    same = (a == b).reshape(len(a), -1).all(axis=1)
    if (a.dtype.kind == "f" or b.dtype.kind == "f") and not same.all():  # the slower check only where needed
        rows = np.flatnonzero(~same)
        same[rows] = np.isclose(a[rows], b[rows], rtol=1e-5, atol=1e-6).reshape(len(rows), -1).all(axis=1)
    return same


Converted = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _with_next_observations(obs: np.ndarray, next_obs: np.ndarray, terminals: np.ndarray, timeouts: np.ndarray,
                            notes: dict[str, Any]) -> Converted:
    """Every step kept: o_T of each episode is its last row's next_observations."""
    n = len(obs)
    ends = terminals | timeouts
    cut = np.zeros(n, bool)
    cut[:-1] = ~ends[:-1] & ~_same_rows(next_obs[:-1], obs[1:])
    cut[-1] = not ends[-1]  # the file stops mid-episode: a truncation
    if cut[:-1].any():
        notes["unflagged_cuts"] = int(cut[:-1].sum())
    if cut[-1]:
        notes["unfinished_tail_steps"] = int(n - 1 - (np.flatnonzero(ends)[-1] if ends.any() else -1))
    truncations = timeouts | cut
    last = np.flatnonzero(terminals | truncations)
    lengths = np.diff(np.concatenate([[-1], last]))
    e = len(last)
    episode = np.repeat(np.arange(e), lengths)
    observations = np.empty((n + e, *obs.shape[1:]), np.result_type(obs, next_obs))
    observations[np.arange(n) + episode] = obs
    observations[last + np.arange(e) + 1] = next_obs[last]
    return observations, np.ones(n, bool), terminals, truncations, lengths


def _without_next_observations(obs: np.ndarray, terminals: np.ndarray, timeouts: np.ndarray, terminal_obs: str,
                               where: str, notes: dict[str, Any]) -> Converted:
    """o_T unknown: time-outs (and the unfinished tail) drop their last step, terminations repeat o_{T-1}."""
    n = len(obs)
    ends = terminals | timeouts
    unfinished = not ends[-1]
    last = np.flatnonzero(ends)
    if unfinished:
        last = np.append(last, n - 1)
        notes["unfinished_tail_steps"] = int(n - 1 - (last[-2] if len(last) > 1 else -1))
    lengths = np.diff(np.concatenate([[-1], last]))
    terminated = terminals[last]
    repeat = terminated & (terminal_obs == "repeat")
    drop = ~repeat
    vanish = drop & (lengths == 1)
    keep = np.ones(n, bool)
    keep[last[drop]] = False
    term, trunc = np.zeros(n, bool), np.zeros(n, bool)
    term[last[repeat]] = True
    shortened = drop & (lengths > 1)  # ends one step earlier, with the same kind of end
    term[last[shortened & terminated] - 1] = True
    trunc[last[shortened & ~terminated] - 1] = True
    counts = np.ones(n, np.int64)
    counts[last[repeat]] = 2  # o_{T-1} again as the terminal episode's o_T
    counts[last[vanish]] = 0
    new_lengths = (lengths - drop)[~vanish]
    if len(new_lengths) == 0:
        raise DatasetError(f"{where}: every episode has one step, and without next_observations its last step is "
                           "dropped (its next observation is unknown): nothing is left; use a file with "
                           "next_observations")
    notes.update({k: int(v) for k, v in (("dropped_steps", drop.sum()),
                                         ("dropped_time_out_steps", (drop & ~terminated).sum()),
                                         ("dropped_terminal_steps", (drop & terminated).sum()),
                                         ("dropped_episodes", vanish.sum()),
                                         ("repeated_final_observations", repeat.sum())) if v})
    return obs[np.repeat(np.arange(n), counts)], keep, term, trunc, new_lengths


def _warn(where: str, notes: dict[str, Any]) -> None:
    parts = []
    if notes.get("dropped_steps"):
        parts.append(f"no next_observations, so the final observation of each episode is unknown: dropped the "
                     f"last step of {notes['dropped_steps']} episodes ({notes.get('dropped_time_out_steps', 0)} "
                     f"time-outs or the unfinished tail, {notes.get('dropped_terminal_steps', 0)} terminations), "
                     f"each now ends at the step before with the same flag"
                     + (f"; {notes['dropped_episodes']} one-step episodes vanished" if notes.get("dropped_episodes")
                        else ""))
    if notes.get("repeated_final_observations"):
        parts.append(f"{notes['repeated_final_observations']} terminated episodes keep their last step with "
                     "o_T = o_{T-1} (never bootstrapped from; terminal_obs='drop' drops the step instead)")
    if notes.get("unflagged_cuts"):
        parts.append(f"{notes['unflagged_cuts']} rows whose next_observations is not the next row's observation "
                     "and that have no terminal/timeout: each ends an episode there as a truncation")
    if notes.get("skipped_infos"):
        parts.append(f"infos {notes['skipped_infos']} are not per-step numbers and were left out")
    if parts:
        warnings.warn(f"{where}: " + "; ".join(parts), stacklevel=3)


def _task_and_scores(path: Path, env: str | None, meta: dict[str, Any]) -> dict[str, Any]:
    """``task`` and D4RL's reference scores from env=, the file's metadata or its name."""
    in_file = next((str(meta[k]) for k in _TASK_KEYS if isinstance(meta.get(k), str) and meta[k]), None)
    from_name = d4rl_name(path.name)
    if env is not None:
        if in_file is not None and not _same_task(env, in_file):
            raise DatasetError(f"{path} is a dataset for another task: its metadata says {in_file!r}, env={env!r}; "
                               f"pass env={in_file!r} or the file for {env!r}")
        if from_name is not None and not _same_task(env, from_name):
            warnings.warn(f"{path}: the file is named like D4RL's {from_name!r} but env={env!r}; using env",
                          stacklevel=4)
        task: str | None = env
    else:
        task = in_file or from_name
    if task is None:
        return {}
    out: dict[str, Any] = {"task": d4rl_name(task) or task}
    if d4rl_name(task):  # the D4RL id, apart from `task` (which a robolearn-written file sets to its own task)
        out["d4rl_dataset"] = d4rl_name(task)
    refs = reference_scores(task)
    if refs is not None and not ("ref_min_score" in meta and "ref_max_score" in meta):
        out["ref_min_score"], out["ref_max_score"] = refs
    return out


# --- write ---------------------------------------------------------------------------------------------------


def write(dataset: Dataset, path: Path, group: str | None = None, compression: str | None = None,
          **_: Any) -> Path:
    """``dataset`` as a D4RL file at ``path`` (".hdf5" appended unless it ends in .hdf5 / .h5); never overwrites.

    One observation group (``group``, default the dataset's default group) becomes ``observations`` /
    ``next_observations``; ``compression`` ("gzip", "lzf" or None) applies to every array. Written to a
    temporary sibling and renamed at the end, so a crash leaves no half file.
    """
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        path = path.with_name(path.name + ".hdf5")
    if path.exists():
        raise DatasetError(f"{path} exists already; datasets are never overwritten")
    group = group or dataset.default_group
    if group not in dataset.observations:
        raise DatasetError(f"{dataset.source} has no observation group {group!r} (it has "
                           f"{sorted(dataset.observations)}); pass group= one of them")
    others = sorted(g for g in dataset.observations if g != group)
    if others:
        warnings.warn(f"a D4RL file holds one observation array: writing group {group!r} to {path}, leaving out "
                      f"{others} (pass group= to pick another)", stacklevel=2)
    for name, value in dataset.infos.items():
        if value.dtype.kind not in "biufS":
            raise DatasetError(f"{dataset.source}: infos[{name!r}] is {value.dtype}; HDF5 stores numbers, bools or "
                               "bytes: convert it or drop it before writing D4RL")
    obs = dataset.observations[group]
    rows = dataset.obs_index
    arrays = {"observations": obs[rows], "actions": dataset.actions, "rewards": dataset.rewards,
              "terminals": dataset.terminations, "timeouts": dataset.truncations, "next_observations": obs[rows + 1]}
    meta = {**dataset.metadata, "observation_group": group, "robolearn_version": robolearn.__version__}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            for key, value in arrays.items():
                f.create_dataset(key, data=np.ascontiguousarray(value), compression=compression)
            for key, value in dataset.infos.items():
                f.create_dataset(f"infos/{key}", data=np.ascontiguousarray(value), compression=compression)
            for key, value in meta.items():
                _write_metadata(f, str(key), value)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _write_metadata(f: h5py.File, key: str, value: Any) -> None:
    name = f"metadata/{key}"
    if isinstance(value, str | bool | int | float | np.bool_ | np.integer | np.floating):
        try:
            f[name] = value
            return
        except (OverflowError, TypeError):
            pass
    f[name] = json.dumps(jsonable(value))
    f[name].attrs["json"] = True


__all__ = ["REF_SCORES", "URL_BASE", "d4rl_name", "detect", "download_file", "download_url", "read",
           "reference_scores", "write"]
