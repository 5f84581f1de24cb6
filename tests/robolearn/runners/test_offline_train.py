"""`robolearn train algo=<offline> dataset=...`: the offline runner (gradient steps, periodic evaluation with a
normalised score, the online runners' outputs, exact resume) and its errors for a dataset that does not fit."""

import json

import pytest
import torch

from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.policy import load_policy
from robolearn.collect.generate import CollectConfig, collect
from robolearn.commands.cli import main
from robolearn.config import EnvConfig
from robolearn.data.formats import save_dataset

SHORT = ["runner.log_every=20", "runner.eval_every=40", "runner.eval_episodes=8", "algo.batch_size=64", "video=false",
         "progress=false"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Noisy expert data of point-mass (its scripted reference controller), 12 episodes of 200 steps."""
    env = EnvConfig("point-mass", num_envs=6, backend="mujoco", overrides={"episode_length": 200})
    data = collect(CollectConfig(env=env, kind="expert", policy="reference", noise=0.3, episodes=12, progress=False,
                                 ref_episodes=6))
    return save_dataset(data, tmp_path_factory.mktemp("data") / "point-mass-expert-v0", "robolearn")


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_bc_learns_and_writes_the_online_outputs(dataset, tmp_path):
    """BC on noisy expert data scores near the expert, with env= taken from the dataset's task (progress bar on,
    as `robolearn train` runs by default)."""
    run = tmp_path / "bc"
    assert main(["train", "algo=bc", f"dataset={dataset}", "+env.overrides.episode_length=200", f"run_dir={run}",
                 "runner.gradient_steps=400", *SHORT[:-1], "progress=true"]) == 0  # the default's progress bar too
    metrics = rows(run)
    assert [r["gradient_steps"] for r in metrics] == list(range(20, 420, 20))
    evals = [r for r in metrics if "eval/return" in r]
    assert [r["gradient_steps"] for r in evals] == list(range(40, 440, 40))
    assert evals[-1]["eval/normalized_score"] > 50  # random 0 .. expert 100 (the dataset's reference returns)
    assert (run / "learning_curve.png").is_file() and any((run / "tensorboard").iterdir())
    policy = load_policy(run / "checkpoints" / "final")
    assert policy.run["env"]["name"] == "point-mass" and policy({"policy": torch.zeros(2, 4)}).shape == (2, 2)
    # BC normalises states (CORL normalize: true): the runner fitted the actor's normaliser on the dataset
    _, state = checkpoint.load(run / "checkpoints" / "final")
    assert not torch.equal(state["actor.net.obs_norm.std"], torch.ones(4))
    assert not torch.equal(state["actor.net.obs_norm.mean"], torch.zeros(4))


@pytest.mark.parametrize("algo", ["iql"])  # the runner's resume is the same for every algorithm (TD3+BC: same code)
def test_resume_is_exact(dataset, tmp_path, algo):
    """6 iterations straight == 3, then resumed to 6: the same networks and the same metrics. With CORL's
    normalize_reward, whose scale (1000 / the span of the dataset's episode returns) a resume applies once."""
    common = ["+env.overrides.episode_length=200", f"algo={algo}", f"dataset={dataset}", *SHORT,
              "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "checkpoint_interval=1",
              "runner.normalize_reward=true"]
    if algo == "iql":
        common.append("algo.value_hidden=[32,32]")
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main(["train", *common, f"run_dir={straight}", "iterations=6"]) == 0
    assert main(["train", *common, f"run_dir={split}", "iterations=3"]) == 0
    assert main(["train", f"resume={split}", "iterations=6"]) == 0
    _, a = checkpoint.load(straight / "checkpoints" / "final")
    _, b = checkpoint.load(split / "checkpoints" / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    drop = ("wall_s", "updates_per_s", "eval/seconds")
    clean = lambda rs: [{k: v for k, v in r.items() if k not in drop} for r in rs]  # noqa: E731
    a, b = clean(rows(straight)), clean(rows(split))
    assert "eval/return" not in a[2] and "eval/return" in b[2]  # the split run also evaluated where it stopped
    b[2] = {k: v for k, v in b[2].items() if not k.startswith("eval/")}
    assert a == b
    from robolearn.data.formats import load_dataset

    returns = load_dataset(dataset).episode_returns()
    for run in (straight, split):
        config = json.loads((run / "checkpoints" / "final" / "config.json").read_text())
        assert config["policy"][algo]["reward_scale"] == pytest.approx(1000 / (returns.max() - returns.min()), rel=1e-6)


def test_dataset_errors(dataset, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a refused run leaves no run folder (runs/<task>-<algo>-<time>) behind
    assert main(["train", "algo=iql", f"dataset={dataset}", "env=pendulum-swingup", *SHORT]) == 2
    assert "collected on point-mass, not pendulum-swingup" in capsys.readouterr().err
    assert main(["train", "algo=bc", *SHORT]) == 2  # the others learn online without a dataset (fine-tuning)
    assert "learns from a dataset only" in capsys.readouterr().err
    assert main(["train", "algo=sac", f"dataset={dataset}", *SHORT[-2:]]) == 2
    assert "is online" in capsys.readouterr().err
    assert main(["train", "algo=bc", "dataset=no-such-dataset", *SHORT]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["train", "algo=bc", f"dataset={dataset}", "runner.normalize_reward=true", *SHORT]) == 2
    assert "normalize_reward scales the rewards, which BCConfig does not read" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_gradient_steps_are_exact(dataset, tmp_path, capsys):
    """A run shorter than log_every runs exactly its gradient steps (logged once); one that is not a whole number of
    logged iterations is refused rather than rounded up."""
    run = tmp_path / "short"
    assert main(["train", "algo=bc", f"dataset={dataset}", "+env.overrides.episode_length=200", f"run_dir={run}",
                 "runner.gradient_steps=30", "runner.eval_episodes=2", "video=false", "progress=false"]) == 0
    assert [r["gradient_steps"] for r in rows(run)] == [30]
    assert main(["train", "algo=bc", f"dataset={dataset}", "runner.gradient_steps=50", *SHORT]) == 2
    assert "must be a multiple of runner.log_every (20)" in capsys.readouterr().err
