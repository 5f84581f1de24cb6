"""`benchmarks/studies/gpu_fidelity.sh` (issue 33's CQL and ReBRAC cells on a lent GPU) cannot rot between loans: its
plan composes here. Each dataset's suite YAML is the mujoco-v5 suite's recipe for that one dataset, with the
fingerprint the collection checks, and the bench command it would run plans cells whose train configs compose
with the learners on the GPU. Its full dry run (`QUICK=1`, about a minute: one dataset made, CQL for 20 steps)
is run by hand."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from robolearn.bench.suite import BenchConfig, load_suite, plan, suite_path
from robolearn.collect.suite import load_suite as load_dataset_suite
from robolearn.config import compose

ROOT = Path(__file__).resolve().parents[2]


def test_the_plan_makes_the_suites_datasets_and_composes_its_gpu_cells(tmp_path):
    env = {**os.environ, "PLAN": "1", "OUT": str(tmp_path / "out"), "GPU_FIDELITY_WORK": str(tmp_path / "work"),
           "PYTHON": sys.executable, "DATASETS": "halfcheetah-v5-medium hopper-v5-medium-replay"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks/studies/gpu_fidelity.sh")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("plan: "))
    args = shlex.split(line.removeprefix("plan: "))
    assert args[0] == "bench" and "algos=[cql,rebrac]" in args and "pack_seeds=true" in args
    for name in ("halfcheetah-v5-medium", "hopper-v5-medium-replay"):
        suite, settings, tasks = load_dataset_suite(str(tmp_path / "work" / name / "mujoco-v5.yaml"))
        assert suite == "mujoco-v5" and len(tasks) == 1 and f"{tasks[0].task}-{tasks[0].kinds[0]}" == name
        assert len(settings["fingerprints"][f"{name}-v0"]) == 64  # the suite's, so the run says whether it matches
    cfg = compose("bench", args[1:], BenchConfig)
    v5 = load_suite(suite_path(cfg["suite"])).only(cfg["algos"], cfg["datasets"])
    cells = plan(v5, tmp_path / "bench", cfg["overrides"], pack_seeds=True)
    assert {(c.algo, c.dataset) for c in cells} == {(a, d) for a in ("cql", "rebrac")
                                                    for d in ("halfcheetah-v5-medium", "hopper-v5-medium-replay")}
    for cell in cells:
        train = compose("train", [a for a in cell.train_args() if not a.startswith("dataset=")])
        assert train["device"] == "cuda" and train["runner"]["gradient_steps"] == 100_000
        assert train["algo"]["compile"] is True and cell.pack is not None
