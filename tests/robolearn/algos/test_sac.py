"""SAC learns, the off-policy runner checkpoints and resumes with its replay buffer, presets load."""

from __future__ import annotations

import json

import pytest
import torch

import sim
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.checkpoints.policy import load_policy
from robolearn.config import algo_config, compose
from robolearn.eval.evaluate import evaluate
from robolearn.runners import train as training
from robolearn.runners.off_policy import OffPolicyRunner

train = training.train  # the `robolearn train` entry point

TIMING = {"env_steps_per_s", "updates_per_s", "wall_s"}


def _runner(tmp_path, task="pendulum-swingup", num_envs=4, seed=0, steps_per_iteration=50, overrides=None, **cfg):
    torch.manual_seed(seed)
    env = sim.make(task, num_envs=num_envs, seed=seed, **(overrides or {}))
    algo = SAC.for_env(env, SACConfig(**cfg))
    return OffPolicyRunner(env, algo, tmp_path, {"test": True}, seed=seed, progress=False,
                           steps_per_iteration=steps_per_iteration)


def _random_algo(algo: SAC):
    """An object with SAC's `act` that acts uniformly at random (the baseline for learning tests)."""
    gen = torch.Generator().manual_seed(0)

    class Random:
        @staticmethod
        def act(obs, deterministic=True):
            return torch.rand(obs["policy"].shape[0], algo.num_actions, generator=gen) * 2 - 1

    return Random()


def _deterministic_return(algo: SAC, task: str, episodes: int = 8, **overrides) -> float:
    env = sim.make(task, num_envs=episodes, seed=1000, **overrides)
    obs, total = env.get_observations(), torch.zeros(episodes)
    for _ in range(env.max_episode_length):  # every env runs exactly one full episode
        obs, rewards, _, _ = env.step(algo.act(obs, deterministic=True))
        total += rewards
    env.close()
    return float(total.mean())


def test_sac_learns_pendulum_swingup(tmp_path):
    """The sparse swing-up (reward 1 within 30 degrees of upright) with DM Control's benchmark action
    repeat of 4 on 1000-step episodes (250 decisions); random actions score about 3, the scripted
    energy-pumping controller 849. 10K decisions (9K updates of small networks, 3-step returns)."""
    ov = {"episode_length": 250, "action_repeat": 4}
    runner = _runner(tmp_path, task="pendulum-swingup", num_envs=4, overrides=ov, actor_hidden=(64, 64),
                     critic_hidden=(64, 64), batch_size=128, learning_starts=1000, n_step=3)
    rows = runner.learn(50, checkpoint_interval=1000)
    assert rows[-1]["updates"] == 9_000
    random_score = _deterministic_return(_random_algo(runner.algo), "pendulum-swingup", **ov)
    score = _deterministic_return(runner.algo, "pendulum-swingup", **ov)
    assert random_score < 10 and score > 50, (random_score, score)  # measured: random ~3, SAC 91


def test_resume_reproduces_uninterrupted_run(tmp_path):
    kw = dict(actor_hidden=(16,), critic_hidden=(16,), batch_size=32, learning_starts=40, num_critics=3,
              num_min_critics=2, subset_replace=True, steps_per_iteration=10)
    full = _runner(tmp_path / "full", **kw).learn(4, checkpoint_interval=2)
    first = _runner(tmp_path / "split", **kw)
    first.learn(2, checkpoint_interval=2)
    first.env.close()
    resumed = _runner(tmp_path / "split", **kw)
    resumed.restore(tmp_path / "split" / "checkpoints" / "latest")
    assert len(resumed.buffer) == len(first.buffer) and resumed.updates == first.updates
    rest = resumed.learn(4, checkpoint_interval=2)

    def strip(r):
        return {k: v for k, v in r.items() if k not in TIMING}

    assert [strip(r) for r in full[2:]] == [strip(r) for r in rest]


def test_presets_resolve_to_their_recipes():
    want = {
        "sac": dict(num_critics=2, num_min_critics=2, actor_q="min", target_entropy_scale=1.0, backup_entropy=True),
        "redq": dict(num_critics=10, subset_replace=False, actor_q="mean", utd_ratio=20.0),
        "rlpd": dict(num_critics=10, subset_replace=False, actor_q="mean", critic_layer_norm=True,
                     actor_layer_norm=False, target_entropy_scale=0.5, offline_ratio=0.5),
        "serl": dict(subset_replace=True, actor_q="mean", activation="tanh", actor_layer_norm=True,
                     backup_entropy=False, init_temperature=0.01),
        "wsrl": dict(subset_replace=True, actor_q="min", actor_layer_norm=True, backup_entropy=False,
                     target_entropy_scale=1.0, utd_ratio=4.0, offline_ratio=0.0, random_warmup=False),
    }
    assert algo_config(compose("train", ["algo=rlpd", "algo.compile=true"])["algo"]).compile
    for recipe, fields in want.items():
        algo = compose("train", [f"algo={recipe}"])["algo"]
        assert algo["recipe"] == recipe and algo["name"] == "sac"
        for k, v in fields.items():
            assert algo[k] == v, (recipe, k)


def test_actor_updates_once_per_transition_whatever_the_utd():
    """RLPD/REDQ/SERL/WSRL update the actor once per env transition: overriding utd_ratio keeps that."""
    for recipe in ("rlpd", "redq", "serl", "wsrl"):
        for utd in (1, 4, 20):
            algo = compose("train", [f"algo={recipe}", f"algo.utd_ratio={utd}"])["algo"]
            learner = SAC(3, 3, 1, algo_config(algo))
            assert learner.actor_period == utd, (recipe, utd)
    assert SAC(3, 3, 1, SACConfig(utd_ratio=4.0, actor_every=2)).actor_period == 2


def test_cli_train_sac_then_eval(tmp_path):
    run = train(["env=pendulum-swingup", "algo=sac", f"run_dir={tmp_path / 'run'}", "progress=false", "video=false",
                 "runner.env_steps=400", "algo.learning_starts=200", "algo.batch_size=32", "env.num_envs=2",
                 "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "runner.steps_per_iteration=50",
                 "+env.overrides.episode_length=50"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 400 and rows[-1]["updates"] == 200
    assert {"updates", "updates_per_s", "critic_loss", "alpha"} <= set(rows[-1])
    policy = load_policy(run / "checkpoints" / "final")
    assert policy.run["algo"]["recipe"] == "sac" and policy.kind == "tanh_gaussian"
    assert policy({"policy": torch.zeros(3, 3)}).shape == (3, 1)
    assert isinstance(evaluate(run / "checkpoints" / "final", episodes=2), float)
    with pytest.raises(Exception, match="num_min_critics"):
        train(["algo=sac", "algo.num_min_critics=5", f"run_dir={tmp_path / 'bad'}", "progress=false"])


def test_td3_trains_from_the_cli(tmp_path):
    run = train(["env=pendulum-swingup", "algo=td3", f"run_dir={tmp_path / 'run'}", "progress=false", "video=false",
                 "runner.env_steps=300", "algo.learning_starts=100", "algo.batch_size=32", "env.num_envs=2",
                 "algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "runner.steps_per_iteration=50",
                 "+env.overrides.episode_length=50"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["updates"] == 200 and "actor_loss" in rows[-1]
    policy = load_policy(run / "checkpoints" / "final")
    assert policy.kind == "deterministic" and policy({"policy": torch.zeros(3, 3)}).abs().max() <= 1.0
    sampled = load_policy(run / "checkpoints" / "final", mode="sample")
    assert not torch.equal(sampled({"policy": torch.zeros(3, 3)}), policy({"policy": torch.zeros(3, 3)}))


def test_offline_data_from_an_episode_folder(tmp_path, capsys):
    """`runner.offline_data` loads a robolearn episode folder (any dataset format) into the offline buffer; a size
    mismatch is an error."""
    import numpy as np

    from robolearn.data.episodes import Episode, save_episodes

    rng = np.random.default_rng(0)
    episodes = [Episode(observations=rng.normal(size=(51, 3)), actions=rng.uniform(-1, 1, (50, 1)),
                        rewards=rng.uniform(size=50), terminations=np.zeros(50, bool),
                        truncations=np.eye(50, dtype=bool)[-1]) for _ in range(2)]
    save_episodes(tmp_path / "data", episodes)
    common = ["env=pendulum-swingup", "progress=false", "video=false", "runner.env_steps=200",
              "algo.learning_starts=100", "algo.batch_size=32", "env.num_envs=2", "algo.actor_hidden=[16]",
              "algo.critic_hidden=[16]", "algo.num_critics=3", "runner.steps_per_iteration=50", "algo.utd_ratio=1",
              "+env.overrides.episode_length=50"]
    run = train(["algo=rlpd", f"run_dir={tmp_path / 'run'}", f"runner.offline_data={tmp_path / 'data'}", *common])
    assert "offline data: 100 transitions from 2 episodes" in capsys.readouterr().out
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["updates"] == 100
    wide = Episode(observations=np.zeros((3, 5)), actions=np.zeros((2, 1)), rewards=np.zeros(2),
                   terminations=np.zeros(2, bool), truncations=np.array([False, True]))
    save_episodes(tmp_path / "wide", [wide])
    with pytest.raises(Exception, match=r"policy observations of shape \(5,\); the learner's are \(3,\)"):
        train(["algo=rlpd", f"run_dir={tmp_path / 'bad'}", f"runner.offline_data={tmp_path / 'wide'}", *common])


def test_max_target_backup_takes_the_best_of_the_sampled_next_actions():
    """max_target_backup (WSRL on antmaze): the TD target's a' is, of `backup_samples` draws from pi(s'), the one whose
    min over the drawn subset of target critics is largest, with that draw's log-prob in the entropy term."""
    torch.manual_seed(0)
    cfg = SACConfig(actor_hidden=(8,), critic_hidden=(8,), num_critics=4, num_min_critics=2, subset_replace=True,
                    max_target_backup=True, backup_samples=5, reward_scale=2.0, reward_bias=-1.0)
    sac = SAC(3, 3, 2, cfg)
    for p in sac.critic_target.parameters():  # targets unlike the critics, so the subset matters
        p.data.normal_()
    b = 6
    batch = {"obs": {"policy": torch.randn(b, 3)}, "actions": torch.rand(b, 2) * 2 - 1, "rewards": torch.randn(b),
             "next_obs": {"policy": torch.randn(b, 3)}, "discount": torch.full((b,), 0.99)}
    g = torch.Generator().manual_seed(7)  # update's draws, in its order: the noise, then the subset
    noise, idx = sac._noise(b, g, 5), sac._subset(g)
    with torch.no_grad():
        actions, logp = sac.actor.sample_many(batch["next_obs"]["policy"], noise)
        q = torch.stack([sac.critic_target(batch["next_obs"]["policy"], actions[:, k]) for k in range(5)], -1)
        v = q[idx].min(0).values  # [B, 5]
        best = v.argmax(-1)
        rows = torch.arange(b)
        expected = 2.0 * batch["rewards"] - 1.0 + 0.99 * (v[rows, best] - sac.alpha * logp[rows, best])
    seen = []
    sac._critic_step = lambda obs_c, actions, target: seen.append(target) or {}
    sac.update(batch, torch.Generator().manual_seed(7))
    torch.testing.assert_close(seen[0], expected)
    assert (v[rows, best][:, None] >= v).all() and noise.shape == (b, 5, 2)
    with pytest.raises(Exception, match="backup_samples"):
        SACConfig(backup_samples=0).validate()
