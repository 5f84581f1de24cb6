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

An algorithm's `per_dataset: {<dataset name>: [overrides]}` adds overrides in that dataset's cells only (per-dataset
hyperparameters, as CORL's configs). A cell is one `robolearn train` run with `video=false`, then the suite's shared
overrides, the algorithm's, its per-dataset ones, the dataset's and the command line's `overrides=` (a later one
wins), then `seed=`, `run_dir=<out>/runs/<cell>` and
`progress=false`. Cells run in worker processes (`backend=local`: a spawn process pool, `workers` of them, one
per core by default, one torch thread each) or as Ray tasks (`backend=ray`: a local Ray instance, or the cluster
at `ray_address` or `$RAY_ADDRESS`, the cells spread over its nodes, a cell whose node dies run again elsewhere
`ray_retries` times; `pip install 'robolearn[bench]'`). A cell that fails is recorded with its error; the others go
on. Each finished cell writes `<out>/cells/<cell>.json` (its score, the curve of (step, score), wall time,
error); running the same command again skips the cells that finished without error with the same overrides, and
re-runs the others from scratch, except an interrupted cell with unchanged overrides and a checkpoint: a `train`
cell continues from its `checkpoints/latest` (`robolearn train resume=`; `checkpoint_interval` and
`checkpoint_minutes` set how much a stop loses), a `finetune` cell from its phases' last checkpoints (the
overrides a cell started with are in `<run_dir>/bench_cell.json`).
Worker output goes to `<out>/logs/<cell>.log`. With `pack_seeds=true` the offline train cells (a `dataset=`), and
every finetune cell, of one algorithm and dataset run as one pack: one `robolearn train seeds=[...]` (or `robolearn
finetune seeds=[...]`) process whose seed-batched updates train all their seeds at once (`robolearn.runners.seeds`;
on a GPU, S seeds cost about what one does), each cell's run folder its `<out>/runs/<algo>__<dataset>/seed<k>/`, its
log `<out>/logs/<algo>__<dataset>__seeds.log`.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robolearn.bench.backends import BACKENDS, RAY_RETRIES, cores, run_local, run_ray
from robolearn.bench.cells import CELL_FILE, PACK_FILE, Cell, Pack, pack_checkpoint, pack_overrides, train_checkpoint
from robolearn.bench.report import write_report
from robolearn.data.dataset import write_json
from robolearn.errors import ConfigError

COMMANDS = ("train", "finetune")


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
    ray_address: str | None = None  # backend=ray: a running cluster ("auto", "<head>:6379", "ray://<head>:10001");
    #                                 null: $RAY_ADDRESS, else start one here
    ray_retries: int = RAY_RETRIES  # backend=ray: re-runs of a cell whose node or worker died (Ray's max_retries)
    report_only: bool = False       # only write the report from <out>/cells (also `robolearn bench report`)
    algos: list[str] | None = None  # only these of the suite's algorithms (null: all); a later run does the rest
    datasets: list[str] | None = None  # only these of its datasets (null: all)
    pack_seeds: bool = False        # offline train / finetune cells differing only by seed: one seed-batched process
    #                                 (`robolearn train seeds=[...]`): <out>/runs/<algo>__<dataset>/seed<k>/
    reps: int = 50000               # bootstrap resamples for the confidence intervals (rliable's default)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend={self.backend!r}: use one of {list(BACKENDS)}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers={self.workers}: need at least 1 (null: one per core)")
        if self.ray_retries < 0:
            raise ConfigError(f"ray_retries={self.ray_retries}: need 0 or more (re-runs of a cell whose node died)")
        if self.reps < 1:
            raise ConfigError(f"reps={self.reps}: need at least 1")


@dataclasses.dataclass
class SuiteEntry:
    """An algorithm or a dataset of a suite: its name (in cell names and the report) and its train overrides."""

    name: str = "?"
    overrides: list[str] = dataclasses.field(default_factory=list)
    #: An algorithm's overrides for one dataset only, by dataset name, after its own (per-dataset hyperparameters,
    #: as CORL's configs/offline/<algo>/<env>/<dataset>.yaml; e.g. ReBRAC's BC coefficients).
    per_dataset: dict[str, list[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Suite:
    """A suite file: what `robolearn bench` runs."""

    algos: list[SuiteEntry] = dataclasses.field(default_factory=list)
    datasets: list[SuiteEntry] = dataclasses.field(default_factory=list)
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    overrides: list[str] = dataclasses.field(default_factory=list)
    description: str = ""
    command: str = "train"          # what a cell runs: `robolearn train`, or `robolearn finetune` (O2O: both phases)
    #: algo -> dataset -> what a paper or a peer's table reports for that method on the original dataset, with its
    #: source and budget; the report sets it beside this suite's scores.
    published: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

    def only(self, algos: Sequence[str] | None, datasets: Sequence[str] | None) -> Suite:
        """This suite with only the named algorithms and datasets (None: all); an unknown name is a ConfigError."""
        picked = {}
        for kind, names in (("algos", algos), ("datasets", datasets)):
            entries = getattr(self, kind)
            if names is None:
                picked[kind] = entries
                continue
            unknown = sorted(set(names) - {e.name for e in entries})
            if unknown:
                raise ConfigError(f"bench {kind}={unknown}: not in the suite (its {kind}: "
                                  f"{', '.join(e.name for e in entries)})")
            picked[kind] = [e for e in entries if e.name in names]
        return dataclasses.replace(self, **picked)


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
    if any(d.per_dataset for d in suite.datasets):
        raise ConfigError(f"suite {path}: per_dataset belongs to algos (an algorithm's overrides on one dataset)")
    datasets = sorted(d.name for d in suite.datasets)
    for algo in suite.algos:
        unknown = sorted(set(algo.per_dataset) - set(datasets))
        if unknown:
            raise ConfigError(f"suite {path}: per_dataset of {algo.name} names datasets {unknown} the suite does not "
                              f"have ({datasets})")
    for algo, by_dataset in suite.published.items():
        unknown = sorted({algo} - {a.name for a in suite.algos}) + sorted(set(by_dataset) - set(datasets))
        if unknown:
            raise ConfigError(f"suite {path}: published names {unknown}, which the suite does not have")
    if suite.command not in COMMANDS:
        raise ConfigError(f"suite {path}: command must be one of {list(COMMANDS)}, got {suite.command!r}")
    if not suite.seeds or len(set(suite.seeds)) != len(suite.seeds):
        raise ConfigError(f"suite {path}: seeds must be a non-empty list of distinct integers, got {suite.seeds}")
    return suite


def cell_id(algo: str, dataset: str, seed: int) -> str:
    """A cell's name: its result's file name in <out>/cells/ and its run folder's."""
    return f"{algo}__{dataset}__seed{seed}"


def plan(suite: Suite, out: Path, overrides: Sequence[str] = (), pack_seeds: bool = False) -> list[Cell]:
    """Every cell of the suite, seed-major: an interrupted run has every algorithm on every dataset for its first
    seeds, a comparison already, rather than some algorithms only. `pack_seeds`: the offline train cells of one
    algorithm and dataset share a pack (`Cell.pack`, their run folders its `seed<k>/`) and one log."""
    out = out.resolve()
    cells = []
    offline: dict[tuple[str, str], bool] = {}
    for seed in suite.seeds:
        for data in suite.datasets:
            for algo in suite.algos:
                name = cell_id(algo.name, data.name, seed)
                args = ["video=false", *suite.overrides, *algo.overrides, *algo.per_dataset.get(data.name, []),
                        *data.overrides, *overrides,
                        f"seed={seed}", "progress=false"]
                cell = Cell(name, algo.name, data.name, int(seed), args, str(out / "runs" / name),
                            str(Path.cwd()), str(out / "logs" / f"{name}.log"), suite.command)
                if pack_seeds:
                    key = (algo.name, data.name)
                    if key not in offline:  # finetune seeds= batches every method; train seeds=, offline runs
                        offline[key] = suite.command == "finetune" or _offline(args)
                    if offline[key]:
                        pack = out / "runs" / f"{algo.name}__{data.name}"
                        cell = dataclasses.replace(cell, run_dir=str(pack / f"seed{seed}"), pack=str(pack),
                                                   log=str(out / "logs" / f"{algo.name}__{data.name}__seeds.log"))
                cells.append(cell)
    return cells


def _offline(overrides: Sequence[str]) -> bool:
    """Whether a train cell's overrides make an offline run (a dataset=): what `robolearn train seeds=` takes."""
    import io

    from robolearn.runners.train import is_online, load_train_config

    with contextlib.redirect_stdout(io.StringIO()):  # composing may print what it found of the dataset
        return not is_online(load_train_config(overrides))


def packs(cells: Sequence[Cell], out: Path) -> list[Cell | Pack]:
    """The pending cells, those of one pack (`Cell.pack`) grouped into a `Pack`; the others as they are. A pack's
    folder is kept when it can resume (the same overrides and seeds, every seed checkpointed, or a finetune pack,
    which resumes its phases itself; no member's result a failure); else its seeds' folders are cleared (the
    finished seeds' stay)."""
    units: list[Cell | Pack] = []
    grouped: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.pack is None:
            units.append(cell)
        else:
            grouped.setdefault(cell.pack, []).append(cell)
    for run_dir, members in grouped.items():
        first = members[0]
        pack = Pack(Path(run_dir).name + "__seeds", members, pack_overrides(first), run_dir, first.cwd, first.log)
        try:
            started = json.loads((Path(run_dir) / PACK_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            started = {}
        failed = any(_failed(out, cell) for cell in members)  # a failed pack starts over, as a failed cell does
        resumable = (not failed and (pack.command == "finetune" or pack_checkpoint(pack))
                     and started.get("seeds") == pack.seeds
                     and _renamed(started.get("overrides"), pack.command) == pack.overrides)
        if not resumable:
            for cell in members:
                shutil.rmtree(cell.run_dir, ignore_errors=True)
            for stale in ("config.yaml", PACK_FILE):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(Path(run_dir) / stale)
        units.append(pack)
    return units


def run_suite(cfg: BenchConfig) -> Path:
    """Run the cells of `cfg.suite` that have no result yet, then write the report; returns the output folder."""
    if cfg.suite is None:
        raise ConfigError("which suite? suite=<name in configs/bench/ or a YAML file>")
    path = suite_path(cfg.suite)
    whole = load_suite(path)
    suite = whole.only(cfg.algos, cfg.datasets)
    out = Path(cfg.out or f"bench/{path.stem}")
    cells = plan(suite, out, cfg.overrides, cfg.pack_seeds)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    # bench.json names the whole suite, also when algos= / datasets= run a part of it: the report covers every
    # part run into this folder so far, and names the cells still to run
    write_json(out / "bench.json", {"suite": str(path), "name": path.stem, "overrides": list(cfg.overrides),
                                     "algos": [a.name for a in whole.algos],
                                     "datasets": [d.name for d in whole.datasets], "seeds": list(whole.seeds),
                                     "description": whole.description,
                                     "cells": [cell_id(a.name, d.name, s) for s in whole.seeds
                                               for d in whole.datasets for a in whole.algos],
                                     "published": whole.published})
    pending = [c for c in cells if not _finished(out, c)]
    workers = cfg.workers or cores()
    print(f"bench {path.stem}: {len(cells)} cells ({len(suite.algos)} algos x {len(suite.datasets)} datasets x "
          f"{len(suite.seeds)} seeds), {len(cells) - len(pending)} done, {len(pending)} to run on {cfg.backend}"
          + (f" ({min(workers, len(pending))} workers)" if cfg.backend == "local" and pending else "")
          + f"; output in {out}", flush=True)
    for cell in pending:
        if cell.pack is None and Path(cell.run_dir).exists() and not _resumable(out, cell):  # a failed or changed
            shutil.rmtree(cell.run_dir)                                                       # run: start it over
        with contextlib.suppress(FileNotFoundError):
            os.remove(cell.log)
    units = packs(pending, out)
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
            run_ray(units, finished, address=cfg.ray_address, num_cpus=cfg.workers, retries=cfg.ray_retries)
        else:
            run_local(units, finished, workers=workers)
    paths = write_report(out, reps=cfg.reps)
    print(f"report: {paths['report']}")
    return out


def _finished(out: Path, cell: Cell) -> bool:
    """Whether the cell has a result without error, for the same overrides."""
    try:
        record = json.loads((out / "cells" / f"{cell.id}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return (not record.get("error") and _renamed(record.get("overrides"), cell.command) == cell.overrides
            and record.get("command", "train") == cell.command)


def _failed(out: Path, cell: Cell) -> bool:
    """Whether the cell's last result is a failure (its run folder is not continued)."""
    try:
        return bool(json.loads((out / "cells" / f"{cell.id}.json").read_text()).get("error"))
    except (OSError, json.JSONDecodeError):
        return False


def _resumable(out: Path, cell: Cell) -> bool:
    """Whether an unfinished cell's run folder can be continued: a cell interrupted (no result, not a failure) with
    the same overrides that is a `robolearn finetune` cell (which resumes its phases from their last checkpoints) or
    a `robolearn train` cell with a checkpoint to resume from (`checkpoint_interval` and `checkpoint_minutes` set
    how much a stop loses)."""
    if (out / "cells" / f"{cell.id}.json").exists():
        return False
    if cell.command == "train" and not train_checkpoint(cell):
        return False
    try:
        started = json.loads((Path(cell.run_dir) / CELL_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return (_renamed(started.get("overrides"), cell.command) == cell.overrides
            and started.get("command") == cell.command)


def _renamed(overrides: Any, command: str) -> Any:
    """A cell's recorded overrides with the options renamed since in today's names (`algo.env_steps=` is
    `runner.env_steps=` now), so a bench folder started before a rename still resumes."""
    from robolearn.config.compose import RENAMED

    if not isinstance(overrides, list):
        return overrides
    renamed = RENAMED.get(command, {})
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        out.append(f"{renamed.get(key.lstrip('+'), key)}{sep}{value}" if sep else o)
    return out


def _cell(cells: Sequence[Cell], ident: str) -> Cell:
    return next(c for c in cells if c.id == ident)
