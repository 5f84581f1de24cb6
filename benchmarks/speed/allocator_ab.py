"""CQL gradient steps/s with glibc's default malloc thresholds against `robolearn.core.cpu.tune_allocator`'s, back to
back on one machine (each in a fresh process, one thread, 256x256 networks, random batches of 256).

    python benchmarks/speed/allocator_ab.py     # -> benchmarks/results/allocator_ab_cpu.json
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, ROOT, machine_info, settings  # noqa: E402

WORKER = """
import sys, time, torch
sys.path.insert(0, {root!r})
from robolearn.core.cpu import tune_allocator
from benchmarks.peers.offline_vs_d3rlpy import robolearn_algo
tuned = tune_allocator()
torch.set_num_threads(1)
torch.manual_seed(0)
algo = robolearn_algo("cql", [256, 256], 17, 6)
g = torch.Generator().manual_seed(0)
b = {{"obs": {{"policy": torch.randn(256, 17, generator=g)}},
     "next_obs": {{"policy": torch.randn(256, 17, generator=g)}},
     "actions": torch.rand(256, 6, generator=g) * 2 - 1, "rewards": torch.rand(256, generator=g),
     "discount": torch.full((256,), 0.99)}}
for _ in range(5):
    algo.update(b, g)
rates = []
for _ in range(3):
    t = time.perf_counter()
    for _ in range(30):
        algo.update(b, g)
    rates.append(30 / (time.perf_counter() - t))
print(tuned, sorted(rates)[1])
"""


@dataclasses.dataclass
class Settings:
    """Where the result goes (`key=value` on the command line); the measurement itself is fixed."""

    out: str = str(RESULTS / "allocator_ab_cpu.json")


def run(malloc: str) -> dict:
    """One fresh process with ROBOLEARN_MALLOC=`malloc`: whether it tuned the allocator, and its CQL steps/s."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ROBOLEARN_MALLOC": malloc}
    code = WORKER.format(root=str(ROOT))
    tuned, rate = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout.split()[-2:]
    return {"tuned": tuned == "True", "cql_steps_per_s": float(rate)}


def main() -> None:
    args = settings(Settings, __doc__)
    result = {"machine": machine_info(), "loadavg_1min": os.getloadavg()[0],
              "glibc_default": run("default"), "tuned": run("")}
    result["speedup"] = result["tuned"]["cql_steps_per_s"] / result["glibc_default"]["cql_steps_per_s"]
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
