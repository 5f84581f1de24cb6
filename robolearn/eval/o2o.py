"""Offline-to-online metrics (`o2o_metrics`: start score, initial dip, steps to 90% of the final score, regret,
final score) from a run's evaluation curve, and their markdown table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robolearn.errors import ConfigError

#: The share of the online steps in which the initial dip is measured.
DIP_WINDOW = 0.1


#: The O2O metrics of the bench report: (o2o.json key, column title, format).
O2O_COLUMNS = (("start_score", "start", ".1f"), ("initial_dip", "initial dip", ".1f"),
               ("steps_to_90", "steps to 90% of final", ",.0f"), ("cumulative_regret", "regret", ".3f"),
               ("final_score", "final", ".1f"))


def o2o_metrics(curve: Sequence[tuple[float, float]], online_steps: int, offline_score: float | None = None,
                learning_starts: int = 0) -> dict[str, Any]:
    """The offline-to-online metrics of an online run's evaluation curve [(env step, normalised score)], whose first
    point is the score before any online step (the pre-trained policy's, or a fresh one's):

    - `start_score`: that first score; `offline_score`: the offline run's own final evaluation, if given;
    - `initial_dip`: the worst score in the first 10% of the online steps that learn (those after the
      `learning_starts` steps of warm-up, which update nothing; at least one evaluation) minus the start score
      (<= 0: a drop);
    - `steps_to_90`: the first env step at which the score reaches 90% of the final score; None when the final
      score is <= 0 or below the start (`ended_below_start`: the run lost ground, so no time to reach its end is
      meaningful: the start itself would count as "reached" and show 0 for a collapse);
    - `cumulative_regret`: the mean over the online evaluations of 1 - score / 100 (the area between the curve
      and the reference's level, as a fraction; CORL's regret with the normalised score in place of success);
    - `final_score`: the last evaluation's score.
    """
    if not curve:
        raise ConfigError("no evaluation in the online run: set eval_every > 0")
    points = sorted((float(s), float(v)) for s, v in curve)
    start = points[0][1] if points[0][0] == 0 else None
    online = [(s, v) for s, v in points if s > 0]
    final = points[-1][1]
    # the evaluations in the first 10% of the learning steps, or the first one after the warm-up when none falls
    # inside (evaluations land on whole collection iterations: eval_every=1000 in 400-step iterations gives 1200)
    end = learning_starts + DIP_WINDOW * max(online_steps - learning_starts, 0)
    after = [s for s, _ in online if s > learning_starts]
    window = [v for s, v in online if s <= max(end, after[0] if after else 0.0)]
    dip = min(window) - start if window and start is not None else None
    below = start is not None and final < start
    reach = next((s for s, v in points if v >= 0.9 * final), None) if final > 0 and not below else None
    regret = sum(1.0 - v / 100.0 for _, v in online) / len(online) if online else None
    return {"start_score": start, "offline_score": offline_score, "initial_dip": dip, "steps_to_90": reach,
            "ended_below_start": below,
            "cumulative_regret": regret, "final_score": final, "online_steps": online_steps,
            "learning_starts": learning_starts}


def refresh_o2o(o2o: dict[str, Any], curve: Sequence[tuple[float, float]], run_dir: str | Path | None = None
                ) -> dict[str, Any]:
    """A record's O2O metrics recomputed from its online curve by this version's `o2o_metrics` (the warm-up length
    from the record, else from the run's online config), so a report never mixes definitions."""
    starts = o2o.get("learning_starts")
    if starts is None:  # written before o2o.json recorded it
        starts = learning_starts(run_dir) if run_dir else 0
    o2o.update(o2o_metrics(curve, int(o2o["online_steps"]), o2o.get("offline_score"), int(starts)))
    return o2o


def learning_starts(run_dir: str | Path) -> int:
    """The env steps before the first update of a finetune run's online phase: where its metrics first count an
    update (a whole-episode warm-up, `warmup_whole_episodes`, may run past `algo.learning_starts`), else its
    `algo.learning_starts`."""
    online = Path(run_dir) / "online"
    config = online / "config.yaml"
    given = int(json.loads(config.read_text())["algo"].get("learning_starts", 0)) if config.is_file() else 0
    metrics = online / "metrics.jsonl"
    if metrics.is_file():
        before = 0  # env steps at the end of the last iteration without an update
        for line in metrics.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("updates"):
                return max(given, before)
            before = int(row.get("env_steps", before))
    return given


def read_curve(run_dir: str | Path, key: str = "eval/normalized_score") -> list[tuple[float, float]]:
    """[(env step, score)] of a run's evaluations (its metrics.jsonl rows that carry `key`)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        return []
    curve: dict[float, float] = {}  # by step: a resumed run may have logged a step twice; the last one counts
    for line in metrics.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a half-written last line
            continue
        if isinstance(row.get(key), (int, float)):
            curve[float(row.get("gradient_steps") or row.get("env_steps") or 0)] = float(row[key])
    return sorted(curve.items())


def o2o_table(cells: Sequence[dict[str, Any]], algos: Sequence[str], datasets: Sequence[str]) -> list[str]:
    """The bench report's O2O section: per algorithm and dataset the mean ± std over seeds of each metric."""
    import numpy as np

    lines = ["## Offline-to-online metrics (mean ± std over seeds; `o2o_metrics` in robolearn/eval/o2o.py)", "",
             "start: the score before the first online step; initial dip: the worst score in the first 10% of the "
             "online steps after the warm-up (`learning_starts`) minus the start (negative: a drop); steps to 90% of "
             "the final score (over the seeds that reach it; none for a run that ends below its start); regret: the "
             "mean of 1 - score/100 over the online evaluations; final: the last evaluation.",
             "", "| algo | dataset | " + " | ".join(title for _, title, _ in O2O_COLUMNS) + " |",
             "|---|---|" + "---|" * len(O2O_COLUMNS)]
    for algo in algos:
        for data in datasets:
            records = [c["o2o"] for c in cells if c["algo"] == algo and c["dataset"] == data and c.get("o2o")
                       and not c.get("error")]
            if not records:
                continue
            cols = []
            for key, _, spec in O2O_COLUMNS:
                values = [float(r[key]) for r in records if r.get(key) is not None]
                cols.append(f"{np.mean(values):{spec}} ± {np.std(values):{spec}}"
                            + (f" ({len(values)}/{len(records)})" if len(values) < len(records) else "")
                            if values else "-")
            lines.append(f"| {algo} | {data} | " + " | ".join(cols) + " |")
    return lines
