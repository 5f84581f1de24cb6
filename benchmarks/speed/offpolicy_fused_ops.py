"""What the off-policy learner's fused and batched ops buy on this machine, one SAC update at a time.

One full SAC update (critic, actor and temperature steps, Polyak averaging) on a fixed minibatch,
timed for the learner as shipped (`eager`, the default), with `compile=True` (each whole update one
traced graph: forward, gradient, Adam step, Polyak), and with one choice of the eager learner swapped
back to the plain way:

- `loop critics`: the N critics as N separate `nn.Linear` stacks called in a Python loop (as
  stable-baselines3 and the REDQ reference code do) instead of one batched-matmul ensemble;
- `foreach Adam` / `single-tensor Adam`: `torch.optim.Adam(foreach=True)` or a per-parameter loop
  instead of `fused=True`;
- `loop Polyak`: a per-parameter `lerp_` loop instead of one `torch._foreach_lerp_`.

Variants run in alternating rounds in one process; the median round counts. Results go to
`benchmarks/results/offpolicy_fused_ops_cpu.json` with machine info.

    python benchmarks/speed/offpolicy_fused_ops.py                # widths 64 / 256 x 2 / 10 critics
    python benchmarks/speed/offpolicy_fused_ops.py hidden=[64] critics=[2] sac.batch_size=128

The learner is robolearn's SAC with `sac`'s settings (`SACConfig`, its defaults unless overridden), but for what
the grid sets per cell: two hidden layers of each `hidden` width for the actor and critics, `critics` critics with
the TD target's min over all of them, and `compile`.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
import robolearn.algos.online.sac as sac_module  # noqa: E402
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402
from robolearn.algos.online.sac import SAC, SACConfig  # noqa: E402

ORIGINAL_POLYAK = sac_module.polyak_update
OBS, ACT = 17, 6  # cheetah-run's observation and action sizes


class LoopQ(nn.Module):
    """N ordinary critics evaluated one after another: the un-batched baseline, same interface as QEnsemble."""

    def __init__(self, in_dim: int, num_critics: int, hidden: int):
        super().__init__()
        self.members = nn.ModuleList(
            nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 1)) for _ in range(num_critics))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, actions], -1)
        return torch.stack([m(x).squeeze(-1) for m in self.members])


def loop_polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters(), strict=True):
            t.lerp_(s, tau)


@dataclasses.dataclass
class Settings:
    """The grid and the learner (`key=value` on the command line)."""

    hidden: list[int] = dataclasses.field(default_factory=lambda: [64, 256])   # widths of the 2 hidden layers
    critics: list[int] = dataclasses.field(default_factory=lambda: [2, 10])    # ensemble sizes
    updates: int = 100              # timed updates per round and variant
    rounds: int = 3                 # alternating rounds; the median counts
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)  # the learner (batch_size, lrs, ...)
    out: str = str(RESULTS / "offpolicy_fused_ops_cpu.json")


def learner(base: SACConfig, hidden: int, critics: int, variant: str) -> SAC:
    cfg = dataclasses.replace(base, actor_hidden=(hidden, hidden), critic_hidden=(hidden, hidden),
                              num_critics=critics, num_min_critics=critics, compile=variant == "compile=True")
    torch.manual_seed(0)
    algo = SAC(OBS, OBS, ACT, cfg)
    if variant == "loop critics":
        algo.critic = LoopQ(OBS + ACT, critics, hidden)
        algo.critic_target = copy.deepcopy(algo.critic).requires_grad_(False)
        algo.critic_opt = torch.optim.Adam(algo.critic.parameters(), lr=cfg.critic_lr, fused=True)
    elif variant.endswith("Adam"):
        flags = {"foreach": True} if variant.startswith("foreach") else {"foreach": False}
        algo.actor_opt = torch.optim.Adam(algo.actor.parameters(), lr=cfg.actor_lr, **flags)
        algo.critic_opt = torch.optim.Adam(algo.critic.parameters(), lr=cfg.critic_lr, **flags)
        algo.alpha_opt = torch.optim.Adam([algo.log_alpha], lr=cfg.temperature_lr, **flags)
    return algo


def timed(algo: SAC, batch: dict[str, Any], updates: int, polyak: Callable) -> float:
    sac_module.polyak_update = polyak
    try:
        gen = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        for _ in range(updates):
            algo.update(batch, gen)
        return updates / (time.perf_counter() - start)
    finally:
        sac_module.polyak_update = ORIGINAL_POLYAK


def measure(hidden: int, critics: int, args: Settings) -> dict[str, Any]:
    size = args.sac.batch_size
    g = torch.Generator().manual_seed(1)
    batch = {"obs": {"policy": torch.randn(size, OBS, generator=g)},
             "next_obs": {"policy": torch.randn(size, OBS, generator=g)},
             "actions": torch.rand(size, ACT, generator=g) * 2 - 1,
             "rewards": torch.randn(size, generator=g), "discount": torch.full((size,), 0.99)}
    variants = ["eager", "compile=True", "loop critics", "foreach Adam", "single-tensor Adam", "loop Polyak"]
    algos = {v: learner(args.sac, hidden, critics, v) for v in variants}
    polyaks = {v: loop_polyak if v == "loop Polyak" else ORIGINAL_POLYAK for v in variants}
    compile_s = {}
    for v in variants:  # warm-up (and compilation)
        start = time.perf_counter()
        timed(algos[v], batch, 20, polyaks[v])
        compile_s[v] = time.perf_counter() - start
    rounds: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            rounds[v].append(timed(algos[v], batch, args.updates, polyaks[v]))
    med = {v: statistics.median(r) for v, r in rounds.items()}
    line = ", ".join(f"{v} {med[v]:.0f}" for v in variants)
    print(f"hidden {hidden}x{hidden}, {critics} critics, batch {size}: updates/s {line}", flush=True)
    return {"hidden": hidden, "num_critics": critics, "batch_size": size, "updates_per_s": med,
            "vs_eager": {v: med[v] / med["eager"] for v in variants}, "warmup_s": compile_s, "rounds": rounds}


def main() -> None:
    args = settings(Settings, __doc__)
    cells = [measure(h, c, args) for h in args.hidden for c in args.critics]
    write_result(args.out, "offpolicy_fused_ops", {"settings": dataclasses.asdict(args),
                                                   "torch_threads": torch.get_num_threads(), "cells": cells})


if __name__ == "__main__":
    main()
