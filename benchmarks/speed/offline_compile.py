"""What `compile: true` buys the offline learners: updates/s of IQL, TD3+BC, CQL and ReBRAC, eager against compiled.

Each learner runs its update on random minibatches of halfcheetah's sizes (17 observations, 6 actions), with its
CORL defaults (batch size, depth) but for the width, which the grid sets: every hidden layer `hidden` wide (64 or
CORL's 256). `compile: true` makes each update one traced graph (forward, `torch.autograd.grad`, the Adam step
written out, Polyak; `robolearn.algos.common.compile_update`); compiling is done before timing. Eager and compiled
run in alternating rounds in one process, one torch thread (a bench cell's), the median round counts. Results go to
`benchmarks/results/offline_compile_cpu.json` with machine info.

    python benchmarks/speed/offline_compile.py
    python benchmarks/speed/offline_compile.py algos=[iql] hidden=[64] rounds=3
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402

OBS, ACT = 17, 6  # halfcheetah's observation and action sizes


@dataclasses.dataclass
class Settings:
    algos: list[str] = dataclasses.field(default_factory=lambda: ["iql", "td3_bc", "cql", "rebrac"])
    hidden: list[int] = dataclasses.field(default_factory=lambda: [64, 256])
    updates: int = 200              # updates per round
    rounds: int = 5
    threads: int = 1
    out: str = str(RESULTS / "offline_compile_cpu.json")


def learner(algo: str, hidden: int, compiled: bool):
    from robolearn.algos.base import spec

    s = spec(algo)
    cfg = s.config()
    widths = {f: (hidden,) * len(getattr(cfg, f)) for f in ("actor_hidden", "critic_hidden", "value_hidden")
              if hasattr(cfg, f)}
    cfg = dataclasses.replace(cfg, compile=compiled, **widths)
    return s.learner_class()(OBS, ACT, cfg), cfg.batch_size


def batches(batch_size: int, n: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        out.append({"obs": {"policy": torch.randn(batch_size, OBS, generator=g)},
                    "actions": torch.rand(batch_size, ACT, generator=g) * 2 - 1,
                    "rewards": torch.randn(batch_size, generator=g), "steps": torch.ones(batch_size),
                    "discount": torch.full((batch_size,), 0.99),
                    "next_obs": {"policy": torch.randn(batch_size, OBS, generator=g)},
                    "next_actions": torch.rand(batch_size, ACT, generator=g) * 2 - 1})
    return out


def main() -> None:
    cfg = settings(Settings, __doc__)
    torch.set_num_threads(cfg.threads)
    rows = []
    for algo in cfg.algos:
        for hidden in cfg.hidden:
            runs = {}
            for compiled in (False, True):
                model, batch_size = learner(algo, hidden, compiled)
                data = batches(batch_size, 8)
                gen = torch.Generator().manual_seed(1)
                began = time.perf_counter()
                for batch in data:  # compiles (every graph kind: TD3's actor step comes every other update)
                    model.update(batch, gen)
                runs[compiled] = (model, data, gen, time.perf_counter() - began)
            rates: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(cfg.rounds):
                for compiled, (model, data, gen, _) in runs.items():
                    start = time.perf_counter()
                    for i in range(cfg.updates):
                        model.update(data[i % len(data)], gen)
                    rates[compiled].append(cfg.updates / (time.perf_counter() - start))
            eager, fast = statistics.median(rates[False]), statistics.median(rates[True])
            row = {"algo": algo, "hidden": hidden, "batch_size": runs[False][0].cfg.batch_size,
                   "eager_updates_per_s": round(eager, 1), "compiled_updates_per_s": round(fast, 1),
                   "speedup": round(fast / eager, 2), "compile_seconds": round(runs[True][3], 1)}
            print(row)
            rows.append(row)
    write_result(cfg.out, "offline_compile", {"settings": dataclasses.asdict(cfg), "rows": rows})


if __name__ == "__main__":
    main()
