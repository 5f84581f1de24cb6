"""`robolearn train ... seeds=[...]`: one process trains several seeds, each a run of its own equal to its solo run."""

import json

import pytest
import torch

from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.policy import load_policy
from robolearn.collect.generate import CollectConfig, collect
from robolearn.commands.cli import main
from robolearn.config import EnvConfig
from robolearn.data.formats import save_dataset

SMALL = ["+env.overrides.episode_length=100", "runner.log_every=15", "runner.eval_every=30", "runner.eval_episodes=4",
         "algo.batch_size=32", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "video=false",
         "progress=false", "checkpoint_interval=1"]
VOLATILE = ("wall_s", "updates_per_s", "env_steps_per_s", "collection_steps_per_s", "eval/seconds")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    env = EnvConfig("point-mass", num_envs=4, backend="mujoco", overrides={"episode_length": 100})
    data = collect(CollectConfig(env=env, kind="expert", policy="reference", noise=0.3, episodes=8, progress=False,
                                 ref_episodes=4))
    return save_dataset(data, tmp_path_factory.mktemp("data") / "point-mass-expert-v0", "robolearn")


def rows(run_dir):
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_rows_close(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == (y[key] if y[key] is None else pytest.approx(y[key], rel=1e-4, abs=1e-4)), key


def assert_states_close(a_dir, b_dir):
    _, a = checkpoint.load(a_dir / "checkpoints" / "final")
    _, b = checkpoint.load(b_dir / "checkpoints" / "final")
    # within one Adam step (lr 3e-4): Adam turns the rounding of near-zero gradients into steps of up to lr
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=3e-4) for k in a)


def test_each_seed_equals_its_solo_run_and_resumes(dataset, tmp_path):
    """TD3+BC (draws: target smoothing noise) with seeds=[3,7]: the second seed's metrics, evaluations and final
    networks equal `seed=7` run alone (seed 3 is row 0 of the same stacks, through the same code). A batch stopped
    after 1 iteration (15 updates: the delayed actor's phase matters) and resumed ends where it would have."""
    common = ["train", "algo=td3_bc", f"dataset={dataset}", *SMALL]
    batched, split = tmp_path / "seeds", tmp_path / "split"
    assert main([*common, "seeds=[3,7]", f"run_dir={batched}", "iterations=4"]) == 0
    solo = tmp_path / "solo7"
    assert main([*common, "seed=7", f"run_dir={solo}", "iterations=4"]) == 0
    assert_rows_close(rows(batched / "seed7"), rows(solo))
    assert_states_close(batched / "seed7", solo)
    assert [json.loads((batched / f"seed{k}" / "config.yaml").read_text())["seed"] for k in (3, 7)] == [3, 7]
    assert rows(batched / "seed3")[-1]["critic_loss"] != rows(batched / "seed7")[-1]["critic_loss"]
    policy = load_policy(batched / "seed7" / "checkpoints" / "final")
    assert policy({"policy": torch.zeros(2, 4)}).shape == (2, 2)
    assert (batched / "seed3" / "learning_curve.png").is_file()

    assert main([*common, "seeds=[3,7]", f"run_dir={split}", "iterations=1"]) == 0
    assert main(["train", f"resume={split}", "iterations=4"]) == 0
    for seed in (3, 7):
        assert_states_close(batched / f"seed{seed}", split / f"seed{seed}")
        a, b = rows(batched / f"seed{seed}"), rows(split / f"seed{seed}")
        b[0] = {k: v for k, v in b[0].items() if not k.startswith("eval/")}  # the split run evaluated where it stopped
        a[0] = {k: v for k, v in a[0].items() if not k.startswith("eval/")}
        assert_rows_close(a, b)


ONLINE = ["env=pendulum-swingup", "env.num_envs=2", "runner.env_steps=300", "runner.steps_per_iteration=25",
          "runner.eval_every=100", "runner.eval_episodes=2", "algo.learning_starts=100", "algo.batch_size=32",
          "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "+env.overrides.episode_length=50", "video=false",
          "progress=false"]


def test_online_seeds_equal_their_solo_runs(tmp_path):
    """RLPD (SAC with 10 critics and a random subset of 2 in each target; here 2 updates per env step, the actor every
    second) with seeds=[0,1]: the second seed's collection, updates and evaluations equal `seed=1` alone."""
    common = ["train", "algo=rlpd", *ONLINE, "algo.utd_ratio=2", "algo.actor_every=2"]
    assert main([*common, "seeds=[0,1]", f"run_dir={tmp_path / 'seeds'}"]) == 0
    assert main([*common, "seed=1", f"run_dir={tmp_path / 'solo'}"]) == 0
    batched = rows(tmp_path / "seeds" / "seed1")
    assert batched[-1]["env_steps"] == 300 and batched[-1]["updates"] > 0
    assert_rows_close(batched, rows(tmp_path / "solo"))
    assert_states_close(tmp_path / "seeds" / "seed1", tmp_path / "solo")
    assert rows(tmp_path / "seeds" / "seed0")[-1]["critic_loss"] != batched[-1]["critic_loss"]


PPO = ["env=pendulum-swingup", "env.num_envs=8", "algo=ppo", "algo.num_steps=16", "algo.actor_hidden=[16]",
       "algo.critic_hidden=[16]", "+env.overrides.episode_length=50", "video=false", "progress=false",
       "checkpoint_interval=1"]


def test_ppo_seeds_equal_their_solo_runs_and_resume(tmp_path):
    """PPO with seeds=[0,1]: each seed's rollouts (actions from its own copy of torch's global streams), minibatch
    permutations, KL-adapted rates and normalisers equal `seed=1` alone; a batch stopped after one iteration and
    resumed ends where it would have."""
    batched, split, solo = tmp_path / "seeds", tmp_path / "split", tmp_path / "solo"
    assert main(["train", *PPO, "seeds=[0,1]", f"run_dir={batched}", "iterations=3"]) == 0
    assert main(["train", *PPO, "seed=1", f"run_dir={solo}", "iterations=3"]) == 0
    assert_rows_close(rows(batched / "seed1"), rows(solo))
    assert_states_close(batched / "seed1", solo)
    assert rows(batched / "seed0")[-1]["loss/value"] != rows(batched / "seed1")[-1]["loss/value"]
    assert main(["train", *PPO, "seeds=[0,1]", f"run_dir={split}", "iterations=1"]) == 0
    assert main(["train", f"resume={split}", "iterations=3"]) == 0
    for seed in (0, 1):
        assert_rows_close(rows(batched / f"seed{seed}"), rows(split / f"seed{seed}"))
        assert_states_close(batched / f"seed{seed}", split / f"seed{seed}")
    assert load_policy(batched / "seed0" / "checkpoints" / "final")({"policy": torch.zeros(2, 3)}).shape == (2, 1)


def test_seeds_takes_every_offline_algorithm_and_refuses_repeated_seeds(dataset, tmp_path, capsys):
    """RO2O (the last offline learner to get a seed-batched update) trains with seeds=; a seed listed twice is
    refused by name."""
    assert main(["train", "algo=ro2o", f"dataset={dataset}", *SMALL, "algo.sample_size=2", "algo.num_critics=2",
                 "seeds=[0,1]", "iterations=1", f"run_dir={tmp_path / 'a'}"]) == 0
    assert all(len(rows(tmp_path / "a" / f"seed{k}")) == 1 for k in (0, 1))
    assert main(["train", "algo=td3_bc", f"dataset={dataset}", *SMALL, "seeds=[1,1]", "iterations=1",
                 f"run_dir={tmp_path / 'b'}"]) != 0
    assert "lists a seed twice" in capsys.readouterr().err


def test_checkpoint_schedule_by_interval_and_by_the_clock(monkeypatch):
    """`latest` every `interval` iterations and at the last; with `minutes`, also at the first iteration that ends
    that long after the last checkpoint. Asked again for the same iteration (each run of a pack asks), it answers
    the same, so a pack's runs checkpoint together."""
    from robolearn.errors import ConfigError
    from robolearn.runners import base

    clock = [0.0]
    monkeypatch.setattr(base.time, "monotonic", lambda: clock[0])
    plain = base.CheckpointSchedule(3)
    assert [plain.due(i, 7) for i in range(1, 8)] == [False, False, True, False, False, True, True]
    timed = base.CheckpointSchedule(100, minutes=1.0)
    answers = []
    for i, now in enumerate([30, 59, 61, 100, 119, 125, 200], start=1):
        clock[0] = now
        answers.append(timed.due(i, 50))
        clock[0] += 1000.0  # the pack's next run asks later: the same answer
        assert timed.due(i, 50) == answers[-1]
        clock[0] = now
    assert answers == [False, False, True, False, False, True, True]  # 61 s; 125 >= 61 + 60; 200 >= 125 + 60
    with pytest.raises(ConfigError, match="checkpoint_minutes"):
        base.CheckpointSchedule(10, minutes=-1)


def test_checkpoint_minutes_checkpoints_every_seed_at_the_same_iterations(dataset, tmp_path, monkeypatch):
    """`checkpoint_minutes` reaches the seed-batched loop: with a clock that always says it is due, both seeds
    checkpoint `latest` after every iteration although `checkpoint_interval` is larger than the run; with 0, only at
    the last. A run saved before the setting existed resumes with today's default."""
    from robolearn.config.schemas import TrainConfig, migrate_run_config
    from robolearn.runners.offline import OfflineRunner

    saved: list[tuple[str, int]] = []
    save = OfflineRunner.save

    def spy(self, path):
        if path.name == "latest":
            saved.append((self.run_dir.name, self.iteration))
        return save(self, path)

    monkeypatch.setattr(OfflineRunner, "save", spy)
    common = ["train", "algo=td3_bc", f"dataset={dataset}", *SMALL, "checkpoint_interval=100", "seeds=[3,7]",
              "iterations=3"]
    assert main([*common, f"run_dir={tmp_path / 'timed'}", "checkpoint_minutes=1e-9"]) == 0
    assert saved == [(f"seed{k}", i) for i in (1, 2, 3) for k in (3, 7)]
    saved.clear()
    assert main([*common, f"run_dir={tmp_path / 'plain'}", "checkpoint_minutes=0"]) == 0
    assert saved == [("seed3", 3), ("seed7", 3)]
    assert migrate_run_config({"seed": 0})["checkpoint_minutes"] == TrainConfig.checkpoint_minutes
