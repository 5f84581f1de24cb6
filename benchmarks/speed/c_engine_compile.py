"""The C engine's VecEnv build time and step time with XLA's default options and with
`sim.vecenv.FAST_C_ENGINE_COMPILE` (XLA's LLVM optimisation passes off for those executables), side by side in one
run: 3 builds and 1000 steps of 64 envs per task. (The fast options are not used: they change the bits of every
trajectory, and with them every dataset's; sim/vecenv.py.)

    python benchmarks/speed/c_engine_compile.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("ROBOLEARN_JAX_CACHE", "off")  # C-engine executables never enter the cache; MJX not used
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
import sim  # noqa: E402
import sim.vecenv  # noqa: E402
from benchmarks.common import RESULTS, write_result  # noqa: E402

TASKS = ["cartpole-balance", "halfcheetah-v5", "ant-goal"]


def measure(task: str) -> dict[str, float]:
    builds = []
    for seed in range(3):
        start = time.perf_counter()
        env = sim.make(task, num_envs=64, backend="mujoco", seed=seed, nthread=1)
        builds.append(time.perf_counter() - start)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(1000):
        env.step(torch.rand(64, env.num_actions, generator=gen) * 2 - 1)
    return {"build_s": sorted(builds)[1], "steps_1000_s": time.perf_counter() - start}


def main() -> None:
    options = sim.vecenv.FAST_C_ENGINE_COMPILE
    kept = sim.vecenv.C_ENGINE_COMPILE
    sim.make(TASKS[0], num_envs=2, backend="mujoco")  # JAX's start-up, outside the timings
    rows = {}
    for task in TASKS:
        for label, value in (("default", None), ("c_engine_compile", options)):
            sim.vecenv.C_ENGINE_COMPILE = value
            rows[f"{task}/{label}"] = measure(task)
            print(task, label, {k: round(v, 3) for k, v in rows[f"{task}/{label}"].items()}, flush=True)
    sim.vecenv.C_ENGINE_COMPILE = kept
    write_result(RESULTS / "c_engine_compile_cpu.json", "c_engine_compile",
                 {"options": options, "num_envs": 64, "note": "build_s: median of 3 VecEnv builds", "rows": rows})


if __name__ == "__main__":
    main()
