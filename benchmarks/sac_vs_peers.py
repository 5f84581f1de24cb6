"""SAC against stable-baselines3's SAC, side by side on one machine, at equal settings.

Both learners use the same network (256, 256), batch size, UTD, learning rates, tau, gamma and
automatic temperature with target entropy -|A| (our `sac` preset is SB3's SAC recipe). With
`--num-critics N` both run N critics with SB3's semantics: the TD target and the actor use the min
over all N (SB3's `n_critics`, a Python loop over N networks; ours, one batched ensemble).

1. Gradient updates per second: each learner's replay buffer is filled with the same number of
   random transitions of the task, then each runs `--updates` updates (sampling included), in
   alternating rounds; the median round counts.
2. Sample efficiency: each learns the task from scratch on one env for `--env-steps`, for every
   seed in `--seeds`; every `--eval-every` env-steps its deterministic policy is evaluated on 8
   episodes (seed 1000); the env-steps at which the evaluation first reaches `--threshold` are
   reported per seed, and their median (a run that never reaches it counts as `--env-steps` + 1).

    python benchmarks/sac_vs_peers.py --skip-learning --updates 500   # update speed only
    # update speed over network widths x ensemble sizes, eager and compiled (one JSON with every cell):
    python benchmarks/sac_vs_peers.py --skip-learning --grid --compile --task cheetah-run
    # sample efficiency, small networks, DM Control's action repeat 4 on pendulum-swingup:
    python benchmarks/sac_vs_peers.py --skip-speed --hidden 64 64 --batch-size 128 --learning-starts 1000 \
        --action-repeat 4 --episode-length 250 --env-steps 16000 --eval-every 2000 --threshold 100 --seeds 0 1 2
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
from robolearn.algos.online.sac import SAC, SACConfig  # noqa: E402
from robolearn.runners.off_policy import OffPolicyRunner  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def sb3_sac(env: Any, args: argparse.Namespace, seed: int):
    from stable_baselines3 import SAC as SB3SAC

    return SB3SAC("MlpPolicy", env, batch_size=args.batch_size, learning_starts=args.learning_starts,
                  policy_kwargs={"net_arch": list(args.hidden), "n_critics": args.num_critics}, train_freq=1,
                  gradient_steps=args.utd,
                  buffer_size=1_000_000, seed=seed, device="cpu", verbose=0)


def our_sac(env: Any, args: argparse.Namespace, compile: bool = False) -> SAC:
    return SAC.for_env(env, SACConfig(batch_size=args.batch_size, utd_ratio=float(args.utd),
                                      learning_starts=args.learning_starts, actor_hidden=tuple(args.hidden),
                                      critic_hidden=tuple(args.hidden), num_critics=args.num_critics,
                                      num_min_critics=args.num_critics, actor_q="min", compile=compile))


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Task overrides shared by both learners' envs and the evaluation envs."""
    out: dict[str, Any] = {"action_repeat": args.action_repeat}
    if args.episode_length:
        out["episode_length"] = args.episode_length
    return out


def update_speed(args: argparse.Namespace) -> dict:
    """Updates/s of the learners on buffers of random transitions: robolearn eager, robolearn with
    `compile=True` (with `--compile`) and SB3, timed in alternating rounds."""
    torch.manual_seed(0)
    ours_env = sim.make(args.task, num_envs=1, seed=0)
    ours = OffPolicyRunner(ours_env, our_sac(ours_env, args, compile=False), "/tmp/robolearn-bench-sac", {},
                           progress=False, steps_per_iteration=args.fill)
    ours.algo.cfg.learning_starts = 10**12  # fill only
    ours.learn(1, checkpoint_interval=10**9)
    learners = {"robolearn": ours.algo}
    if args.compile:
        learners["robolearn_compiled"] = our_sac(ours_env, args, compile=True)
    sb3_env = sim.make_sb3(args.task, num_envs=1, seed=0)
    peer = sb3_sac(sb3_env, args, 0)
    peer.learning_starts = 10**12
    peer.learn(args.fill)
    gen = torch.Generator().manual_seed(0)

    def time_ours(algo: SAC) -> float:
        start = time.perf_counter()
        for _ in range(args.updates):
            algo.update_critic(ours.buffer.sample(args.batch_size, gen), gen)
        return args.updates / (time.perf_counter() - start)

    def time_peer() -> float:
        start = time.perf_counter()
        peer.train(gradient_steps=args.updates, batch_size=args.batch_size)
        return args.updates / (time.perf_counter() - start)

    for algo in learners.values():  # warm-up (and compilation)
        time_ours(algo)
    time_peer()
    rates: dict[str, list[float]] = {name: [] for name in [*learners, "sb3"]}
    for _ in range(args.rounds):
        for name, algo in learners.items():
            rates[name].append(time_ours(algo))
        rates["sb3"].append(time_peer())
    ours_env.close()
    sb3_env.close()
    med = {name: statistics.median(r) for name, r in rates.items()}
    p = med["sb3"]
    print(f"hidden {args.hidden}, {args.num_critics} critics, batch {args.batch_size}: updates/s "
          + ", ".join(f"{name} {v:.1f} ({v / p:.2f}x SB3)" for name, v in med.items()), flush=True)
    out = {"hidden": list(args.hidden), "num_critics": args.num_critics, "batch_size": args.batch_size,
           "sb3_updates_per_s": p, "sb3_rounds": rates["sb3"]}
    for name in learners:
        out.update({f"{name}_updates_per_s": med[name], f"{name}_ratio": med[name] / p, f"{name}_rounds": rates[name]})
    return out


def evaluate(act, task: str, episodes: int = 8, **task_overrides: Any) -> float:
    env = sim.make(task, num_envs=episodes, seed=1000, **task_overrides)
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


def learn_ours(args: argparse.Namespace, seed: int, ov: dict[str, Any], curves: dict, wall: dict,
               rounds: int) -> None:
    start = time.perf_counter()
    torch.manual_seed(seed)
    env = sim.make(args.task, num_envs=1, seed=seed, **ov)
    runner = OffPolicyRunner(env, our_sac(env, args), f"/tmp/robolearn-bench-sac-learn-{seed}", {}, seed=seed,
                             progress=False, steps_per_iteration=args.eval_every)
    curve = curves["robolearn"][seed] = []
    for i in range(rounds):
        runner.learn(i + 1, checkpoint_interval=10**9)
        ret = evaluate(lambda o, r=runner: r.algo.act({"policy": o}, deterministic=True), args.task, **ov)
        curve.append((runner.env_steps, ret))
        print(f"robolearn seed {seed} {runner.env_steps} {ret:.1f} ({time.perf_counter() - start:.0f} s)", flush=True)
    env.close()
    wall["robolearn"] += time.perf_counter() - start


def learn_sb3(args: argparse.Namespace, seed: int, ov: dict[str, Any], curves: dict, wall: dict,
              rounds: int) -> None:
    start = time.perf_counter()
    sb3_env = sim.make_sb3(args.task, num_envs=1, seed=seed, **ov)
    peer = sb3_sac(sb3_env, args, seed)
    curve = curves["sb3"][seed] = []
    for i in range(rounds):
        peer.learn(args.eval_every, reset_num_timesteps=i == 0)
        ret = evaluate(lambda o, p=peer: torch.as_tensor(p.predict(o.numpy(), deterministic=True)[0]), args.task,
                       **ov)
        curve.append(((i + 1) * args.eval_every, ret))
        print(f"sb3 seed {seed} {(i + 1) * args.eval_every} {ret:.1f} ({time.perf_counter() - start:.0f} s)",
              flush=True)
    sb3_env.close()
    wall["sb3"] += time.perf_counter() - start


def learning(args: argparse.Namespace) -> dict:
    """Evaluation curves of both learners per seed and the env-steps each needs to reach the threshold."""
    ov = overrides(args)
    curves: dict[str, dict[int, list[tuple[int, float]]]] = {"robolearn": {}, "sb3": {}}
    wall = {"robolearn": 0.0, "sb3": 0.0}
    rounds = args.env_steps // args.eval_every
    for seed in args.seeds:
        if args.only != "sb3":
            learn_ours(args, seed, ov, curves, wall, rounds)
        if args.only != "robolearn":
            learn_sb3(args, seed, ov, curves, wall, rounds)
    curves = {who: c for who, c in curves.items() if c}

    def first(curve):
        return next((s for s, r in curve if r >= args.threshold), args.env_steps + 1)

    out: dict[str, Any] = {"curves": curves, "threshold": args.threshold, "wall_s": wall}
    for who in curves:
        steps = [first(c) for c in curves[who].values()]
        out[f"{who}_steps_to_threshold"] = steps
        out[f"{who}_median_steps_to_threshold"] = statistics.median(steps)
        out[f"{who}_final_return_mean"] = statistics.mean(c[-1][1] for c in curves[who].values())
    print(f"median env-steps to {args.threshold}: "
          + ", ".join(f"{who} {out[f'{who}_median_steps_to_threshold']}" for who in curves))
    return out


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
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--num-critics", type=int, default=2)
    ap.add_argument("--compile", action="store_true",
                    help="also time robolearn with compile=True (one graph per update)")
    ap.add_argument("--grid", action="store_true",
                    help="update speed for hidden 64/128/256 x 2/10 critics (batch 256) instead of one setting")
    ap.add_argument("--action-repeat", type=int, default=1)
    ap.add_argument("--episode-length", type=int, default=0, help="0: the task's default")
    ap.add_argument("--skip-learning", action="store_true")
    ap.add_argument("--only", choices=["robolearn", "sb3"], default=None,
                    help="learning curves of one learner only (e.g. to run the two in parallel)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    fields: dict[str, Any] = {"task": args.task, "settings": {k: v for k, v in vars(args).items() if k != "out"},
                              "torch_threads": torch.get_num_threads()}
    if args.grid and not args.skip_speed:
        cells = []
        for width in (64, 128, 256):
            for critics in (2, 10):
                cell = argparse.Namespace(**{**vars(args), "hidden": [width, width], "num_critics": critics})
                cells.append(update_speed(cell))
        fields["updates_grid"] = cells
    elif not args.skip_speed:
        fields["updates"] = update_speed(args)
    if not args.skip_learning:
        fields["learning"] = learning(args)
    out = args.out or RESULTS / f"sac_vs_peers_{args.task}{'_grid' if args.grid else ''}_cpu.json"
    write_result(out, "sac_vs_peers", fields)


if __name__ == "__main__":
    main()
