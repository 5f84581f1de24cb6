"""`robolearn bench`: run a suite (algorithms x datasets x seeds) or rebuild its report.

    robolearn bench suite=smoke                     # -> bench/smoke/report.md
    robolearn bench report out=bench/smoke          # the report again from the cells on disk

The suite runner is `robolearn.bench.suite`, the report `robolearn.bench.report`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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
    overrides), seeds and shared overrides; see robolearn/bench.py and the README's "Benchmarks" section.
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


def cli_args(args: Sequence[str]) -> list[str]:
    """`robolearn bench` arguments as overrides: `report` is `report_only=true`, and `overrides=[a=1,b=2]` (Hydra's
    grammar wants the items quoted) becomes `overrides=["a=1","b=2"]`."""
    result = []
    for i, arg in enumerate(args):
        if arg == "report" and i == 0:
            result.append("report_only=true")
        elif arg.startswith("overrides=[") and arg.endswith("]") and not re.search(r"[\[,]\s*[\"']", arg):
            result.append("overrides=[" + ",".join(json.dumps(x) for x in _split_top(arg[11:-1])) + "]")
        else:
            result.append(arg)
    return result


def _split_top(text: str) -> list[str]:
    """`a=1,b=[2,3]` -> ["a=1", "b=[2,3]"]: commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "[{("
        depth -= ch in "]})"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts
