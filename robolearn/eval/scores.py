"""Normalised scores, D4RL's way: 0 is the random policy's return, 100 the reference's (an expert's).

    normalized_score(returns, random, reference) = 100 * (returns - random) / (reference - random)

This module is the one place that formula and its reference returns live, so a training run's
`eval/normalized_score`, a dataset's `Dataset.normalized_score`, a suite's behaviour-policy score and a benchmark
cell's score agree. The reference returns come from a dataset's metadata (`ref_min_score` / `ref_max_score`, as
D4RL and Minari store them: `dataset_reference`), D4RL's own table for a D4RL dataset (`d4rl_reference`, the data
in `robolearn.eval.d4rl_reference`: d4rl/infos.py's REF_MIN_SCORE / REF_MAX_SCORE) or the task registry
(`TaskSpec.random_return` / `reference_return`: `task_reference`); `reference_returns` takes the dataset's, else
D4RL's, else the task's, and `reference_source` says which.

It imports nothing of robolearn but its errors and the D4RL table (and the task registry, on use), so
`robolearn.data` can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from robolearn.errors import ConfigError
from robolearn.eval.d4rl_reference import REF_SCORES

R = TypeVar("R")  # a float, a numpy array or a tensor of returns: the score has the same type


def normalized_score(returns: R, random: Any, reference: Any) -> R:
    """100 * (returns - random) / (reference - random): 0 for the random policy's return, 100 for the reference's.

    `returns` is a number or an array (numpy or torch) of them; the arithmetic runs in their types as given (a
    caller wanting float64 passes float64). Raises `ConfigError` when `random` or `reference` is unknown (None) or
    they are equal: there is nothing to normalise by."""
    if random is None or reference is None or reference == random:
        raise ConfigError(f"no reference returns to normalise scores by (random {random}, reference {reference}): "
                          "both must be known and differ")
    return 100.0 * (returns - random) / (reference - random)


def task_reference(task: str) -> tuple[float, float] | None:
    """(random, reference) returns of a registered task, to normalise scores by; None when unknown or equal."""
    from sim.errors import UnknownTaskError
    from sim.tasks import spec

    try:
        s = spec(task)
    except UnknownTaskError:
        return None
    return (s.random_return, s.reference_return) if s.reference_return != s.random_return else None


def dataset_reference(metadata: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """(ref_min_score, ref_max_score) of a dataset's metadata, as stored (D4RL / Minari's names); None when either
    is missing or they are equal."""
    lo, hi = metadata.get("ref_min_score"), metadata.get("ref_max_score")
    return None if lo is None or hi is None or hi == lo else (lo, hi)


def d4rl_reference(name: str) -> tuple[float, float] | None:
    """D4RL's (REF_MIN_SCORE, REF_MAX_SCORE) of a D4RL dataset id (``"halfcheetah-medium-v2"``); None when D4RL
    has none (file names: `robolearn.data.formats.d4rl.d4rl_name` gives the id)."""
    return REF_SCORES.get(str(name).strip().lower())


def reference_source(metadata: Mapping[str, Any], task: str) -> tuple[tuple[float, float] | None, str]:
    """((random, expert) returns, where they come from) to normalise a run on a dataset by: the dataset's reference
    scores (its `metadata`, measured at its episode length, as Minari and D4RL store them: "dataset", or
    "D4RL <name>" when they are D4RL's table's), else D4RL's table for its D4RL name (`metadata["d4rl_dataset"]`),
    else the task registry's ("task <name>"); (None, "none") when none is known."""
    name = metadata.get("d4rl_dataset")
    d4rl = d4rl_reference(name) if isinstance(name, str) else None
    given = dataset_reference(metadata)
    if given is not None:
        pair = (float(given[0]), float(given[1]))
        return pair, f"D4RL {name}" if d4rl == pair else "dataset"
    if d4rl is not None:
        return d4rl, f"D4RL {name}"
    found = task_reference(task)
    return (found, f"task {task}") if found is not None else (None, "none")


def reference_returns(metadata: Mapping[str, Any], task: str) -> tuple[float, float] | None:
    """(random, expert) returns to normalise a run on a dataset by (`reference_source`, without the source)."""
    return reference_source(metadata, task)[0]
