"""Offline training: gradient steps on a fixed dataset, with periodic evaluation in the simulator.

    robolearn train algo=iql dataset=data/d4rl-like/cheetah-run-medium-v0

The dataset (any format `robolearn.data.formats` reads) becomes one replay buffer of its transitions (time-outs
bootstrap, terminations do not; a learner with `dataset_returns` (Cal-QL) gets its Monte-Carlo returns in every
batch as `mc_returns`). Each iteration is
`log_every` gradient steps (`algo.update(batch)` on uniform minibatches); every `eval_every` steps the
deterministic policy plays `eval_episodes` whole episodes on as many batched envs, and `eval/return` and
`eval/normalized_score` (D4RL's 100 * (R - random) / (expert - random), with the dataset's reference returns,
else the task's) are logged. Outputs match the online runners: `metrics.jsonl`, TensorBoard, checkpoints
(`latest` every `checkpoint_interval` iterations, `final`), a learning curve; resume is exact (networks,
optimizers, RNGs and counters are saved; evaluation envs are re-seeded by gradient step; a run evaluates at its
end too, so a run stopped and resumed has one evaluation more).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from robolearn.checkpoints import checkpoint
from robolearn.errors import CheckpointError, ConfigError
from robolearn.runners.base import CheckpointSchedule, RunnerBase, evaluate_policy, progress_bar, restore_rng, rng_state
from robolearn.runners.off_policy import Means


@dataclasses.dataclass
class OfflineRunConfig:
    """The offline runner's part of `algo` (beside the algorithm's own fields)."""

    gradient_steps: int = 1_000_000  # training length (CORL: 1M); `iterations` = gradient_steps / log_every
    log_every: int = 1000           # gradient steps per logged iteration
    eval_every: int = 5000          # gradient steps between evaluations (CORL's eval_freq)
    eval_episodes: int = 10         # episodes per evaluation, one per env (CORL: 10)
    normalize_reward: bool = False  # CORL's locomotion normalize_reward: algo.reward_scale times 1000 / (max - min
    #                                 episode return of the dataset); CORL sets it for IQL on hopper-medium(-replay)


def synchronized_since(start: float, device: torch.device) -> float:
    """Seconds since `start` (a `time.perf_counter()` reading), once the device's queued work has finished."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


class OfflineRunner(RunnerBase):
    """Samples the dataset's buffer, updates `algo`, evaluates in `env` (its envs are the evaluation episodes)."""

    draws_on_device = True

    def __init__(self, env: Any, algo: Any, buffer: Any, run_dir: str | Path, config: dict[str, Any],
                 run_cfg: OfflineRunConfig, reference: tuple[float, float] | None, seed: int = 0,
                 progress: bool = True):
        super().__init__(env, run_dir, config, seed, algo.device, progress)
        if run_cfg.log_every < 1 or run_cfg.eval_every < 1 or run_cfg.eval_episodes < 1:
            raise ConfigError("log_every, eval_every and eval_episodes must be >= 1")
        self.algo, self.buffer, self.run_cfg, self.reference, self.seed = algo, buffer, run_cfg, reference, seed
        self.last_eval: dict[str, float] = {}

    @property
    def gradient_steps(self) -> int:
        return self.iteration * self.run_cfg.log_every

    def learn(self, iterations: int, checkpoint_interval: int = 50,
              checkpoint_minutes: float = 0.0) -> list[dict[str, Any]]:
        """Run until `iterations` in total (counting those before a resume); returns the new metric rows."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        rows = []
        batch_size = self.algo.cfg.batch_size
        checkpoints = CheckpointSchedule(checkpoint_interval, checkpoint_minutes)
        bar = progress_bar(self.progress, type(self.algo).__name__, iterations, self.iteration)
        try:
            while self.iteration < iterations:
                stats = Means()
                start = time.perf_counter()
                for _ in range(self.run_cfg.log_every):
                    stats.add(self.algo.update(self.buffer.sample(batch_size, self.generator), self.generator))
                self.end_iteration(stats.means(), synchronized_since(start, self.device), rows, bar, iterations,
                                   checkpoints)
        finally:
            if bar is not None:
                bar.close()
        return rows

    def end_iteration(self, stats: dict[str, Any], update_s: float, rows: list[dict[str, Any]], bar: Any,
                      iterations: int,
                      checkpoints: CheckpointSchedule) -> None:
        """Count the iteration's `log_every` updates (which took `update_s`), evaluate when due, log its row and
        checkpoint (a seed-batch, `robolearn.runners.seeds`, calls this for each seed's run)."""
        self.iteration += 1
        self.wall_s += update_s
        row = {"iteration": self.iteration, "gradient_steps": self.gradient_steps, "env_steps": 0,
               "updates_per_s": self.run_cfg.log_every / update_s, **stats}
        due = self.gradient_steps % self.run_cfg.eval_every < self.run_cfg.log_every
        if due or self.iteration == iterations:
            self.last_eval = self.evaluate()
            row.update(self.last_eval)
        row["wall_s"] = round(self.wall_s, 3)
        self._record(row, rows, bar, iterations, checkpoints)


    def _log(self, row: dict[str, Any]) -> None:
        self.env_steps = self.gradient_steps  # TensorBoard's x axis: gradient steps
        super()._log(row)
        self.env_steps = 0

    def evaluate(self) -> dict[str, float]:
        """The deterministic policy's mean return and normalised score (`evaluate_policy`), envs seeded by step."""
        return evaluate_policy(self.env, self.algo, self.seed + 1 + self.gradient_steps, self.reference)

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Networks (`model.safetensors`: the policy loads from it) and the trainer state: optimizers, RNGs,
        counters and the last evaluation."""
        tensors, meta = rng_state(self.generator, self.device)
        opt_tensors, opt_meta = checkpoint.flatten_optimizers(self.algo.optimizers)
        tensors.update(opt_tensors)
        meta.update({"optimizers": opt_meta, "iteration": self.iteration, "updates": self.algo.updates,
                     "wall_s": self.wall_s, "last_eval": self.last_eval})
        return checkpoint.save(path, {"policy": self.algo.config, "run": self.config}, self.algo.model_state(),
                               tensors, meta)

    def restore(self, path: str | Path) -> None:
        _, model_state = checkpoint.load(path)
        meta, tensors = checkpoint.load_trainer(path)
        try:
            self.algo.load_model_state(model_state)
            checkpoint.restore_optimizers(self.algo.optimizers, tensors, meta["optimizers"])
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this learner: {e}") from e
        restore_rng(self.generator, tensors, meta, self.device)
        self.iteration, self.wall_s = meta["iteration"], meta["wall_s"]
        self.algo.updates, self.last_eval = meta["updates"], meta["last_eval"]
        self._trim_metrics()
