"""Offline-to-online fine-tuning: `train init=` warm-starts the online learner from an offline checkpoint, WSRL's
warm-up fills an empty buffer with the pre-trained policy's actions and no offline data is sampled afterwards,
`robolearn finetune` improves a pre-trained policy online and reports the O2O metrics, a fine-tuning run stopped
mid-way resumes exactly, and the errors say what to fix."""

from __future__ import annotations

import json

import pytest
import torch

from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.warm_start import warm_start
from robolearn.collect.generate import CollectConfig, collect
from robolearn.config import EnvConfig, compose, make_env
from robolearn.core.buffers import ReplayBuffer
from robolearn.data.formats import save_dataset
from robolearn.errors import CheckpointError, ConfigError
from robolearn.eval.o2o import o2o_metrics, o2o_table
from robolearn.runners import train as training
from robolearn.runners.o2o import finetune as run_finetune
from robolearn.runners.o2o import load_config
from robolearn.runners.off_policy import OffPolicyLearner, OffPolicyRunner

train, make_runner, resolve_run = training.train, training.make_runner, training.resolve_run


def finetune(overrides: list[str]):
    """`robolearn finetune` from key=value overrides (the command's composition, then its one library call)."""
    return run_finetune(load_config(overrides))

EP = "+env.overrides.episode_length=200"
SMALL = ["algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]", "algo.batch_size=128"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A weak behaviour on cartpole-balance (the reference controller with N(0, 1) action noise), 16 episodes of 200
    steps; its reference returns are measured at that length."""
    env = EnvConfig("cartpole-balance", num_envs=8, backend="mujoco", overrides={"episode_length": 200})
    data = collect(CollectConfig(env=env, kind="expert", policy="reference", noise=1.0, episodes=16, progress=False,
                                 ref_episodes=8))
    return save_dataset(data, tmp_path_factory.mktemp("data") / "cartpole-balance-noisy-v0", "robolearn")


@pytest.fixture(scope="module")
def pretrained(dataset, tmp_path_factory):
    """100 gradient steps of Cal-QL with 4 LayerNorm critics (WSRL's pre-training, small)."""
    run = tmp_path_factory.mktemp("offline") / "calql"
    train(["algo=calql", f"dataset={dataset}", EP, *SMALL, "algo.num_critics=4", "algo.num_min_critics=2",
           "algo.critic_layer_norm=true", "algo.actor_layer_norm=true", "runner.gradient_steps=100",
           "runner.log_every=50", "runner.eval_every=100", "runner.eval_episodes=4", f"run_dir={run}", "video=false",
           "progress=false"])
    return run


def test_warm_start_and_the_wsrl_warm_up(pretrained, tmp_path):
    """The online learner starts from the checkpoint (its 4 critics, not the preset's 10); during the warm-up the
    buffer fills with the pre-trained policy's sampled actions and no update runs; no offline buffer exists."""
    cfg = compose("train", ["env=cartpole-balance", "algo=wsrl", EP, *SMALL, f"init={pretrained}",
                            "algo.learning_starts=160", "algo.warmup_whole_episodes=false",  # (test_warmup.py)
                            "runner.steps_per_iteration=10", "video=false", "progress=false"])
    cfg["dataset"] = None
    cfg = resolve_run(cfg)
    assert cfg["algo"]["num_critics"] == 4 and cfg["algo"]["offline_ratio"] == 0.0
    env = make_env(cfg["env"], seed=0)
    runner = make_runner(env, cfg, tmp_path, seed=0)
    assert warm_start(runner.algo, pretrained) == ["actor", "critic", "critic_target", "log_alpha"]
    _, saved = checkpoint.load(pretrained / "checkpoints" / "final")
    state = runner.algo.model_state()
    assert all(torch.equal(state[k], saved[k]) for k in state if k.split(".")[0] in ("actor", "critic"))
    acted = []
    act = runner.algo.act

    def spy(obs, deterministic=None, generator=None):  # None: the runner did not say (OfflineAlgo's default: mode)
        acted.append((deterministic, act(obs, deterministic=bool(deterministic), generator=generator)))
        return acted[-1][1]

    runner.algo.act = spy
    runner.learn(2)  # 2 x 10 steps x 8 envs = the 160 warm-up transitions
    assert runner.updates == 0 and len(runner.buffer) == 160 and runner.offline is None
    assert all(det is False for det, _ in acted)  # sampled, as WSRL's finetune.py, never random
    assert torch.equal(runner.buffer.actions[:20], torch.stack([a for _, a in acted]))
    runner.learn(3)  # past the warm-up: updates from the online buffer only
    assert runner.updates > 0
    env.close()


def test_no_offline_sample_at_ratio_zero(pretrained):
    """With offline_ratio 0 the learner never draws from an offline buffer, even if one is given."""
    from robolearn.algos.online.sac import SAC, SACConfig

    class Untouchable(ReplayBuffer):
        def sample(self, *args, **kwargs):
            raise AssertionError("offline data sampled")

    algo = SAC(3, 3, 1, SACConfig(actor_hidden=(8,), critic_hidden=(8,), batch_size=4, learning_starts=0))
    online = ReplayBuffer(64, 1, {"policy": 3}, 1)
    offline = Untouchable(64, 1, {"policy": 3}, 1)
    for _ in range(8):
        online.add({"policy": torch.randn(1, 3)}, torch.rand(1, 1), torch.ones(1), {"policy": torch.randn(1, 3)},
                   torch.zeros(1), torch.zeros(1))
    learner = OffPolicyLearner(algo, online, offline, torch.Generator().manual_seed(0))
    assert learner.collected(8, 8) and learner.update() == 8


def test_finetune_improves_a_pretrained_policy_and_reports(dataset, pretrained, tmp_path):
    """WSRL from the weak checkpoint: the deterministic policy's score rises online (measured 8.8 -> 97.5 on
    3200 env steps at UTD 4; here 8.8 -> 52 on 1600 at UTD 2); o2o.json holds the metrics, the bench reads them."""
    out = tmp_path / "wsrl"
    finetune(["algo=wsrl", f"checkpoint={pretrained}", f"run_dir={out}", "online_steps=1600", "eval_every=800",
              "eval_episodes=8", "progress=false", 'online=["algo.learning_starts=320",'
              '"algo.warmup_whole_episodes=false","algo.utd_ratio=2","algo.batch_size=128"]'])
    metrics = json.loads((out / "o2o.json").read_text())
    assert metrics["final_score"] > metrics["start_score"] + 30, metrics
    assert metrics["offline_score"] is not None and metrics["dataset"] == str(dataset)
    online = json.loads((out / "online" / "config.yaml").read_text())
    assert online["env"]["overrides"]["episode_length"] == 200  # the checkpoint's task options, not given again
    assert online["runner"]["offline_data"] is None and online["algo"]["offline_ratio"] == 0.0  # WSRL keeps no data
    from robolearn.bench.cells import read_score

    record = read_score(out)
    assert record["score"] == metrics["final_score"] and record["o2o"]["algo"] == "wsrl"
    cells = [{**record, "algo": "wsrl", "dataset": "cp", "seed": 0}]
    assert o2o_table(cells, ["wsrl"], ["cp"])[-1].startswith("| wsrl | cp | ")


def test_ro2o_fine_tune_stopped_mid_way_resumes_exactly(dataset, tmp_path, monkeypatch):
    """`robolearn finetune algo=ro2o`: RO2O pre-trains on the dataset, then the same learner collects with sampled
    actions and keeps learning online with lambda frozen at its minimum. A second run stopped after 2 of its 3
    online iterations and run again ends with the same networks and metrics as the uninterrupted one."""
    from robolearn.algos.offline.ro2o import RO2O

    asked = []
    act = RO2O.act

    def spy(self, obs, deterministic=None, generator=None):  # None: the runner did not say (OfflineAlgo: the mode)
        asked.append(deterministic)
        return act(self, obs, deterministic=True if deterministic is None else deterministic, generator=generator)

    monkeypatch.setattr(RO2O, "act", spy)
    offline = tmp_path / "offline"
    train(["algo=ro2o", f"dataset={dataset}", EP, "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]",
           "algo.num_critics=3", "algo.sample_size=4", "runner.gradient_steps=40", "runner.log_every=20",
           "runner.eval_every=40", "runner.eval_episodes=2", "algo.batch_size=64", f"run_dir={offline}", "video=false",
           "progress=false"])
    args = ["algo=ro2o", f"checkpoint={offline}", "online_steps=240", "eval_every=160", "eval_episodes=2",
            "progress=false", f'online=["{EP}","algo.learning_starts=80","runner.steps_per_iteration=10",'
            '"checkpoint_interval=1","algo.batch_size=64","algo.sample_size=4"]']
    straight, split = tmp_path / "straight", tmp_path / "split"
    finetune([*args, f"run_dir={straight}"])
    assert None not in asked and False in asked  # collection samples, evaluation takes the mode
    rows = [json.loads(line) for line in (straight / "online" / "metrics.jsonl").read_text().splitlines()]
    lambdas = [r["ood_reg"] for r in rows if "ood_reg" in r]
    assert lambdas and all(abs(v - 0.1) < 1e-6 for v in lambdas)
    calls = {"n": 0}
    iteration = OffPolicyRunner._iteration

    def crash(self, obs):
        calls["n"] += 1
        if calls["n"] > 2:  # of 3 iterations
            raise KeyboardInterrupt("stopped")
        return iteration(self, obs)

    monkeypatch.setattr(OffPolicyRunner, "_iteration", crash)
    with pytest.raises(KeyboardInterrupt):
        finetune([*args, f"run_dir={split}"])
    monkeypatch.setattr(OffPolicyRunner, "_iteration", iteration)
    finetune([*args, f"run_dir={split}"])
    _, a = checkpoint.load(straight / "online" / "checkpoints" / "final")
    _, b = checkpoint.load(split / "online" / "checkpoints" / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((straight / "o2o.json").read_text()) == json.loads((split / "o2o.json").read_text())


def test_calql_continues_online_on_half_offline_batches(dataset, pretrained, tmp_path):
    """Cal-QL's online phase: the offline learner driven by the off-policy runner, calibration off, the dataset
    retained in 50/50 batches from the first step."""
    run = tmp_path / "calql"
    train(["env=cartpole-balance", "algo=calql", EP, f"init={pretrained}", "algo.calibrate=false",
           f"runner.offline_data={dataset}", "algo.offline_ratio=0.5", "algo.learning_starts=0", "runner.env_steps=80",
           "runner.steps_per_iteration=10", "runner.eval_every=0", "algo.batch_size=64", "algo.cql_n_actions=3",
           f"run_dir={run}", "video=false", "progress=false"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["updates"] == 80 and all(r["critic_loss"] == r["critic_loss"] for r in rows)  # finite


def _rows(run_dir):
    volatile = ("wall_s", "updates_per_s", "env_steps_per_s", "collection_steps_per_s", "eval/seconds")
    return [{k: v for k, v in json.loads(line).items() if k not in volatile}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_seed_batched_finetune_writes_each_seeds_solo_run(dataset, tmp_path):
    """`robolearn finetune seeds=[0,1]` (WSRL: Cal-QL offline, then SAC warm-started from each seed's own offline
    checkpoint, after a whole-episode warm-up) runs both phases seed-batched; seed 1's folder is what a solo run
    writes (offline/, online/, o2o.json), its online metrics and scores those of seed 1 fine-tuned alone from the same
    checkpoint, to float rounding. Run again, it is finished; a
warm-up of whole episodes that could outlast learning_starts is refused with seeds=."""
    args = ["algo=wsrl", f"dataset={dataset}", "offline_steps=40", "online_steps=300", "eval_every=150",
            "eval_episodes=2", "progress=false",
            f'offline=["{EP}","algo.num_critics=3","algo.actor_hidden=[32,32]","algo.critic_hidden=[32,32]",'
            '"algo.batch_size=64","algo.cql_n_actions=3","runner.log_every=20","runner.eval_every=40",'
            '"runner.eval_episodes=2"]',
            f'online=["{EP}","env.num_envs=1","algo.learning_starts=200","runner.steps_per_iteration=50",'
            '"algo.batch_size=64"]']
    seeds, solo = tmp_path / "seeds", tmp_path / "solo"
    finetune([*args, "seeds=[0,1]", f"run_dir={seeds}"])
    # seed 1's online phase alone, from seed 1's offline checkpoint (the seed-batched offline learners equal their
    # solo runs: tests/robolearn/runners/test_seeds.py, tests/robolearn/algos/test_offline_algos.py)
    finetune([*args, "seed=1", f"checkpoint={seeds / 'seed{seed}' / 'offline'}", f"run_dir={solo}"])  # {seed}: 1
    assert json.loads((seeds / "online" / "config.yaml").read_text())["seeds"] == [0, 1]
    last = [_rows(seeds / f"seed{k}" / "offline")[-1]["critic_loss"] for k in (0, 1)]
    assert last[0] != last[1]  # two seeds, two runs
    a, b = _rows(seeds / "seed1" / "online"), _rows(solo / "online")
    assert len(a) == len(b) and a[-1].keys() == b[-1].keys()
    for x, y in zip(a, b, strict=True):  # the vmapped update's rounding grows with the updates (measured 1e-3; the
        #                                    normalised score amplifies the return's: it is checked below)
        assert all(x[k] == pytest.approx(y[k], rel=5e-3, abs=1e-4) for k in x
                   if isinstance(y[k], float) and k != "eval/normalized_score")
    mine, alone = (json.loads((run / "o2o.json").read_text()) for run in (seeds / "seed1", solo))
    assert mine["seed"] == 1 and mine["init"] == str(seeds / "seed1" / "offline") and mine["learning_starts"] == 200
    assert mine["final_score"] == pytest.approx(alone["final_score"], abs=0.5)  # measured 0.14 apart
    assert alone["init"] == mine["init"]
    assert finetune([*args, "seeds=[0,1]", f"run_dir={seeds}"]) == seeds  # finished: nothing runs again
    assert json.loads((seeds / "seed1" / "o2o.json").read_text()) == mine
    with pytest.raises(ConfigError, match=r"holds a run with seeds=\[0, 1\], not \[0, 2\]"):  # never overwritten
        finetune([*args, "seeds=[0,2]", f"run_dir={seeds}"])
    # a whole-episode warm-up that could outlast learning_starts would end on each seed's own episodes: refused
    with pytest.raises(ConfigError, match="out of lockstep"):
        train(["env=cartpole-balance", "algo=wsrl", EP, "env.num_envs=2", "algo.learning_starts=200", "seeds=[0,1]",
               "runner.env_steps=100", "runner.eval_every=0", f"run_dir={tmp_path / 'refused'}", "video=false",
               "progress=false"])


@pytest.mark.parametrize("algo", ["calql", "ro2o"])
def test_seed_batched_online_phase_of_an_offline_learner(algo, dataset, tmp_path):
    """Cal-QL's and RO2O's online phases keep their offline learner (CQL on 50/50 batches; RO2O with its own buffer)
    in an off-policy run: seeds=[0,1] runs them seed-batched too (they were sent to the offline seeds runner and
    failed), seed 1's online metrics those of seed 1 fine-tuned alone from the same checkpoint."""
    args = [f"algo={algo}", f"dataset={dataset}", "offline_steps=20", "online_steps=200", "eval_every=100",
            "eval_episodes=2", "progress=false",
            f'offline=["{EP}","algo.actor_hidden=[32,32]","algo.critic_hidden=[32,32]","algo.batch_size=32",'
            '"runner.log_every=20","runner.eval_every=20","runner.eval_episodes=2"]',
            f'online=["{EP}","env.num_envs=2","algo.learning_starts=100","runner.steps_per_iteration=50",'
            '"algo.batch_size=32"]']
    seeds, solo = tmp_path / "seeds", tmp_path / "solo"
    finetune([*args, "seeds=[0,1]", f"run_dir={seeds}"])
    finetune([*args, "seed=1", f"checkpoint={seeds / 'seed{seed}' / 'offline'}", f"run_dir={solo}"])
    a, b = _rows(seeds / "seed1" / "online"), _rows(solo / "online")
    assert len(a) == len(b) == 3 and a[-1]["updates"] == 100 and "critic_loss" in a[-1]
    for x, y in zip(a, b, strict=True):
        assert all(x[k] == pytest.approx(y[k], rel=5e-3, abs=1e-4) for k in x
                   if isinstance(y[k], float) and k != "eval/normalized_score")


def test_o2o_metrics_by_hand():
    curve = [(0, 40.0), (1000, 20.0), (2000, 35.0), (5000, 60.0), (10000, 80.0)]
    m = o2o_metrics(curve, online_steps=10000, offline_score=42.0)
    assert m["start_score"] == 40.0 and m["initial_dip"] == -20.0  # the worst of the first 1000 steps
    assert m["steps_to_90"] == 10000.0 and m["final_score"] == 80.0  # 72 first reached at the end
    assert m["cumulative_regret"] == pytest.approx(sum(1 - v / 100 for v in (20, 35, 60, 80)) / 4)
    assert o2o_metrics([(0, 10.0), (500, 95.0), (1000, 100.0)], 1000)["steps_to_90"] == 500.0
    # a run that collapses ends below its start: no steps-to-90% (its start would count as reached: 0 +- 0)
    collapse = o2o_metrics([(0, 97.0), (1000, 40.0), (2000, 0.5), (3000, 30.0)], 3000)
    assert collapse["steps_to_90"] is None and collapse["ended_below_start"] and collapse["final_score"] == 30.0
    assert not m["ended_below_start"]
    late = [(0, 40.0), (1200, 25.0), (2000, 10.0), (10000, 80.0)]  # no evaluation inside the first 1000 steps
    assert o2o_metrics(late, online_steps=10000)["initial_dip"] == -15.0  # the first online evaluation's
    # a 1000-step warm-up that updates nothing: the window is the next 10% of 9000 steps (to 1900), at least 2000
    warm = [(0, 40.0), (800, 41.0), (1600, 30.0), (2400, 5.0), (10000, 80.0)]
    assert o2o_metrics(warm, 10000, learning_starts=1000)["initial_dip"] == -10.0
    assert o2o_metrics(warm[:1] + warm[2:], 10000, learning_starts=1800)["initial_dip"] == -35.0
    with pytest.raises(ConfigError, match="eval_every"):
        o2o_metrics([], 1000)


def test_errors(dataset, pretrained, tmp_path):
    with pytest.raises(ConfigError, match="not an O2O method"):
        finetune(["algo=ppo", f"dataset={dataset}"])
    with pytest.raises(ConfigError, match="dataset=<path or name>"):
        finetune(["algo=wsrl"])
    with pytest.raises(ConfigError, match="no offline phase"):
        finetune(["algo=rlpd", f"checkpoint={pretrained}"])
    with pytest.raises(CheckpointError, match="neither a checkpoint"):
        train(["env=cartpole-balance", "algo=wsrl", f"init={tmp_path}", "video=false", "progress=false"])
    with pytest.raises(ConfigError, match="calibrate=false"):  # online transitions have no Monte-Carlo return
        train(["env=cartpole-balance", "algo=calql", "video=false", "progress=false"])
    with pytest.raises(ConfigError, match="leave dataset= out"):
        train(["algo=calql", f"dataset={dataset}", f"init={pretrained}", "video=false", "progress=false"])
    td3_bc = tmp_path / "td3_bc"
    train(["algo=td3_bc", f"dataset={dataset}", EP, "runner.gradient_steps=10", "runner.log_every=10",
           "runner.eval_every=10", "runner.eval_episodes=2", f"run_dir={td3_bc}", "video=false", "progress=false"])
    with pytest.raises(CheckpointError, match="deterministic"):  # a TD3+BC actor cannot start SAC
        train(["env=cartpole-balance", "algo=wsrl", f"init={td3_bc}", "video=false", "progress=false"])
