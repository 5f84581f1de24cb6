"""`robolearn bench`: suites of real (tiny) training cells on the process pool and on Ray, resume, failures, and
the score extraction and rliable aggregation on synthetic cell results."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from robolearn.bench.backends import run_ray
from robolearn.bench.cells import read_score
from robolearn.bench.report import aggregate, late_table, score_matrices, score_table
from robolearn.bench.suite import BenchConfig, load_suite, plan, run_suite, suite_path
from robolearn.commands.cli import main
from robolearn.config import compose
from robolearn.errors import ConfigError
from robolearn.runners.o2o import FinetuneConfig
from sim.tasks import spec

# PPO on pendulum-swingup, 2 iterations of 4 envs x 16 steps, 16-step episodes: a cell trains in about a second
TINY = ["iterations=2", "env.num_envs=4", "algo.num_steps=16", "+env.overrides.episode_length=16",
        "checkpoint_interval=100"]


def _suite(path: Path, algos: list[dict], seeds: list[int]) -> Path:
    datasets = [{"name": "pendulum", "overrides": ["env=pendulum-swingup"]}]
    path.write_text(json.dumps({"algos": algos, "datasets": datasets, "seeds": seeds, "overrides": TINY}))  # YAML
    return path


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """1 algorithm (and one whose override is bad) x 1 dataset x 2 seeds on the local pool, 2 workers."""
    tmp = tmp_path_factory.mktemp("bench")
    suite = _suite(tmp / "tiny.yaml", [{"name": "ppo", "overrides": ["algo=ppo", "algo.learning_rate=0.003"]},
                                       {"name": "broken", "overrides": ["algo=ppo", "algo.no_such_key=1"]}], [0, 1])
    out = tmp / "out"
    run_suite(BenchConfig(suite=str(suite), out=str(out), workers=2, reps=200))
    return suite, out


def test_local_pool_runs_the_suite_and_reports(local_run):
    _, out = local_run
    cells = {p.stem: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
    good = [f"ppo__pendulum__seed{s}" for s in (0, 1)]
    assert sorted(cells) == sorted(good + ["broken__pendulum__seed0", "broken__pendulum__seed1"])
    for name in good:
        cell = cells[name]
        assert cell["error"] is None and cell["source"] == "mean_return" and cell["task"] == "pendulum-swingup"
        assert np.isfinite(cell["score"]) and cell["curve"][-1][1] == cell["score"] and cell["wall_s"] > 0
        assert cell["curve"][-1][0] == 2 * 4 * 16  # env steps of the last iteration
        assert (Path(cell["run_dir"]) / "checkpoints" / "final").is_dir()
        assert "seed=" + name[-1] in cell["overrides"]
    # the failing cell is recorded with its error; the others finished
    broken = cells["broken__pendulum__seed0"]
    assert "no_such_key" in broken["error"] and broken["score"] is None
    assert "no_such_key" in (out / "logs" / "broken__pendulum__seed0.log").read_text()

    results = json.loads((out / "results.json").read_text())
    assert results["algos"] == ["ppo", "broken"] and len(results["cells"]) == 4
    for algo in ("ppo",):
        scores = [cells[f"{algo}__pendulum__seed{s}"]["score"] for s in (0, 1)]
        assert results["scores"][algo]["pendulum"]["mean"] == pytest.approx(np.mean(scores))
        iqm, low, high = results["aggregates"][algo]["iqm"]
        assert low <= iqm <= high and iqm == pytest.approx(np.mean(scores))  # IQM of 2 runs: their mean
    assert "broken" not in results["aggregates"] and results["scores"]["broken"]["pendulum"]["n"] == 0
    report = (out / "report.md").read_text()
    assert "| ppo |" in report and "| broken | failed |" in report and "IQM" in report and "no_such_key" in report
    for png in ("aggregate.png", "profile.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_resume_runs_only_the_unfinished_cells_as_ray_tasks(local_run):
    """The re-run goes to Ray (a local instance the test starts), so one run covers both resume and the Ray
    backend; without Ray installed (it is in the dev extra) it resumes on the local pool."""
    try:
        import ray
    except ImportError:
        ray = None
    suite, out = local_run
    before = {p.stem: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    redo = "ppo__pendulum__seed1"
    (out / "cells" / f"{redo}.json").unlink()
    (out / "runs" / redo / "stale").write_text("left by an interrupted run")
    for name in ("latest", "final"):  # no checkpoint to continue from: the cell starts over
        shutil.rmtree(out / "runs" / redo / "checkpoints" / name)
    if ray is not None:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        backend = "ray" if ray is not None else "local"
        assert main(["bench", f"suite={suite}", f"out={out}", f"backend={backend}", "reps=100"]) == 0
    finally:
        if ray is not None:
            ray.shutdown()
    after = {p.stem: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    rerun = {name for name in after if after[name] != before.get(name)}
    assert rerun == {redo, "broken__pendulum__seed0", "broken__pendulum__seed1"}  # failed cells run again too
    assert not (out / "runs" / redo / "stale").exists()  # the unfinished run started over
    cell = json.loads((out / "cells" / f"{redo}.json").read_text())
    assert cell["error"] is None and np.isfinite(cell["score"])
    broken = json.loads((out / "cells" / "broken__pendulum__seed1.json").read_text())
    assert "no_such_key" in broken["error"]  # a failure inside a Ray task is recorded like a local one
    results = json.loads((out / "results.json").read_text())
    assert results["scores"]["ppo"]["pendulum"]["n"] == 2 and "2 failed" in (out / "report.md").read_text()


def test_ray_backend_without_ray_is_a_config_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match="pip install"):
        run_ray([], lambda result: None)


# --- without training ---------------------------------------------------------------------------------------------

def _rows(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(json.dumps({"env": {"name": "pendulum-swingup"}}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"half a li')
    return path


def test_score_is_the_last_evaluation_else_the_normalised_return(tmp_path):
    run = _rows(tmp_path / "eval", [{"step": 100, "eval/normalized_score": 10.0, "mean_return": 5.0},
                                    {"step": 150, "mean_return": 7.0},
                                    {"step": 200, "eval/normalized_score": 42.5}, {"step": 250, "mean_return": 9.0}])
    assert read_score(run) == {"score": 42.5, "curve": [[100, 10.0], [200, 42.5]], "source": "eval/normalized_score",
                               "task": "pendulum-swingup"}
    ref = spec("pendulum-swingup")
    run = _rows(tmp_path / "online", [{"env_steps": 64, "mean_return": None}, {"env_steps": 128, "mean_return": 30.0},
                                      {"env_steps": 192, "mean_return": ref.reference_return}])
    got = read_score(run)
    assert got["source"] == "mean_return" and got["score"] == pytest.approx(100.0)
    assert got["curve"][0] == [128, pytest.approx(100 * (30 - ref.random_return) /
                                                  (ref.reference_return - ref.random_return))]
    with pytest.raises(ConfigError, match="no finished episode"):
        read_score(_rows(tmp_path / "none", [{"env_steps": 64, "mean_return": None}]))


def _cell(algo: str, dataset: str, seed: int, score: float | None, error: str | None = None) -> dict:
    return {"id": f"{algo}__{dataset}__seed{seed}", "algo": algo, "dataset": dataset, "seed": seed, "score": score,
            "curve": [[1, score]], "source": "eval/normalized_score", "wall_s": 1.0, "error": error}


def test_aggregates_match_hand_computed_values(tmp_path):
    a = {"d1": [0.0, 10.0, 20.0], "d2": [30.0, 40.0, 100.0]}
    cells = [_cell("a", d, s, x) for d, xs in a.items() for s, x in enumerate(xs)]
    cells += [_cell("b", "d1", 0, 50.0), _cell("b", "d1", 1, 70.0), _cell("b", "d1", 2, None, "Boom"),
              _cell("b", "d2", 0, 60.0), _cell("b", "d2", 1, 60.0), _cell("b", "d2", 2, 90.0)]
    table = score_table(cells)
    assert table == {"a": a, "b": {"d1": [50.0, 70.0], "d2": [60.0, 60.0, 90.0]}}
    matrices = score_matrices(table)
    assert matrices["a"].shape == (3, 2) and matrices["b"].tolist() == [[50.0, 60.0], [70.0, 60.0]]  # 2 runs each
    stats = aggregate(matrices, reps=300)
    # a: IQM of the 6 scores drops the lowest and the highest: mean(10, 20, 30, 40) = 25; the median is rliable's,
    # over the datasets' means (10, 56.7); the mean 200 / 6
    assert stats["a"]["iqm"][0] == pytest.approx(25.0) and stats["a"]["median"][0] == pytest.approx(200 / 6)
    assert stats["a"]["mean"][0] == pytest.approx(200 / 6)
    assert stats["b"]["iqm"][0] == pytest.approx(60.0) and stats["b"]["mean"][0] == pytest.approx(60.0)
    for algo in stats:
        for point, low, high in stats[algo].values():
            assert low <= point <= high

    out = tmp_path / "out"
    for cell in cells:
        (out / "cells").mkdir(parents=True, exist_ok=True)
        (out / "cells" / f"{cell['id']}.json").write_text(json.dumps(cell))
    assert main(["bench", "report", f"out={out}", "reps=300"]) == 0  # the report from the cell results alone
    results = json.loads((out / "results.json").read_text())
    assert results["scores"]["a"]["d2"] == {"mean": pytest.approx(170 / 3), "std": pytest.approx(np.std([30, 40, 100])),
                                            "n": 3, "runs": 3, "late_mean": pytest.approx(170 / 3),
                                            "late_std": pytest.approx(np.std([30, 40, 100]))}
    assert results["scores"]["b"]["d1"]["n"] == 2 and results["runs_per_dataset"] == {"a": 3, "b": 2}
    report = (out / "report.md").read_text()
    assert "| a | 10.0 ± 8.2 | 56.7 ± 30.9 |" in report and "60.0 ± 10.0 (2/3)" in report
    assert "25.0 [" in report and "`b__d1__seed2`: Boom" in report and "Published" not in report
    assert "Late score" not in report  # one evaluation a cell: the late score is the final one
    # the late score: each seed's mean over its last LATE_EVALS evaluations, then mean ± std over the seeds
    curve = [[i, x] for i, x in enumerate([90.0, 0.0, 10.0, 20.0, 30.0, 40.0, 50.0])]  # last 5: mean 30
    late = [{**_cell("c", "d1", s, curve[-1][1] + s), "curve": [*curve[:-1], [6, 50.0 + s]]} for s in (0, 1)]
    assert late_table(late) == {"c": {"d1": [30.0, 30.2]}}
    assert late_table(late, k=1) == {"c": {"d1": [50.0, 51.0]}}
    for cell in late:
        (out / "cells" / f"{cell['id']}.json").write_text(json.dumps(cell))
    assert main(["bench", "report", f"out={out}", "reps=300"]) == 0
    assert "| c | 30.1 ± 0.1 | - |" in (out / "report.md").read_text()
    assert json.loads((out / "results.json").read_text())["scores"]["c"]["d1"]["late_mean"] == pytest.approx(30.1)
    for cell in late:
        (out / "cells" / f"{cell['id']}.json").unlink()
    # a suite's published numbers (bench.json keeps them) sit beside its own scores
    (out / "bench.json").write_text(json.dumps({"published": {"a": {"d2": "Paper X, 1M steps: 91.0"}}}))
    assert main(["bench", "report", f"out={out}", "reps=300"]) == 0
    assert "| a | d2 | 56.7 ± 30.9 | Paper X, 1M steps: 91.0 |" in (out / "report.md").read_text()
    path = _suite(tmp_path / "p.yaml", [{"name": "x"}], [0])
    path.write_text(json.dumps({**json.loads(path.read_text()), "published": {"y": {"pendulum": "text"}}}))
    with pytest.raises(ConfigError, match=r"published names \['y'"):
        load_suite(path)


def test_parts_of_a_suite_run_into_one_folder_report_together(tmp_path, monkeypatch):
    """`algos=` / `datasets=` run a part of a suite, the rest later into the same folder: the report covers every
    part finished there and counts what is still to run (the cells' training is stubbed: this is bookkeeping)."""
    import robolearn.bench.suite as bench_suite

    def train(units, finished, workers):
        for cell in units:
            finished({"id": cell.id, "algo": cell.algo, "dataset": cell.dataset, "seed": cell.seed,
                      "score": {"a": 10.0, "b": 20.0}[cell.algo] + cell.seed, "curve": [[1, 0.0]],
                      "source": "eval/normalized_score", "wall_s": 1.0, "error": None})

    monkeypatch.setattr(bench_suite, "run_local", train)
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"algos": [{"name": "a"}, {"name": "b"}],
                                "datasets": [{"name": "d1"}, {"name": "d2"}], "seeds": [0, 1]}))
    out = tmp_path / "out"
    run_suite(BenchConfig(suite=str(path), out=str(out), datasets=["d2"], reps=100))
    assert "2 not run yet" not in (out / "report.md").read_text()
    assert "4 not run yet" in (out / "report.md").read_text()  # d1's 4 cells (a and b, 2 seeds) still to run
    run_suite(BenchConfig(suite=str(path), out=str(out), algos=["a"], datasets=["d1"], reps=100))
    results = json.loads((out / "results.json").read_text())
    assert results["datasets"] == ["d1", "d2"] and results["algos"] == ["a", "b"]
    assert results["scores"]["a"]["d1"]["mean"] == 10.5 and results["scores"]["b"]["d2"]["mean"] == 20.5
    assert results["scores"]["b"]["d1"]["n"] == 0
    assert "2 not run yet" in (out / "report.md").read_text()


def test_suites_compose_and_bad_suites_are_errors(tmp_path):
    from robolearn.runners.o2o import load_config

    # o2o-v5 as its header's command runs it on a CPU (64x64 networks, one env online), read from the header itself
    header = "".join(line.lstrip("#").strip().removesuffix("\\") for line in suite_path("o2o-v5").read_text()
                     .splitlines() if line.startswith(("#   robolearn bench", "#     overrides=")))
    args = shlex.split(header)[2:]
    assert args[0] == "suite=o2o-v5"
    small = compose("bench", args, BenchConfig)["overrides"]
    assert small[:3] == ["offline_steps=10000", "online_steps=20000", "eval_every=2000"]
    for name, online_steps, extra in (("o2o", 250_000, []), ("o2o-cpu", 10_000, []), ("o2o-v5", 20_000, small),
                                      ("o2o-antmaze", 100_000, [])):
        o2o = load_suite(suite_path(name))  # command: finetune; every method x dataset composes as a finetune run
        methods = {"wsrl", "ro2o", "calql", "rlpd", "sac"} | ({"cql"} if name in ("o2o-v5", "o2o-antmaze") else set())
        assert o2o.command == "finetune" and {a.name for a in o2o.algos} == methods
        cells = plan(o2o, tmp_path / name, extra, pack_seeds=True)[: len(o2o.algos) * len(o2o.datasets)]
        # every method on the first dataset, every dataset with the first method (a dataset only sets dataset=)
        for cell in [c for c in cells if c.dataset == o2o.datasets[0].name or c.algo == o2o.algos[0].name]:
            cfg = load_config(cell.train_args())
            assert cfg.algo.split("_")[0] == cell.algo and cfg.online_steps == online_steps  # (its domain's recipe)
            if cell.algo == "cql":  # naive fine-tuning: Cal-QL's phases without the calibration
                naive = cfg.methods[cfg.algo]
                assert all(not compose("train", p)["algo"]["calibrate"] for p in (naive.offline, naive.online))
            assert cfg.dataset in (cell.dataset, f"{cell.dataset}-waypoint")  # antmaze-umaze: D4RL's, kind waypoint
            assert cell.pack is not None  # every finetune cell packs its seeds
            if name == "o2o-cpu" or extra:  # 64x64 networks in the phase that creates them
                assert "algo.critic_hidden=[64,64]" in (cfg.offline if cfg.methods[cfg.algo].offline else cfg.online)
            method = cfg.methods[cfg.algo]  # each phase's train overrides compose (their keys exist)
            phases = [p for p in (method.offline, method.online) if p is not None]
            assert all(compose("train", [*p, "env=antmaze-umaze"])["algo"] for p in phases)
            if name == "o2o-antmaze" and cfg.algo == "calql_antmaze":  # both phases: CORL's one agent
                assert all(compose("train", p)["algo"]["cql_target_action_gap"] == 0.8 for p in phases)
            if name == "o2o-antmaze" and cfg.algo == "wsrl_antmaze":  # WSRL's antmaze max backup online
                assert compose("train", method.online)["algo"]["max_target_backup"] is True
            if name == "o2o-antmaze" and cfg.algo == "ro2o_antmaze":  # the LCB actor in both phases
                assert all(compose("train", p)["algo"]["actor_objective"] == "lcb" for p in phases)
            if cell.algo == "ro2o":  # online as ro2o_ft_*.py: the regularisers out of the losses
                ro2o_online = compose("train", method.online)["algo"]
                assert ro2o_online["beta_q_smooth"] == ro2o_online["beta_policy"] == ro2o_online["beta_ood"] == 0
            if name == "o2o-v5" and cell.algo == "wsrl":  # WSRL pre-trains with CQL on locomotion
                assert compose("train", method.offline)["algo"]["name"] == "cql"
            if name == "o2o-v5":  # one env online: the papers', and WSRL's whole-episode warm-up stays in lockstep
                assert "env.num_envs=1" in cfg.online and "algo.compile=true" in cfg.online + cfg.offline
    for name in ("smoke", "prior-data", "offline-locomotion", "offline-fidelity", "offline-fidelity-long",
                 "offline-fidelity-iql-long", "offline-fidelity-cql-long", "offline-fidelity-bc-long",
                 "offline-fidelity-cql-authors", "offline-fidelity-v5"):
        suite = load_suite(suite_path(name))
        cells = plan(suite, tmp_path / name)
        assert len(cells) == len(suite.algos) * len(suite.datasets) * len(suite.seeds)
        first = (suite.algos[0].name, suite.datasets[0].name, suite.seeds[0])
        some = [c for c in cells if c.seed == first[2] and (c.algo == first[0] or c.dataset == first[1])]
        for cell in some:  # every algorithm and every dataset at least once
            # `robolearn train` takes dataset= out before Hydra (the suites' datasets are not made here)
            cfg = compose("train", [a for a in cell.train_args() if not a.startswith("dataset=")])
            assert cfg["video"] is False and cfg["progress"] is False and cfg["run_dir"] == cell.run_dir
    # later overrides win: shared < algo < dataset < command line < seed
    suite = load_suite(_suite(tmp_path / "s.yaml", [{"name": "x", "overrides": ["iterations=5"]}], [3]))
    cfg = compose("train", plan(suite, tmp_path, ["algo.num_steps=8", "seed=9"])[0].train_args())
    assert cfg["iterations"] == 5 and cfg["algo"]["num_steps"] == 8 and cfg["seed"] == 3
    # per-dataset hyperparameters: in that dataset's cells only, after the algorithm's own (CORL's ReBRAC coefficients)
    v5 = load_suite(suite_path("offline-fidelity-v5"))
    args = {(c.algo, c.dataset): c.overrides for c in plan(v5, tmp_path / "v5") if c.seed == 0}
    assert args[("rebrac", "hopper-v5-medium-replay")][-8:-3] == ["algo=rebrac", "algo.compile=true",
                                                                  "algo.beta_actor=0.05",
                                                                  "algo.beta_critic=0.5",
                                                                  "dataset=mujoco-v5/hopper-v5-medium-replay"]
    assert "runner.normalize_reward=true" in args[("cql", "hopper-v5-medium")]
    assert not any("normalize_reward" in a for a in args[("cql", "hopper-v5-medium-replay")])
    # algos= / datasets= run part of a suite (the rest later, into the same folder); unknown names are errors
    part = v5.only(["bc", "iql"], ["hopper-v5-medium"])
    assert {(c.algo, c.dataset) for c in plan(part, tmp_path / "v5")} == {("bc", "hopper-v5-medium"),
                                                                         ("iql", "hopper-v5-medium")}
    assert v5.only(None, None) == v5
    with pytest.raises(ConfigError, match=r"bench algos=\['sac'\]: not in the suite \(its algos: bc, td3_bc"):
        v5.only(["sac"], None)
    (tmp_path / "per.yaml").write_text("algos: [{name: a, per_dataset: {e: [x=1]}}]\ndatasets: [{name: d}]\n")
    with pytest.raises(ConfigError, match=r"per_dataset of a names datasets \['e'\]"):
        load_suite(tmp_path / "per.yaml")
    (tmp_path / "dup.yaml").write_text("algos: [{name: a}, {name: a}]\ndatasets: [{name: d}]\n")
    with pytest.raises(ConfigError, match="duplicate algos"):
        load_suite(tmp_path / "dup.yaml")
    (tmp_path / "typo.yaml").write_text("algos: [{name: a}]\ndatasets: [{name: d}]\nseed: [1]\n")
    with pytest.raises(ConfigError, match="seed"):
        load_suite(tmp_path / "typo.yaml")
    with pytest.raises(ConfigError, match="smoke"):
        suite_path("no-such-suite")
    # a list of overrides needs no quotes (any command: bench's overrides=, finetune's offline= / online=)
    assert compose("bench", ["overrides=[a=1,b.c=[2,3]]"], BenchConfig)["overrides"] == ["a=1", "b.c=[2,3]"]
    # some items quoted, some not (a quoted item keeps its commas and brackets)
    assert compose("bench", ['overrides=[a=1,"b=[\\"x=1\\",\\"y=[2,3]\\"]"]'], BenchConfig)["overrides"] == [
        "a=1", 'b=["x=1","y=[2,3]"]']
    assert compose("finetune", ["online=[algo.utd_ratio=2,algo.batch_size=128]"], FinetuneConfig)["online"] == [
        "algo.utd_ratio=2", "algo.batch_size=128"]
    from robolearn.bench.suite import _renamed
    from robolearn.commands.cli import ALIASES

    assert _renamed(["algo.env_steps=5", "seed=1"], "train") == ["runner.env_steps=5", "seed=1"]  # old bench folders

    assert ALIASES["bench"]["report"] == "report_only=true"  # `robolearn bench report out=...`
    assert main(["bench", "backend=slurm", "suite=smoke"]) == 2
    assert main(["bench", "backend=ray", "ray_retries=-1", "suite=smoke"]) == 2


def test_an_interrupted_train_cell_continues_from_its_checkpoint(tmp_path):
    """A train cell stopped after a checkpoint (config and `checkpoints/latest` in its folder, no result) goes on
    from there when the bench runs again: its first iterations are not trained twice."""
    from robolearn.bench.cells import CELL_FILE, run_cell
    from robolearn.bench.suite import _resumable

    out = tmp_path / "out"
    overrides = ["iterations=4", "checkpoint_interval=2", *TINY[1:4]]
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"algos": [{"name": "ppo", "overrides": ["algo=ppo"]}],
                                "datasets": [{"name": "pendulum", "overrides": ["env=pendulum-swingup"]}],
                                "seeds": [0], "overrides": overrides}))
    cell = plan(load_suite(path), out)[0]
    run = Path(cell.run_dir)
    assert main(["train", *cell.train_args(), "iterations=2"]) == 0  # what a stop after iteration 2's checkpoint ...
    saved = json.loads((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(json.dumps({**saved, "iterations": 4}))  # ... of a 4-iteration run
    shutil.rmtree(run / "checkpoints" / "final")
    (run / CELL_FILE).write_text(json.dumps({"overrides": cell.overrides, "command": "train"}))
    first = (run / "metrics.jsonl").read_text().splitlines()
    assert len(first) == 2 and _resumable(out, cell)
    assert not _resumable(out, dataclasses.replace(cell, overrides=[*cell.overrides, "seed=1"]))
    result = run_cell(cell)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert result["error"] is None and np.isfinite(result["score"])
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4] and (run / "metrics.jsonl").read_text().startswith(
        "\n".join(first))


def test_an_interrupted_finetune_cell_keeps_its_run_folder(tmp_path):
    """A finetune cell with no result and the same overrides continues (finetune resumes its phases); a failed one,
    one whose overrides changed, or a train cell without a checkpoint starts over."""
    from robolearn.bench.cells import CELL_FILE
    from robolearn.bench.suite import _resumable

    out = tmp_path / "out"
    suite = load_suite(_suite(tmp_path / "s.yaml", [{"name": "x", "overrides": ["iterations=5"]}], [0]))
    cell = dataclasses.replace(plan(suite, out)[0], command="finetune")
    run = Path(cell.run_dir)
    run.mkdir(parents=True)
    assert not _resumable(out, cell)  # started before this version: no record of its overrides
    (run / CELL_FILE).write_text(json.dumps({"overrides": cell.overrides, "command": "finetune"}))
    assert _resumable(out, cell)
    assert not _resumable(out, dataclasses.replace(cell, overrides=[*cell.overrides, "seed=1"]))
    assert not _resumable(out, dataclasses.replace(cell, command="train"))
    (out / "cells").mkdir()
    (out / "cells" / f"{cell.id}.json").write_text(json.dumps({"error": "Boom"}))
    assert not _resumable(out, cell)


def test_pool_workers_exit_when_the_bench_process_dies():
    """A bench killed from outside (here: its process exits at once with a cell still running) leaves no worker
    behind: each worker watches its parent and exits when it is gone."""
    import os
    import subprocess
    import sys
    import time

    script = (
        "import multiprocessing, os, sys, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from robolearn.bench.backends import exit_with_parent\n"
        "if __name__ == '__main__':\n"
        "    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('spawn'),\n"
        "                               initializer=exit_with_parent, initargs=(os.getpid(), 0.1))\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 120)\n"
        "    time.sleep(0.5)\n"
        "    os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[3])
    worker = int(out.stdout.split()[0])
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(worker, 9)
    raise AssertionError("the pool worker outlived its bench process")


def test_packed_seeds_run_as_one_process_and_score_as_unpacked(tmp_path):
    """`pack_seeds=true`: an offline algorithm's seeds on one dataset train in one `robolearn train seeds=[...]`
    (run folders <out>/runs/<algo>__<dataset>/seed<k>/) and score what the unpacked cells score; an online algorithm
    of the same suite keeps one process per cell."""
    from robolearn.collect.generate import CollectConfig, collect
    from robolearn.config import EnvConfig
    from robolearn.core.cpu import cpu_model
    from robolearn.data.formats import load_dataset, save_dataset

    env = EnvConfig("point-mass", num_envs=4, backend="mujoco", overrides={"episode_length": 100})
    data = save_dataset(collect(CollectConfig(env=env, kind="expert", policy="reference", noise=0.3, episodes=8,
                                              progress=False, ref_episodes=4)), tmp_path / "pm-v0", "robolearn")
    small = ["runner.gradient_steps=40", "runner.log_every=20", "runner.eval_every=40", "runner.eval_episodes=4",
             "algo.batch_size=32", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]",
             "+env.overrides.episode_length=100"]
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"algos": [{"name": "td3_bc", "overrides": ["algo=td3_bc", *small]}],
                                "datasets": [{"name": "pm", "overrides": [f"dataset={data}"]}],
                                "seeds": [0, 1]}))
    scores = {}
    for packed in (True, False):
        out = tmp_path / f"out{packed}"
        run_suite(BenchConfig(suite=str(path), out=str(out), workers=1, reps=100, pack_seeds=packed))
        cells = {p.stem: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
        assert all(c["error"] is None for c in cells.values())
        scores[packed] = {k: c["score"] for k, c in cells.items()}
        # each cell records the data it trained on (which generation of a regenerated dataset) and the CPU
        assert {c["data"] for c in cells.values()} == {load_dataset(data).fingerprint()}
        assert {c["machine"] for c in cells.values()} == {cpu_model()}
        report = (out / "report.md").read_text()
        assert f"| pm | {load_dataset(data).fingerprint()[:12]} (2) | {cpu_model()} (2) |" in report
        if packed:
            assert cells["td3_bc__pm__seed1"]["run_dir"] == str(out.resolve() / "runs" / "td3_bc__pm" / "seed1")
            assert json.loads((out / "runs" / "td3_bc__pm" / "config.yaml").read_text())["seeds"] == [0, 1]
    assert scores[True].keys() == scores[False].keys()
    assert all(scores[True][k] == pytest.approx(scores[False][k], rel=1e-3, abs=1e-2) for k in scores[True])


def test_packed_finetune_cells_run_as_one_seed_batched_finetune(tmp_path):
    """`pack_seeds=true` on a finetune suite: a method's seeds on one dataset run as one `robolearn finetune
    seeds=[...]`; each cell's folder <out>/runs/<algo>__<dataset>/seed<k>/ is a finetune run's, scored by its online
    phase with its O2O metrics."""
    from robolearn.collect.generate import CollectConfig, collect
    from robolearn.config import EnvConfig
    from robolearn.data.formats import save_dataset

    env = EnvConfig("point-mass", num_envs=4, backend="mujoco", overrides={"episode_length": 50})
    data = save_dataset(collect(CollectConfig(env=env, kind="expert", policy="reference", noise=0.3, episodes=4,
                                              progress=False, ref_episodes=2)), tmp_path / "pm-v0", "robolearn")
    online = ('online=["env.num_envs=1","algo.learning_starts=50","runner.steps_per_iteration=25",'
              '"algo.batch_size=16","algo.actor_hidden=[16]","algo.critic_hidden=[16]"]')
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"command": "finetune", "algos": [{"name": "sac", "overrides": ["algo=sac", online]}],
                                "datasets": [{"name": "pm", "overrides": [f"dataset={data}"]}], "seeds": [0, 1],
                                "overrides": ["online_steps=100", "eval_every=50", "eval_episodes=2"]}))
    out = tmp_path / "out"
    run_suite(BenchConfig(suite=str(path), out=str(out), workers=1, reps=100, pack_seeds=True))
    cells = {p.stem: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
    assert sorted(cells) == ["sac__pm__seed0", "sac__pm__seed1"] and all(c["error"] is None for c in cells.values())
    pack = out.resolve() / "runs" / "sac__pm"
    assert cells["sac__pm__seed1"]["run_dir"] == str(pack / "seed1")
    assert json.loads((pack / "online" / "config.yaml").read_text())["seeds"] == [0, 1]
    assert cells["sac__pm__seed1"]["o2o"]["seed"] == 1 and cells["sac__pm__seed1"]["curve"][-1][0] == 100
