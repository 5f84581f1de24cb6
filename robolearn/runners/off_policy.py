"""Off-policy training: a replay buffer fed by envs or robots, critic updates at a set update-to-data ratio.

`OffPolicyLearner` is the learner half, shared by the sim runner below and the real-world learner
(`real.rl.learner`, fed by robots over the actor/learner link): after `learning_starts` transitions it owes
`utd_ratio` critic updates per transition collected (fractions carry over), each on a minibatch that mixes
the offline buffer, if any, at `offline_ratio` (`sample_mixed`); and it checkpoints networks, optimizers,
the replay buffer, the update counters and the RNGs, so a resumed learner continues with the data it had.

`OffPolicyRunner` adds collection from a VecEnv: each iteration steps it `steps_per_iteration` times, and
every transition goes into the replay buffer with its true next observation (`extras["final_obs"]`, so
time-outs bootstrap and terminations do not). Outputs match the on-policy runner (`metrics.jsonl`,
TensorBoard, checkpoints, plots); rows also carry `updates` (critic updates so far) and `updates_per_s`.
With `snapshot_every` it also writes the actor alone, at the start and whenever an iteration's env steps cross a
multiple of it (and after the last iteration), into `<run_dir>/snapshots/` (`robolearn.checkpoints.snapshots`): the
behaviour policies of D4RL-style datasets, taken at iteration ends so that a resumed run takes the same ones.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from robolearn.algos.online.sac import SAC
from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.snapshots import save_snapshot
from robolearn.core.buffers import ReplayBuffer, check_replay, sample_mixed
from robolearn.errors import CheckpointError, ConfigError
from robolearn.runners.base import CheckpointSchedule, RunnerBase, evaluate_policy, progress_bar, restore_rng, rng_state


@dataclasses.dataclass
class OffPolicyRunConfig:
    """The off-policy runner's part of `algo` (beside the algorithm's own fields)."""

    steps_per_iteration: int = 50   # vec-env steps per logged iteration
    env_steps: int = 200_000        # training length; `iterations` is derived from it unless given
    offline_data: str | None = None  # a dataset (any format) mixed into every batch at algo.offline_ratio
    eval_every: int = 0             # env steps between evaluations of the deterministic policy (0: none)
    eval_episodes: int = 10         # episodes per evaluation, one per env of a separate evaluation VecEnv
    eval_reference: list[float] | None = None  # [random, reference] returns that normalise the evaluations' score
    #                                            (a dataset's, for its episode length); null: the task's
    snapshot_every: int = 0         # env steps between policy-only snapshots (`robolearn.checkpoints.snapshots`)


class Replay(Protocol):
    """What the learner needs of its online buffer: a `ReplayBuffer`, or several behind one `sample`."""

    def __len__(self) -> int: ...

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Any]: ...

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]: ...

    def load_state_dict(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None: ...


class Means:
    """Running means of logged values: floats, or 0-d tensors summed on their device (synced once, in `means`)."""

    def __init__(self) -> None:
        self.sums: dict[str, Any] = {}
        self.counts: dict[str, int] = {}

    def add(self, values: Mapping[str, Any]) -> None:
        for k, v in values.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: float(v / self.counts[k]) for k, v in self.sums.items()}


class OffPolicyLearner:
    """The update schedule and training state of off-policy learning; whoever collects calls `collected`.

    Args:
        algo: SAC or TD3 (`update(batch, generator)`, `model_state`, `optimizers`, `config`).
        buffer: the online replay buffer (see `Replay`).
        offline: an offline buffer mixed into every batch at `algo.cfg.offline_ratio`, or None.
        generator: the random draws of sampling and updates (on the learner's device).
    """

    def __init__(self, algo: SAC, buffer: Replay, offline: ReplayBuffer | None, generator: torch.Generator):
        check_replay(algo.cfg)
        self.algo, self.buffer, self.offline, self.generator = algo, buffer, offline, generator
        self.updates = 0
        self.update_debt = 0.0

    def collected(self, new: int, total: int, warming: bool = False) -> bool:
        """Count `new` transitions, `total` in all so far: past `learning_starts` (and the warm-up, while the caller
        says it goes on: `warmup_whole_episodes`), each owes `utd_ratio` critic updates. Returns whether learning has
        started (updates are owed)."""
        cfg = self.algo.cfg
        if total <= cfg.learning_starts or warming:
            return False
        self.update_debt += cfg.utd_ratio * new
        return True

    def update(self, stats: Means | None = None, limit: int | None = None) -> int:
        """Pay the update debt, at most `limit` updates (the rest stays owed); returns how many ran. Each draws
        one minibatch (`sample_mixed`) and calls `algo.update`, whose statistics go into `stats`."""
        cfg, done = self.algo.cfg, 0
        while self.update_debt >= 1.0 and (limit is None or done < limit):
            batch = sample_mixed(self.buffer, self.offline, cfg.batch_size, cfg.offline_ratio, self.generator)
            out = self.algo.update(batch, self.generator)
            if stats is not None:
                stats.add(out)
            self.update_debt -= 1.0
            self.updates += 1
            done += 1
        return done

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path, run_config: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None,
             meta: dict[str, Any] | None = None) -> Path:
        """Atomically checkpoint the networks (`model.safetensors`, with `{"policy", "run": run_config}`) and the
        trainer state: the caller's `tensors`/`meta`, the RNGs, optimizers, replay buffer and update counters."""
        tensors, meta = dict(tensors or {}), dict(meta or {})
        rng_tensors, rng_meta = rng_state(self.generator)
        tensors.update(rng_tensors)
        meta.update(rng_meta)
        opt_tensors, opt_meta = checkpoint.flatten_optimizers(self.algo.optimizers)
        tensors.update(opt_tensors)
        buf_tensors, buf_meta = self.buffer.state_dict()
        tensors.update({f"buffer/{k}": v for k, v in buf_tensors.items()})
        meta.update({"optimizers": opt_meta, "buffer": buf_meta, "updates": self.updates,
                     "update_debt": self.update_debt, "critic_updates": self.algo.updates})
        model_config = {"policy": self.algo.config, "run": run_config}
        return checkpoint.save(path, model_config, self.algo.model_state(), tensors, meta)

    def restore(self, path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Continue from `save`: networks, optimizers, replay buffer, counters, RNGs. Returns the trainer state's
        (tensors, meta), whose other entries (the caller's) the caller restores."""
        _, model_state = checkpoint.load(path)
        meta, tensors = checkpoint.load_trainer(path)
        try:
            self.algo.load_model_state(model_state)
            checkpoint.restore_optimizers(self.algo.optimizers, tensors, meta["optimizers"])
            self.buffer.load_state_dict({k[7:]: v for k, v in tensors.items() if k.startswith("buffer/")},
                                        meta["buffer"])
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this learner: {e}") from e
        restore_rng(self.generator, tensors, meta)
        self.updates, self.update_debt = meta["updates"], meta["update_debt"]
        self.algo.updates = meta["critic_updates"]
        return tensors, meta


class OffPolicyRunner(RunnerBase):
    """Owns collection from the VecEnv and the replay buffer; `learner` owns the update schedule and its state."""

    draws_on_device = True

    def __init__(self, env: Any, algo: SAC, run_dir: str | Path, config: dict[str, Any], seed: int = 0,
                 progress: bool = True, steps_per_iteration: int = OffPolicyRunConfig.steps_per_iteration,
                 offline: ReplayBuffer | None = None, eval_env: Any = None, eval_every: int = 0,
                 reference: tuple[float, float] | None = None,
                 warmup_actions: Callable[[int, torch.Generator], torch.Tensor] | None = None,
                 eval_deterministic: bool = True, snapshot_every: int = 0):
        """`eval_env`: a separate VecEnv on which the deterministic policy (the sampled one with
        `eval_deterministic=False`) plays one episode per env every `eval_every` env steps (and before the first
        step, so a fine-tuning run logs where it starts), logging `eval/return` and, with `reference` = (random,
        reference) returns, `eval/normalized_score`. `warmup_actions(num_envs, generator)`: the actions before
        `learning_starts` (default: uniform when `random_warmup`, else the actor's; DSRL plays its base policy).
        `snapshot_every`: env steps between policy snapshots (see the module docstring; 0: none)."""
        super().__init__(env, run_dir, config, seed, algo.device, progress)
        self.steps_per_iteration = steps_per_iteration
        self.warmup_actions, self.eval_deterministic = warmup_actions, eval_deterministic
        self.eval_env, self.eval_every, self.reference, self.seed = eval_env, eval_every, reference, seed
        if eval_every < 0 or (eval_every and eval_env is None):
            raise ConfigError("eval_every must be >= 0, and an evaluation needs eval_env")
        if snapshot_every < 0:
            raise ConfigError(f"runner.snapshot_every must be >= 0 env steps (0: no snapshots), got {snapshot_every}")
        self.snapshot_every = snapshot_every
        self.random_steps = 0  # env steps of uniform random warm-up actions so far (the snapshot index keeps them)
        self.last_eval: dict[str, Any] | None = None  # the latest evaluation, for the snapshot index
        cfg = algo.cfg
        dims = {k: v[0] for k, v in env.observation_shapes.items() if k in ("policy", "critic")}
        buffer = ReplayBuffer(max(cfg.buffer_size, env.num_envs), env.num_envs, dims, env.num_actions,
                              self.device, cfg.n_step, cfg.gamma)
        self.learner = OffPolicyLearner(algo, buffer, offline, self.generator)
        self.episode_ended = torch.zeros(env.num_envs, dtype=torch.bool, device=self.device)  # since the start
        self.warmed_up = False  # every env has ended an episode (read from episode_ended, then kept)

    @property
    def algo(self) -> SAC:
        return self.learner.algo

    @property
    def buffer(self) -> ReplayBuffer:
        return self.learner.buffer

    @property
    def offline(self) -> ReplayBuffer | None:
        return self.learner.offline

    @property
    def updates(self) -> int:
        return self.learner.updates

    def learn(self, iterations: int, checkpoint_interval: int = 50,
              checkpoint_minutes: float = 0.0) -> list[dict[str, Any]]:
        """Run until `iterations` in total (counting those before a resume); returns the new metric rows."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        rows = []
        obs = self.env.get_observations().to(self.device)
        checkpoints = CheckpointSchedule(checkpoint_interval, checkpoint_minutes)
        bar = progress_bar(self.progress, type(self.algo).__name__, iterations, self.iteration)
        try:
            self.start(rows, iterations)
            while self.iteration < iterations:
                start = time.perf_counter()
                before = self.env_steps
                obs, log, update_s, updates = self._iteration(obs)
                self.end_iteration(log, time.perf_counter() - start, update_s, updates, before, rows, bar, iterations,
                                   checkpoints)
        finally:
            if bar is not None:
                bar.close()
        return rows

    def start(self, rows: list[dict[str, Any]], iterations: int) -> None:
        """Before the first iteration of a run (not of a resume): the starting policy's evaluation and snapshot."""
        if self.eval_every and self.iteration == 0 and iterations > 0:  # the starting policy's score
            row = {"iteration": 0, "env_steps": 0, "updates": 0, **self._episode_stats(), **self.evaluate()}
            rows.append(row)
            self._log(row)
        if self.snapshot_every and self.env_steps == 0 and iterations > 0:  # the policy that acts first
            self._snapshot()

    def end_iteration(self, log: dict[str, Any], elapsed: float, update_s: float, updates: int, before: int,
                      rows: list[dict[str, Any]], bar: Any, iterations: int,
                      checkpoints: CheckpointSchedule) -> None:
        """Count an iteration that took `elapsed` s (`updates` of them in `update_s`) from `before` env steps on:
        its row, the evaluation and snapshot when due, the checkpoint (a seed-batch, `robolearn.runners.seeds`,
        calls this for each seed's run)."""
        self.iteration += 1
        steps = self.steps_per_iteration * self.env.num_envs
        self.wall_s += elapsed
        row = {"iteration": self.iteration, "env_steps": self.env_steps, "updates": self.updates,
               "env_steps_per_s": steps / elapsed, "updates_per_s": updates / update_s if update_s > 0 else 0.0,
               "wall_s": round(self.wall_s, 3), **self._episode_stats(), **log}
        if self.eval_every and (self.env_steps // self.eval_every > before // self.eval_every
                                or self.iteration == iterations):
            row.update(self.evaluate())
        if self.snapshot_every and (self.env_steps // self.snapshot_every > before // self.snapshot_every
                                    or self.iteration == iterations):
            self._snapshot()  # before `_record` checkpoints: a resume never skips it
        self._record(row, rows, bar, iterations, checkpoints)

    def _iteration(self, obs: Any):
        stats = Means()  # env log floats and the learner's 0-d tensors (synced once, at the end)
        update_s, updates = 0.0, 0
        for _ in range(self.steps_per_iteration):
            obs = self.collect_step(obs, stats)
            if self.learner.collected(self.env.num_envs, self.env_steps, warming=self._warming()):
                start = time.perf_counter()
                updates += self.learner.update(stats)
                if self.device.type == "cuda":  # time the updates, not their launch
                    torch.cuda.synchronize(self.device)
                update_s += time.perf_counter() - start
        return obs, stats.means(), update_s, updates

    def collect_step(self, obs: Any, stats: Means) -> Any:
        """One step of every env (the warm-up's actions, else the actor's sampled ones) into the buffer; the env's
        logged values into `stats`. Returns the next observations."""
        cfg = self.algo.cfg
        warming = self._warming()
        if warming and self.warmup_actions is not None:
            actions = self.warmup_actions(self.env.num_envs, self.generator).to(self.device)
        elif warming and cfg.random_warmup:
            actions = torch.rand(self.env.num_envs, self.env.num_actions, generator=self.generator,
                                 device=self.device) * 2 - 1
            self.random_steps = self.env_steps + self.env.num_envs
        else:
            actions = self.algo.act(obs, deterministic=False, generator=self.generator)
        next_obs, rewards, dones, extras = self.env.step(actions)
        next_obs, rewards, dones = next_obs.to(self.device), rewards.to(self.device), dones.to(self.device)
        terminated = extras["terminated"].to(self.device)
        self.buffer.add(obs, actions.to(self.device), rewards, extras["final_obs"].to(self.device), terminated,
                        dones.bool() & ~terminated.bool())
        self._track_episodes(rewards, dones.bool())
        self.episode_ended |= dones.bool()
        self.env_steps += self.env.num_envs
        env_log = {k: float(v) for k, v in extras["log"].items()}
        stats.add({k: v for k, v in env_log.items() if v == v})  # NaN: an `episode/` metric, no episode ended
        return next_obs

    def _warming(self) -> bool:
        """Whether the warm-up goes on: before `learning_starts` env steps, and with `warmup_whole_episodes` until
        every env has ended an episode (the buffer then starts with whole episodes, as WSRL's one env does)."""
        cfg = self.algo.cfg
        if self.env_steps < cfg.learning_starts:
            return True
        if not getattr(cfg, "warmup_whole_episodes", False) or self.warmed_up:
            return False
        self.warmed_up = bool(self.episode_ended.all())  # one device sync a step, only until the warm-up ends
        return not self.warmed_up

    def evaluate(self) -> dict[str, float]:
        """The deterministic (or sampled) policy on the evaluation envs (`evaluate_policy`), seeded by env step."""
        out = evaluate_policy(self.eval_env, self.algo, self.seed + 1 + self.env_steps, self.reference,
                              self.eval_deterministic)
        self.last_eval = {"env_steps": self.env_steps, "deterministic": self.eval_deterministic,
                          **{k[5:]: v for k, v in out.items() if k in ("eval/return", "eval/normalized_score")}}
        return out

    def _snapshot(self) -> None:
        """Write the actor as `<run_dir>/snapshots/step_<env_steps>/` and index it, with the latest evaluation when it
        is less than `snapshot_every` env steps old."""
        recent = self.last_eval is not None and self.env_steps - self.last_eval["env_steps"] < self.snapshot_every
        info = {"num_envs": self.env.num_envs, "steps_per_iteration": self.steps_per_iteration,
                "snapshot_every": self.snapshot_every, "random_warmup_steps": self.random_steps}
        save_snapshot(self.run_dir, self.env_steps, {"policy": self.algo.config, "run": self.config},
                      self.algo.model_state(), self.last_eval if recent else None, info)

    # --- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Checkpoint the learner (`OffPolicyLearner.save`) with the env state, episodes and counters."""
        tensors, meta = self._env_state()
        tensors["warmup.episode_ended"] = self.episode_ended.cpu()
        return self.learner.save(path, self.config, tensors, meta)

    def restore(self, path: str | Path) -> None:
        """Continue from a checkpoint saved by `save` (networks, optimizers, replay buffer, RNGs, env state)."""
        tensors, meta = self.learner.restore(path)
        self._restore_env(tensors, meta)
        ended = tensors.get("warmup.episode_ended")  # a checkpoint from before it: past its warm-up
        self.episode_ended = (ended.to(self.device) if ended is not None else
                              torch.full_like(self.episode_ended, self.env_steps >= self.algo.cfg.learning_starts))
        self.warmed_up = False
