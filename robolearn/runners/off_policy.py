"""The off-policy runner: many envs feed a replay buffer, the learner updates at a set update-to-data ratio.

Each iteration steps the VecEnv `steps_per_iteration` times. Every transition goes into the replay
buffer with its true next observation (`extras["final_obs"]`, so time-outs bootstrap and
terminations do not). After `learning_starts` transitions the learner owes `utd_ratio` critic
updates per transition collected (fractions carry over), each on a minibatch that mixes the
offline buffer, if any, at `offline_ratio`.

Outputs match the on-policy runner (`metrics.jsonl`, TensorBoard, checkpoints, plots); rows also
carry `updates` (critic updates so far) and `updates_per_s`. Checkpoints hold the replay buffer,
so a resumed run continues with the data it had.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from robolearn import checkpoint
from robolearn.algos.sac import SAC
from robolearn.buffers import ReplayBuffer, sample_mixed
from robolearn.errors import CheckpointError
from robolearn.runners.base import RunnerBase, progress_bar


class OffPolicyRunner(RunnerBase):
    """Owns collection, the replay buffer and the update schedule; the algorithm owns the updates."""

    draws_on_device = True

    def __init__(self, env: Any, algo: SAC, run_dir: str | Path, config: dict[str, Any], seed: int = 0,
                 progress: bool = True, steps_per_iteration: int = 50, offline: ReplayBuffer | None = None):
        super().__init__(env, run_dir, config, seed, algo.device, progress)
        self.algo, self.offline = algo, offline
        self.steps_per_iteration = steps_per_iteration
        cfg = algo.cfg
        dims = {k: v[0] for k, v in env.observation_shapes.items() if k in ("policy", "critic")}
        self.buffer = ReplayBuffer(max(cfg.buffer_size, env.num_envs), env.num_envs, dims, env.num_actions,
                                   self.device, cfg.n_step, cfg.gamma)
        self.updates = 0
        self.update_debt = 0.0

    def learn(self, iterations: int, checkpoint_interval: int = 50) -> list[dict[str, Any]]:
        """Run until `iterations` in total (counting those before a resume); returns the new metric rows."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        rows = []
        obs = self.env.get_observations().to(self.device)
        bar = progress_bar(self.progress, type(self.algo).__name__, iterations, self.iteration)
        try:
            while self.iteration < iterations:
                start = time.perf_counter()
                obs, log, update_s, updates = self._iteration(obs)
                elapsed = time.perf_counter() - start
                self.iteration += 1
                steps = self.steps_per_iteration * self.env.num_envs
                self.wall_s += elapsed
                row = {"iteration": self.iteration, "env_steps": self.env_steps, "updates": self.updates,
                       "env_steps_per_s": steps / elapsed,
                       "updates_per_s": updates / update_s if update_s > 0 else 0.0,
                       "wall_s": round(self.wall_s, 3), **self._episode_stats(), **log}
                rows.append(row)
                self._log(row)
                if bar is not None:
                    bar.update(row)
                if self.iteration % checkpoint_interval == 0 or self.iteration == iterations:
                    self.save(self.run_dir / "checkpoints" / "latest")
        finally:
            if bar is not None:
                bar.close()
        return rows

    def _iteration(self, obs: Any):
        cfg = self.algo.cfg
        sums: dict[str, Any] = {}  # floats from the env log, 0-d tensors from the learner (synced once)
        counts: dict[str, int] = {}
        update_s, updates = 0.0, 0
        for _ in range(self.steps_per_iteration):
            if self.env_steps < cfg.learning_starts and cfg.random_warmup:
                actions = torch.rand(self.env.num_envs, self.env.num_actions, generator=self.generator,
                                     device=self.device) * 2 - 1
            else:
                actions = self.algo.act(obs, generator=self.generator)
            next_obs, rewards, dones, extras = self.env.step(actions)
            next_obs, rewards, dones = next_obs.to(self.device), rewards.to(self.device), dones.to(self.device)
            terminated = extras["terminated"].to(self.device)
            self.buffer.add(obs, actions.to(self.device), rewards, extras["final_obs"].to(self.device), terminated,
                            dones.bool() & ~terminated.bool())
            self._track_episodes(rewards, dones.bool())
            self.env_steps += self.env.num_envs
            for k, v in extras["log"].items():
                v = float(v)
                if v == v:  # NaN: an `episode/` metric with no episode ending at this step
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
            obs = next_obs
            if self.env_steps > cfg.learning_starts:
                self.update_debt += cfg.utd_ratio * self.env.num_envs
                start = time.perf_counter()
                while self.update_debt >= 1.0:
                    batch = sample_mixed(self.buffer, self.offline, cfg.batch_size, cfg.offline_ratio, self.generator)
                    for k, v in self.algo.update_critic(batch, self.generator).items():
                        sums[k] = sums.get(k, 0.0) + v
                        counts[k] = counts.get(k, 0) + 1
                    self.update_debt -= 1.0
                    self.updates += 1
                    updates += 1
                if self.device.type == "cuda":  # time the updates, not their launch
                    torch.cuda.synchronize(self.device)
                update_s += time.perf_counter() - start
        return obs, {k: float(v / counts[k]) for k, v in sums.items()}, update_s, updates

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        tensors, meta = self._common_state()
        opt_meta = {}
        for name, opt in self.algo.optimizers.items():
            t, m = checkpoint.flatten_optimizer(opt)
            tensors.update({f"{name}/{k}": v for k, v in t.items()})
            opt_meta[name] = m
        buf_tensors, buf_meta = self.buffer.state_dict()
        tensors.update({f"buffer/{k}": v for k, v in buf_tensors.items()})
        meta.update({"optimizers": opt_meta, "buffer": buf_meta, "updates": self.updates,
                     "update_debt": self.update_debt, "critic_updates": self.algo.critic_updates})
        model_config = {"policy": self.algo.config, "run": self.config}
        return checkpoint.save(path, model_config, self.algo.model_state(), tensors, meta)

    def restore(self, path: str | Path) -> None:
        """Continue from a checkpoint saved by `save` (networks, optimizers, replay buffer, RNGs, env state)."""
        _, model_state = checkpoint.load(path)
        try:
            self.algo.load_model_state(model_state)
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this learner: {e}") from e
        meta, tensors = checkpoint.load_trainer(path)
        for name, opt in self.algo.optimizers.items():
            prefix = name + "/"
            checkpoint.restore_optimizer(opt, {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)},
                                         meta["optimizers"][name])
        self.buffer.load_state_dict({k[7:]: v for k, v in tensors.items() if k.startswith("buffer/")}, meta["buffer"])
        self._restore_common(tensors, meta)
        self.updates, self.update_debt = meta["updates"], meta["update_debt"]
        self.algo.critic_updates = meta["critic_updates"]
