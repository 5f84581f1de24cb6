"""Simulator throughput: env-steps/s per task x backend x num_envs, against raw `mujoco.rollout`.

For each configuration this times `VecEnv.step` (physics + task math + auto-reset + torch hand-off)
and, in the same run on the same model, one raw `mujoco.rollout` call over the same number of envs,
threads and physics steps: the C engine with nothing around it. The ratio says what the
environment layer costs. Cold start (process start to first step done) is measured in fresh
subprocesses, once with an empty JAX compilation cache and once with it warm.

    python benchmarks/speed/sim_throughput.py                    # CPU defaults, writes results/*.json
    python benchmarks/speed/sim_throughput.py backends=[mjx] num_envs=[4096,16384]   # on a GPU

Targets (issue 2): C backend within 20% of raw rollout at 1024 envs; cold start < 30 s, warm < 5 s;
on a GPU, MJX cartpole-balance at 16384 envs >= 10M env-steps/s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np
import torch
from mujoco import rollout

import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402


@dataclasses.dataclass
class Settings:
    """What `sim_throughput` measures (`key=value` on the command line)."""

    tasks: list[str] = dataclasses.field(default_factory=lambda: list(sim.list_tasks()))
    backends: list[str] = dataclasses.field(default_factory=lambda: ["mujoco", "mjx"])
    num_envs: list[int] = dataclasses.field(default_factory=lambda: [64, 1024])
    mjx_cpu_num_envs: int = 256     # MJX on a CPU is slow: one size only
    steps: int = 200                # timed steps per configuration
    nthread: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    cold_start: bool = True         # also time process start to first step (fresh subprocesses)
    out: str | None = None          # null: results/sim_throughput_{cpu,gpu}.json


def time_vecenv(task: str, backend: str, num_envs: int, steps: int, nthread: int | None) -> dict:
    env = sim.make(task, num_envs=num_envs, backend=backend, nthread=nthread, check_actions=False)
    gen = torch.Generator().manual_seed(0)
    actions = [(torch.rand(num_envs, env.num_actions, generator=gen) * 2 - 1).to(env.device) for _ in range(8)]
    # Desynchronised episodes, as rsl_rl's init_at_random_ep_len leaves them: resets happen every step.
    env.episode_length_buf = torch.randint(0, env.max_episode_length, (num_envs,), generator=gen)
    for i in range(5):  # compile and warm up
        env.step(actions[i % 8])
    start = time.perf_counter()
    for i in range(steps):
        obs, rew, _, _ = env.step(actions[i % 8])
    float(rew.sum())  # wait for the device
    elapsed = time.perf_counter() - start
    cfg = env.task.cfg
    env.close()
    return {"env_steps_per_s": num_envs * steps / elapsed,
            "physics_steps_per_s": num_envs * steps * cfg.n_substeps * cfg.action_repeat / elapsed}


def time_raw_rollout(task: str, num_envs: int, steps: int, nthread: int) -> tuple[float, float]:
    """Physics steps/s of bare `mujoco.rollout` on the same model, envs, threads and physics steps.

    Two numbers: one call rolling out all `steps` (the C engine's ceiling), and one call per control
    step feeding the state back (what any env on top of rollout must do to let a policy act).
    """
    t = sim.make_task(task)
    m = t.mj_model
    nsub = t.cfg.n_substeps * t.cfg.action_repeat
    data = [mujoco.MjData(m) for _ in range(nthread)]
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    x0 = np.zeros(mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(m, d, x0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    x0 = np.tile(x0, (num_envs, 1))
    rng = np.random.default_rng(0)
    ctrl = np.repeat(rng.uniform(-1, 1, (num_envs, steps, m.nu)), nsub, axis=1)
    with rollout.Rollout(nthread=nthread) as pool:
        pool.rollout(m, data, x0, ctrl[:, :10])  # warm the pool
        start = time.perf_counter()
        pool.rollout(m, data, x0, ctrl)
        one_call = time.perf_counter() - start
        x = x0
        start = time.perf_counter()
        for t in range(steps):
            state, _ = pool.rollout(m, data, x, ctrl[:, t * nsub:(t + 1) * nsub])
            x = state[:, -1]
        per_step = time.perf_counter() - start
    physics_steps = num_envs * steps * nsub
    return physics_steps / one_call, physics_steps / per_step


COLD_START = """
import time, torch
t0 = time.perf_counter()
import sim
env = sim.make({task!r}, num_envs={num_envs}, backend={backend!r})
env.step(torch.zeros(env.num_envs, env.num_actions))
print(time.perf_counter() - t0)
"""


def cold_start(task: str, backend: str, num_envs: int) -> dict:
    """Seconds from a new Python process to the first step, with an empty then a warm compile cache."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "ROBOLEARN_JAX_CACHE": cache}
        code = COLD_START.format(task=task, backend=backend, num_envs=num_envs)
        for label in ("cold_s", "warm_cache_s"):
            res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            out[label] = float(res.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    args = settings(Settings, __doc__)

    import jax

    on_gpu = jax.default_backend() == "gpu"
    rows = []
    for task in args.tasks:
        for backend in args.backends:
            sizes = args.num_envs if (backend == "mujoco" or on_gpu) else [args.mjx_cpu_num_envs]
            for n in sizes:
                row = {"task": task, "backend": backend, "num_envs": n}
                row.update(time_vecenv(task, backend, n, args.steps, args.nthread if backend == "mujoco" else None))
                if backend == "mujoco":
                    raw, raw_stepped = time_raw_rollout(task, n, args.steps, args.nthread)
                    row["raw_rollout_physics_steps_per_s"] = raw
                    row["raw_stepped_rollout_physics_steps_per_s"] = raw_stepped
                    row["ratio_to_raw_rollout"] = row["physics_steps_per_s"] / raw
                    row["ratio_to_raw_stepped_rollout"] = row["physics_steps_per_s"] / raw_stepped
                rows.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)

    cold = []
    if args.cold_start:
        for backend in args.backends:
            c = {"task": "cartpole-balance", "backend": backend, "num_envs": 1024 if backend == "mujoco" else 256}
            c.update(cold_start(c["task"], backend, c["num_envs"]))
            cold.append(c)
            print(json.dumps(c), flush=True)

    write_result(args.out or RESULTS / f"sim_throughput_{'gpu' if on_gpu else 'cpu'}.json", "sim_throughput",
                 {"steps_timed": args.steps, "nthread": args.nthread, "throughput": rows, "cold_start": cold})


if __name__ == "__main__":
    main()
