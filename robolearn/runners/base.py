"""What every runner shares: episode statistics, metrics.jsonl + TensorBoard, the progress bar and the
environment/RNG part of the training state that makes a resumed run reproduce an uninterrupted one.

`rng_state` / `restore_rng` are the RNG part alone, for learners without a simulator (the real-world learner).
They include the learner device's default generator (`device_generator`): on CUDA, sampling that takes no
generator (PPO's `torch.distributions` actions) draws from it, and `torch.get_rng_state` is the CPU's only."""

from __future__ import annotations

import json
import os
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.errors import ConfigError
from robolearn.eval.episodes import run_episodes
from robolearn.eval.scores import normalized_score

RETURN_WINDOW = 100  # finished episodes averaged into `mean_return`


class CheckpointSchedule:
    """Which iterations end with a `checkpoints/latest`: every `interval` iterations, a run's last, and (`minutes` >
    0) the first to end `minutes` or more after the last checkpoint, so that a slow run (a CQL pack on a CPU core at
    a few updates/s, 10K of them between interval checkpoints) loses about that much at most to a stop.

    The runs of a seed pack share one schedule, which answers once per iteration: their checkpoints stay at one
    iteration, as a resume of the pack needs. Checkpoints only save (the RNGs included), so a run's results do
    not depend on when they happen."""

    def __init__(self, interval: int, minutes: float = 0.0):
        if interval < 1 or minutes < 0:
            raise ConfigError(f"checkpoint_interval must be >= 1 and checkpoint_minutes >= 0, not {interval} and "
                              f"{minutes}")
        self.interval, self.seconds = interval, 60.0 * minutes
        self.last = time.monotonic()
        self._answer: tuple[int, bool] | None = None  # (iteration, due): asked again by each run of a pack

    def due(self, iteration: int, iterations: int) -> bool:
        """Whether the run(s) checkpoint at the end of `iteration` of `iterations`."""
        if self._answer is None or self._answer[0] != iteration:
            now = time.monotonic()
            due = (iteration % self.interval == 0 or iteration == iterations
                   or (self.seconds > 0 and now - self.last >= self.seconds))
            if due:
                self.last = now
            self._answer = (iteration, due)
        return self._answer[1]


class RunnerBase:
    """Episode tracking, logging and the env/RNG training state; subclasses own the loop."""

    label = "train"
    draws_on_device = False

    def __init__(self, env: Any, run_dir: str | Path, config: dict[str, Any], seed: int, device: torch.device,
                 progress: bool):
        self.env, self.config, self.device, self.progress = env, config, device, progress
        self.run_dir = Path(run_dir)
        torch.manual_seed(seed)
        # the off-policy runner draws on the learner's device (no host copies per update); PPO draws on the CPU
        self.generator = torch.Generator(device=device if self.draws_on_device else "cpu").manual_seed(seed)
        self.iteration = 0
        self.env_steps = 0
        self.wall_s = 0.0
        self.ep_return = torch.zeros(env.num_envs, dtype=torch.float64, device=device)
        self.ep_length = torch.zeros(env.num_envs, dtype=torch.int64, device=device)
        self.finished_returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.finished_lengths: deque[float] = deque(maxlen=RETURN_WINDOW)
        self._writer = None
        self.logging = True   # metrics.jsonl and TensorBoard (a torchrun job: rank 0 only)
        self.world_size = 1   # ranks of a torchrun job, each stepping its own env block

    # --- episodes ------------------------------------------------------------------------------
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
        if not self.logging:
            return
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "iteration":
                self._writer.add_scalar(k, v, self.env_steps)
        self._writer.flush()

    def _record(self, row: dict[str, Any], rows: list[dict[str, Any]], bar: ProgressBar | None, iterations: int,
                checkpoints: CheckpointSchedule) -> None:
        """The end of an iteration: keep, log and show its row; checkpoint `latest` when `checkpoints` says
        (subclasses provide `save`)."""
        if self.world_size > 1:
            row = {**row, "world_size": self.world_size, "env_steps_all_ranks": row["env_steps"] * self.world_size}
        rows.append(row)
        self._log(row)
        if bar is not None:
            bar.update(row)
        if checkpoints.due(self.iteration, iterations):
            self.save(self.run_dir / "checkpoints" / "latest")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # --- training state --------------------------------------------------------------------------
    def _common_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Env state, RNGs, episode bookkeeping and counters, for `checkpoint.save`'s trainer state."""
        tensors, meta = self._env_state()
        rng_tensors, rng_meta = rng_state(self.generator, self.device)
        tensors.update(rng_tensors)
        meta.update(rng_meta)
        return tensors, meta

    def _restore_common(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self._restore_env(tensors, meta)
        restore_rng(self.generator, tensors, meta, self.device)

    def _env_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The simulation's part of the trainer state: env state, episode bookkeeping and counters (no RNGs)."""
        tensors = {f"env.{k}": torch.from_numpy(np.array(v)) for k, v in self.env.state_dict().items()}
        tensors.update({
            "episodes.return": self.ep_return.cpu(), "episodes.length": self.ep_length.cpu(),
            "episodes.finished_returns": torch.tensor(list(self.finished_returns), dtype=torch.float64),
            "episodes.finished_lengths": torch.tensor(list(self.finished_lengths), dtype=torch.float64),
        })
        meta = {"iteration": self.iteration, "env_steps": self.env_steps, "wall_s": self.wall_s}
        return tensors, meta

    def _restore_env(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.env.load_state_dict({k[4:]: v.numpy() for k, v in tensors.items() if k.startswith("env.")})
        self.ep_return = tensors["episodes.return"].to(self.device)
        self.ep_length = tensors["episodes.length"].to(self.device)
        self.finished_returns = deque(tensors["episodes.finished_returns"].tolist(), maxlen=RETURN_WINDOW)
        self.finished_lengths = deque(tensors["episodes.finished_lengths"].tolist(), maxlen=RETURN_WINDOW)
        self.iteration, self.env_steps, self.wall_s = meta["iteration"], meta["env_steps"], meta["wall_s"]
        self._trim_metrics()

    def _trim_metrics(self) -> None:
        """After a restore: drop the metric rows of iterations past the checkpoint's (a run that died after its last
        checkpoint wrote them; the resumed run writes them again), so `metrics.jsonl` holds each iteration once.
        TensorBoard keeps its events: a resumed run's points overwrite nothing there, they are added again."""
        path = self.run_dir / "metrics.jsonl"
        if not self.logging or not path.is_file():
            return
        lines = path.read_text().splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get("iteration", 0) <= self.iteration]
        if len(kept) != len(lines):
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, path)


def evaluate_policy(env: Any, algo: Any, seed: int, reference: tuple[float, float] | None,
                    deterministic: bool = True) -> dict[str, float]:
    """Mean return of `algo`'s deterministic policy (sampled with `deterministic=False`, from a generator seeded
    with `seed`) over one whole episode per env of `env`, re-seeded with `seed` first (callers derive it from their
    step counter, so a resumed run evaluates on the same starts): `robolearn.eval.episodes.run_episodes`. With
    `reference` = (random, reference) returns, also the normalised score (`robolearn.eval.scores`)."""
    start = time.perf_counter()
    if deterministic:
        def act(obs: Any) -> torch.Tensor:
            return algo.act(obs, deterministic=True).to(env.device)
    else:
        generator = torch.Generator().manual_seed(seed)

        def act(obs: Any) -> torch.Tensor:
            return algo.act(obs, False, generator).to(env.device)
    episodes = run_episodes(env, act, seed)
    total = episodes.returns.cpu()
    out = {"eval/return": float(total.mean()), "eval/return_std": float(total.std()) if env.num_envs > 1 else 0.0,
           "eval/seconds": time.perf_counter() - start}
    if episodes.success is not None:  # tasks with a success metric (arm, mazes): the fraction that succeeded
        out["eval/success"] = episodes.success
    if reference is not None:
        out["eval/normalized_score"] = normalized_score(out["eval/return"], *reference)
    return out


def device_generator(device: torch.device) -> torch.Generator | None:
    """The generator that draws on `device` when a call is given none: CUDA's default generator of that device.

    None on the CPU, whose default generator is the global one (`torch.get_rng_state`, saved as `rng.torch`),
    and on other device types (MPS, XPU ...), whose default streams are not saved: resume is exact on CPU and CUDA.
    """
    if device.type != "cuda":
        return None
    torch.cuda.init()  # the per-device default generators exist once CUDA is initialised
    return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]


def rng_state(generator: torch.Generator, device: torch.device | None = None
              ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The global torch RNG, `generator` and the default generator of the learner's `device` (`generator`'s when
    None; only where `device_generator` has one) as trainer-state tensors, the devices as metadata."""
    tensors = {"rng.torch": torch.get_rng_state(), "rng.generator": generator.get_state()}
    meta: dict[str, Any] = {"generator_device": generator.device.type}
    default = device_generator(device if device is not None else generator.device)
    if default is not None:
        tensors["rng.device"] = default.get_state()
        meta["rng_device"] = default.device.type
    return tensors, meta


def restore_rng(generator: torch.Generator, tensors: dict[str, torch.Tensor], meta: dict[str, Any],
                device: torch.device | None = None) -> None:
    """Continue the random streams saved by `rng_state`, so a resumed run draws what an uninterrupted one would."""
    torch.set_rng_state(tensors["rng.torch"])
    default = device_generator(device if device is not None else generator.device)
    if default is not None:
        if meta.get("rng_device") == default.device.type:
            default.set_state(tensors["rng.device"])
        else:  # saved on the CPU: the device's stream keeps its seed
            warnings.warn(f"the checkpoint has no random state for {default.device.type} (saved on "
                          f"{meta.get('rng_device', 'cpu')}): it keeps its seed instead, so the resumed run's "
                          "random draws differ from an uninterrupted one", stacklevel=3)
    saved_on = meta.get("generator_device", "cpu")
    if saved_on == generator.device.type:
        generator.set_state(tensors["rng.generator"])
    else:  # a CPU generator's state does not fit a CUDA generator (or the reverse): the stream restarts
        warnings.warn(f"the checkpoint's random generator was on {saved_on}, this run's is on "
                      f"{generator.device.type}: it keeps its seed instead, so the resumed run's random "
                      "draws differ from an uninterrupted one", stacklevel=3)


class ProgressBar:
    """A rich progress bar showing iterations, env-steps, env-steps/s and mean return."""

    def __init__(self, label: str, total: int, done: int):
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn())
        self.task = self.progress.add_task("train", total=total, completed=done, info="")
        self.last_eval = "score -"  # offline runs: the latest evaluation, shown until the next
        self.progress.start()

    def update(self, row: dict[str, Any]) -> None:
        """Online rows: env-steps, their rate and the mean training return; offline rows (`gradient_steps`, no
        env-steps): gradient steps, their rate and the last evaluation's score (normalised where known)."""
        if "gradient_steps" in row:
            if "eval/return" in row:
                score = row.get("eval/normalized_score")
                self.last_eval = f"score {score:.1f}" if score is not None else f"return {row['eval/return']:.1f}"
            info = (f"gradient steps {row['gradient_steps']:,}  {row['updates_per_s']:,.0f}/s  "
                    f"{self.last_eval}")
        else:
            ret = row["mean_return"]
            info = (f"steps {row['env_steps']:,}  {row['env_steps_per_s']:,.0f}/s  "
                    f"return {'-' if ret is None else f'{ret:.1f}'}")
        self.progress.update(self.task, completed=row["iteration"], info=info)

    def close(self) -> None:
        self.progress.stop()


def progress_bar(enabled: bool, label: str, total: int, done: int) -> ProgressBar | None:
    return ProgressBar(label, total, done) if enabled else None
