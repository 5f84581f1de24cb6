"""Plots of training runs: the learning curve from `metrics.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path


def learning_curve(metrics: str | Path, out: str | Path, task: str | None = None) -> Path:
    """Mean return against env steps (offline runs: the evaluation return against gradient steps), with the
    task's random and reference returns as guides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    offline = any("gradient_steps" in r for r in rows)
    if offline:
        pts = [(r["gradient_steps"], r["eval/return"]) for r in rows if r.get("eval/return") is not None]
    else:
        pts = [(r["env_steps"], r["mean_return"]) for r in rows if r.get("mean_return") is not None]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    if pts:
        label = "evaluation return (deterministic policy)" if offline else "mean of the last 100 episodes"
        ax.plot(*zip(*pts, strict=True), label=label)
    if task is not None:
        from sim.tasks import TASKS

        cls = TASKS.get(task)
        if cls is not None:
            ax.axhline(cls.reference_return, color="gray", ls="--", label=f"reference ({cls.reference_return:.0f})")
            ax.axhline(cls.random_return, color="gray", ls=":", label=f"random ({cls.random_return:.0f})")
    ax.set_xlabel("gradient steps" if offline else "env steps")
    ax.set_ylabel("episode return")
    ax.set_title(task or "learning curve")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out
