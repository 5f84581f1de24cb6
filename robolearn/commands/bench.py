"""`robolearn bench`: run a suite (algorithms x datasets x seeds) or rebuild its report.

    robolearn bench suite=smoke                     # -> bench/smoke/report.md
    robolearn bench report out=bench/smoke          # the report again from the cells on disk (report_only=true)

The suite runner is `robolearn.bench.suite`, the report `robolearn.bench.report`.
"""

from __future__ import annotations

from pathlib import Path

from robolearn.bench.report import write_report
from robolearn.bench.suite import BenchConfig, run_suite, suite_path
from robolearn.errors import ConfigError


def cmd_bench(cfg: BenchConfig) -> int:
    """Run a benchmark suite (algorithms x datasets x seeds) in parallel; resumable; writes an rliable report.

    robolearn bench suite=smoke                      # configs/bench/smoke.yaml -> bench/smoke/report.md
    robolearn bench suite=smoke backend=ray          # the cells as Ray tasks
    robolearn bench report out=bench/smoke           # the report again from <out>/cells

    A suite (configs/bench/: smoke, prior-data; or a YAML file) lists algos and datasets (each a name and train
    overrides), seeds and shared overrides; see robolearn/bench/ (suite, cells, backends, report) and docs/bench.md.
    """
    if cfg.report_only:
        if cfg.out is None and cfg.suite is None:
            raise ConfigError("`robolearn bench report` needs out=<bench folder> (or suite=)")
        out = Path(cfg.out or f"bench/{suite_path(cfg.suite).stem}")
        paths = write_report(out, reps=cfg.reps)
        print(f"report: {paths['report']}")
        return 0
    run_suite(cfg)
    return 0
