"""The off-policy warm-up: before `learning_starts` the runner only collects; WSRL's goes on until every env has
ended an episode (`warmup_whole_episodes`), so its first updates see whole episodes, not only their beginnings
(8 envs x 125 steps of a 700-step maze episode held no reward)."""

from __future__ import annotations

from robolearn.config import compose, make_env
from robolearn.runners.train import make_runner, resolve_run


def _runner(tmp_path, *overrides: str):
    cfg = compose("train", ["env=pendulum-swingup", "algo=wsrl", "env.num_envs=2", "+env.overrides.episode_length=20",
                            "algo.learning_starts=8", "runner.steps_per_iteration=4", "algo.actor_hidden=[8]",
                            "algo.critic_hidden=[8]", "algo.batch_size=8", "video=false", "progress=false",
                            *overrides])
    cfg["dataset"] = None
    cfg = resolve_run(cfg)
    env = make_env(cfg["env"], 0)
    return make_runner(env, cfg, tmp_path, 0), env


def test_the_wsrl_warm_up_fills_whole_episodes(tmp_path):
    runner, env = _runner(tmp_path / "whole")
    assert runner.algo.cfg.warmup_whole_episodes  # the wsrl preset's
    runner.learn(4)  # 32 transitions, past learning_starts (8), but no env has ended its 20-step episode
    assert runner.updates == 0 and not runner.episode_ended.any()
    runner.save(tmp_path / "ckpt")
    runner.learn(6)  # both envs end their episode at 40 transitions: learning starts after it
    assert runner.episode_ended.all() and runner.updates > 0
    resumed, env2 = _runner(tmp_path / "resumed")
    resumed.restore(tmp_path / "ckpt")
    assert resumed.env_steps == 32 and not resumed.episode_ended.any()  # the warm-up state is checkpointed
    env.close(), env2.close()


def test_without_it_learning_starts_at_learning_starts(tmp_path):
    runner, env = _runner(tmp_path, "algo.warmup_whole_episodes=false")
    runner.learn(2)  # 16 transitions > 8
    assert runner.updates > 0
    env.close()
