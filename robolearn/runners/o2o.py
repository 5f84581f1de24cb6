"""`robolearn finetune`: offline-to-online (O2O) fine-tuning, one method per `algo=`, as `configs/finetune.yaml`
defines them (WSRL, RO2O, Cal-QL, RLPD with prior data, SAC from scratch).

    robolearn finetune algo=wsrl dataset=point-maze-umaze-diverse offline_steps=50000 online_steps=100000
    robolearn finetune algo=ro2o checkpoint=runs/<offline ro2o run> online_steps=250000
    robolearn finetune algo=wsrl dataset=hopper-v5-medium seeds=[0,1,2,3,4]  # 5 seeds in one process
    robolearn train algo=wsrl init=runs/<offline run> env=cheetah-run       # the online phase alone

A method is two `robolearn train` runs in one folder: `<run_dir>/offline` (the offline algorithm on the dataset;
skipped with `checkpoint=`, and for the methods without pre-training) and `<run_dir>/online` (the online learner
initialised from the offline checkpoint with `init=`, `train`'s warm start: actor, critics, targets and temperature
by name, the networks' sizes taken from the checkpoint). Data the method keeps (`retain_data`: Cal-QL's and RLPD's
50/50 batches) is the dataset as `runner.offline_data`; WSRL and RO2O start online with an empty buffer that the
pre-trained policy fills first (`algo.learning_starts` with `algo.random_warmup=false`: no update, no random action).

The online phase evaluates the deterministic policy every `eval_every` env steps and once before its first step, so
`<run_dir>/o2o.json` holds the O2O metrics (`o2o_metrics`): the starting score, the initial dip, steps to 90% of
the final score, the cumulative regret and the final score. Re-running the same command resumes: a finished phase is
not run again, an interrupted one continues from its last checkpoint (exactly, as `train resume=`).

With `seeds=[...]` both phases are seed-batched `robolearn train seeds=` runs (`robolearn.runners.seeds`: one
update for all seeds, each seed's numbers its solo run's), and seed k's folder `<run_dir>/seed<k>/` is what a solo
`seed=k` run writes (offline/, online/, o2o.json); `<run_dir>/offline` and `<run_dir>/online` hold the phases'
seed-batched configs (what a resume reads).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.warm_start import checkpoint_dir, seed_path
from robolearn.errors import ConfigError
from robolearn.eval.o2o import DIP_WINDOW, learning_starts, o2o_metrics, read_curve
from robolearn.eval.scores import reference_source, task_reference


@dataclasses.dataclass
class MethodConfig:
    """One O2O method: its offline phase (train overrides, or null for none), its online phase, what it keeps."""

    description: str = ""
    offline: list[str] | None = None  # `robolearn train` overrides of the pre-training (algo=...); null: none
    offline_steps: int = 100_000      # its gradient steps, unless finetune's offline_steps says otherwise
    online: list[str] = dataclasses.field(default_factory=list)  # the online phase's train overrides (algo=...)
    retain_data: bool = False         # the dataset is mixed into online batches (runner.offline_data)


@dataclasses.dataclass
class FinetuneConfig:
    """`robolearn finetune`: pre-train offline (or start from `checkpoint`), then fine-tune online."""

    algo: str = "wsrl"                # the method: a key of `methods`
    checkpoint: str | None = None     # an offline run (or checkpoint folder) to start from; null: pre-train here
    dataset: str | None = None        # the prior data (pre-training, retained data); null: the checkpoint run's
    env: str | None = None            # the task; null: the dataset's (or the checkpoint run's)
    offline_steps: int | None = None  # gradient steps offline; null: the method's
    online_steps: int = 100_000       # env steps online
    eval_every: int = 5000            # online env steps between evaluations
    eval_episodes: int = 10
    seed: int = 0
    seeds: list[int] | None = None    # these seeds in one process (seed-batched phases), seed k in <run_dir>/seed<k>/
    device: str = "cpu"
    run_dir: str | None = None        # null: runs/<task>-<algo>-finetune-<time>
    progress: bool = True
    video: bool = False
    offline: list[str] = dataclasses.field(default_factory=list)  # more train overrides for the offline phase
    online: list[str] = dataclasses.field(default_factory=list)   # ... and for the online phase
    methods: dict[str, MethodConfig] = dataclasses.field(default_factory=dict)  # configs/finetune.yaml


def load_config(overrides: Sequence[str]) -> FinetuneConfig:
    """The composed `configs/finetune.yaml` with its overrides, checked."""
    from omegaconf import OmegaConf

    from robolearn.config import compose

    raw = compose("finetune", overrides, FinetuneConfig)
    cfg: FinetuneConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(FinetuneConfig), raw))
    if cfg.algo not in cfg.methods:
        raise ConfigError(f"algo={cfg.algo!r} is not an O2O method; use one of {sorted(cfg.methods)} "
                          "(configs/finetune.yaml)")
    if cfg.online_steps < 1 or cfg.eval_every < 1 or cfg.eval_episodes < 1:
        raise ConfigError("online_steps, eval_every and eval_episodes must be >= 1")
    method = cfg.methods[cfg.algo]
    if cfg.eval_every > DIP_WINDOW * cfg.online_steps:
        print(f"note: eval_every={cfg.eval_every} > {DIP_WINDOW:.0%} of online_steps={cfg.online_steps}: the initial "
              "dip is measured at the first online evaluation alone (evaluate more often to see inside the window)")
    if cfg.checkpoint is None and cfg.dataset is None:
        raise ConfigError("give dataset=<path or name> (pre-trained here) or checkpoint=<offline run>")
    if cfg.checkpoint is not None and method.offline is None:
        raise ConfigError(f"algo={cfg.algo} has no offline phase to start from a checkpoint: give dataset= only")
    return cfg


def _checkpoint_run(path: str) -> dict[str, Any]:
    config, _ = checkpoint.load(checkpoint_dir(path))
    return config.get("run") or {}


def finetune(cfg: FinetuneConfig) -> Path:
    """Run (or resume) one O2O method (`load_config` composes `cfg`); returns the run folder."""
    import time

    from robolearn.data.sources import load_source, resolve_dataset
    from robolearn.runners.train import dataset_env, env_override

    method = cfg.methods[cfg.algo]
    seeds = _seeds(cfg)
    dataset, task = cfg.dataset, cfg.env
    task_overrides: dict[str, Any] = {}  # the dataset's task options (episode_length, reward_type, ...)
    if cfg.checkpoint is not None:  # the first seed's (a {seed} in it is each seed's)
        run = _checkpoint_run(seed_path(cfg.checkpoint, (seeds or [cfg.seed])[0]))
        dataset = dataset or run.get("dataset")
        if task is None:  # the checkpoint's task, with the options it trained and scored with
            task = (run.get("env") or {}).get("name")
            task_overrides = dict((run.get("env") or {}).get("overrides") or {})
    reference = None
    if dataset is not None:  # its task, and its reference returns (measured at its episode length)
        meta = load_source(dataset)[1].metadata
        if task is None:
            choice = dataset_env(dataset)
            task, task_overrides = (choice.task, dict(choice.overrides)) if choice is not None else (None, {})
        pair, origin = reference_source(meta, task or "")  # the dataset's or D4RL's; the task's is checked below
        reference = [float(v) for v in pair] if pair is not None and not origin.startswith("task") else None
    if task is None:
        raise ConfigError(f"dataset {dataset} names no task: pass env=<task>")

    if reference is None and task_reference(task) is None:
        raise ConfigError(f"no reference returns to score {task} by (the dataset has no ref_min_score/ref_max_score "
                          "and the task none): the O2O metrics need normalised scores")
    out = Path(cfg.run_dir or f"runs/{task}-{cfg.algo}-finetune-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    common = {"device": cfg.device, "progress": cfg.progress,
              **{f"env.overrides.{k}": v for k, v in task_overrides.items()},
              **({"seed": cfg.seed} if seeds is None else {"seeds": seeds})}

    init = cfg.checkpoint  # seeds=: a {seed} in it is each seed's
    if init is None and method.offline is not None:
        steps = cfg.offline_steps if cfg.offline_steps is not None else method.offline_steps
        _phase(out, "offline", seeds, [*method.offline, env_override(task)], cfg.offline, {
            **common, "dataset": dataset, "runner.gradient_steps": steps,
            "runner.log_every": math.gcd(steps, 1000), "video": False})  # logs every 1000 steps when it divides them
        init = str(out / "offline") if seeds is None else str(out / "seed{seed}" / "offline")
    online: dict[str, Any] = {**common, "runner.env_steps": cfg.online_steps, "runner.eval_every": cfg.eval_every,
                              "runner.eval_episodes": cfg.eval_episodes, "video": cfg.video}
    if reference is not None:
        online["runner.eval_reference"] = reference
    if init is not None:
        online["init"] = init
    if method.retain_data:
        online["runner.offline_data"] = str(resolve_dataset(dataset))
    _phase(out, "online", seeds, [*method.online, env_override(task)], cfg.online, online)
    from robolearn.data.dataset import write_json

    for seed in [cfg.seed] if seeds is None else seeds:  # seed k's folder is a solo run's: offline/, online/, o2o.json
        folder = out if seeds is None else out / f"seed{seed}"
        seed_init = None if init is None else seed_path(init, seed)
        offline_score = None
        if seed_init is not None:  # the offline run's own last evaluation (a checkpoint's run folder is two levels up)
            offline_curve = read_curve(checkpoint_dir(seed_init).parent.parent)
            offline_score = offline_curve[-1][1] if offline_curve else None
        metrics = o2o_metrics(read_curve(folder / "online"), cfg.online_steps, offline_score, learning_starts(folder))
        metrics.update({"algo": cfg.algo, "task": task, "dataset": dataset, "seed": seed, "init": seed_init})
        write_json(folder / "o2o.json", metrics)
        print(json.dumps(metrics, indent=2))
    print(f"run directory: {out}" + ("" if seeds is None else f" (seeds {seeds}: seed<k>/)"))
    return out


def _seeds(cfg: FinetuneConfig) -> list[int] | None:
    """The seeds of a seed-batched run (`seeds=`), checked; None for one `seed=`."""
    if cfg.seeds is None:
        return None
    seeds = [int(k) for k in cfg.seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds= must list distinct seeds, got {seeds}")
    return seeds


def _phase(out: Path, phase: str, seeds: list[int] | None, preset: list[str], user: list[str],
           values: dict[str, Any]) -> None:
    """One training run, `<out>/<phase>`: skipped when finished (checkpoints/final), resumed when interrupted, else
    composed from the method's `preset` overrides (configs/finetune.yaml) and the user's, with `values` (dotted
    keys) set in it unless the user's overrides name them. With `seeds`, one seed-batched run: `<out>/<phase>` holds
    its config and seed k's run is `<out>/seed<k>/<phase>` (`seed_dir`), so each seed's folder is a solo run's."""
    import shutil

    from robolearn.algos.common import fresh_graphs
    from robolearn.runners.train import load_train_config, resume_config, run_training

    fresh_graphs()  # this phase's learner compiles its own graphs, not variants of the last phase's
    run_dir = out / phase
    runs = [run_dir] if seeds is None else [out / f"seed{k}" / phase for k in seeds]
    saved = run_dir / "config.yaml"
    if saved.is_file():  # a folder of another run (solo against seed-batched, other seeds) is not overwritten
        before = json.loads(saved.read_text()).get("seeds")
        if before != seeds:
            raise ConfigError(f"{run_dir} holds a run with seeds={before}, not {seeds}: give another run_dir (or "
                              "remove that one)")
    if all((run / "checkpoints" / "final" / checkpoint.CONFIG).is_file() for run in runs):
        print(f"{run_dir}: finished before, not run again")
        return
    if (seeds is None or saved.is_file()) and all(
            (run / "checkpoints" / "latest" / checkpoint.CONFIG).is_file() for run in runs):
        print(f"{run_dir}: resuming")
        run_training(resume_config(run_dir))
        return
    for path in {run_dir, *runs}:  # started but not checkpointed (every seed): start over
        if path.exists():
            shutil.rmtree(path)
    cfg = load_train_config([*preset, *user])
    named = {o.split("=", 1)[0].lstrip("+") for o in user}
    if seeds is not None:
        values = {**values, "seed_dir": f"../seed{{seed}}/{phase}"}
    for key, value in {**values, "run_dir": str(run_dir)}.items():
        if key not in named:
            *path, last = key.split(".")
            node = cfg
            for part in path:
                node = node[part]
            node[last] = value
    run_training(cfg)
