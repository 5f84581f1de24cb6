"""The on-policy runner: collect rollouts from a VecEnv, update PPO, log, checkpoint, resume.

A run directory holds `config.yaml` (the resolved config), `metrics.jsonl` (one JSON object per
iteration: `env_steps`, `env_steps_per_s`, `mean_return`, `wall_s`, losses, reward terms ...),
TensorBoard events, `checkpoints/latest` and `checkpoints/final` (`config.json` +
`model.safetensors` + training state), `learning_curve.png` and a video of the final policy.
Resuming restores the model, optimizer, RNGs and every env's state, so a resumed run reproduces
the metrics of an uninterrupted one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from robolearn.algos.online.ppo import PPO, RolloutStorage
from robolearn.checkpoints import checkpoint
from robolearn.errors import CheckpointError
from robolearn.runners.base import CheckpointSchedule, RunnerBase, progress_bar


class OnPolicyRunner(RunnerBase):
    """Owns the loop; `PPO` owns the update."""

    def __init__(self, env: Any, algo: PPO, run_dir: str | Path, config: dict[str, Any], seed: int = 0,
                 progress: bool = True):
        super().__init__(env, run_dir, config, seed, algo.device, progress)
        self.algo = algo
        self.storage = RolloutStorage(algo.cfg.num_steps, env.num_envs, env.observation_shapes, env.num_actions,
                                      self.device)

    # --- the loop ------------------------------------------------------------------------------
    def learn(self, iterations: int, checkpoint_interval: int = 50, checkpoint_minutes: float = 0.0,
              random_episode_start: bool = True) -> list[dict[str, Any]]:
        """Run until `iterations` in total (counting those before a resume); returns the new metric rows.

        `random_episode_start` spreads the envs' episode clocks over the episode length on a fresh
        start (as rsl_rl's `init_at_random_ep_len`), so episodes finish every iteration rather than
        all at once.
        """
        rows: list[dict[str, Any]] = []
        obs = self.start(random_episode_start)
        checkpoints = CheckpointSchedule(checkpoint_interval, checkpoint_minutes)
        bar = progress_bar(self.progress, "PPO", iterations, self.iteration)
        try:
            while self.iteration < iterations:
                start = time.perf_counter()
                obs, log = self.rollout(obs)
                rollout_s = time.perf_counter() - start
                stats = {k: float(v) for k, v in self.algo.update(self.storage, obs, self.generator).items()}
                self.end_iteration(stats, log, rollout_s, time.perf_counter() - start, rows, bar, iterations,
                                   checkpoints)
        finally:
            if bar is not None:
                bar.close()
        return rows

    def start(self, random_episode_start: bool = True) -> TensorDict:
        """Before the first iteration of this process: the run folder, the envs' episode clocks (spread out on a fresh
        start), the first observations."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if random_episode_start and self.iteration == 0:
            self.env.episode_length_buf = torch.randint(0, self.env.max_episode_length, (self.env.num_envs,),
                                                        generator=self.generator)
        return self.env.get_observations().to(self.device)

    def end_iteration(self, stats: dict[str, float], log: dict[str, float], rollout_s: float, elapsed: float,
                      rows: list[dict[str, Any]], bar: Any, iterations: int,
                      checkpoints: CheckpointSchedule) -> None:
        """After an iteration's rollout and update (`stats`): count it, log its row, checkpoint when due."""
        self.iteration += 1
        steps = self.algo.cfg.num_steps * self.env.num_envs
        self.env_steps += steps
        self.wall_s += elapsed
        row = {"iteration": self.iteration, "env_steps": self.env_steps,
               "env_steps_per_s": steps / elapsed, "collection_steps_per_s": steps / rollout_s,
               "wall_s": round(self.wall_s, 3), **self._episode_stats(), **stats, **log}
        self._record(row, rows, bar, iterations, checkpoints)

    def rollout(self, obs: TensorDict) -> tuple[TensorDict, dict[str, float]]:
        """One iteration's `num_steps` steps of every env into the storage from `obs`; the last observations and the
        means of the envs' logged terms."""
        log_sums: dict[str, float] = {}
        log_counts: dict[str, int] = {}
        for _ in range(self.algo.cfg.num_steps):
            actions, log_probs, values = self.algo.rollout_step(obs)
            next_obs, rewards, dones, extras = self.env.step(actions)
            next_obs, rewards, dones = next_obs.to(self.device), rewards.to(self.device), dones.to(self.device)
            time_outs = extras["time_outs"].to(self.device)
            final = self.algo.final_values(extras["final_obs"].to(self.device), time_outs)
            self.storage.add(obs, actions, log_probs, values, rewards, extras["terminated"].to(self.device),
                             time_outs, final)
            self._track_episodes(rewards, dones.bool())
            for k, v in extras["log"].items():
                v = float(v)
                if v == v:  # NaN: an `episode/` metric with no episode ending at this step
                    log_sums[k] = log_sums.get(k, 0.0) + v
                    log_counts[k] = log_counts.get(k, 0) + 1
            obs = next_obs
        return obs, {k: v / log_counts[k] for k, v in log_sums.items()}

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        opt_tensors, opt_meta = checkpoint.flatten_optimizer(self.algo.optimizer)
        tensors, meta = self._common_state()
        tensors.update(opt_tensors)
        meta.update({"optimizer": opt_meta, "learning_rate": self.algo.learning_rate})
        model_config = {"policy": self.algo.config, "run": self.config}
        return checkpoint.save(path, model_config, self.algo.model_state(), tensors, meta)

    def restore(self, path: str | Path) -> None:
        """Continue from a checkpoint saved by `save` (model, optimizer, RNGs, env state, counters)."""
        _, model_state = checkpoint.load(path)
        try:
            self.algo.load_model_state(model_state)
        except RuntimeError as e:
            raise CheckpointError(f"checkpoint {path} does not fit this policy: {e}") from e
        meta, tensors = checkpoint.load_trainer(path)
        checkpoint.restore_optimizer(self.algo.optimizer, tensors, meta["optimizer"])
        self.algo.learning_rate = meta["learning_rate"]
        for group in self.algo.optimizer.param_groups:
            group["lr"] = self.algo.learning_rate
        self._restore_common(tensors, meta)
