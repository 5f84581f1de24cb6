"""Policy snapshots of an off-policy run (`runner.snapshot_every`): the behaviour checkpoints of D4RL-style suites.

    <run_dir>/snapshots/step_0/                 config.json + model.safetensors: the actor only (`load_policy`)
    <run_dir>/snapshots/step_50000/ ...
    <run_dir>/snapshots/index.json              every snapshot's env steps, the env steps it acted, evaluations

A snapshot holds what `robolearn.checkpoints.policy.load_policy` needs to act (the `actor.*` tensors and the
`{"policy", "run"}` config), no critics and no trainer state, so a whole run's sequence of policies is small enough
to commit. The index says, for each snapshot, the env steps at which it was taken and how many the run collected
with it (`acted`: until the next snapshot), the run's own evaluation near it, and the run-wide facts needed to play
the sequence again as the run did (its `num_envs` and the uniform-random warm-up steps it began with):
`robolearn.collect.behaviour` builds a behaviour folder from it, whose snapshots `robolearn collect` plays back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from robolearn.checkpoints import checkpoint
from robolearn.data.dataset import write_json
from robolearn.errors import CheckpointError

SNAPSHOTS = "snapshots"
INDEX = "index.json"


def snapshot_name(env_steps: int) -> str:
    """The folder name of the snapshot taken at `env_steps`."""
    return f"step_{int(env_steps)}"


def save_snapshot(run_dir: str | Path, env_steps: int, config: dict[str, Any], model_state: dict[str, torch.Tensor],
                  evaluation: dict[str, float] | None = None, run_info: dict[str, Any] | None = None) -> Path:
    """Atomically write the actor of `model_state` with `config` (`{"policy", "run"}`) as
    `<run_dir>/snapshots/step_<env_steps>/` and record it in the index (`add_to_index`)."""
    actor = {k: v for k, v in model_state.items() if k.startswith("actor.")}
    if not actor:
        raise CheckpointError("a policy snapshot needs the learner's `actor.*` tensors; this learner has none")
    folder = Path(run_dir) / SNAPSHOTS
    path = checkpoint.save(folder / snapshot_name(env_steps), config, actor)
    add_to_index(folder, env_steps, evaluation, run_info)
    return path


def read_index(folder: str | Path) -> dict[str, Any]:
    """The index of a snapshots folder (empty when there is none yet)."""
    path = Path(folder) / INDEX
    if not path.is_file():
        return {"snapshots": []}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); the snapshots index is corrupt") from e


def add_to_index(folder: str | Path, env_steps: int, evaluation: dict[str, float] | None = None,
                 run_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Append the snapshot at `env_steps` to `folder`'s index (atomically) and return the index.

    Entries at or past `env_steps` are dropped first: a run resumed from an earlier checkpoint takes those
    snapshots again (identically). The previous entry's `acted` becomes the env steps between it and this one;
    the newest acted none yet. `random_warmup_steps` keeps the largest value reported (a resumed run counts from
    its checkpoint on)."""
    index = read_index(folder)
    entries = [e for e in index["snapshots"] if e["env_steps"] < env_steps]
    if entries:
        entries[-1]["acted"] = int(env_steps) - entries[-1]["env_steps"]
    entry: dict[str, Any] = {"name": snapshot_name(env_steps), "env_steps": int(env_steps), "acted": 0}
    if evaluation:
        entry["eval"] = evaluation
    info = dict(run_info or {})
    warmup = max(int(index.get("random_warmup_steps", 0)), int(info.pop("random_warmup_steps", 0)))
    index = {**index, **info, "random_warmup_steps": warmup, "env_steps": int(env_steps),
             "snapshots": [*entries, entry]}
    write_json(Path(folder) / INDEX, index)
    return index
