"""One cell of a bench suite: the training run it is (`Cell`), how a worker runs it (`run_cell`: one `robolearn
train` or `robolearn finetune` in this process, its output to the cell's log, a failure recorded with its error),
and its score read back from the run folder (`read_score`: the final normalised evaluation, the curve, the O2O
metrics of a finetune cell). Offline train cells, or finetune cells, that differ only by seed can run as one `Pack`
(`run_pack`: one `robolearn train seeds=[...]` or `robolearn finetune seeds=[...]` process,
`robolearn.runners.seeds`); `run_unit` runs either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from robolearn.core.cpu import cpu_model
from robolearn.data.dataset import write_json
from robolearn.errors import ConfigError

#: where a row of metrics.jsonl says how far training got, most specific first
STEP_KEYS = ("step", "env_steps", "gradient_steps", "updates", "iteration")


EVAL_KEY = "eval/normalized_score"


CELL_FILE = "bench_cell.json"  # in a cell's run folder: the overrides it started with
PACK_FILE = "bench_pack.json"  # in a pack's run folder: the overrides (without seed=) and the seeds it started with


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
    pack: str | None = None         # packed (`BenchConfig.pack_seeds`): the pack's run folder, this one's parent

    def train_args(self) -> list[str]:
        return [*self.overrides, f"run_dir={self.run_dir}"]


@dataclasses.dataclass
class Pack:
    """Offline train cells, or finetune cells, that differ only by seed, run as one `robolearn train seeds=[...]`
    (`robolearn finetune seeds=[...]`) process: each cell's run folder is the pack's `seed<k>/`, and one worker trains
    all of them with seed-batched updates."""

    id: str
    cells: list[Cell]
    overrides: list[str]            # the cells' train overrides without `seed=`
    run_dir: str
    cwd: str
    log: str

    @property
    def seeds(self) -> list[int]:
        return [cell.seed for cell in self.cells]

    @property
    def command(self) -> str:
        return self.cells[0].command


def pack_overrides(cell: Cell) -> list[str]:
    """A cell's overrides without its `seed=` (what the cells of one pack share)."""
    return [o for o in cell.overrides if not o.startswith("seed=")]


def run_unit(unit: Cell | Pack) -> list[dict[str, Any]]:
    """Run a cell or a pack in this (worker) process: the result of each of its cells."""
    return run_pack(unit) if isinstance(unit, Pack) else [run_cell(unit)]


def failed(unit: Cell | Pack, error: str) -> list[dict[str, Any]]:
    """The results of a cell or a pack that could not run (its worker died): each cell failed with `error`."""
    return [cell_result(cell, error=error) for cell in (unit.cells if isinstance(unit, Pack) else [unit])]


def run_pack(pack: Pack) -> list[dict[str, Any]]:
    """Train a pack's seeds in this (worker) process, one seed-batched `robolearn train seeds=[...]` (resumed when
    its folder has every seed's checkpoint) or `robolearn finetune seeds=[...]` (which resumes its phases itself);
    each cell's result, all with the pack's wall time."""
    seeds = f"seeds=[{','.join(str(k) for k in pack.seeds)}]"
    resume = pack.command == "finetune" or pack_checkpoint(pack)
    if not resume:  # what an earlier attempt (on a node that died) left: its seeds start over
        _start_over(*(cell.run_dir for cell in pack.cells), str(Path(pack.run_dir) / "config.yaml"))

    def job(resume: bool) -> None:
        if pack.command == "finetune":
            _finetune([*pack.overrides, seeds], pack.run_dir)
        else:
            _train([*pack.overrides, seeds], pack.run_dir, resume)

    error, wall_s = _in_worker(pack.cwd, pack.log, pack.run_dir, PACK_FILE,
                               {"overrides": pack.overrides, "seeds": pack.seeds}, job, resume=resume)
    return [cell_result(cell, error=error, wall_s=wall_s) for cell in pack.cells]


def pack_checkpoint(pack: Pack) -> bool:
    """Whether a pack's run folder has what `robolearn train resume=` needs for every one of its seeds."""
    run_dir = Path(pack.run_dir)
    return (run_dir / "config.yaml").is_file() and all(
        (run_dir / f"seed{k}" / "checkpoints" / "latest" / "trainer.json").is_file() for k in pack.seeds)


def run_cell(cell: Cell) -> dict[str, Any]:
    """Train one cell in this (worker) process and read its score; a failure is returned as the error text."""
    def job(resume: bool) -> None:
        if cell.command == "finetune":
            _finetune(cell.overrides, cell.run_dir)
        else:
            _train(cell.overrides, cell.run_dir, resume)

    # a train cell's folder kept by `run` (the same overrides, unfinished) resumes from its checkpoint; one without
    # a checkpoint (an earlier attempt of this cell died on a lost node) starts over, no rows of that attempt kept
    resume = cell.command == "train" and train_checkpoint(cell)
    if cell.command == "train" and not resume:
        _start_over(cell.run_dir)
    error, wall_s = _in_worker(cell.cwd, cell.log, cell.run_dir, CELL_FILE,
                               {"overrides": cell.overrides, "command": cell.command}, job, resume=resume)
    return cell_result(cell, error=error, wall_s=wall_s)


def _start_over(*paths: str) -> None:
    """Remove run folders (and files) that cannot be continued, so a cell run again writes only its own outputs."""
    for path in map(Path, paths):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _in_worker(cwd: str, log: str, run_dir: str, record_name: str, record: dict[str, Any],
               job: Callable[[bool], None], resume: bool) -> tuple[str | None, float]:
    """Run `job(resume)` in this worker process from `cwd`, its output appended to `log`, after writing `record` (what
    the run started with) to `<run_dir>/<record_name>`; returns the error text (None) and the wall time."""
    _worker_setup()
    start = time.time()
    error = None
    with contextlib.suppress(OSError):
        if Path(cwd).is_dir():
            os.chdir(cwd)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(run_dir) / record_name, record)
    with _output_to(log):
        try:
            job(resume)
        except Exception:  # the run's failure becomes its cells' recorded error; the bench goes on
            error = traceback.format_exc()
            print(error, file=sys.stderr)
    return error, time.time() - start


def _finetune(overrides: list[str], run_dir: str) -> None:
    """`robolearn finetune` with `overrides` into `run_dir` (a finished phase is kept, an interrupted one resumes)."""
    from robolearn.runners.o2o import finetune, load_config

    cfg = load_config(overrides)
    cfg.run_dir = run_dir
    finetune(cfg)


def _train(overrides: list[str], run_dir: str, resume: bool) -> None:
    """`robolearn train` with `overrides` into `run_dir`, or the run there resumed."""
    from robolearn.runners.train import load_train_config, resume_config, run_training

    if resume:
        run_training(resume_config(run_dir))
    else:
        run = load_train_config(overrides)
        run["run_dir"] = run_dir
        run_training(run)


def cell_result(cell: Cell, error: str | None = None, wall_s: float = 0.0) -> dict[str, Any]:
    """The record of a cell: its identity, then its score and curve read from its run directory."""
    record: dict[str, Any] = {"id": cell.id, "algo": cell.algo, "dataset": cell.dataset, "seed": cell.seed,
                              "score": None, "curve": [], "source": None, "task": None, "wall_s": round(wall_s, 3),
                              "error": error, "run_dir": cell.run_dir, "overrides": cell.overrides,
                              "command": cell.command,
                              "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": cpu_model(),
                              "data": recorded_data(cell.run_dir)}
    if error is None:
        try:
            record.update(read_score(cell.run_dir))
        except Exception as e:  # any reason (no metrics, an unknown task) is the cell's error
            record["error"] = f"{type(e).__name__}: {e}"
    return record


def recorded_data(run_dir: str | Path) -> str | None:
    """The fingerprint of the dataset a cell's run trained on (its `dataset_source`; a finetune run's offline phase),
    or None (no dataset, or a run made before runs recorded it): cells on another generation of a regenerated dataset
    (another CPU, another engine build) tell themselves apart by it."""
    for name in ("config.yaml", "offline/config.yaml"):
        with contextlib.suppress(OSError, json.JSONDecodeError, AttributeError):
            found = (json.loads((Path(run_dir) / name).read_text()).get("dataset_source") or {}).get("fingerprint")
            if found:
                return found
    return None


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
    """One thread per worker (the cores are shared by the cells), and no JAX grabbing most of a GPU per process.
    Called before each cell: the graphs compiled for the worker's earlier cells are dropped, so every cell compiles
    its own (`fresh_graphs`)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from robolearn.algos.common import fresh_graphs
    from robolearn.core.cpu import tune_allocator

    tune_allocator()
    torch.set_num_threads(1)
    fresh_graphs()


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


def train_checkpoint(cell: Cell) -> bool:
    """Whether a train cell's run folder has what `robolearn train resume=` needs: its config and a full checkpoint."""
    run_dir = Path(cell.run_dir)
    return (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "latest" / "trainer.json").is_file()
