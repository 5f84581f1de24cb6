"""The tiny token-level trainer (`examples.char_lm`): 2-digit addition, a supervised warm-up on 512 problems, then RL
from the exact-answer reward with GRPO and with PPO (token-level GAE and a value head), from the same
`robolearn.core.advantages` and `robolearn.core.losses` that PPO on robots uses.
Greedy accuracy on 512 held-out problems
before and after RL, one process per estimator (one thread each).

    python benchmarks/studies/lm_addition.py lm.iterations=300   # -> benchmarks/results/lm_addition_cpu.{json,png}
    python benchmarks/studies/lm_addition.py estimators=[grpo] lm.iterations=10 lm.sft_steps=50 out=/tmp/lm  # quick

`lm` is the trainer's `LMConfig` (examples.char_lm.rl), here with a longer warm-up on more problems, a lower lr and
fewer evaluations than its defaults; one run per estimator in `estimators` (each sets `lm.estimator`).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from examples.char_lm.rl import LMConfig, train_addition  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The estimators compared and the trainer's settings (`key=value` on the command line)."""

    estimators: list[str] = dataclasses.field(default_factory=lambda: ["grpo", "gae"])
    lm: LMConfig = dataclasses.field(default_factory=lambda: LMConfig(
        iterations=300, sft_steps=800, sft_examples=512, lr=3e-4, eval_every=25))
    out: str = str(RESULTS / "lm_addition_cpu")  # <out>.json and <out>.png


def run(cfg: LMConfig) -> tuple[str, list[dict]]:
    """One estimator's warm-up and RL (its own process, one thread): its evaluation history."""
    torch.set_num_threads(1)
    return cfg.estimator, train_addition(cfg)


def main() -> None:
    args = settings(Settings, __doc__)
    jobs = [dataclasses.replace(args.lm, estimator=e) for e in args.estimators]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        results = dict(pool.map(run, jobs))
    summary = {e: {"accuracy_before_rl": h[0]["accuracy"], "accuracy_after_rl": h[-1]["accuracy"],
                   "wall_s": h[-1]["wall_s"]} for e, h in results.items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in dataclasses.asdict(args).items() if k != "out"}
    out.with_name(out.name + ".json").write_text(json.dumps(
        {"machine": machine_info(), "config": config, "summary": summary, "curves": results}, indent=2))
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
    fig.savefig(out.with_name(out.name + ".png"), dpi=100)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
