"""Seed-batched training: S seeds of one run in one process.

    robolearn train algo=iql dataset=mujoco/halfcheetah/medium-v0 seeds=[0,1,2,3,4]
    robolearn train env=cheetah-run algo=sac seeds=[0,1,2] device=cuda

A benchmark cell is several seeds of one algorithm, dataset and config. With `seeds=[...]` each seed is a complete
run of its own in `<run_dir>/seed<k>/` (its `config.yaml` says `seed: k`; `metrics.jsonl`, TensorBoard, checkpoints,
learning curve), built by the same code as `robolearn train seed=k` (its learner's initialisation, its generator's
batches and draws, its evaluation episodes), while the S learners' gradient steps run as one
(`robolearn.algos.seeds.SeedBatch`: one vmapped update). Each seed's metrics equal its solo run's to float rounding
(tests/robolearn/runners/test_seeds.py). `load_policy` loads a seed's checkpoint like any other, and
`robolearn train resume=<run_dir>` resumes every seed exactly. Each row's `updates_per_s` is the batch's: updates of
all S seeds together per second.

Offline (`SeedsRunner`), each seed samples its own batches from the one dataset buffer. Online (`OffPolicySeedsRunner`:
SAC, TD3 and their presets) each seed has its own envs, replay buffer and evaluation envs and steps them as its solo
run does; the seeds stay in lockstep because the update schedule depends on env steps only (a warm-up of whole
episodes, `warmup_whole_episodes`, which would end on each seed's own episodes, is taken only where it ends at
`learning_starts` anyway: at least num_envs x the episode length, as WSRL's 5000 steps of one env on 1000-step
episodes). PPO (`OnPolicySeedsRunner`)
collects each seed's rollout from its own envs with its own policy, then updates all S as one (advantages, the
minibatch epochs with each seed's own permutations and KL-adapted rate, the normalisers). Its actions are drawn
from torch's global random streams, as a solo run draws them: each seed keeps its own copy of those streams
(`GlobalStreams`), swapped in around its rollout and its checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from robolearn.algos.seeds import SeedBatch, stack_batches
from robolearn.core.buffers import sample_mixed
from robolearn.errors import ConfigError
from robolearn.runners.base import CheckpointSchedule, device_generator, progress_bar
from robolearn.runners.off_policy import Means, OffPolicyRunner
from robolearn.runners.offline import OfflineRunner, synchronized_since
from robolearn.runners.on_policy import OnPolicyRunner


class SeedsRunner:
    """Trains offline runners that differ only by seed in lockstep, by one seed-batched update."""

    def __init__(self, runners: list[OfflineRunner]):
        self.runners = runners
        self.batch = SeedBatch([runner.algo for runner in runners])

    def learn(self, iterations: int, checkpoint_interval: int = 50,
              checkpoint_minutes: float = 0.0) -> list[list[dict[str, Any]]]:
        """Run every seed until `iterations` in total (counting those before a resume); each seed's new rows."""
        lead = self.runners[0]
        for runner in self.runners:
            runner.run_dir.mkdir(parents=True, exist_ok=True)
        rows: list[list[dict[str, Any]]] = [[] for _ in self.runners]
        log_every, batch_size = lead.run_cfg.log_every, lead.algo.cfg.batch_size
        generators = [runner.generator for runner in self.runners]
        checkpoints = CheckpointSchedule(checkpoint_interval, checkpoint_minutes)
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
                                         bar if k == 0 else None, iterations, checkpoints)
        finally:
            if bar is not None:
                bar.close()
        return rows


class OffPolicySeedsRunner:
    """Trains off-policy runners that differ only by seed in lockstep: each collects from its own envs, and the
    updates they owe run as one seed-batched update."""

    def __init__(self, runners: list[OffPolicyRunner]):
        for r in runners:  # a warm-up of whole episodes can only run past learning_starts if an episode is longer
            cfg, env = r.algo.cfg, r.env
            if getattr(cfg, "warmup_whole_episodes", False) and cfg.learning_starts < env.num_envs * \
                    env.max_episode_length:
                raise ConfigError(
                    f"seeds= with warmup_whole_episodes and algo.learning_starts={cfg.learning_starts} < "
                    f"{env.num_envs} envs x {env.max_episode_length} steps: each seed's warm-up would end on its own "
                    "episodes, out of lockstep. With learning_starts >= num_envs x the episode length every env has "
                    "ended an episode by then (fewer envs, or a larger learning_starts); else one seed= per run")
        self.runners = runners
        self.batch = SeedBatch([runner.algo for runner in runners])

    def learn(self, iterations: int, checkpoint_interval: int = 50,
              checkpoint_minutes: float = 0.0) -> list[list[dict[str, Any]]]:
        """Run every seed until `iterations` in total (counting those before a resume); each seed's new rows."""
        lead = self.runners[0]
        rows: list[list[dict[str, Any]]] = [[] for _ in self.runners]
        obs = []
        for k, runner in enumerate(self.runners):
            runner.run_dir.mkdir(parents=True, exist_ok=True)
            obs.append(runner.env.get_observations().to(runner.device))
            runner.start(rows[k], iterations)
        checkpoints = CheckpointSchedule(checkpoint_interval, checkpoint_minutes)
        bar = progress_bar(lead.progress, f"{type(lead.algo).__name__} x{len(self.runners)} seeds", iterations,
                           lead.iteration)
        try:
            while lead.iteration < iterations:
                start, before = time.perf_counter(), lead.env_steps
                stats = [Means() for _ in self.runners]
                update_s, updates = 0.0, 0
                for _ in range(lead.steps_per_iteration):
                    owed = []
                    for k, runner in enumerate(self.runners):
                        obs[k] = runner.collect_step(obs[k], stats[k])
                        owed.append(runner.learner.collected(runner.env.num_envs, runner.env_steps,
                                                             warming=runner._warming()))
                    if any(owed):
                        began = time.perf_counter()
                        updates += self._pay(stats)
                        update_s += synchronized_since(began, lead.device)
                elapsed = time.perf_counter() - start
                for k, runner in enumerate(self.runners):
                    runner.end_iteration(stats[k].means(), elapsed, update_s, updates, before, rows[k],
                                         bar if k == 0 else None, iterations, checkpoints)
        finally:
            if bar is not None:
                bar.close()
        return rows

    def _pay(self, stats: list[Means]) -> int:
        """The updates every seed owes (the same number: lockstep), each one seed-batched update on each seed's own
        minibatch (`sample_mixed`, its generator); returns how many ran."""
        learners = [runner.learner for runner in self.runners]
        if len({learner.update_debt for learner in learners}) != 1:
            raise RuntimeError("the seeds fell out of lockstep (their update debts differ)")
        cfg, done = learners[0].algo.cfg, 0
        generators = [learner.generator for learner in learners]
        while learners[0].update_debt >= 1.0:
            batch = stack_batches([sample_mixed(learner.buffer, learner.offline, cfg.batch_size, cfg.offline_ratio,
                                                learner.generator) for learner in learners])
            out = self.batch.update(batch, generators)
            for k, learner in enumerate(learners):
                stats[k].add({key: value[k] for key, value in out.items()})
                learner.update_debt -= 1.0
                learner.updates += 1
            done += 1
        return done


class GlobalStreams:
    """Each seed's own copy of torch's global random streams (the CPU's and the learner device's default generator):
    what a solo run draws from without a generator (PPO's sampled actions), kept apart per seed in one process."""

    def __init__(self, device: torch.device):
        self.device_generator = device_generator(device)
        self.states: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    def _now(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        gen = self.device_generator
        return torch.get_rng_state(), (gen.get_state() if gen is not None else None)

    def capture(self) -> None:
        """Add the next seed's streams as they are now (right after its runner was built or restored)."""
        self.states.append(self._now())

    @contextmanager
    def use(self, k: int) -> Iterator[None]:
        """Seed k's streams in place for the block; they are kept for its next turn afterwards."""
        cpu, dev = self.states[k]
        torch.set_rng_state(cpu)
        if dev is not None:
            self.device_generator.set_state(dev)
        try:
            yield
        finally:
            self.states[k] = self._now()


class OnPolicySeedsRunner:
    """Trains PPO runners that differ only by seed in lockstep: each collects its rollout from its own envs, and the
    S updates run as one seed-batched update."""

    def __init__(self, runners: list[OnPolicyRunner], streams: GlobalStreams):
        if len(streams.states) != len(runners):
            raise ValueError("one captured random stream per seed is needed (GlobalStreams.capture after each runner)")
        self.runners, self.streams = runners, streams
        self.batch = SeedBatch([runner.algo for runner in runners])

    def learn(self, iterations: int, checkpoint_interval: int = 50,
              checkpoint_minutes: float = 0.0) -> list[list[dict[str, Any]]]:
        """Run every seed until `iterations` in total (counting those before a resume); each seed's new rows."""
        lead = self.runners[0]
        rows: list[list[dict[str, Any]]] = [[] for _ in self.runners]
        obs = []
        for k, runner in enumerate(self.runners):
            with self.streams.use(k):
                obs.append(runner.start())
        generators = [runner.generator for runner in self.runners]
        checkpoints = CheckpointSchedule(checkpoint_interval, checkpoint_minutes)
        bar = progress_bar(lead.progress, f"PPO x{len(self.runners)} seeds", iterations, lead.iteration)
        try:
            while lead.iteration < iterations:
                start = time.perf_counter()
                logs, rollout_s = [], []
                for k, runner in enumerate(self.runners):
                    began = time.perf_counter()
                    with self.streams.use(k):
                        obs[k], log = runner.rollout(obs[k])
                    logs.append(log)
                    rollout_s.append(time.perf_counter() - began)
                storage = stack_batches([_fields(runner.storage) for runner in self.runners])
                last_obs = {key: torch.stack([o[key] for o in obs]) for key in obs[0].keys()}
                stats = self.batch.update(_Rollout(storage), last_obs, generators)
                means = {key: value.tolist() for key, value in stats.items()}  # [S] each
                for runner in self.runners:
                    runner.storage.step = 0
                elapsed = synchronized_since(start, lead.device)
                for k, runner in enumerate(self.runners):
                    with self.streams.use(k):  # its checkpoint saves its own streams
                        runner.end_iteration({key: value[k] for key, value in means.items()}, logs[k], rollout_s[k],
                                             elapsed, rows[k], bar if k == 0 else None, iterations,
                                             checkpoints)
        finally:
            if bar is not None:
                bar.close()
        return rows


def _fields(storage: Any) -> dict[str, Any]:
    """A rollout storage's tensors by name (observation groups as a dict), for `stack_batches`."""
    return {"obs": {k: storage.obs[k] for k in storage.obs.keys()}, "actions": storage.actions,
            "log_probs": storage.log_probs, "values": storage.values, "rewards": storage.rewards,
            "dones": storage.dones, "truncs": storage.truncs, "bootstrap_values": storage.bootstrap_values}


class _Rollout:
    """S seeds' rollouts stacked on a leading axis, read by `PPO.update` as a `RolloutStorage`."""

    def __init__(self, fields: dict[str, Any]):
        self.__dict__.update(fields)
        self.step = 0
