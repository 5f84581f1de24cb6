"""Behaviour folders: a run's policy snapshots (`runner.snapshot_every`), built into a folder, from which a suite
regenerates the same datasets bit for bit (D4RL's one-SAC-run-per-task construction, without training in the suite)."""

import json
import math
import shutil

import pytest
import torch

from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.policy import load_policy
from robolearn.checkpoints.snapshots import read_index
from robolearn.collect.behaviour import build_behaviour, load_behaviour, replay_schedule
from robolearn.collect.generate import play_snapshots
from robolearn.collect.suite import load_suite
from robolearn.commands.cli import main
from robolearn.config import make_env
from robolearn.data.formats import load_dataset
from robolearn.errors import ConfigError
from robolearn.runners.train import resume_config, run_training, train

# 2 envs x 25 steps = 50 env steps an iteration, 8 iterations; a snapshot every 100 env steps (and at 0); few updates
TRAIN = ["env=pendulum-swingup", "algo=sac", "env.num_envs=2", "runner.steps_per_iteration=25",
         "runner.env_steps=400", "runner.snapshot_every=100", "runner.eval_every=100", "runner.eval_episodes=2",
         "algo.learning_starts=50", "algo.utd_ratio=0.1", "algo.batch_size=32", "algo.actor_hidden=[16]",
         "algo.critic_hidden=[16]", "+env.overrides.episode_length=60", "video=false", "progress=false"]
STEPS = [0, 100, 200, 300, 400]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("behaviour")
    return train([*TRAIN, f"run_dir={root / 'run'}"])


@pytest.fixture(scope="module")
def folder(run, tmp_path_factory):
    """The run's behaviour folder, medium picked at the third snapshot: the evaluations are real (sampled), the
    scores they are read as rise with the snapshot's env steps, so the pick does not hang on a tiny run's luck."""
    import robolearn.eval.evaluate as evaluate_module

    real, calls = evaluate_module.evaluate, []

    def evaluate(path, episodes, seed, mode):
        assert mode == "sample" and math.isfinite(real(path, episodes, seed, mode=mode))
        calls.append(path.name)
        return 3.8 + 8.448 * int(path.name.split("_")[1]) / 10  # normalised score = env steps / 10 (pendulum's refs)

    mp = pytest.MonkeyPatch()
    mp.setattr(evaluate_module, "evaluate", evaluate)
    try:
        out = build_behaviour(run, tmp_path_factory.mktemp("folders") / "pendulum-swingup-sac", medium_score=15,
                              eval_episodes=2)
    finally:
        mp.undo()
    assert calls == ["step_0", "step_100", "step_200", "step_400"]  # up to medium, then the expert
    return out


def test_snapshots_are_policy_only_indexed_and_resume_safe(run):
    index = read_index(run / "snapshots")
    assert [s["env_steps"] for s in index["snapshots"]] == STEPS
    assert [s["acted"] for s in index["snapshots"]] == [100, 100, 100, 100, 0]
    assert index["random_warmup_steps"] == 50 and index["num_envs"] == 2 and index["env_steps"] == 400
    assert all("return" in s["eval"] for s in index["snapshots"])  # evaluated at the same env steps
    snap = run / "snapshots" / "step_200"
    assert sorted(p.name for p in snap.iterdir()) == ["config.json", "model.safetensors"]  # no trainer state
    _, tensors = checkpoint.load(snap)
    assert tensors and all(k.startswith("actor.") for k in tensors)  # no critics
    policy = load_policy(snap, mode="sample", seed=1)
    assert policy({"policy": torch.zeros(3, policy.policy_config["obs_dim"])}).shape == (3, 1)


def test_a_resumed_run_continues_the_index(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    run_training(resume_config(copy, iterations=10))  # 2 more iterations: 500 env steps
    index = read_index(copy / "snapshots")
    assert [s["env_steps"] for s in index["snapshots"]] == [*STEPS, 500]
    assert [s["acted"] for s in index["snapshots"]][-2:] == [100, 0]


def test_behaviour_folder(folder):
    b = load_behaviour(folder, "pendulum-swingup")
    assert (b["medium"], b["expert"], b["medium_score"]) == ("step_200", "step_400", 20.0)
    assert [s["name"] for s in b["snapshots"]] == [f"step_{s}" for s in STEPS]
    assert "+env.overrides.episode_length=60" in b["overrides"] and "runner.snapshot_every=100" in b["overrides"]
    assert "algo.actor_hidden=[16]" in b["overrides"] and "env=pendulum-swingup" in b["overrides"]
    assert [acted for _, acted in replay_schedule(folder, b, "medium-replay")] == [100, 100]  # before medium
    assert [acted for _, acted in replay_schedule(folder, b, "full-replay")] == [100, 100, 100, 100]


def test_play_snapshots_keeps_the_runs_steps_and_cuts_the_last_episodes(folder):
    """4 envs of 30-step episodes over 4 x 100 env steps (100 vec steps): the episodes end at their done flags across
    snapshot switches, the ones still running at the end are cut there as truncations."""
    b = load_behaviour(folder)
    env = make_env({"name": "pendulum-swingup", "num_envs": 4, "overrides": {"episode_length": 30}}, seed=0)
    try:
        episodes = play_snapshots(env, replay_schedule(folder, b, "full-replay"), seed=0, random_steps=50)
    finally:
        env.close()
    lengths = sorted(len(e["actions"]) for e in episodes)
    assert lengths == [10] * 4 + [30] * 12  # per env: 3 whole episodes, then 10 steps cut
    assert all(e["truncations"][-1] and not e["truncations"][:-1].any() for e in episodes)
    assert all(len(e["observations"]["policy"]) == len(e["actions"]) + 1 for e in episodes)


SUITE = """
seed: 3
tasks:
  pendulum-swingup:
    kinds: [random, medium, expert, medium-expert, medium-replay, full-replay]
    transitions: 240
    num_envs: 4
    behaviour: {folder}
"""


def test_suite_from_behaviour_regenerates_identically(folder, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(SUITE.format(folder=folder))
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert main(["collect", f"suite={path}", f"out={out}", "progress=false"]) == 0
    record = json.loads((outs[0] / "suite.json").read_text())
    assert "training" not in record and record["behaviour"]["pendulum-swingup"]["medium"] == "step_200"
    # (episodes, steps, snapshots played): transitions=240 on 4 envs, one whole 60-step episode each (the run's
    # episode length), medium-expert a medium and an expert set; the replay kinds (whose size transitions= does not
    # set: as mujoco-v5.yaml) the run's env steps on 4 envs: 50 steps each cut (medium-replay), 60 + 40 cut each
    # (full-replay)
    expected = {"random": (4, 240, None), "medium": (4, 240, ["step_200"]), "expert": (4, 240, ["step_400"]),
                "medium-expert": (8, 480, ["step_200", "step_400"]),
                "medium-replay": (4, 200, ["step_0", "step_100"]),
                "full-replay": (8, 400, ["step_0", "step_100", "step_200", "step_300"])}
    for kind, (episodes, steps, snapshots) in expected.items():
        name = f"pendulum-swingup-{kind}-v0"
        data, d = load_dataset(outs[0] / name), record["datasets"][name]
        assert (data.num_episodes, data.num_steps) == (episodes, steps) == (d["episodes"], d["steps"]), kind
        assert d["source"].get("snapshots") == snapshots and (snapshots is None or d["source"]["behaviour"] ==
                                                             str(folder)), kind
        a, b = outs[0] / name, outs[1] / name
        for file in sorted(a.glob("*.npy")):  # bit for bit
            assert file.read_bytes() == (b / file.name).read_bytes(), (kind, file.name)
        meta = [json.loads((o / "dataset.json").read_text())["metadata"] for o in (a, b)]
        assert [{k: v for k, v in m.items() if k != "collection_seconds"} for m in meta] == [
            {k: v for k, v in meta[1].items() if k != "collection_seconds"}] * 2
    assert "Behaviour of pendulum-swingup" in (outs[0] / "README.md").read_text()
    assert {"mujoco", "jax", "jaxlib", "torch", "numpy"} <= set(meta[0]["software"])  # what decides the bits
    # suite.json fingerprints each dataset (the sha256 of its arrays): equal across the two regenerations
    again = json.loads((outs[1] / "suite.json").read_text())
    for name, d in record["datasets"].items():
        assert d["fingerprint"] == load_dataset(outs[0] / name).fingerprint() == again["datasets"][name]["fingerprint"]


def test_suite_checks_its_recorded_fingerprints_and_fills_in_missing_ones(folder, tmp_path, capsys):
    """A suite YAML's `fingerprints:` are the datasets its results were measured on: the run says which it made bit for
    bit and which not (not an error: another machine may round differently); a record made before fingerprints gets
    them from the datasets on disk."""
    path, out = tmp_path / "tiny.yaml", tmp_path / "data"
    path.write_text(SUITE.format(folder=folder))
    assert main(["collect", f"suite={path}", f"out={out}", "progress=false"]) == 0
    assert "fingerprints: the suite records none to check against" in capsys.readouterr().out
    record = json.loads((out / "suite.json").read_text())
    made = {k: v.pop("fingerprint") for k, v in record["datasets"].items()}
    (out / "suite.json").write_text(json.dumps(record))  # as a suite.json from before fingerprints
    recorded = dict(made, **{"pendulum-swingup-expert-v0": "0" * 64, "pendulum-swingup-elsewhere-v0": "1" * 64})
    path.write_text(SUITE.format(folder=folder) + "fingerprints:\n" +
                    "".join(f"  {k}: '{v}'\n" for k, v in recorded.items()))
    assert main(["collect", f"suite={path}", f"out={out}", "progress=false"]) == 0
    printed = capsys.readouterr().out
    assert {k: v["fingerprint"] for k, v in json.loads((out / "suite.json").read_text())["datasets"].items()} == made
    assert f"fingerprints: {len(made) - 1} of the {len(made)} datasets made here are bit for bit the suite's " \
           f"recorded ones (1 of its {len(made) + 1} not made here)" in printed
    assert "other bits than recorded (same recipe; compare statistics, not bits): pendulum-swingup-expert-v0" in printed
    path.write_text(SUITE.format(folder=folder) + "fingerprints:\n  pendulum-swingup-expert-v0: 1e5\n")
    with pytest.raises(ConfigError, match="quote them"):  # YAML read the hex string as a number
        load_suite(str(path))


def test_missing_behaviour_folder_says_how_to_make_it(tmp_path):
    # a suite naming a folder not made yet (as mujoco-v5 did before its runs were committed)
    suite = tmp_path / "suite.yaml"
    suite.write_text("tasks:\n"
                     "  halfcheetah-v5: {kinds: [medium], behaviour: benchmarks/behaviour/halfcheetah-v5-sac}\n"
                     "  hopper-v5: {kinds: [medium], behaviour: benchmarks/behaviour/hopper-v5-td3}\n")
    with pytest.raises(ConfigError, match=r"suite task hopper-v5: behaviour folder benchmarks/behaviour/"
                                          r"hopper-v5-td3 does not exist .*robolearn train env=hopper-v5 "
                                          r"algo=td3 .*runner.snapshot_every=.*robolearn collect behaviour="):
        load_suite(str(suite))
    # the tasks whose folders are committed load on their own (collect ... tasks=[...]), the others unchecked
    _, _, tasks = load_suite(str(suite), only=["halfcheetah-v5"])
    assert [t.task for t in tasks] == ["halfcheetah-v5"]
    assert [t.task for t in load_suite("mujoco-v5")[2]] == ["halfcheetah-v5", "hopper-v5", "walker2d-v5", "ant-v5"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"tasks:\n  pendulum-swingup:\n    kinds: [medium]\n    behaviour: {tmp_path}\n"
                   "    train: {iterations: 1}\n")
    with pytest.raises(ConfigError, match="not both"):
        load_suite(str(bad))
    with pytest.raises(ConfigError, match="no policy snapshots.*snapshot_every"):
        build_behaviour(tmp_path, tmp_path / "out")


def test_collect_behaviour_command_builds_a_folder_once(run, tmp_path, capsys):
    """`robolearn collect behaviour=<run>`: real sampled evaluations; any score reaches -1000, so medium = step_0."""
    out = tmp_path / "pendulum-swingup-sac"
    args = ["collect", f"behaviour={run}", f"out={out}", "medium_score=-1000"]
    assert main(args) == 0
    b = load_behaviour(out, "pendulum-swingup")
    assert (b["medium"], b["expert"], b["medium_threshold"]) == ("step_0", "step_400", -1000)
    assert "step_0: normalised score" in capsys.readouterr().out
    assert main(args) == 2  # a ConfigError, printed
    assert "never overwritten" in capsys.readouterr().err


def test_committed_behaviour_folders_load():
    """Every folder under benchmarks/behaviour/ (the mujoco-v5 suite's SAC runs) is whole, and its expert and medium
    snapshots load as policies of its task's sizes."""
    from robolearn.checkpoints.policy import load_policy
    from robolearn.collect.behaviour import ROOT, load_behaviour, snapshot

    folders = sorted(p.parent for p in (ROOT / "benchmarks" / "behaviour").glob("*/behaviour.json"))
    for folder in folders:
        behaviour = load_behaviour(folder)
        assert folder.name == f"{behaviour['task']}-{behaviour['algo']}"
        for name in (behaviour["medium"], behaviour["expert"]):
            policy = load_policy(snapshot(folder, name))
            assert policy.run["env"]["name"] == behaviour["task"]


def test_expert_best_takes_the_snapshot_the_run_rated_highest(run, tmp_path):
    """expert=best (a run that degraded at its end): the snapshot with the highest evaluation the run recorded;
    a medium_score below any score keeps the medium at the first snapshot, so only two snapshots are scored."""
    out = build_behaviour(run, tmp_path / "best", medium_score=-100.0, eval_episodes=1, expert="best")
    behaviour = json.loads((out / "behaviour.json").read_text())
    evals = {s["name"]: s["eval"]["return"] for s in read_index(run / "snapshots")["snapshots"]}
    assert behaviour["expert"] == max(evals, key=evals.get) and behaviour["expert_rule"] == "best"
    with pytest.raises(ConfigError, match="last or best"):
        build_behaviour(run, tmp_path / "bad", expert="median")
