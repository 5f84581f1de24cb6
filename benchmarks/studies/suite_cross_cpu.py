"""Does a dataset suite come out the same on another kind of CPU? This machine's `robolearn collect suite=<name>`
(its data/<name>/suite.json) beside the generation the committed results trained on: that one's fingerprints (the
suite YAML's `fingerprints:`) and statistics (the suite's table in docs/offline-rl.md, the record of that machine's
run). Per dataset: whether the bits are the same, and the episodes, transitions and mean return on both.

    python benchmarks/studies/suite_cross_cpu.py suites=[mujoco-v5,antmaze]
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, ROOT, settings, write_result  # noqa: E402


@dataclass
class Settings:
    suites: list[str] = field(default_factory=lambda: ["mujoco-v5", "antmaze"])  # under data/ and configs/dataset/
    data: str = "data"                    # where this machine's suites are
    docs: str = "docs/offline-rl.md"      # the committed tables of the recorded generation
    reference_cpu: str = "AMD EPYC"       # the machine the recorded generation was made on
    out: str = str(RESULTS / "suite_cross_cpu.json")


def recorded_rows(docs: Path) -> dict[str, dict[str, float]]:
    """The docs' suite tables by dataset name: the mujoco-v5 table's episodes, transitions and mean return, the
    antmaze table's share of episodes reaching their goal and mean return."""
    rows = {}
    for line in docs.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells or not re.fullmatch(r"[a-z0-9-]+-v0", cells[0]):
            continue
        numbers = [float(c.replace(",", "").rstrip(" %")) for c in cells[1:] if re.fullmatch(r"-?[\d,.]+ ?%?", c)]
        if len(cells) == 7:  # | dataset | episodes | transitions | size | mean return | normalised | seconds |
            rows[cells[0]] = {"episodes": numbers[0], "steps": numbers[1], "return_mean": numbers[3]}
        elif len(cells) == 5 and cells[2].endswith("%"):  # | dataset | recipe | reaching % | mean return | seconds |
            rows[cells[0]] = {"reached": numbers[0], "return_mean": numbers[1]}
    return rows


def main() -> None:
    s = settings(Settings, __doc__)
    recorded = recorded_rows(ROOT / s.docs)
    suites = {}
    for suite in s.suites:
        made_path = ROOT / s.data / suite / "suite.json"
        if not made_path.is_file():
            print(f"{suite}: {made_path} is not there (make it first: robolearn collect suite={suite})")
            continue
        made = json.loads(made_path.read_text())["datasets"]
        prints = yaml.safe_load((ROOT / "configs" / "dataset" / f"{suite}.yaml").read_text()).get("fingerprints", {})
        rows = {}
        for name, here in sorted(made.items()):
            then = recorded.get(name, {})
            meta = json.loads((ROOT / s.data / suite / name / "dataset.json").read_text())["metadata"]
            # the difference of the two mean returns in standard errors (the episodes' spread here, on both sides)
            se = meta["return_std"] * (2 / here["episodes"]) ** 0.5
            row = {"same_bits": here.get("fingerprint") == prints.get(name),
                   "here": {k: here.get(k) for k in ("episodes", "steps", "return_mean", "normalized_score")},
                   "return_std": meta["return_std"], "recorded": then}
            if then:
                diff = here["return_mean"] - then["return_mean"]
                row.update(return_mean_change_pct=100 * diff / abs(then["return_mean"]),
                           return_mean_change_se=diff / se if se > 0 else 0.0)
            rows[name] = row
            print(f"{name}: {'same bits' if row['same_bits'] else 'other bits'}, episodes "
                  f"{here.get('episodes')} vs {then.get('episodes')}, mean return {here['return_mean']:.1f} vs "
                  f"{then.get('return_mean')} ({row.get('return_mean_change_se', float('nan')):+.2f} SE)")
        suites[suite] = {"made": len(rows), "same_bits": sum(r["same_bits"] for r in rows.values()),
                         "of_recorded": len(prints), "datasets": rows}
    write_result(s.out, "suite_cross_cpu", {"reference_cpu": s.reference_cpu, "suites": suites})


if __name__ == "__main__":
    main()
