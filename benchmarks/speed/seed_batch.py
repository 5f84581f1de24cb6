"""Seeds in one process against one process per seed, on this CPU: seed-updates/s for S = 1, 2, 5, 10 seeds.

A bench cell today is one process per seed (as in CORL, d3rlpy, JAX-CORL and Unifloral); `robolearn train seeds=[...]`
and `robolearn bench pack_seeds=true` train S seeds in one process with one vmapped update
(`robolearn.algos.seeds.SeedBatch`). For IQL, TD3+BC, CQL and SAC at 64x64 and 256x256 (halfcheetah's sizes: 17
observations, 6 actions; batch 256; CORL's depths), with `compile: true` on both sides (the bench's offline cells
compile), this measures:

- `batched`: one process, a seed-batch of S learners, all the machine's cores as torch threads;
- `processes`: S processes of one learner each, one torch thread each (a bench worker's), started together and timed
  over the same window (a file barrier): their rates summed.

Seed-updates/s is S x updates/s. Each measurement is its own process (compilation excluded from the timing). Also
the machine's float32 matmul rate (one thread, all threads; 1024 x 1024 products) and, at 256x256, the fraction of it
each update reaches (its matmul FLOPs counted by `torch.utils.flop_counter` on one eager update). Results:
`benchmarks/results/seed_batch_cpu.json` with machine info.

    python benchmarks/speed/seed_batch.py
    python benchmarks/speed/seed_batch.py algos=[iql] hidden=[64] seeds=[1,5] timed_s=3
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402

OBS, ACT, BATCH = 17, 6, 256  # halfcheetah's observation and action sizes; CORL's batch


@dataclasses.dataclass
class Settings:
    algos: list[str] = dataclasses.field(default_factory=lambda: ["iql", "td3_bc", "cql", "sac"])
    hidden: list[int] = dataclasses.field(default_factory=lambda: [64, 256])
    seeds: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 5, 10])
    timed_s: float = 5.0            # seconds of timed updates per measurement
    compile: bool = True
    out: str = str(RESULTS / "seed_batch_cpu.json")


def learners(algo: str, hidden: int, n: int, compiled: bool) -> list:
    """`n` learners of `algo` with every hidden layer `hidden` wide (CORL's depths), seeded 0..n-1."""
    from robolearn.algos.base import spec

    s = spec(algo)
    cfg = s.config()
    widths = {f: (hidden,) * len(getattr(cfg, f)) for f in ("actor_hidden", "critic_hidden", "value_hidden")
              if hasattr(cfg, f)}
    cfg = dataclasses.replace(cfg, compile=compiled, batch_size=BATCH, **widths)
    out = []
    for k in range(n):
        torch.manual_seed(k)
        args = (OBS, OBS, ACT) if s.runner == "off_policy" else (OBS, ACT)
        out.append(s.learner_class()(*args, cfg))
    return out


def batch(generator: torch.Generator, seeds: int = 0) -> dict:
    """Random transitions of halfcheetah's sizes: [B, ...], or [S, B, ...] for a seed-batch of `seeds`."""
    lead = (seeds,) if seeds else ()
    return {"obs": {"policy": torch.randn(*lead, BATCH, OBS, generator=generator)},
            "next_obs": {"policy": torch.randn(*lead, BATCH, OBS, generator=generator)},
            "actions": torch.rand(*lead, BATCH, ACT, generator=generator) * 2 - 1,
            "next_actions": torch.rand(*lead, BATCH, ACT, generator=generator) * 2 - 1,
            "rewards": torch.randn(*lead, BATCH, generator=generator), "steps": torch.ones(*lead, BATCH),
            "discount": torch.full((*lead, BATCH), 0.99)}


def worker(spec: dict) -> None:
    """One measurement process: build, compile (8 updates), wait at the barrier, time `timed_s`; print a JSON line."""
    from robolearn.algos.seeds import SeedBatch

    torch.set_num_threads(spec["threads"])
    generator = torch.Generator().manual_seed(spec["index"])
    seeds = spec["batched_seeds"]
    if seeds:
        group = SeedBatch(learners(spec["algo"], spec["hidden"], seeds, spec["compile"]))
        gens = [torch.Generator().manual_seed(100 + k) for k in range(seeds)]
        data = [batch(generator, seeds) for _ in range(8)]
        update = lambda b: group.update(b, gens)  # noqa: E731
    else:
        learner = learners(spec["algo"], spec["hidden"], 1, spec["compile"])[0]
        data = [batch(generator) for _ in range(8)]
        update = lambda b: learner.update(b, generator)  # noqa: E731
    start = time.perf_counter()
    for b in data:
        update(b)
    compile_s = time.perf_counter() - start
    barrier = Path(spec["barrier"])
    (barrier / f"ready{spec['index']}").touch()
    while len(list(barrier.glob("ready*"))) < spec["group"]:
        time.sleep(0.01)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < spec["timed_s"]:
        update(data[n % len(data)])
        n += 1
    rate = n / (time.perf_counter() - start)
    print(json.dumps({"updates_per_s": rate, "compile_s": compile_s}), flush=True)


def measure(cfg: Settings, algo: str, hidden: int, processes: int, batched_seeds: int, threads: int) -> dict:
    """Start `processes` workers together (each a seed-batch of `batched_seeds`, or one learner when 0); their rates."""
    with tempfile.TemporaryDirectory() as barrier:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(
            {"algo": algo, "hidden": hidden, "batched_seeds": batched_seeds, "threads": threads, "index": i,
             "group": processes, "barrier": barrier, "timed_s": cfg.timed_s, "compile": cfg.compile})],
            stdout=subprocess.PIPE, text=True, env=env) for i in range(processes)]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    rates = [o["updates_per_s"] for o in outs]
    return {"updates_per_s": rates, "compile_s": max(o["compile_s"] for o in outs)}


def matmul_gflops(threads: int, n: int = 1024, repeats: int = 20) -> float:
    """float32 GFLOP/s of n x n x n products at `threads` torch threads (the median of `repeats`)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / sorted(times)[len(times) // 2] / 1e9


def update_flops(algo: str, hidden: int) -> int:
    """FLOPs (matmuls and the like, as `torch.utils.flop_counter` counts them) of one eager update."""
    from torch.utils.flop_counter import FlopCounterMode

    learner = learners(algo, hidden, 1, False)[0]
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):  # past TD3+BC's delayed actor: count an update with every step (the second)
        b = batch(generator)
        with FlopCounterMode(display=False) as counter:
            learner.update(b, generator)
    return counter.get_total_flops()


def main() -> None:
    cfg = settings(Settings, __doc__)
    cores = len(os.sched_getaffinity(0))
    peak = {"one_thread": matmul_gflops(1), "all_threads": matmul_gflops(cores)}
    print(f"matmul float32: {peak['one_thread']:.0f} GFLOP/s on one thread, {peak['all_threads']:.0f} on {cores}")
    rows = []
    for algo in cfg.algos:
        for hidden in cfg.hidden:
            flops = update_flops(algo, hidden)
            for seeds in cfg.seeds:
                batched = measure(cfg, algo, hidden, 1, seeds, cores)
                separate = measure(cfg, algo, hidden, seeds, 0, 1)
                b_rate, p_rate = seeds * batched["updates_per_s"][0], sum(separate["updates_per_s"])
                row = {"algo": algo, "hidden": hidden, "S": seeds, "batched_seed_updates_per_s": round(b_rate, 1),
                       "processes_seed_updates_per_s": round(p_rate, 1), "ratio": round(b_rate / p_rate, 2),
                       "batched_compile_s": round(batched["compile_s"], 1),
                       "process_rates": [round(r, 1) for r in separate["updates_per_s"]],
                       "flops_per_update": flops,
                       "batched_fraction_of_matmul_peak": round(b_rate * flops / 1e9 / peak["all_threads"], 3),
                       "processes_fraction_of_matmul_peak": round(p_rate * flops / 1e9 / peak["all_threads"], 3)}
                print(row, flush=True)
                rows.append(row)
                write_result(cfg.out, "seed_batch", {"settings": dataclasses.asdict(cfg), "cores": cores,
                                                     "matmul_gflops": peak, "rows": rows})


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
    else:
        main()
