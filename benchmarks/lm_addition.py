"""The tiny token-level trainer (`examples.char_lm`): 2-digit addition, a supervised warm-up on 512 problems, then RL
from the exact-answer reward with GRPO and with PPO (token-level GAE and a value head), from the same
`robolearn.core.advantages` and `robolearn.core.losses` that PPO on robots uses.
Greedy accuracy on 512 held-out problems
before and after RL, one process per estimator (one thread each).

    python benchmarks/lm_addition.py --iterations 300     # -> benchmarks/results/lm_addition_cpu.{json,png}
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sim_throughput import machine_info  # noqa: E402
from examples.char_lm.rl import LMConfig, train_addition  # noqa: E402

OUT = Path(__file__).parent / "results"


def run(args: tuple[str, int, int]) -> tuple[str, list[dict]]:
    estimator, iterations, seed = args
    torch.set_num_threads(1)
    cfg = LMConfig(estimator=estimator, iterations=iterations, sft_steps=800, sft_examples=512, lr=3e-4,
                   eval_every=25, seed=seed)
    return estimator, train_addition(cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--estimators", nargs="+", default=["grpo", "gae"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    jobs = [(e, args.iterations, args.seed) for e in args.estimators]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        results = dict(pool.map(run, jobs))
    summary = {e: {"accuracy_before_rl": h[0]["accuracy"], "accuracy_after_rl": h[-1]["accuracy"],
                   "wall_s": h[-1]["wall_s"]} for e, h in results.items()}
    OUT.mkdir(exist_ok=True)
    (OUT / "lm_addition_cpu.json").write_text(json.dumps(
        {"machine": machine_info(), "config": vars(args), "summary": summary, "curves": results}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for e, h in results.items():
        ax.plot([r["iteration"] for r in h], [100 * r["accuracy"] for r in h],
                label={"grpo": "GRPO", "gae": "PPO (GAE, value head)"}.get(e, e))
    ax.set_xlabel("RL iteration (32 prompts x 8 answers)")
    ax.set_ylabel("greedy accuracy on held-out problems (%)")
    ax.set_title("2-digit addition, tiny transformer: after the warm-up, RL")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "lm_addition_cpu.png", dpi=100)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
