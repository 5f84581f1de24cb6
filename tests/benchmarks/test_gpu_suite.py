"""The GPU suite's driver (`benchmarks/speed/gpu_suite.py`) cannot rot between GPU loans: its off-policy part (solo
and seed-batched SAC and IQL, eager) runs here at tiny sizes and its summary reads the result. The compiled rows and
the MJX parts run in `bash benchmarks/gpu_suite.sh --quick` (about 2 minutes on this CPU)."""

from __future__ import annotations

import dataclasses
import json

from benchmarks.speed import gpu_suite  # the checkout is on the path (pyproject: pythonpath)


def test_offpolicy_part_and_summary_run_at_tiny_sizes(tmp_path):
    tiny = dataclasses.replace(gpu_suite.QUICK, hidden=(16, 16), batch_size=32, replay_size=1000, timed_s=0.05,
                               seeds=(2,), compiled=False)
    # a budget no loaded machine exhausts: a row past the budget is skipped, which is the driver's business, not this
    # test's (with two other jobs on the two cores 60 s were once not enough)
    result = gpu_suite.Result(tmp_path, "offpolicy", tiny, 600.0)
    gpu_suite.part_offpolicy(tiny, result, 600.0)
    result.update(status="done")
    rows = {r["name"]: r for r in json.loads((tmp_path / "offpolicy_updates.json").read_text())["rows"]}
    assert sorted(rows) == ["iql_eager", "iql_seeds2_eager", "sac_eager", "sac_seeds2_eager"]
    assert all("error" not in r and r["updates_per_s"] > 0 for r in rows.values()), rows
    assert rows["iql_seeds2_eager"]["seed_updates_per_s"] == 2 * rows["iql_seeds2_eager"]["updates_per_s"]
    gpu_suite.part_summary(tmp_path, "offpolicy=0")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["parts"]["offpolicy"]["updates_per_s"].keys() == rows.keys()
    assert summary["parts"]["mjx"] == {"status": "no result file"}
