"""The offline-fidelity benches folded into one table per budget, with CORL's ordering checked (issue 15).

`robolearn bench` writes one report per suite; the fidelity question ("do the algorithms order as in CORL?")
spans several: the 25K-step suite over three datasets, and the longer suites that carried some cells on to 100K
and 300K steps. This reads every cell of the given bench folders, takes each run's curve (the score at every
evaluation, so a 300K run also gives its 100K score; one value per (algo, dataset, seed, step), so a run resumed
into a longer suite counts once), and writes, per dataset, the mean ± std over seeds at each budget and whether
each algorithm sits where CORL's halfcheetah table puts it relative to BC (D4RL-style medium-replay and
medium-expert: every other algorithm above BC; random: BC worst).

    .venv/bin/python benchmarks/studies/offline_fidelity_summary.py   # -> results/offline_fidelity_summary.{md,json}

Only fold benches run on the same generated datasets: a regenerated suite differs (its behaviour SAC run is not
bit-reproducible on CPU), so benches run after a regeneration belong in their own table (``folders=[...]``,
another ``out=``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings  # noqa: E402
from robolearn.bench.report import load_cells  # noqa: E402

FOLDERS = ["offline_fidelity", "offline_fidelity_long", "offline_fidelity_iql_long", "offline_fidelity_cql_long"]
BUDGETS = [25_000, 100_000, 150_000, 300_000]
ALGOS = ["bc", "td3_bc", "iql", "cql", "rebrac"]  # the table's row order; other algorithms follow
#: CORL's "last" scores on halfcheetah (README; ../shared/references/offline-o2o.md section 4.3), for the ordering.
CORL = {"medium-replay": {"bc": 35.66, "td3_bc": 44.84, "cql": 45.04, "iql": 44.46, "rebrac": 51.18},
        "medium-expert": {"bc": 55.95, "td3_bc": 90.78, "cql": 95.63, "iql": 94.74, "rebrac": 103.80}}


def gather(folders: list[Path]) -> dict[str, dict[str, dict[int, dict[int, float]]]]:
    """dataset -> algo -> step -> seed -> normalised score, from every cell's evaluation curve."""
    table: dict[str, dict[str, dict[int, dict[int, float]]]] = {}
    for folder in folders:
        cells, _ = load_cells(folder)
        for cell in cells:
            if cell.get("error") or not cell.get("curve"):
                continue
            by_step = table.setdefault(cell["dataset"], {}).setdefault(cell["algo"], {})
            for step, score in cell["curve"]:
                by_step.setdefault(int(step), {})[int(cell["seed"])] = float(score)
    return table


def verdict(kind: str, algo: str, mean: float, bc: float, worst: bool, spread: float) -> str:
    """Where CORL puts `algo` relative to BC on this kind of dataset, and whether ours agrees (`spread`: the larger
    of the two seed stds; a difference within it is called level)."""
    if algo == "bc":
        return "BC worst" if kind == "random" and worst else ""
    if kind == "random":
        return "" if mean >= bc else "below BC (CORL: BC worst)"
    if mean > bc + spread:
        return "above BC"
    return "level with BC (CORL: above)" if mean > bc - spread else "**below BC** (CORL: above)"


def summarise(table: dict[str, dict[str, dict[int, dict[int, float]]]]) -> tuple[list[str], dict]:
    lines = ["# Offline fidelity across budgets", "",
             "Every offline-fidelity bench folded together (cheetah-run, d4rl-like datasets, 64-wide networks, "
             "rewards x20, CORL's hyperparameters): normalised score, mean ± std over seeds (n), at each budget a "
             "run reached. The ordering column compares each algorithm at its longest budget with BC at BC's longest "
             "budget up to that (a difference within the larger seed std is level), against CORL's halfcheetah "
             "order (medium-replay and medium-expert: all above BC; random: BC worst).", ""]
    record: dict = {}
    for dataset in sorted(table):
        kind = dataset.split("cheetah-run-")[-1]
        header = " | ".join(f"{b // 1000}K steps" for b in BUDGETS)
        lines += [f"## {dataset}", "",
                  f"| algo | {header} | ordering at the longest budget with BC | CORL halfcheetah |",
                  "|---|" + "---|" * (len(BUDGETS) + 2)]
        algos = [a for a in ALGOS if a in table[dataset]] + sorted(set(table[dataset]) - set(ALGOS))
        stats = {algo: {b: table[dataset][algo].get(b, {}) for b in BUDGETS} for algo in algos}
        record[dataset] = {a: {b: {"mean": float(np.mean(list(s.values()))), "std": float(np.std(list(s.values()))),
                                   "seeds": sorted(s)} for b, s in by_b.items() if s} for a, by_b in stats.items()}
        for algo, by_budget in stats.items():
            cells = []
            for b in BUDGETS:
                s = list(by_budget[b].values())
                cells.append(f"{np.mean(s):.1f} ± {np.std(s):.1f} ({len(s)})" if s else "-")
            note = ""
            mine = [b for b in BUDGETS if by_budget[b]]
            bc_budgets = [b for b in BUDGETS if stats.get("bc", {}).get(b) and (not mine or b <= mine[-1])]
            if mine and bc_budgets:  # the algorithm at its longest budget, BC at its longest up to that (BC plateaus)
                b, bc_b = mine[-1], bc_budgets[-1]
                mine_s, bc_s = list(by_budget[b].values()), list(stats["bc"][bc_b].values())
                others = [float(np.mean(list(stats[a][bc_b].values()))) for a in stats if a != "bc" and stats[a][bc_b]]
                note = verdict(kind, algo, float(np.mean(mine_s)), float(np.mean(bc_s)),
                               all(np.mean(bc_s) < o for o in others), max(np.std(mine_s), np.std(bc_s)))
                where = f"{b // 1000}K" + ("" if b == bc_b or algo == "bc" else f"; BC at {bc_b // 1000}K")
                note = f"{note} ({where})" if note else ""
            corl = CORL.get(kind, {}).get(algo)
            lines.append(f"| {algo} | " + " | ".join(cells) + f" | {note} | {'-' if corl is None else corl} |")
        lines.append("")
    return lines, record


@dataclasses.dataclass
class Settings:
    """Which bench folders to fold and where the table goes (`key=value` on the command line)."""

    folders: list[str] = dataclasses.field(default_factory=lambda: [str(RESULTS / f) for f in FOLDERS])
    out: str = str(RESULTS / "offline_fidelity_summary")  # <out>.md and <out>.json


def main() -> None:
    args = settings(Settings, __doc__)
    folders = [Path(f) for f in args.folders if (Path(f) / "cells").is_dir()]
    table = gather(folders)
    lines, record = summarise(table)
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps({"folders": [f.name for f in folders],
                                                    "budgets": BUDGETS, "scores": record}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
