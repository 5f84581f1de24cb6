"""A bench suite's report: the cells' final scores gathered into tables, IQM and stratified-bootstrap CIs
(rliable), performance profiles, learning curves, as `report.md`, `report.json` and PNG plots.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robolearn.data.dataset import write_json
from robolearn.errors import ConfigError


def load_cells(out: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The cell records of a bench folder (those of its suite, in its order, when bench.json says which) and the
    folder's bench.json (empty if none)."""
    out = Path(out)
    records = {}
    for path in sorted((out / "cells").glob("*.json")):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            record = json.loads(path.read_text())
            if record.get("o2o") and record.get("curve"):  # this version's O2O definitions, whatever wrote it
                from robolearn.eval.o2o import refresh_o2o

                refresh_o2o(record["o2o"], record["curve"], record.get("run_dir"))
            records[record["id"]] = record
    try:
        meta = json.loads((out / "bench.json").read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    if meta.get("cells"):
        return [records[i] for i in meta["cells"] if i in records], meta
    return list(records.values()), meta


def score_table(cells: Sequence[dict[str, Any]], late: int | None = None) -> dict[str, dict[str, list[float]]]:
    """algo -> dataset -> the scores of its cells that finished (seed order); with `late` = k, each one's mean over
    the last k points of its curve instead (`late_table`)."""
    table: dict[str, dict[str, list[float]]] = {}
    for cell in sorted(cells, key=lambda c: c["seed"]):
        row = table.setdefault(cell["algo"], {}).setdefault(cell["dataset"], [])
        if cell.get("error") or cell.get("score") is None:
            continue
        if late is None:
            row.append(float(cell["score"]))
        elif curve := [point[1] for point in cell.get("curve") or [] if point[1] is not None][-late:]:
            row.append(sum(curve) / len(curve))
    return table


#: The late score: the mean of a seed's last LATE_EVALS evaluations. A policy's deterministic score can swing by tens
#: of points between evaluations (hopper: 30-70 points over a run), so one final evaluation of a few seeds cannot
#: order methods a few points apart; the late mean smooths over the end of the run.
LATE_EVALS = 5


def late_table(cells: Sequence[dict[str, Any]], k: int = LATE_EVALS) -> dict[str, dict[str, list[float]]]:
    """algo -> dataset -> each finished seed's mean over the last `k` points of its curve (seed order)."""
    return score_table(cells, late=k)


def score_matrices(table: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """algo -> its (runs x datasets) score matrix, as rliable takes it: the datasets with a score, each with as
    many runs as the one with fewest (a failed seed drops that many runs from the others, latest seeds first)."""
    import numpy as np

    matrices = {}
    for algo, by_dataset in table.items():
        columns = [scores for scores in by_dataset.values() if scores]
        if columns:
            runs = min(len(c) for c in columns)
            matrices[algo] = np.array([c[:runs] for c in columns], dtype=float).T
    return matrices


def aggregate(matrices: dict[str, Any], reps: int = 50000, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """algo -> {"iqm" | "median" | "mean": [point, ci_low, ci_high]} with 95% stratified-bootstrap CIs (rliable)."""
    import numpy as np
    from rliable import library as rly
    from rliable import metrics

    if not matrices:
        return {}

    def func(x):
        return np.array([metrics.aggregate_iqm(x), metrics.aggregate_median(x), metrics.aggregate_mean(x)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # arch: random_state -> generator
        points, intervals = rly.get_interval_estimates(matrices, func, reps=reps,
                                                       random_state=np.random.RandomState(seed))
    return {algo: {name: [float(points[algo][i]), float(intervals[algo][0][i]), float(intervals[algo][1][i])]
                   for i, name in enumerate(("iqm", "median", "mean"))} for algo in matrices}


def write_report(out: str | Path, reps: int = 50000) -> dict[str, Path]:
    """report.md, results.json, aggregate.png and profile.png in `out` from its cell records."""
    import numpy as np

    out = Path(out)
    cells, meta = load_cells(out)
    if not cells and not meta:
        raise ConfigError(f"{out} has no cell results (<out>/cells/*.json): nothing to report")
    algos = meta.get("algos") or list(dict.fromkeys(c["algo"] for c in cells))
    datasets = meta.get("datasets") or list(dict.fromkeys(c["dataset"] for c in cells))
    table = score_table(cells)
    matrices = score_matrices(table)
    stats = aggregate(matrices, reps=reps)
    failed = [c for c in cells if c.get("error")]
    missing = [i for i in meta.get("cells", []) if i not in {c["id"] for c in cells}]
    late = late_table(cells)
    per_cell: dict[str, dict[str, dict[str, Any]]] = {}
    for algo in algos:
        for data in datasets:
            scores, lates = table.get(algo, {}).get(data, []), late.get(algo, {}).get(data, [])
            runs = sum(1 for c in cells if c["algo"] == algo and c["dataset"] == data)
            per_cell.setdefault(algo, {})[data] = {
                "mean": float(np.mean(scores)) if scores else None, "std": float(np.std(scores)) if scores else None,
                "n": len(scores), "runs": runs, "late_mean": float(np.mean(lates)) if lates else None,
                "late_std": float(np.std(lates)) if lates else None}
    paths = {"report": out / "report.md", "results": out / "results.json", "aggregate": out / "aggregate.png",
             "profile": out / "profile.png"}
    write_json(paths["results"], {"suite": meta.get("name"), "algos": algos, "datasets": datasets,
                                   "scores": per_cell, "aggregates": stats, "reps": reps,
                                   "runs_per_dataset": {a: int(m.shape[0]) for a, m in matrices.items()},
                                   "cells": cells})
    if matrices:
        _plot_aggregates(stats, paths["aggregate"])
        _plot_profile(matrices, paths["profile"], reps=min(reps, 2000))
    else:
        for key in ("aggregate", "profile"):
            paths[key].unlink(missing_ok=True)
    paths["curves"] = out / "curves.png"
    has_curves = plot_curves(cells, algos, datasets, paths["curves"])

    def fmt(m: dict[str, Any]) -> str:
        if m["n"] == 0:
            return "failed" if m["runs"] else "-"
        text = f"{m['mean']:.1f} ± {m['std']:.1f}"
        return text + (f" ({m['n']}/{m['runs']})" if m["n"] < m["runs"] else "")

    name = meta.get("name") or out.name
    lines = [f"# Benchmark: {name}", ""]
    if meta.get("description"):
        lines += [meta["description"].strip(), ""]
    lines += [f"{len(cells) - len(failed)} cells finished, {len(failed)} failed"
              + (f", {len(missing)} not run yet" if missing else "")
              + (f"; command-line overrides {meta['overrides']}" if meta.get("overrides") else "") + ".",
              "",
              "Scores are normalised: 0 = random actions, 100 = the reference (the final `eval/normalized_score`, "
              "or the final `mean_return` scaled by the task's random and reference returns).", "",
              "## Normalised score per dataset (mean ± std over seeds; (n/N): seeds that finished)", "",
              "| algo | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
    lines += [f"| {algo} | " + " | ".join(fmt(per_cell[algo][d]) for d in datasets) + " |" for algo in algos]
    if any(len(c.get("curve") or []) > 1 for c in cells):
        def fmt_late(m: dict[str, Any]) -> str:
            return "-" if m["late_mean"] is None else f"{m['late_mean']:.1f} ± {m['late_std']:.1f}"

        lines += ["", f"## Late score per dataset (each seed's mean over its last {LATE_EVALS} evaluations; mean ± "
                  "std over seeds)", "", "One final evaluation of a policy whose score swings between evaluations "
                  "cannot order methods a few points apart; this averages over the end of each run.", "",
                  "| algo | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
        lines += [f"| {algo} | " + " | ".join(fmt_late(per_cell[algo][d]) for d in datasets) + " |" for algo in algos]
    lines += ["", f"## Aggregates over datasets and seeds (95% stratified-bootstrap CIs, {reps} resamples, rliable)",
              "", "| algo | IQM | median | mean | runs x datasets |", "|---|---|---|---|---|"]
    for algo in algos:
        if algo in stats:
            cols = [f"{p:.1f} [{lo:.1f}, {hi:.1f}]" for p, lo, hi in (stats[algo][k] for k in ("iqm", "median",
                                                                                               "mean"))]
            shape = matrices[algo].shape
            lines.append(f"| {algo} | " + " | ".join(cols) + f" | {shape[0]} x {shape[1]} |")
        else:
            lines.append(f"| {algo} | - | - | - | no finished cell |")
    if matrices:
        lines += ["", "![aggregates](aggregate.png)", "", "![performance profile](profile.png)"]
    if any(c.get("o2o") for c in cells):
        from robolearn.eval.o2o import o2o_table

        lines += ["", *o2o_table(cells, algos, datasets)]
    published = meta.get("published") or {}
    if published:
        lines += ["", "## Published numbers beside ours", "",
                  "The suite's own datasets are rebuilt with D4RL's recipes, not D4RL's files, and its budget may be "
                  "smaller: set them side by side, not equal.", "",
                  "| algo | dataset | ours (final, mean ± std) | published |", "|---|---|---|---|"]
        for algo in algos:
            for data, text in (published.get(algo) or {}).items():
                lines.append(f"| {algo} | {data} | {fmt(per_cell[algo][data]) if data in per_cell[algo] else '-'} | "
                             f"{text} |")
    if has_curves:
        lines += ["", "## Learning curves (mean over seeds, 95% bootstrap CI)", "", "![curves](curves.png)"]
    lines += provenance_table(cells, datasets)
    if failed:
        lines += ["", "## Failed cells", ""]
        for c in failed:
            last = c["error"].strip().splitlines()[-1] if c["error"].strip() else "?"
            lines.append(f"- `{c['id']}`: {last}")
    paths["report"].write_text("\n".join(lines) + "\n")
    return paths


def provenance_table(cells: Sequence[dict[str, Any]], datasets: Sequence[str]) -> list[str]:
    """Report lines on what each dataset's finished cells trained on and where: the data's generations (the first 12
    hex digits of the fingerprint a cell records) and the CPUs, with their counts. A regenerated dataset can hold
    other bits with the same statistics (another kind of CPU, another engine build), so a column mixing
    generations is seen here. Empty when no cell records either (cells made before they did)."""
    if not any(c.get("data") or c.get("machine") for c in cells):
        return []

    def counted(values: list[str]) -> str:
        return ", ".join(f"{v} ({values.count(v)})" for v in dict.fromkeys(values))

    lines = ["", "## Data and machines", "", "Per dataset, the generations of the data its finished cells trained on "
             "(the first 12 hex digits of its fingerprint) and their CPUs, with the number of cells; one recipe makes "
             "other bits with the same statistics on another kind of CPU.", "",
             "| dataset | data | machine |", "|---|---|---|"]
    for data in datasets:
        done = [c for c in cells if c["dataset"] == data and not c.get("error")]
        if done:
            lines.append(f"| {data} | {counted([(c.get('data') or 'not recorded')[:12] for c in done])} | "
                         f"{counted([c.get('machine') or 'not recorded' for c in done])} |")
    return lines


def plot_curves(cells: Sequence[dict[str, Any]], algos: Sequence[str], datasets: Sequence[str], path: Path,
                seed: int = 0) -> bool:
    """One panel per dataset: each algorithm's score curve, the mean over its seeds at the steps all of them logged,
    with a 95% percentile-bootstrap band over seeds. Returns whether anything was drawn (else `path` is removed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rng = np.random.default_rng(seed)
    panels = [d for d in datasets if any(c["dataset"] == d and len(c.get("curve") or []) > 1 for c in cells)]
    if not panels:
        path.unlink(missing_ok=True)
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, data in zip(axes[0], panels, strict=True):
        for algo in algos:
            curves = [dict((float(s), float(v)) for s, v in c["curve"]) for c in cells
                      if c["algo"] == algo and c["dataset"] == data and not c.get("error") and c.get("curve")]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            values = np.array([[c[s] for s in steps] for c in curves])  # [seeds, steps]
            boot = values[rng.integers(0, len(values), (1000, len(values)))].mean(1)  # [1000, steps]
            lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
            line, = ax.plot(steps, values.mean(0), label=f"{algo} ({len(curves)})")
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2)
        ax.set_title(data, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("normalised score")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _plot_aggregates(stats: dict[str, dict[str, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from rliable import plot_utils

    algos = list(stats)
    points = {a: np.array([stats[a][k][0] for k in ("iqm", "median", "mean")]) for a in algos}
    intervals = {a: np.array([[stats[a][k][1] for k in ("iqm", "median", "mean")],
                              [stats[a][k][2] for k in ("iqm", "median", "mean")]]) for a in algos}
    row_height = 0.37  # inches per algorithm (rliable's default); the x label goes below the tick labels
    fig, _ = plot_utils.plot_interval_estimates(points, intervals, metric_names=["IQM", "Median", "Mean"],
                                                algorithms=algos, xlabel="Normalized score", row_height=row_height,
                                                xlabel_y_coordinate=-0.5 / (row_height * len(algos)))
    fig.savefig(path, bbox_inches="tight", dpi=100)
    plt.close(fig)


def _plot_profile(matrices: dict[str, Any], path: Path, reps: int = 2000) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from rliable import library as rly
    from rliable import plot_utils

    top = max(100.0, max(float(np.max(m)) for m in matrices.values()))
    low = min(0.0, min(float(np.min(m)) for m in matrices.values()))
    taus = np.linspace(low, top, 101)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        profiles, cis = rly.create_performance_profile(matrices, taus, reps=reps)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=cis, ax=ax,
                                         xlabel=r"Normalized score ($\tau$)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
