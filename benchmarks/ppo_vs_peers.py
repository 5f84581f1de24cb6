"""PPO against peers, side by side on one machine: env-steps/s and wall-clock to a return threshold.

Runs in one invocation, on the same task and machine:
- robolearn PPO on our VecEnv (C backend on CPU);
- rsl_rl PPO (`OnPolicyRunner`) on the same VecEnv, same network sizes and PPO settings;
- stable-baselines3 PPO on our SB3 adapter (8 envs, SB3's defaults but the same network sizes);
- stable-baselines3 PPO on gymnasium's own MuJoCo InvertedPendulum-v5 (8 envs): gymnasium has no
  DM-style cart-pole, so this row gives SB3's env-steps/s on a native gymnasium env, not a score.

Every learner is watched by the same tracker: the return of each finished episode, and the wall
time at which the mean of the last 20 finished full episodes first reaches the threshold.

    python benchmarks/ppo_vs_peers.py                       # cartpole-balance, threshold 900
    python benchmarks/ppo_vs_peers.py --task cartpole-swingup --threshold 700 --budget-s 600
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find the benchmarks package
from benchmarks.sim_throughput import write_result  # noqa: E402

RESULTS = Path(__file__).parent / "results"
WINDOW = 20


class Tracker:
    """Wraps a VecEnv: counts env-steps, records finished episodes' returns, times the threshold."""

    def __init__(self, env: Any, threshold: float, budget_s: float, budget_steps: int):
        self.env, self.threshold = env, threshold
        self.budget_s, self.budget_steps = budget_s, budget_steps
        self.returns: deque[float] = deque(maxlen=WINDOW)
        self.ep_return = torch.zeros(env.num_envs, dtype=torch.float64)
        self.ep_len = torch.zeros(env.num_envs, dtype=torch.int64)
        self.steps = 0
        self.start = time.perf_counter()
        self.solved_s: float | None = None
        self.solved_steps: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    @property
    def episode_length_buf(self):
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value):
        self.env.episode_length_buf = value

    def step(self, actions):
        obs, rew, dones, extras = self.env.step(actions)
        self.steps += self.env.num_envs
        self.ep_return += rew.double().cpu()
        self.ep_len += 1
        done = dones.bool().cpu()
        full = done & (self.ep_len >= self.env.max_episode_length)  # ignore partial first episodes
        self.returns.extend(self.ep_return[full | (done & extras["terminated"].cpu())].tolist())
        self.ep_return[done] = 0.0
        self.ep_len[done] = 0
        if self.solved_s is None and len(self.returns) == WINDOW and np.mean(self.returns) >= self.threshold:
            self.solved_s, self.solved_steps = time.perf_counter() - self.start, self.steps
        return obs, rew, dones, extras

    @property
    def done(self) -> bool:
        return (self.solved_s is not None or time.perf_counter() - self.start > self.budget_s
                or self.steps >= self.budget_steps)

    def result(self) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.start
        return {"env_steps": self.steps, "wall_s": elapsed, "env_steps_per_s": self.steps / elapsed,
                "solved_s": self.solved_s, "solved_env_steps": self.solved_steps,
                "final_mean_return": float(np.mean(self.returns)) if self.returns else None}


def run_robolearn(task: str, num_envs: int, args) -> dict[str, Any]:
    from robolearn.algos.online.ppo import PPO, PPOConfig
    from robolearn.runners.on_policy import OnPolicyRunner

    torch.manual_seed(0)
    env = Tracker(sim.make(task, num_envs=num_envs, seed=0), args.threshold, args.budget_s, args.budget_steps)
    algo = PPO.for_env(env, PPOConfig(actor_hidden=(64, 64), critic_hidden=(64, 64)), torch.device("cpu"))
    runner = OnPolicyRunner(env, algo, "/tmp/robolearn-bench", {}, progress=False)
    while not env.done:
        runner.learn(runner.iteration + 1, checkpoint_interval=10**9, random_episode_start=True)
    runner.close()
    return env.result()


def run_rsl_rl(task: str, num_envs: int, args) -> dict[str, Any]:
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(0)
    env = Tracker(sim.make(task, num_envs=num_envs, seed=0), args.threshold, args.budget_s, args.budget_steps)
    cfg = {
        "num_steps_per_env": 32, "save_interval": 10**9, "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4, "learning_rate": 1e-3,
                      "entropy_coef": 0.01, "schedule": "adaptive", "desired_kl": 0.01},
        "actor": {"class_name": "MLPModel", "hidden_dims": [64, 64], "obs_normalization": True,
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": {"class_name": "MLPModel", "hidden_dims": [64, 64], "obs_normalization": True},
    }
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    first = True
    while not env.done:
        runner.learn(num_learning_iterations=1, init_at_random_ep_len=first)
        first = False
    return env.result()


def run_sb3(task: str, args, gym_env: str | None = None) -> dict[str, Any]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    n = 8
    if gym_env is None:
        from sim.adapters import SB3VecEnv

        tracker = Tracker(sim.make(task, num_envs=n, seed=0), args.threshold, args.budget_s, args.budget_steps)
        venv = SB3VecEnv(tracker)
    else:
        import gymnasium as gym
        from stable_baselines3.common.env_util import make_vec_env

        venv = make_vec_env(lambda: gym.make(gym_env), n_envs=n, seed=0)
        tracker = None
    start, budget_steps = time.perf_counter(), args.budget_steps

    class Stop(BaseCallback):
        def _on_step(self) -> bool:
            if tracker is not None:
                return not tracker.done
            return time.perf_counter() - start < args.budget_s and self.num_timesteps < budget_steps

    model = PPO("MlpPolicy", venv, seed=0, device="cpu", verbose=0,
                policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}})
    model.learn(total_timesteps=budget_steps, callback=Stop())
    if tracker is not None:
        return tracker.result()
    elapsed = time.perf_counter() - start
    return {"env": gym_env, "env_steps": model.num_timesteps, "wall_s": elapsed,
            "env_steps_per_s": model.num_timesteps / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="cartpole-balance")
    ap.add_argument("--threshold", type=float, default=900.0)
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=300.0, help="per learner")
    ap.add_argument("--budget-steps", type=int, default=2_000_000, help="per learner")
    ap.add_argument("--peers", nargs="+", default=["robolearn", "rsl_rl", "sb3", "sb3_gym"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)

    rows = {}
    for peer in args.peers:
        if peer == "robolearn":
            rows[peer] = run_robolearn(args.task, args.num_envs, args)
        elif peer == "rsl_rl":
            rows[peer] = run_rsl_rl(args.task, args.num_envs, args)
        elif peer == "sb3":
            rows[peer] = run_sb3(args.task, args)
        elif peer == "sb3_gym":
            short = argparse.Namespace(**{**vars(args), "budget_steps": 100_000})
            rows[peer] = run_sb3(args.task, short, gym_env="InvertedPendulum-v5")
        print(peer, json.dumps(rows[peer]), flush=True)

    ratios = {}
    if "robolearn" in rows:
        ours = rows["robolearn"]
        for peer, r in rows.items():
            if peer == "robolearn":
                continue
            ratios[f"env_steps_per_s_vs_{peer}"] = ours["env_steps_per_s"] / r["env_steps_per_s"]
            if ours.get("solved_s") and r.get("solved_s"):
                ratios[f"time_to_threshold_vs_{peer}"] = ours["solved_s"] / r["solved_s"]
    print("ratios", json.dumps(ratios))
    write_result(args.out or RESULTS / f"ppo_vs_peers_{args.task}_cpu.json", "ppo_vs_peers",
                 {"task": args.task, "threshold": args.threshold, "num_envs_vecenv": args.num_envs, "window": WINDOW,
                  "budget_s": args.budget_s, "results": rows, "ratios": ratios})


if __name__ == "__main__":
    main()
