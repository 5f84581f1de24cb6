"""`robolearn bench`: a suite of training runs (algorithms x datasets x seeds) in parallel, resumable, with an
rliable report.

    robolearn bench suite=smoke                           # configs/bench/smoke.yaml -> bench/smoke/
    robolearn bench suite=my_suite.yaml out=bench/mine workers=4 overrides='["runner.env_steps=5000"]'
    robolearn bench suite=smoke backend=ray ray_address=auto   # cells as Ray tasks on a running cluster
    robolearn bench report out=bench/smoke                # the report again, from the cell results

A suite (`configs/bench/<name>.yaml`, or any YAML file) lists `algos` and `datasets`, each a name and a list of
`robolearn train` overrides, the `seeds`, and shared `overrides`:

    algos:
      - {name: sac, overrides: [algo=sac]}
      - {name: rlpd, overrides: [algo=rlpd]}
    datasets:
      - {name: cheetah-run-medium, overrides: [env=cheetah-run, runner.offline_data=data/cheetah-run-medium-v0]}
    seeds: [0, 1, 2, 3, 4]
    overrides: [runner.env_steps=100000]

A suite with `command: finetune` runs `robolearn finetune` per cell instead (offline-to-online: the entries are its
overrides, the score comes from the online phase and the report adds the O2O metrics of `o2o.json`).

A cell is one `robolearn train` run with `video=false`, then the suite's shared overrides, the algorithm's, the
dataset's and the command line's `overrides=` (a later one wins), then `seed=`, `run_dir=<out>/runs/<cell>` and
`progress=false`. Cells run in worker processes (`backend=local`: a spawn process pool, `workers` of them, one
per core by default, one torch thread each) or as Ray tasks (`backend=ray`: a local Ray instance, or the cluster
at `ray_address`; `pip install 'robolearn[bench]'`). A cell that fails is recorded with its error; the others go
on. Each finished cell writes `<out>/cells/<cell>.json` (its score, the curve of (step, score), wall time,
error); running the same command again skips the cells that finished without error with the same overrides, and
re-runs the others from scratch, except an interrupted cell with unchanged overrides and a checkpoint: a `train`
cell continues from its `checkpoints/latest` (`robolearn train resume=`; `checkpoint_interval` sets how much a
stop loses), a `finetune` cell from its phases' last checkpoints (the overrides a cell started with are in
`<run_dir>/bench_cell.json`).
Worker output goes to `<out>/logs/<cell>.log`.

The score of a run is its last `eval/normalized_score` in `metrics.jsonl` (D4RL-style, 0 = random, 100 =
reference), or else its last `mean_return` normalised the same way with the task's random and reference
returns (`robolearn tasks`). The report (`<out>/report.md`, `results.json`, `aggregate.png`, `profile.png`)
gives the mean +- std over seeds per algorithm and dataset, and per algorithm the IQM, median and mean over all
datasets and seeds with 95% stratified-bootstrap confidence intervals and the performance profile (rliable).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from robolearn.bench.report import write_report
from robolearn.data.dataset import write_json
from robolearn.errors import ConfigError

BACKENDS = ("local", "ray")


COMMANDS = ("train", "finetune")


#: where a row of metrics.jsonl says how far training got, most specific first
STEP_KEYS = ("step", "env_steps", "gradient_steps", "updates", "iteration")


EVAL_KEY = "eval/normalized_score"


CELL_FILE = "bench_cell.json"  # in a cell's run folder: the overrides it started with


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclasses.dataclass
class BenchConfig:
    """`robolearn bench`: run a suite of training cells (algorithms x datasets x seeds) and report on them."""

    suite: str | None = None        # configs/bench/<suite>.yaml, or a YAML file's path
    out: str | None = None          # null: bench/<suite>
    overrides: list[str] = dataclasses.field(default_factory=list)  # train overrides for every cell (last word)
    backend: str = "local"          # local (process pool) | ray
    workers: int | None = None      # concurrent cells (local; ray: the CPUs of the instance started here); null:
    #                                 one per core
    ray_address: str | None = None  # backend=ray: a running cluster ("auto", "ray://host:10001"); null: start one
    report_only: bool = False       # only write the report from <out>/cells (also `robolearn bench report`)
    reps: int = 50000               # bootstrap resamples for the confidence intervals (rliable's default)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend={self.backend!r}: use one of {list(BACKENDS)}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers={self.workers}: need at least 1 (null: one per core)")
        if self.reps < 1:
            raise ConfigError(f"reps={self.reps}: need at least 1")


@dataclasses.dataclass
class SuiteEntry:
    """An algorithm or a dataset of a suite: its name (in cell names and the report) and its train overrides."""

    name: str = "?"
    overrides: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Suite:
    """A suite file: what `robolearn bench` runs."""

    algos: list[SuiteEntry] = dataclasses.field(default_factory=list)
    datasets: list[SuiteEntry] = dataclasses.field(default_factory=list)
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    overrides: list[str] = dataclasses.field(default_factory=list)
    description: str = ""
    command: str = "train"          # what a cell runs: `robolearn train`, or `robolearn finetune` (O2O: both phases)


@dataclasses.dataclass
class Cell:
    """One training run of the suite."""

    id: str
    algo: str
    dataset: str
    seed: int
    overrides: list[str]            # the train overrides, without run_dir (compared on resume)
    run_dir: str
    cwd: str                        # the directory relative paths in the overrides are relative to
    log: str
    command: str = "train"          # train | finetune

    def train_args(self) -> list[str]:
        return [*self.overrides, f"run_dir={self.run_dir}"]


def suite_path(suite: str) -> Path:
    """A suite's file: a path to a YAML file, or the name of one in configs/bench/."""
    from robolearn.config import config_dir

    path = Path(suite).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"suite file {path} does not exist")
        return path
    named = config_dir() / "bench" / f"{suite}.yaml"
    if not named.is_file():
        known = sorted(p.stem for p in (config_dir() / "bench").glob("*.yaml"))
        raise ConfigError(f"no suite {suite!r}: give a YAML file or one of {known} (configs/bench/)")
    return named


def load_suite(path: str | Path) -> Suite:
    """The suite in a YAML file, checked: names unique and file-name safe, at least one algo, dataset and seed."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read suite {path}: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"suite {path}: expected a mapping with algos, datasets, seeds, overrides")
    try:
        suite: Suite = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Suite), raw))
    except OmegaConfBaseException as e:
        raise ConfigError(f"suite {path}: {str(e).splitlines()[0]} (keys: algos, datasets, seeds, overrides, "
                          f"description; an entry is {{name: ..., overrides: [...]}})") from e
    for kind in ("algos", "datasets"):
        entries = getattr(suite, kind)
        if not entries:
            raise ConfigError(f"suite {path} has no {kind}")
        names = [e.name for e in entries]
        bad = [n for n in names if not _NAME.match(n) or "__" in n]
        if bad:
            raise ConfigError(f"suite {path}: {kind} names {bad} must be letters, digits, '.', '_', '+', '-' "
                              "(no '__'): they name files")
        if len(set(names)) != len(names):
            raise ConfigError(f"suite {path}: duplicate {kind} names {sorted(n for n in names if names.count(n) > 1)}")
    if suite.command not in COMMANDS:
        raise ConfigError(f"suite {path}: command must be one of {list(COMMANDS)}, got {suite.command!r}")
    if not suite.seeds or len(set(suite.seeds)) != len(suite.seeds):
        raise ConfigError(f"suite {path}: seeds must be a non-empty list of distinct integers, got {suite.seeds}")
    return suite


def plan(suite: Suite, out: Path, overrides: Sequence[str] = ()) -> list[Cell]:
    """Every cell of the suite, seed-major: an interrupted run has every algorithm on every dataset for its first
    seeds, a comparison already, rather than some algorithms only."""
    out = out.resolve()
    cells = []
    for seed in suite.seeds:
        for data in suite.datasets:
            for algo in suite.algos:
                cell_id = f"{algo.name}__{data.name}__seed{seed}"
                args = ["video=false", *suite.overrides, *algo.overrides, *data.overrides, *overrides,
                        f"seed={seed}", "progress=false"]
                cells.append(Cell(cell_id, algo.name, data.name, int(seed), args, str(out / "runs" / cell_id),
                                  str(Path.cwd()), str(out / "logs" / f"{cell_id}.log"), suite.command))
    return cells


def run_cell(cell: Cell) -> dict[str, Any]:
    """Train one cell in this (worker) process and read its score; a failure is returned as the error text."""
    _worker_setup()
    start = time.time()
    error = None
    with contextlib.suppress(OSError):
        if Path(cell.cwd).is_dir():
            os.chdir(cell.cwd)
    Path(cell.log).parent.mkdir(parents=True, exist_ok=True)
    Path(cell.run_dir).mkdir(parents=True, exist_ok=True)
    resume = cell.command == "train" and _train_checkpoint(cell)  # `run` kept it: the same overrides, unfinished
    write_json(Path(cell.run_dir) / CELL_FILE, {"overrides": cell.overrides, "command": cell.command})
    with _output_to(cell.log):
        try:
            if cell.command == "finetune":
                from robolearn.runners.o2o import finetune, load_config

                cfg = load_config(cell.overrides)
                cfg.run_dir = cell.run_dir
                finetune(cfg)
            else:
                from robolearn.runners.train import load_train_config, resume_config, run_training

                if resume:
                    run_training(resume_config(cell.run_dir))
                else:
                    run = load_train_config(cell.overrides)
                    run["run_dir"] = cell.run_dir
                    run_training(run)
        except Exception:
            error = traceback.format_exc()
            print(error, file=sys.stderr)
    return cell_result(cell, error=error, wall_s=time.time() - start)


def cell_result(cell: Cell, error: str | None = None, wall_s: float = 0.0) -> dict[str, Any]:
    """The record of a cell: its identity, then its score and curve read from its run directory."""
    record: dict[str, Any] = {"id": cell.id, "algo": cell.algo, "dataset": cell.dataset, "seed": cell.seed,
                              "score": None, "curve": [], "source": None, "task": None, "wall_s": round(wall_s, 3),
                              "error": error, "run_dir": cell.run_dir, "overrides": cell.overrides,
                              "command": cell.command,
                              "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if error is None:
        try:
            record.update(read_score(cell.run_dir))
        except Exception as e:  # any reason (no metrics, an unknown task) is the cell's error
            record["error"] = f"{type(e).__name__}: {e}"
    return record


def read_score(run_dir: str | Path) -> dict[str, Any]:
    """A run's normalised score: the last `eval/normalized_score` of metrics.jsonl, or else the last `mean_return`
    normalised with the task's random and reference returns; with the curve of (step, score) it comes from. A
    `robolearn finetune` folder is scored by its online run, and its O2O metrics (o2o.json) come along as "o2o"."""
    run_dir = Path(run_dir)
    if (run_dir / "online" / "metrics.jsonl").is_file():
        record = read_score(run_dir / "online")
        with contextlib.suppress(OSError, json.JSONDecodeError):
            record["o2o"] = json.loads((run_dir / "o2o.json").read_text())
        return record
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise ConfigError(f"{metrics} does not exist")
    rows = []
    for line in metrics.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a half-written last line
            rows.append(json.loads(line))
    config = run_dir / "config.yaml"
    task = (json.loads(config.read_text()).get("env") or {}).get("name") if config.is_file() else None
    scored = [r for r in rows if _finite(r.get(EVAL_KEY))]
    if scored:
        curve = [(_step(r), float(r[EVAL_KEY])) for r in scored]
        source = EVAL_KEY
    else:
        returns = [r for r in rows if _finite(r.get("mean_return"))]
        if not returns:
            raise ConfigError(f"{metrics} has neither {EVAL_KEY} nor a mean_return (no finished episode)")
        if task is None:
            raise ConfigError(f"{config} names no task (env.name) to normalise mean_return with")
        from robolearn.eval.scores import normalized_score, task_reference

        reference = task_reference(task)
        if reference is None:
            raise ConfigError(f"task {task} is unknown or has no reference return to normalise mean_return with")
        curve = [(_step(r), normalized_score(float(r["mean_return"]), *reference)) for r in returns]
        source = "mean_return"
    return {"score": curve[-1][1], "curve": [list(p) for p in curve], "source": source, "task": task}


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x == x and abs(x) != float("inf")


def _step(row: dict[str, Any]) -> int | float:
    for key in STEP_KEYS:
        if _finite(row.get(key)) and row[key] > 0:
            return row[key]
    return 0


def _worker_setup() -> None:
    """One thread per worker (the cores are shared by the cells), and no JAX grabbing most of a GPU per process."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from robolearn.core.cpu import tune_allocator

    tune_allocator()
    torch.set_num_threads(1)


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """stdout and stderr of this process (Python's and C's) appended to `path` meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run_suite(cfg: BenchConfig) -> Path:
    """Run the cells of `cfg.suite` that have no result yet, then write the report; returns the output folder."""
    if cfg.suite is None:
        raise ConfigError("which suite? suite=<name in configs/bench/ or a YAML file>")
    path = suite_path(cfg.suite)
    suite = load_suite(path)
    out = Path(cfg.out or f"bench/{path.stem}")
    cells = plan(suite, out, cfg.overrides)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    write_json(out / "bench.json", {"suite": str(path), "name": path.stem, "overrides": list(cfg.overrides),
                                     "algos": [a.name for a in suite.algos],
                                     "datasets": [d.name for d in suite.datasets], "seeds": list(suite.seeds),
                                     "description": suite.description, "cells": [c.id for c in cells]})
    pending = [c for c in cells if not _finished(out, c)]
    workers = cfg.workers or _cores()
    print(f"bench {path.stem}: {len(cells)} cells ({len(suite.algos)} algos x {len(suite.datasets)} datasets x "
          f"{len(suite.seeds)} seeds), {len(cells) - len(pending)} done, {len(pending)} to run on {cfg.backend}"
          + (f" ({min(workers, len(pending))} workers)" if cfg.backend == "local" and pending else "")
          + f"; output in {out}", flush=True)
    for cell in pending:
        if Path(cell.run_dir).exists() and not _resumable(out, cell):  # a failed or changed run: start it over
            shutil.rmtree(cell.run_dir)
        with contextlib.suppress(FileNotFoundError):
            os.remove(cell.log)
    done = 0

    def finished(result: dict[str, Any]) -> None:
        nonlocal done
        done += 1
        write_json(out / "cells" / f"{result['id']}.json", result)
        if result["error"]:
            what = f"FAILED: {result['error'].strip().splitlines()[-1]} (log: {_cell(cells, result['id']).log})"
        else:
            what = f"score {result['score']:.1f} ({result['source']})"
        print(f"[{done}/{len(pending)}] {result['id']}: {what}, {result['wall_s']:.0f} s", flush=True)

    if pending:
        if cfg.backend == "ray":
            run_ray(pending, finished, address=cfg.ray_address, num_cpus=cfg.workers)
        else:
            run_local(pending, finished, workers=workers)
    paths = write_report(out, reps=cfg.reps)
    print(f"report: {paths['report']}")
    return out


def exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """In a pool worker: a daemon thread that ends the process once `parent` is gone (the worker re-parented), so
    a bench killed from outside (SIGKILL, `pkill` of the bench alone) leaves no worker training on; a cell stopped
    that way resumes from its last checkpoint at the next bench."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def run_local(cells: Sequence[Cell], done: Callable[[dict[str, Any]], None], workers: int) -> None:
    """The cells in a pool of spawned worker processes; `done(result)` as each finishes. A cell whose worker
    process dies (a crash, the OOM killer) breaks the pool: the cells it took with it run again in a fresh pool,
    twice at most."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    attempts = dict.fromkeys((c.id for c in cells), 0)
    todo = list(cells)
    while todo:
        retry = []
        pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=context,
                                   initializer=exit_with_parent, initargs=(os.getpid(),))
        try:
            futures = {pool.submit(run_cell, cell): cell for cell in todo}
            for future in as_completed(futures):
                cell = futures[future]
                try:
                    result = future.result()
                except BrokenProcessPool as e:
                    attempts[cell.id] += 1
                    if attempts[cell.id] < 2:
                        retry.append(cell)
                        continue
                    result = cell_result(cell, error=f"the worker process died: {e}")
                except Exception:
                    result = cell_result(cell, error=traceback.format_exc())
                done(result)
        except BaseException:  # interrupted (Ctrl-C): stop the running cells now rather than wait for them
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        todo = retry


def run_ray(cells: Sequence[Cell], done: Callable[[dict[str, Any]], None], address: str | None = None,
            num_cpus: int | None = None) -> None:
    """The cells as Ray tasks (one CPU each) on the Ray instance this process is connected to, else the cluster at
    `address`, else a local instance started (and stopped) here; `done(result)` as each finishes."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError("backend=ray needs Ray: pip install 'robolearn[bench]' (or pip install ray)") from e
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address)
        else:
            ray.init(num_cpus=num_cpus or _cores(), include_dashboard=False)
        started = True
    try:
        task = ray.remote(num_cpus=1)(run_cell)
        refs = {task.remote(cell): cell for cell in cells}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                cell = refs.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception:
                    result = cell_result(cell, error=traceback.format_exc())
                done(result)
    finally:
        if started:
            ray.shutdown()


def _finished(out: Path, cell: Cell) -> bool:
    """Whether the cell has a result without error, for the same overrides."""
    try:
        record = json.loads((out / "cells" / f"{cell.id}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return (not record.get("error") and record.get("overrides") == cell.overrides
            and record.get("command", "train") == cell.command)


def _resumable(out: Path, cell: Cell) -> bool:
    """Whether an unfinished cell's run folder can be continued: a cell interrupted (no result, not a failure) with
    the same overrides that is a `robolearn finetune` cell (which resumes its phases from their last checkpoints) or
    a `robolearn train` cell with a checkpoint to resume from (`checkpoint_interval` sets how much a stop loses)."""
    if (out / "cells" / f"{cell.id}.json").exists():
        return False
    if cell.command == "train" and not _train_checkpoint(cell):
        return False
    try:
        started = json.loads((Path(cell.run_dir) / CELL_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return started == {"overrides": cell.overrides, "command": cell.command}


def _train_checkpoint(cell: Cell) -> bool:
    """Whether a train cell's run folder has what `robolearn train resume=` needs: its config and a full checkpoint."""
    run_dir = Path(cell.run_dir)
    return (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "latest" / "trainer.json").is_file()


def _cell(cells: Sequence[Cell], cell_id: str) -> Cell:
    return next(c for c in cells if c.id == cell_id)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
