"""Seed-batched offline training: S seeds of one run in one process.

    robolearn train algo=iql dataset=mujoco/halfcheetah/medium-v0 seeds=[0,1,2,3,4]

A benchmark cell is several seeds of one algorithm, dataset and config. With `seeds=[...]` each seed is a complete
run of its own in `<run_dir>/seed<k>/` (its `config.yaml` says `seed: k`; `metrics.jsonl`, TensorBoard, checkpoints,
learning curve), built by the same code as `robolearn train seed=k` (its learner's initialisation, its generator's
batches and draws, its evaluation episodes), while the S learners' gradient steps run as one
(`robolearn.algos.seeds.SeedBatch`: one vmapped update). Each seed's metrics equal its solo run's to float rounding
(tests/robolearn/runners/test_seeds.py). `load_policy` loads a seed's checkpoint like any other, and
`robolearn train resume=<run_dir>` resumes every seed exactly. Each row's `updates_per_s` is the batch's: updates of
all S seeds together per second.
"""

from __future__ import annotations

import time
from typing import Any

from robolearn.algos.seeds import SeedBatch, stack_batches
from robolearn.runners.base import progress_bar
from robolearn.runners.offline import OfflineRunner, synchronized_since


class SeedsRunner:
    """Trains offline runners that differ only by seed in lockstep, by one seed-batched update."""

    def __init__(self, runners: list[OfflineRunner]):
        self.runners = runners
        self.batch = SeedBatch([runner.algo for runner in runners])

    def learn(self, iterations: int, checkpoint_interval: int = 50) -> list[list[dict[str, Any]]]:
        """Run every seed until `iterations` in total (counting those before a resume); each seed's new rows."""
        lead = self.runners[0]
        for runner in self.runners:
            runner.run_dir.mkdir(parents=True, exist_ok=True)
        rows: list[list[dict[str, Any]]] = [[] for _ in self.runners]
        log_every, batch_size = lead.run_cfg.log_every, lead.algo.cfg.batch_size
        generators = [runner.generator for runner in self.runners]
        bar = progress_bar(lead.progress, f"{type(lead.algo).__name__} x{len(self.runners)} seeds", iterations,
                           lead.iteration)
        try:
            while lead.iteration < iterations:
                sums: dict[str, Any] = {}
                counts: dict[str, int] = {}  # a statistic some updates leave out (a delayed actor's) averages its own
                start = time.perf_counter()
                for _ in range(log_every):
                    batch = stack_batches([r.buffer.sample(batch_size, r.generator) for r in self.runners])
                    for key, value in self.batch.update(batch, generators).items():  # [S] each
                        sums[key] = sums.get(key, 0.0) + value
                        counts[key] = counts.get(key, 0) + 1
                update_s = synchronized_since(start, lead.device)
                means = {key: (value / counts[key]).tolist() for key, value in sums.items()}
                for k, runner in enumerate(self.runners):
                    runner.end_iteration({key: value[k] for key, value in means.items()}, update_s, rows[k],
                                         bar if k == 0 else None, iterations, checkpoint_interval)
        finally:
            if bar is not None:
                bar.close()
        return rows
