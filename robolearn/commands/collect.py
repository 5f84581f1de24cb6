"""`robolearn collect`: an offline dataset from the simulator (`robolearn.collect.generate`), a whole
D4RL-style suite of them (`suite=`, `robolearn.collect.suite`), or the behaviour folder such a suite plays from a
run's policy snapshots (`behaviour=<run dir>`, `robolearn.collect.behaviour`).
"""

from __future__ import annotations

from pathlib import Path

from robolearn.collect.generate import CollectConfig, collect
from robolearn.errors import ConfigError


def cmd_collect(cfg: CollectConfig) -> int:
    """Collect and write the dataset; prints where, its size and its returns."""
    from robolearn.data.formats import save_dataset

    if cfg.suite:
        from robolearn.collect.suite import run_suite

        run_suite(cfg)
        return 0
    if cfg.behaviour:
        from robolearn.collect.behaviour import build_behaviour

        build_behaviour(cfg.behaviour, cfg.out, cfg.medium_score, seed=cfg.seed, expert=cfg.expert)
        return 0
    out = Path(cfg.out or f"data/{cfg.env.name}-{cfg.kind}-v0")  # -v0: a Minari dataset id too
    if out.exists():
        raise ConfigError(f"out={out} exists already; datasets are never overwritten")
    dataset = collect(cfg)
    path = save_dataset(dataset, out, cfg.format)
    m = dataset.metadata
    print(f"wrote {dataset.num_episodes} episodes, {dataset.num_steps} steps ({cfg.format}) to {path} in "
          f"{m['collection_seconds']:.1f} s: return {m['return_mean']:.1f} +- {m['return_std']:.1f}")
    return 0
