"""A dataset as a learner's replay buffer: the one checked conversion that offline training, online training with
mixed-in data (`runner.offline_data`) and the real-world learner (`offline_data=`) share.

It checks what a silent mismatch would corrupt: the task (when both the dataset and the caller name one), the
observation groups the learner reads and their sizes, the action size; a `ConfigError` names the fix.

    buffer = dataset_buffer(load_dataset(path), {"policy": (3,)}, num_actions=1, source=path)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from robolearn.data.dataset import Dataset, to_replay_buffer
from robolearn.errors import ConfigError


def dataset_buffer(data: Dataset, observation_shapes: Mapping[str, Sequence[int]], num_actions: int, *,
                   source: Any, groups: Sequence[str] = ("policy",), task: str | None = None, device: str = "cpu",
                   n_step: int = 1, gamma: float = 0.99, extras: dict[str, Any] | None = None) -> Any:
    """`data` as a `robolearn.core.buffers.ReplayBuffer` holding `groups` of observations, after checking it fits a
    learner whose observation groups have `observation_shapes` and that acts with `num_actions`; `task`: the task
    the learner runs (None: unchecked); `source`: the dataset's path, for messages; `extras`: per-transition tensors
    each sample carries (e.g. Monte-Carlo returns)."""
    recorded = data.metadata.get("task")
    if task and recorded and recorded != task:
        raise ConfigError(f"dataset {source} was collected on {recorded}, not {task}: pass env={recorded} (or leave "
                          "env= out: it defaults to the dataset's task)")
    for group in groups:
        have = data.observations.get(group)
        if have is None:
            raise ConfigError(f"dataset {source} has observation groups {sorted(data.observations)}; the learner "
                              f"reads {list(groups)} (a critic group holds privileged observations)")
        want = tuple(observation_shapes[group])
        if tuple(have.shape[1:]) != want:
            raise ConfigError(f"dataset {source} has {group} observations of shape {tuple(have.shape[1:])}; the "
                              f"learner's are {want}")
    if data.actions.shape[1] != num_actions:
        raise ConfigError(f"dataset {source} has actions of size {data.actions.shape[1]}; the learner has "
                          f"{num_actions}")
    return to_replay_buffer(data, list(groups), device=device, n_step=n_step, gamma=gamma, extras=extras)
