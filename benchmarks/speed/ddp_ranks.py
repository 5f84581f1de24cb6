"""PPO with 1 and with N torchrun ranks at the same global batch: learning curves and env-steps/s, one invocation.

    python benchmarks/speed/ddp_ranks.py                                   # this CPU: 2 ranks x 128 vs 1 x 256 envs
    python benchmarks/speed/ddp_ranks.py device=cuda ranks=[1,2,4,8] envs_per_rank=4096 task=ant-velocity

Each layout is one `torchrun --nproc_per_node=<ranks> -m robolearn train` with `global_envs / ranks` envs per rank
(or `envs_per_rank`), so every update sees the same number of transitions; a one-rank layout also runs with a second
seed, the spread the N-rank curve is judged against. On a CPU with fewer cores than ranks x threads the env-steps/s
column measures contention, not scaling: label it correctness (docs/distributed.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402


@dataclasses.dataclass
class Settings:
    task: str = "cartpole-balance"
    iterations: int = 12
    ranks: list[int] = dataclasses.field(default_factory=lambda: [2, 1])
    global_envs: int = 256       # envs over all ranks (ignored when envs_per_rank > 0)
    envs_per_rank: int = 0       # weak scaling: a fixed block per rank
    device: str = "cpu"
    second_seed: bool = True     # one-rank layouts also run seed 1: the seed-to-seed spread
    out: str | None = None       # null: results/ddp_ranks_<task>_<device>.json


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout(args: Settings, ranks: int, seed: int, run_dir: Path) -> dict:
    envs = args.envs_per_rank or args.global_envs // ranks
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--rdzv_backend=c10d",
           f"--rdzv_endpoint=127.0.0.1:{free_port()}", "-m", "robolearn", "train", f"env={args.task}", "algo=ppo",
           f"env.num_envs={envs}", f"iterations={args.iterations}", f"seed={seed}", f"device={args.device}",
           f"run_dir={run_dir}", "video=false", "progress=false", "checkpoint_interval=1000000"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r.get("env_steps_all_ranks", r["env_steps"]) for r in rows]
    train_s = rows[-1]["wall_s"]
    out = {"ranks": ranks, "envs_per_rank": envs, "seed": seed, "env_steps": steps,
           "mean_return": [r["mean_return"] for r in rows], "env_steps_per_s": steps[-1] / train_s,
           "train_s": train_s, "job_s": wall}
    print(f"{ranks} rank(s) x {envs} envs, seed {seed}: {out['env_steps_per_s']:,.0f} env-steps/s, returns "
          f"{[round(r or 0) for r in out['mean_return']]}", flush=True)
    return out


def main() -> None:
    args = settings(Settings, __doc__)
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            seeds = [0, 1] if ranks == 1 and args.second_seed else [0]
            for seed in seeds:
                cells.append(layout(args, ranks, seed, Path(tmp) / f"r{ranks}s{seed}"))
    out = args.out or RESULTS / f"ddp_ranks_{args.task}_{args.device}.json"
    write_result(out, "ddp_ranks", {"settings": dataclasses.asdict(args), "cores": os.cpu_count(), "cells": cells,
                                    "note": "ranks share this machine's cores: a correctness check, not scaling"
                                    if args.device == "cpu" else ""})


if __name__ == "__main__":
    main()
