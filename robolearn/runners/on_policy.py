"""The on-policy runner: collect rollouts from a VecEnv, update PPO, log, checkpoint, resume.

A run directory holds `config.yaml` (the resolved config), `metrics.jsonl` (one JSON object per
iteration: `env_steps`, `env_steps_per_s`, `mean_return`, `wall_s`, losses, reward terms ...),
TensorBoard events, `checkpoints/latest` and `checkpoints/final` (`config.json` +
`model.safetensors` + training state), `learning_curve.png` and a video of the final policy.
Resuming restores the model, optimizer, RNGs and every env's state, so a resumed run reproduces
the metrics of an uninterrupted one.
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from robolearn import checkpoint
from robolearn.algos.ppo import PPO, RolloutStorage
from robolearn.errors import CheckpointError

RETURN_WINDOW = 100  # finished episodes averaged into `mean_return`


class OnPolicyRunner:
    """Owns the loop; `PPO` owns the update."""

    def __init__(self, env: Any, algo: PPO, run_dir: str | Path, config: dict[str, Any], seed: int = 0,
                 progress: bool = True):
        self.env, self.algo, self.config = env, algo, config
        self.run_dir = Path(run_dir)
        self.device = algo.device
        self.progress = progress
        torch.manual_seed(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.storage = RolloutStorage(algo.cfg.num_steps, env.num_envs, env.observation_shapes, env.num_actions,
                                      self.device)
        self.iteration = 0
        self.env_steps = 0
        self.wall_s = 0.0
        self.ep_return = torch.zeros(env.num_envs, dtype=torch.float64, device=self.device)
        self.ep_length = torch.zeros(env.num_envs, dtype=torch.int64, device=self.device)
        self.finished_returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.finished_lengths: deque[float] = deque(maxlen=RETURN_WINDOW)
        self._writer = None

    # --- the loop ------------------------------------------------------------------------------
    def learn(self, iterations: int, checkpoint_interval: int = 50,
              random_episode_start: bool = True) -> list[dict[str, Any]]:
        """Run until `iterations` in total (counting those before a resume); returns the new metric rows.

        `random_episode_start` spreads the envs' episode clocks over the episode length on a fresh
        start (as rsl_rl's `init_at_random_ep_len`), so episodes finish every iteration rather than
        all at once.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        rows = []
        if random_episode_start and self.iteration == 0:
            self.env.episode_length_buf = torch.randint(0, self.env.max_episode_length, (self.env.num_envs,),
                                                        generator=self.generator)
        obs = self.env.get_observations().to(self.device)
        bar = _progress(self.progress, iterations, self.iteration)
        try:
            while self.iteration < iterations:
                start = time.perf_counter()
                obs, log = self._rollout(obs)
                rollout_s = time.perf_counter() - start
                stats = self.algo.update(self.storage, obs, self.generator)
                elapsed = time.perf_counter() - start
                self.iteration += 1
                steps = self.algo.cfg.num_steps * self.env.num_envs
                self.env_steps += steps
                self.wall_s += elapsed
                row = {"iteration": self.iteration, "env_steps": self.env_steps,
                       "env_steps_per_s": steps / elapsed, "collection_steps_per_s": steps / rollout_s,
                       "wall_s": round(self.wall_s, 3), **self._episode_stats(), **stats, **log}
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

    def _rollout(self, obs: TensorDict) -> tuple[TensorDict, dict[str, float]]:
        log_sums: dict[str, float] = {}
        log_counts: dict[str, int] = {}
        for _ in range(self.algo.cfg.num_steps):
            actions, log_probs, values = self.algo.act(obs)
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

    def _track_episodes(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        self.ep_return += rewards.to(torch.float64)
        self.ep_length += 1
        if bool(dones.any()):
            self.finished_returns.extend(self.ep_return[dones].tolist())
            self.finished_lengths.extend(self.ep_length[dones].tolist())
            self.ep_return[dones] = 0.0
            self.ep_length[dones] = 0

    def _episode_stats(self) -> dict[str, float | None]:
        if not self.finished_returns:
            return {"mean_return": None, "mean_episode_length": None}
        return {"mean_return": float(np.mean(self.finished_returns)),
                "mean_episode_length": float(np.mean(self.finished_lengths))}

    # --- outputs -------------------------------------------------------------------------------
    def _log(self, row: dict[str, Any]) -> None:
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "iteration":
                self._writer.add_scalar(k, v, self.env_steps)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        opt_tensors, opt_meta = checkpoint.flatten_optimizer(self.algo.optimizer)
        env_state = {f"env.{k}": torch.from_numpy(np.array(v)) for k, v in self.env.state_dict().items()}
        tensors = {
            **opt_tensors, **env_state,
            "rng.torch": torch.get_rng_state(), "rng.generator": self.generator.get_state(),
            "episodes.return": self.ep_return.cpu(), "episodes.length": self.ep_length.cpu(),
            "episodes.finished_returns": torch.tensor(list(self.finished_returns), dtype=torch.float64),
            "episodes.finished_lengths": torch.tensor(list(self.finished_lengths), dtype=torch.float64),
        }
        meta = {"optimizer": opt_meta, "iteration": self.iteration, "env_steps": self.env_steps,
                "wall_s": self.wall_s, "learning_rate": self.algo.learning_rate}
        model_config = {"policy": self.algo.policy.config, "run": self.config}
        return checkpoint.save(path, model_config, self.algo.policy.state_dict(), tensors, meta)

    def restore(self, path: str | Path) -> None:
        """Continue from a checkpoint saved by `save` (model, optimizer, RNGs, env state, counters)."""
        _, model_state = checkpoint.load(path)
        try:
            self.algo.policy.load_state_dict(model_state)
        except RuntimeError as e:
            raise CheckpointError(f"checkpoint {path} does not fit this policy: {e}") from e
        meta, tensors = checkpoint.load_trainer(path)
        checkpoint.restore_optimizer(self.algo.optimizer, tensors, meta["optimizer"])
        self.algo.learning_rate = meta["learning_rate"]
        for group in self.algo.optimizer.param_groups:
            group["lr"] = self.algo.learning_rate
        self.env.load_state_dict({k[4:]: v.numpy() for k, v in tensors.items() if k.startswith("env.")})
        torch.set_rng_state(tensors["rng.torch"])
        self.generator.set_state(tensors["rng.generator"])
        self.ep_return = tensors["episodes.return"].to(self.device)
        self.ep_length = tensors["episodes.length"].to(self.device)
        self.finished_returns = deque(tensors["episodes.finished_returns"].tolist(), maxlen=RETURN_WINDOW)
        self.finished_lengths = deque(tensors["episodes.finished_lengths"].tolist(), maxlen=RETURN_WINDOW)
        self.iteration, self.env_steps, self.wall_s = meta["iteration"], meta["env_steps"], meta["wall_s"]


class _Bar:
    """A rich progress bar showing iterations, env-steps, env-steps/s and mean return."""

    def __init__(self, total: int, done: int):
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]PPO"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn())
        self.task = self.progress.add_task("train", total=total, completed=done, info="")
        self.progress.start()

    def update(self, row: dict[str, Any]) -> None:
        ret = row["mean_return"]
        info = (f"steps {row['env_steps']:,}  {row['env_steps_per_s']:,.0f}/s  "
                f"return {'-' if ret is None else f'{ret:.1f}'}")
        self.progress.update(self.task, completed=row["iteration"], info=info)

    def close(self) -> None:
        self.progress.stop()


def _progress(enabled: bool, total: int, done: int) -> _Bar | None:
    return _Bar(total, done) if enabled else None
