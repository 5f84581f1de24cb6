"""Gymnasium v5 locomotion throughput: robolearn's batched tasks against EnvPool and Gymnasium's vector env.

One invocation times, per task and number of envs, env-steps/s of uniform random actions with auto-reset:

- robolearn: `sim.make("<task>-v5", backend="mujoco")`, the torch VecEnv (C engine in a thread pool, task math
  in one jitted JAX step, torch hand-off), what a learner steps;
- EnvPool (`pip install envpool`): `envpool.make_gymnasium("HalfCheetah-v5", ...)`, its C++ thread pool, numpy out;
- Gymnasium: `gymnasium.make_vec(..., vectorization_mode="sync")`, the reference implementation, one process.

All run in this process on the same cores with the same thread count; results are ratios to EnvPool's.

    python benchmarks/speed/envpool_v5.py                           # writes results/envpool_v5_cpu.json
    python benchmarks/speed/envpool_v5.py num_envs=[64] steps=500
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402

#: our task -> the Gymnasium / EnvPool id it equals
TASKS = {"halfcheetah-v5": "HalfCheetah-v5", "hopper-v5": "Hopper-v5", "walker2d-v5": "Walker2d-v5",
         "ant-v5": "Ant-v5"}


@dataclasses.dataclass
class Settings:
    """What `envpool_v5` measures (`key=value` on the command line)."""

    tasks: list[str] = dataclasses.field(default_factory=lambda: list(TASKS))
    num_envs: list[int] = dataclasses.field(default_factory=lambda: [1, 16, 256])
    steps: int = 300                # timed vector steps per configuration (after a warm-up)
    nthread: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    gymnasium_max_envs: int = 64    # Gymnasium's sync vector env steps envs one by one: skip it beyond this
    out: str | None = None          # null: results/envpool_v5_cpu.json


def _rate(step: Callable[[np.ndarray], object], num_envs: int, num_actions: int, steps: int) -> float:
    """env-steps/s of `step` over `steps` batches of uniform random actions (10 warm-up steps first)."""
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (16, num_envs, num_actions)).astype(np.float32)
    for i in range(10):
        step(actions[i % 16])
    start = time.perf_counter()
    for i in range(steps):
        step(actions[i % 16])
    return num_envs * steps / (time.perf_counter() - start)


def robolearn_rate(task: str, num_envs: int, steps: int, nthread: int) -> float:
    import torch

    import sim

    env = sim.make(task, num_envs=num_envs, backend="mujoco", nthread=nthread, check_actions=False)
    try:
        return _rate(lambda a: env.step(torch.from_numpy(a)), num_envs, env.num_actions, steps)
    finally:
        env.close()


def envpool_rate(env_id: str, num_envs: int, steps: int, nthread: int) -> float | None:
    try:
        import envpool
    except ImportError:
        return None
    env = envpool.make_gymnasium(env_id, num_envs=num_envs, batch_size=num_envs, num_threads=min(nthread, num_envs),
                                 seed=0)
    env.reset()
    rate = _rate(lambda a: env.step(a.astype(np.float64)), num_envs, env.action_space.shape[0], steps)
    env.close()
    return rate


def gymnasium_rate(env_id: str, num_envs: int, steps: int) -> float:
    import gymnasium as gym

    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync")
    env.reset(seed=0)
    rate = _rate(lambda a: env.step(a.astype(np.float64)), num_envs, env.single_action_space.shape[0], steps)
    env.close()
    return rate


def main() -> None:
    s = settings(Settings, __doc__)
    rows = []
    for task in s.tasks:
        env_id = TASKS[task]
        for n in s.num_envs:
            row = {"task": task, "env_id": env_id, "num_envs": n,
                   "robolearn": robolearn_rate(task, n, s.steps, s.nthread),
                   "envpool": envpool_rate(env_id, n, s.steps, s.nthread),
                   "gymnasium": gymnasium_rate(env_id, n, s.steps) if n <= s.gymnasium_max_envs else None}
            if row["envpool"]:
                row["robolearn_over_envpool"] = row["robolearn"] / row["envpool"]
            if row["gymnasium"]:
                row["robolearn_over_gymnasium"] = row["robolearn"] / row["gymnasium"]
            rows.append(row)
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    import envpool  # noqa: F401  (its version goes into the result)

    fields = {"settings": dataclasses.asdict(s), "rows": rows, "envpool": sys.modules["envpool"].__version__}
    write_result(s.out or RESULTS / "envpool_v5_cpu.json", "envpool_v5", fields)


if __name__ == "__main__":
    main()
