"""Sample efficiency of an RLPD-style learner (10 critics, LayerNorm, high UTD) vs plain SAC, one task.

Both start from the repo's presets (`configs/algo/sac.yaml`, `configs/algo/rlpd.yaml`, online only: no offline
data). `sac` is the plain SAC learner (`SACConfig`; by default the sac preset with learning starting at 2,000
env steps) and the RLPD learner is the same config with only what makes the recipes differ changed, as the rlpd
preset changes it: ensemble size and subset, LayerNorm, actor objective, target entropy and UTD (`rlpd_utd`).
So networks, batch size and learning start are `sac.*` for both, and the env count is shared. Every `eval_every`
env-steps the deterministic policy is evaluated on 8 episodes (seed 1000). Writes the curves as JSON (with
machine info) and a PNG plot.

    python benchmarks/studies/rlpd_vs_sac.py task=cheetah-run env_steps=20000 rlpd_utd=4 \\
        sac.actor_hidden=[128,128] sac.critic_hidden=[128,128]
    python benchmarks/studies/rlpd_vs_sac.py task=pendulum-swingup action_repeat=4 episode_length=250 \\
        env_steps=12000 eval_every=1000 sac.actor_hidden=[64,64] sac.critic_hidden=[64,64] sac.batch_size=128 \\
        sac.learning_starts=1000 rlpd_utd=4
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
import sim  # noqa: E402
from benchmarks.common import RESULTS, episode_returns, settings, task_overrides, write_result  # noqa: E402
from robolearn.algos.online.sac import SAC, SACConfig  # noqa: E402
from robolearn.config import algo_config, compose  # noqa: E402
from robolearn.runners.off_policy import OffPolicyRunner  # noqa: E402


def preset(recipe: str) -> SACConfig:
    """The SAC config of `configs/algo/<recipe>.yaml` (as `robolearn train algo=<recipe>` composes it)."""
    return algo_config(compose("train", [f"algo={recipe}"])["algo"])


@dataclasses.dataclass
class Settings:
    """The task, the two learners and the schedule (`key=value` on the command line)."""

    task: str = "cheetah-run"
    env_steps: int = 20_000
    eval_every: int = 2_000
    num_envs: int = 1
    action_repeat: int = 1
    episode_length: int = 0         # 0: the task's default
    sac: SACConfig = dataclasses.field(default_factory=lambda: dataclasses.replace(
        preset("sac"), learning_starts=2_000))  # plain SAC; its networks, batch, learning start are RLPD's too
    rlpd_utd: float = 20.0          # the RLPD learner's UTD (sac.utd_ratio is plain SAC's)
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    only: str | None = None         # sac | rlpd: run one learner (e.g. in parallel)
    merge: list[str] | None = None  # combine result files of `only=` runs into one (JSON + plot) instead of running
    out: str | None = None          # null: results/rlpd_vs_sac_<task>_cpu.json


def config(recipe: str, args: Settings) -> SACConfig:
    """`args.sac` for "sac"; for "rlpd", `args.sac` with the rlpd preset's differences from the sac preset and
    `rlpd_utd`. Online only (no offline buffer): offline_ratio 0 for both."""
    if recipe == "sac":
        return dataclasses.replace(args.sac, offline_ratio=0.0)
    base, rlpd = preset("sac"), preset(recipe)
    differs = {f.name: getattr(rlpd, f.name) for f in dataclasses.fields(SACConfig)
               if getattr(rlpd, f.name) != getattr(base, f.name)}
    return dataclasses.replace(args.sac, **{**differs, "utd_ratio": args.rlpd_utd, "offline_ratio": 0.0})


def evaluate(act: Any, args: Settings) -> float:
    """Mean return of the deterministic policy `act` over 8 episodes (seed 1000) of the task."""
    return float(episode_returns(act, args.task, 8, 1000, **task_overrides(args.action_repeat,
                                                                            args.episode_length)).mean())


def run(recipe: str, args: Settings, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    env = sim.make(args.task, num_envs=args.num_envs, seed=seed, **task_overrides(args.action_repeat,
                                                                                  args.episode_length))
    cfg = config(recipe, args)
    runner = OffPolicyRunner(env, SAC.for_env(env, cfg), f"/tmp/robolearn-rlpd-vs-sac-{recipe}-{seed}", {},
                             seed=seed, progress=False, steps_per_iteration=args.eval_every // args.num_envs)
    curve, start = [], time.perf_counter()
    for i in range(args.env_steps // args.eval_every):
        runner.learn(i + 1, checkpoint_interval=10**9)
        ret = evaluate(lambda o, r=runner: r.algo.act({"policy": o}, deterministic=True), args)
        curve.append((runner.env_steps, ret))
        print(f"{recipe} seed {seed} {runner.env_steps} {ret:.1f} updates {runner.updates} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    env.close()
    return {"curve": curve, "updates": runner.updates, "wall_s": time.perf_counter() - start,
            "config": {k: v for k, v in vars(cfg).items()}}


def plot(results: dict[str, Any], args: Settings, out: Path) -> None:
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
    nets = "x".join(map(str, args.sac.critic_hidden))
    ax.set_title(f"{args.task}: RLPD-style vs SAC ({nets} nets, {seeds} seeds, online)", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    args = settings(Settings, __doc__)
    if args.only not in (None, "sac", "rlpd"):
        sys.exit(f"only= takes sac or rlpd, not {args.only!r}")
    out = Path(args.out or RESULTS / f"rlpd_vs_sac_{args.task}_cpu.json")
    if args.merge:
        import json

        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        results: dict[str, dict] = {}
        for part in parts:  # the same learner may come in several files, one per seed
            for k, v in part["results"].items():
                results.setdefault(k, {}).update(v)
        write_result(out, "rlpd_vs_sac", {**parts[0], "results": results, "merged_from": list(args.merge)})
        plot(results, args, out.with_suffix(".png"))
        return
    learners = {"sac": args.sac.utd_ratio, "rlpd": args.rlpd_utd}
    if args.only:
        learners = {args.only: learners[args.only]}
    results = {f"{name} (UTD {utd:g})": {seed: run(name, args, seed) for seed in args.seeds}
               for name, utd in learners.items()}
    write_result(out, "rlpd_vs_sac", {"task": args.task,
                                      "settings": dataclasses.asdict(args),
                                      "torch_threads": torch.get_num_threads(), "results": results})
    plot(results, args, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
