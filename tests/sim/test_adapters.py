"""Peers' code runs on our envs: gymnasium's checker, SB3 PPO, rsl_rl's OnPolicyRunner."""

from __future__ import annotations

import numpy as np

import sim


def test_gymnasium_env_checker_passes():
    from gymnasium.utils.env_checker import check_env

    env = sim.make_gym("cartpole-swingup")
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.std() > 0
    env.close()


def test_gymnasium_single_env_episode_end():
    env = sim.make_gym("pendulum-swingup", episode_length=3)
    obs, _ = env.reset(seed=0)
    for _t in range(3):
        obs, rew, terminated, truncated, _ = env.step(env.action_space.sample())
    assert truncated and not terminated
    env.close()


def test_gymnasium_vector_env_same_step_reset():
    env = sim.make_gym("cartpole-swingup", num_envs=3, episode_length=2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 5) and env.action_space.shape == (3, 1)
    _, _, term, trunc, infos = env.step(np.zeros((3, 1), np.float32))
    assert not trunc.any() and infos == {}
    obs, _, term, trunc, infos = env.step(np.zeros((3, 1), np.float32))
    assert trunc.all() and not term.any()
    assert infos["_final_obs"].all() and not np.allclose(infos["final_obs"], obs)
    env.close()


def test_sb3_ppo_runs_on_adapter():
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env  # noqa: F401 (import proves API match)

    venv = sim.make_sb3("cartpole-balance", num_envs=8, episode_length=200)
    model = PPO("MlpPolicy", venv, n_steps=256, batch_size=256, n_epochs=2, seed=0, device="cpu", verbose=0)
    model.learn(total_timesteps=4096)
    assert model.num_timesteps >= 4096
    # Finished episodes carry SB3's terminal-observation conventions.
    venv.reset()
    for _ in range(199):
        venv.step(np.zeros((8, 1), np.float32))
    _, _, dones, infos = venv.step(np.zeros((8, 1), np.float32))
    assert dones.all() and all(i["TimeLimit.truncated"] for i in infos)
    assert infos[0]["terminal_observation"].shape == (5,)
    venv.close()


def test_rsl_rl_on_policy_runner_runs(tmp_path):
    from rsl_rl.runners import OnPolicyRunner  # a dev dependency; `make test` installs it

    env = sim.make("cartpole-balance", num_envs=16)
    cfg = {
        "num_steps_per_env": 16,
        "save_interval": 100,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2},
        "actor": {"class_name": "MLPModel", "hidden_dims": [32, 32],
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": {"class_name": "MLPModel", "hidden_dims": [32, 32]},
    }
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    runner.learn(num_learning_iterations=3, init_at_random_ep_len=True)
    assert runner.current_learning_iteration >= 2
