"""SAC against stable-baselines3's SAC, side by side on one machine, at equal settings.

Both learners use the same network (256, 256), batch size, UTD, learning rates, tau, gamma and
automatic temperature with target entropy -|A| (our `sac` preset is SB3's SAC recipe).

1. Gradient updates per second: each learner's replay buffer is filled with the same number of
   random transitions of the task, then each runs `--updates` updates (sampling included), in
   alternating rounds; the median round counts.
2. Sample efficiency: each learns the task from scratch on one env for `--env-steps`; every
   `--eval-every` env-steps its deterministic policy is evaluated on 8 episodes (seed 1000); the
   env-steps at which the evaluation first reaches `--threshold` are reported.

    python benchmarks/sac_vs_peers.py                                 # pendulum-swingup
    python benchmarks/sac_vs_peers.py --skip-learning --updates 500   # update speed only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find the benchmarks package
from benchmarks.sim_throughput import write_result  # noqa: E402
from robolearn.algos.sac import SAC, SACConfig  # noqa: E402
from robolearn.runners.off_policy import OffPolicyRunner  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def sb3_sac(env: Any, args: argparse.Namespace, seed: int):
    from stable_baselines3 import SAC as SB3SAC

    return SB3SAC("MlpPolicy", env, batch_size=args.batch_size, learning_starts=args.learning_starts,
                  policy_kwargs={"net_arch": [256, 256]}, train_freq=1, gradient_steps=args.utd,
                  buffer_size=1_000_000, seed=seed, device="cpu", verbose=0)


def our_sac(env: Any, args: argparse.Namespace) -> SAC:
    return SAC.for_env(env, SACConfig(batch_size=args.batch_size, utd_ratio=float(args.utd),
                                      learning_starts=args.learning_starts))


def update_speed(args: argparse.Namespace) -> dict:
    """Updates/s of both learners on buffers of random transitions."""
    torch.manual_seed(0)
    ours_env = sim.make(args.task, num_envs=1, seed=0)
    ours = OffPolicyRunner(ours_env, our_sac(ours_env, args), "/tmp/robolearn-bench-sac", {}, progress=False,
                           steps_per_iteration=args.fill)
    ours.algo.cfg.learning_starts = 10**12  # fill only
    ours.learn(1, checkpoint_interval=10**9)
    sb3_env = sim.make_sb3(args.task, num_envs=1, seed=0)
    peer = sb3_sac(sb3_env, args, 0)
    peer.learning_starts = 10**12
    peer.learn(args.fill)
    gen = torch.Generator().manual_seed(0)

    def time_ours() -> float:
        start = time.perf_counter()
        for _ in range(args.updates):
            ours.algo.update_critic(ours.buffer.sample(args.batch_size, gen), gen)
        return args.updates / (time.perf_counter() - start)

    def time_peer() -> float:
        start = time.perf_counter()
        peer.train(gradient_steps=args.updates, batch_size=args.batch_size)
        return args.updates / (time.perf_counter() - start)

    time_ours(), time_peer()  # warm-up
    ours_rates, peer_rates = [], []
    for _ in range(args.rounds):
        ours_rates.append(time_ours())
        peer_rates.append(time_peer())
    ours_env.close()
    sb3_env.close()
    o, p = statistics.median(ours_rates), statistics.median(peer_rates)
    print(f"updates/s: robolearn {o:.1f}, stable-baselines3 {p:.1f}, ratio {o / p:.2f}")
    return {"robolearn_updates_per_s": o, "sb3_updates_per_s": p, "ratio": o / p,
            "robolearn_rounds": ours_rates, "sb3_rounds": peer_rates}


def evaluate(act, task: str, episodes: int = 8) -> float:
    env = sim.make(task, num_envs=episodes, seed=1000)
    obs = env.get_observations()
    total = torch.zeros(episodes, dtype=torch.float64)
    done = torch.zeros(episodes, dtype=torch.bool)
    try:
        while not bool(done.all()):
            obs, rewards, dones, _ = env.step(act(obs["policy"]))
            total += rewards.double() * ~done
            done |= dones.bool()
    finally:
        env.close()
    return float(total.mean())


def learning(args: argparse.Namespace) -> dict:
    """Evaluation curves of both learners and the env-steps each needs to reach the threshold."""
    curves: dict[str, list[tuple[int, float]]] = {"robolearn": [], "sb3": []}
    start = time.perf_counter()
    torch.manual_seed(args.seed)
    env = sim.make(args.task, num_envs=1, seed=args.seed)
    runner = OffPolicyRunner(env, our_sac(env, args), "/tmp/robolearn-bench-sac-learn", {}, seed=args.seed,
                             progress=False, steps_per_iteration=args.eval_every)
    for i in range(args.env_steps // args.eval_every):
        runner.learn(i + 1, checkpoint_interval=10**9)
        ret = evaluate(lambda o: runner.algo.act({"policy": o}, deterministic=True), args.task)
        curves["robolearn"].append((runner.env_steps, ret))
        print(f"robolearn {runner.env_steps} {ret:.1f} ({time.perf_counter() - start:.0f} s)")
    env.close()
    ours_s = time.perf_counter() - start

    start = time.perf_counter()
    sb3_env = sim.make_sb3(args.task, num_envs=1, seed=args.seed)
    peer = sb3_sac(sb3_env, args, args.seed)
    for i in range(args.env_steps // args.eval_every):
        peer.learn(args.eval_every, reset_num_timesteps=i == 0)
        ret = evaluate(lambda o: torch.as_tensor(peer.predict(o.numpy(), deterministic=True)[0]), args.task)
        curves["sb3"].append(((i + 1) * args.eval_every, ret))
        print(f"sb3 {(i + 1) * args.eval_every} {ret:.1f} ({time.perf_counter() - start:.0f} s)")
    sb3_env.close()
    peer_s = time.perf_counter() - start

    def first(curve):
        return next((s for s, r in curve if r >= args.threshold), None)

    return {"curves": curves, "threshold": args.threshold, "robolearn_steps_to_threshold": first(curves["robolearn"]),
            "sb3_steps_to_threshold": first(curves["sb3"]), "robolearn_wall_s": ours_s, "sb3_wall_s": peer_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="pendulum-swingup")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--utd", type=int, default=1)
    ap.add_argument("--learning-starts", type=int, default=5000)
    ap.add_argument("--fill", type=int, default=5000, help="random transitions in the buffers for the speed test")
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--env-steps", type=int, default=40_000)
    ap.add_argument("--eval-every", type=int, default=5_000)
    ap.add_argument("--threshold", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-learning", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    fields: dict[str, Any] = {"task": args.task, "settings": {k: v for k, v in vars(args).items() if k != "out"},
                              "torch_threads": torch.get_num_threads(), "updates": update_speed(args)}
    if not args.skip_learning:
        fields["learning"] = learning(args)
    out = args.out or RESULTS / f"sac_vs_peers_{args.task}_cpu.json"
    write_result(out, "sac_vs_peers", fields)


if __name__ == "__main__":
    main()
