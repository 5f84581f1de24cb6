"""mkdocs hook: benchmark tables generated from ``benchmarks/results/*.json`` when the site is built.

A page asks for a table with a marker on a line of its own, ``<!-- table: NAME -->`` (optionally followed by
arguments, ``<!-- table: NAME ARG -->``); the hook replaces the marker with the markdown table that
``TABLES[NAME]`` builds from the committed result file, and a line naming that file, its date and machine. So
the numbers on the site are the numbers in the JSON, and a re-run benchmark updates its page. An unknown name,
a missing file or a missing field stops the build with the page and the marker in the message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = re.compile(r"^<!-- table: (?P<name>[\w-]+)(?P<args>(?: [\w.-]+)*) -->$", re.MULTILINE)

Row = list[str]


def _results(config: MkDocsConfig) -> Path:
    """The benchmark results folder, found from mkdocs.yml (which sits at the repository root)."""
    return Path(config.config_file_path).resolve().parent / "benchmarks" / "results"


def _load(results: Path, name: str) -> dict[str, Any]:
    path = results / name
    if not path.is_file():
        raise PluginError(f"tables hook: {path} does not exist; re-run its benchmark or fix the marker")
    return json.loads(path.read_text())


def _markdown(header: Row, rows: list[Row]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _source(name: str, data: dict[str, Any]) -> str:
    """The provenance line under a generated table: file, date, machine."""
    machine = data.get("machine", {})
    where = f"{machine['cpu']}, {machine['cores']} cores" if {"cpu", "cores"} <= machine.keys() else "machine unknown"
    return f"*Generated from `benchmarks/results/{name}` ({data.get('date', 'undated')}, {where}).*"


def _thousands(value: float) -> str:
    return f"{value / 1000:.0f}K" if value >= 1000 else f"{value:.0f}"


def offline_fidelity_summary(results: Path, args: list[str]) -> str:
    """Normalised score, mean ± std over seeds (n), per algorithm and budget, for one dataset (the argument) or
    every dataset in ``offline_fidelity_summary.json`` (written by the offline-fidelity summary script)."""
    name = "offline_fidelity_summary.json"
    data = _load(results, name)
    budgets: list[int] = data["budgets"]
    datasets = args or sorted(data["scores"])
    blocks = []
    for dataset in datasets:
        if dataset not in data["scores"]:
            raise PluginError(f"tables hook: {name} has no dataset {dataset!r}; it has {sorted(data['scores'])}")
        rows = []
        for algo, by_budget in data["scores"][dataset].items():
            cells = []
            for budget in budgets:
                s = by_budget.get(str(budget))
                cells.append(f"{s['mean']:.1f} ± {s['std']:.1f} ({len(s['seeds'])})" if s else "-")
            rows.append([algo, *cells])
        title = f"**{dataset}**\n\n" if len(datasets) > 1 else ""
        blocks.append(title + _markdown(["algo", *(f"{b // 1000}K steps" for b in budgets)], rows))
    return "\n\n".join(blocks) + "\n\n" + _source(name, data)


def sac_update_grid(results: Path, args: list[str]) -> str:
    """SAC full updates per second against stable-baselines3 (and SBX, where the file has it) over network widths
    and critic counts; the argument names the result file (default: the cheetah-run grid)."""
    name = args[0] if args else "sac_vs_peers_cheetah-run_grid_cpu.json"
    data = _load(results, name)
    sbx = all("sbx_updates_per_s" in cell for cell in data["updates_grid"])
    rows = []
    for cell in data["updates_grid"]:
        width = "x".join(str(h) for h in cell["hidden"])
        row = [f"{width}, {cell['num_critics']}", f"{cell['sb3_updates_per_s']:.0f}"]
        if sbx:
            row.append(f"{cell['sbx_updates_per_s']:.0f}")
        row += [f"{cell['robolearn_updates_per_s']:.0f} ({cell['robolearn_ratio']:.2f}x)",
                f"{cell['robolearn_compiled_updates_per_s']:.0f} ({cell['robolearn_compiled_ratio']:.2f}x)"]
        if sbx:
            row.append(f"**{cell['robolearn_compiled_vs_sbx']:.2f}x**")
        rows.append(row)
    header = ["networks, critics", "SB3 updates/s", *(["SBX updates/s"] if sbx else []),
              "robolearn (eager, vs SB3)", "robolearn `compile=true` (vs SB3)", *(["compiled vs SBX"] if sbx else [])]
    return _markdown(header, rows) + "\n\n" + _source(name, data)


def offpolicy_fused_ops(results: Path, args: list[str]) -> str:
    """Off-policy updates per second with one implementation choice undone at a time (one thread)."""
    name = "offpolicy_fused_ops_cpu.json"
    data = _load(results, name)
    columns = {"eager": "eager", "compile=True": "`compile=true`", "loop critics": "critics in a Python loop",
               "foreach Adam": "foreach Adam", "single-tensor Adam": "per-tensor Adam",
               "loop Polyak": "per-tensor Polyak"}
    rows = [[f"{c['hidden']}x{c['hidden']}, {c['num_critics']}",
             *(f"{c['updates_per_s'][key]:.0f}" for key in columns)] for c in data["cells"]]
    return _markdown(["networks, critics", *columns.values()], rows) + "\n\n" + _source(name, data)


def sim_throughput(results: Path, args: list[str]) -> str:
    """Env-steps/s of the first tasks: C backend at 1024 envs with its ratios to bare ``mujoco.rollout``, and MJX
    on the CPU at 256 envs."""
    name = "sim_throughput_cpu.json"
    data = _load(results, name)
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for r in data["throughput"]:
        by_task.setdefault(r["task"], {})[f"{r['backend']}/{r['num_envs']}"] = r
    rows = []
    for task, runs in by_task.items():
        c, mjx = runs.get("mujoco/1024"), runs.get("mjx/256")
        rows.append([f"`{task}`",
                     f"{_thousands(c['env_steps_per_s'])} env-steps/s" if c else "-",
                     f"{c['ratio_to_raw_rollout']:.2f}" if c else "-",
                     f"{c['ratio_to_raw_stepped_rollout']:.2f}" if c else "-",
                     _thousands(mjx["env_steps_per_s"]) if mjx else "-"])
    header = ["task", "C backend, 1024 envs", "vs one bare rollout call", "vs bare rollout called per step",
              "MJX on CPU, 256 envs"]
    return _markdown(header, rows) + "\n\n" + _source(name, data)


def sim_throughput_new_tasks(results: Path, args: list[str]) -> str:
    """Env-steps/s and physics steps/s of the heavier tasks (C backend, 1024 envs)."""
    name = "sim_throughput_cpu_new_tasks.json"
    data = _load(results, name)
    rows = [[f"`{r['task']}`", _thousands(r["env_steps_per_s"]), _thousands(r["physics_steps_per_s"]),
             f"{r['ratio_to_raw_rollout']:.2f}"]
            for r in data["throughput"] if r["backend"] == "mujoco"]
    header = ["task", "env-steps/s", "physics steps/s", "vs one bare rollout call"]
    return _markdown(header, rows) + "\n\n" + _source(name, data)


TABLES: dict[str, Callable[[Path, list[str]], str]] = {
    "offline_fidelity_summary": offline_fidelity_summary,
    "sac_update_grid": sac_update_grid,
    "offpolicy_fused_ops": offpolicy_fused_ops,
    "sim_throughput": sim_throughput,
    "sim_throughput_new_tasks": sim_throughput_new_tasks,
}


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace every table marker on the page with its generated table."""
    results = _results(config)

    def render(match: re.Match[str]) -> str:
        name, args = match["name"], match["args"].split()
        if name not in TABLES:
            raise PluginError(f"tables hook: {page.file.src_path}: unknown table {name!r}; known: {sorted(TABLES)}")
        try:
            return TABLES[name](results, args)
        except (KeyError, TypeError) as err:
            raise PluginError(f"tables hook: {page.file.src_path}: table {name!r}: missing field {err}") from err

    return MARKER.sub(render, markdown)
