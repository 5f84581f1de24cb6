"""Sample efficiency of an RLPD-style learner (10 critics, LayerNorm, high UTD) vs plain SAC, one task.

Both start from the repo's presets (`configs/algo/sac.yaml`, `configs/algo/rlpd.yaml`, online only:
no offline data), with the same networks, batch size and env count; only what makes the recipes
differ changes: ensemble size and subset, LayerNorm, actor objective, target entropy and UTD. Every
`--eval-every` env-steps the deterministic policy is evaluated on 8 episodes (seed 1000). Writes
the curves as JSON (with machine info) and a PNG plot.

    python benchmarks/rlpd_vs_sac.py --task cheetah-run --env-steps 20000 --rlpd-utd 4 --hidden 128 128
    python benchmarks/rlpd_vs_sac.py --task pendulum-swingup --action-repeat 4 --episode-length 250 \
        --env-steps 12000 --eval-every 1000 --hidden 64 64 --batch-size 128 --learning-starts 1000 --rlpd-utd 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find the benchmarks package
import sim  # noqa: E402
from benchmarks.sac_vs_peers import evaluate, overrides  # noqa: E402
from benchmarks.sim_throughput import write_result  # noqa: E402
from robolearn.algos.online.sac import SAC  # noqa: E402
from robolearn.config import algo_config, compose  # noqa: E402
from robolearn.runners.off_policy import OffPolicyRunner  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def config(recipe: str, args: argparse.Namespace, utd: float):
    algo = compose("train", [f"algo={recipe}"])["algo"]
    algo.update(actor_hidden=list(args.hidden), critic_hidden=list(args.hidden), batch_size=args.batch_size,
                utd_ratio=utd, learning_starts=args.learning_starts, offline_ratio=0.0)
    return algo_config(algo)[0]


def run(recipe: str, args: argparse.Namespace, utd: float, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    env = sim.make(args.task, num_envs=args.num_envs, seed=seed, **overrides(args))
    cfg = config(recipe, args, utd)
    runner = OffPolicyRunner(env, SAC.for_env(env, cfg), f"/tmp/robolearn-rlpd-vs-sac-{recipe}-{seed}", {},
                             seed=seed, progress=False, steps_per_iteration=args.eval_every // args.num_envs)
    curve, start = [], time.perf_counter()
    for i in range(args.env_steps // args.eval_every):
        runner.learn(i + 1, checkpoint_interval=10**9)
        ret = evaluate(lambda o, r=runner: r.algo.act({"policy": o}, deterministic=True), args.task,
                       **overrides(args))
        curve.append((runner.env_steps, ret))
        print(f"{recipe} seed {seed} {runner.env_steps} {ret:.1f} updates {runner.updates} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    env.close()
    return {"curve": curve, "updates": runner.updates, "wall_s": time.perf_counter() - start,
            "config": {k: v for k, v in vars(cfg).items()}}


def plot(results: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, runs in results.items():
        for i, r in enumerate(runs.values()):
            steps, rets = zip(*r["curve"], strict=True)
            ax.plot(steps, rets, color="C0" if label.startswith("sac") else "C1", alpha=0.9,
                    label=label if i == 0 else None)
    ax.set_xlabel("env steps" if args.action_repeat == 1 else
                  f"env steps (agent decisions; action repeat {args.action_repeat})")
    ax.set_ylabel("deterministic return (8 episodes)")
    seeds = max(len(runs) for runs in results.values())
    ax.set_title(f"{args.task}: RLPD-style vs SAC ({'x'.join(map(str, args.hidden))} nets, {seeds} seeds, online)",
                 fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="cheetah-run")
    ap.add_argument("--env-steps", type=int, default=20_000)
    ap.add_argument("--eval-every", type=int, default=2_000)
    ap.add_argument("--num-envs", type=int, default=1)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--action-repeat", type=int, default=1)
    ap.add_argument("--episode-length", type=int, default=0, help="0: the task's default")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--learning-starts", type=int, default=2_000)
    ap.add_argument("--sac-utd", type=float, default=1.0)
    ap.add_argument("--rlpd-utd", type=float, default=20.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--only", choices=["sac", "rlpd"], default=None, help="run one learner (e.g. in parallel)")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="combine result files of `--only` runs into one (JSON + plot) instead of running")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or RESULTS / f"rlpd_vs_sac_{args.task}_cpu.json"
    if args.merge:
        import json

        parts = [json.loads(p.read_text()) for p in args.merge]
        results: dict[str, dict] = {}
        for part in parts:  # the same learner may come in several files, one per seed
            for k, v in part["results"].items():
                results.setdefault(k, {}).update(v)
        write_result(out, "rlpd_vs_sac", {**parts[0], "results": results,
                                          "merged_from": [str(p) for p in args.merge]})
        plot(results, args, out.with_suffix(".png"))
        return
    learners = {"sac": args.sac_utd, "rlpd": args.rlpd_utd}
    if args.only:
        learners = {args.only: learners[args.only]}
    results = {f"{name} (UTD {utd:g})": {seed: run(name, args, utd, seed) for seed in args.seeds}
               for name, utd in learners.items()}
    write_result(out, "rlpd_vs_sac", {"task": args.task, "settings": {k: str(v) for k, v in vars(args).items()},
                                      "torch_threads": torch.get_num_threads(), "results": results})
    plot(results, args, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
