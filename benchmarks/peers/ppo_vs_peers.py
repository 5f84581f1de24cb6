"""PPO against peers, side by side on one machine: env-steps/s and wall-clock to a return threshold.

Runs in one invocation, on the same task and machine:
- robolearn PPO on our VecEnv (C backend on CPU), with `ppo`'s settings (`PPOConfig`; robolearn's defaults);
- rsl_rl PPO (`OnPolicyRunner`) on the same VecEnv, with the same network sizes and PPO settings (taken from `ppo`);
- stable-baselines3 PPO on our SB3 adapter (8 envs, SB3's defaults but the same network sizes);
- stable-baselines3 PPO on gymnasium's own MuJoCo InvertedPendulum-v5 (8 envs): gymnasium has no
  DM-style cart-pole, so this row gives SB3's env-steps/s on a native gymnasium env, not a score.

Every learner is watched by the same tracker: the return of each finished episode, and the wall
time at which the mean of the last 20 finished full episodes first reaches the threshold.

    python benchmarks/peers/ppo_vs_peers.py                 # cartpole-balance, threshold 900
    python benchmarks/peers/ppo_vs_peers.py task=cartpole-swingup threshold=700 budget_s=600
    python benchmarks/peers/ppo_vs_peers.py peers=[robolearn,rsl_rl] ppo.actor_hidden=[128,128] \\
        ppo.critic_hidden=[128,128]
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402
from robolearn.algos.online.ppo import PPOConfig  # noqa: E402

WINDOW = 20


@dataclasses.dataclass
class Settings:
    """The task, the budget and the learners (`key=value` on the command line)."""

    task: str = "cartpole-balance"
    threshold: float = 900.0        # mean return of the last WINDOW full episodes
    num_envs: int = 64              # envs of the VecEnv learners (robolearn, rsl_rl)
    budget_s: float = 300.0         # per learner
    budget_steps: int = 2_000_000   # per learner
    peers: list[str] = dataclasses.field(default_factory=lambda: ["robolearn", "rsl_rl", "sb3", "sb3_gym"])
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)  # robolearn's PPO; rsl_rl and SB3 follow it
    out: str | None = None          # null: results/ppo_vs_peers_<task>_cpu.json


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


def run_robolearn(task: str, num_envs: int, args: Settings) -> dict[str, Any]:
    from robolearn.algos.online.ppo import PPO
    from robolearn.runners.on_policy import OnPolicyRunner

    torch.manual_seed(0)
    env = Tracker(sim.make(task, num_envs=num_envs, seed=0), args.threshold, args.budget_s, args.budget_steps)
    algo = PPO.for_env(env, args.ppo, torch.device("cpu"))
    runner = OnPolicyRunner(env, algo, "/tmp/robolearn-bench", {}, progress=False)
    while not env.done:
        runner.learn(runner.iteration + 1, checkpoint_interval=10**9, random_episode_start=True)
    runner.close()
    return env.result()


def run_rsl_rl(task: str, num_envs: int, args: Settings) -> dict[str, Any]:
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(0)
    env = Tracker(sim.make(task, num_envs=num_envs, seed=0), args.threshold, args.budget_s, args.budget_steps)
    ppo = args.ppo
    cfg = {  # robolearn's PPO settings in rsl_rl's names (its other settings are its defaults)
        "num_steps_per_env": ppo.num_steps, "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": ppo.num_epochs,
                      "num_mini_batches": ppo.num_minibatches, "learning_rate": ppo.learning_rate,
                      "entropy_coef": ppo.entropy_coef, "schedule": ppo.schedule, "desired_kl": ppo.desired_kl},
        "actor": {"class_name": "MLPModel", "hidden_dims": list(ppo.actor_hidden),
                  "obs_normalization": ppo.normalize_obs,
                  "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": ppo.init_std}},
        "critic": {"class_name": "MLPModel", "hidden_dims": list(ppo.critic_hidden),
                   "obs_normalization": ppo.normalize_obs},
    }
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    first = True
    while not env.done:
        runner.learn(num_learning_iterations=1, init_at_random_ep_len=first)
        first = False
    return env.result()


def run_sb3(task: str, args: Settings, gym_env: str | None = None) -> dict[str, Any]:
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
                policy_kwargs={"net_arch": {"pi": list(args.ppo.actor_hidden), "vf": list(args.ppo.critic_hidden)}})
    model.learn(total_timesteps=budget_steps, callback=Stop())
    if tracker is not None:
        return tracker.result()
    elapsed = time.perf_counter() - start
    return {"env": gym_env, "env_steps": model.num_timesteps, "wall_s": elapsed,
            "env_steps_per_s": model.num_timesteps / elapsed}


def main() -> None:
    args = settings(Settings, __doc__)
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
            short = dataclasses.replace(args, budget_steps=100_000)
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
