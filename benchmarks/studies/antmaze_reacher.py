"""How often a goal reacher snapshot, steered by D4RL's waypoints, reaches the goal of each antmaze layout: the
measure that picks the snapshot the antmaze datasets are collected with (docs/offline-rl.md, the antmaze recipe).

Each snapshot drives `num_envs` ants from the layout's start cell towards its goal cell for `steps` control steps,
through `robolearn.collect.waypoint.waypoint_actor` (the collector's own controller: the reacher sampled, plus
N(0, noise^2)), on the C backend. An ant succeeds when its torso comes within `radius` m of the goal (D4RL's antmaze
success: 0.5 m) at any step. Writes JSON (with machine info) to benchmarks/results/ and prints a table.

    python benchmarks/studies/antmaze_reacher.py snapshots=runs/behaviour/ant-goal-sac/snapshots \\
        "mazes=[antmaze-umaze,antmaze-medium]" every=200000
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
import sim  # noqa: E402
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402
from robolearn.collect.waypoint import waypoint_actor  # noqa: E402
from robolearn.errors import ConfigError  # noqa: E402

#: Control steps per episode: D4RL's antmaze evaluation limits (700 on umaze, 1000 on the others).
STEPS = {"antmaze-umaze": 700, "antmaze-medium": 1000, "antmaze-large": 1000}


@dataclasses.dataclass
class Settings:
    """Which snapshots, where, how many ants (`key=value` on the command line)."""

    snapshots: str = "runs/behaviour/ant-goal-sac/snapshots"  # a folder of step_<N>/ snapshots, or one checkpoint
    mazes: list[str] = dataclasses.field(default_factory=lambda: ["antmaze-umaze"])
    every: int = 100_000   # only snapshots whose env steps are a multiple of this
    since: int = 0         # only snapshots at or after this many env steps
    num_envs: int = 10
    noise: float = 0.0     # the datasets use 0.2 (`robolearn.collect.waypoint.default_noise`)
    radius: float = 0.5
    seed: int = 0
    out: str | None = None  # null: results/antmaze_reacher_cpu.json


def snapshots(args: Settings) -> list[tuple[int, Path]]:
    """(env steps, folder) of the snapshots to measure, oldest first."""
    root = Path(args.snapshots)
    if (root / "config.json").is_file():
        return [(-1, root)]
    found = sorted((int(p.name.split("_")[1]), p) for p in root.glob("step_*") if (p / "config.json").is_file())
    found = [(n, p) for n, p in found if n >= args.since and n % args.every == 0]
    if not found:
        raise ConfigError(f"no snapshots in {root} at multiples of {args.every} env steps from {args.since}")
    return found


def success(reacher: Path, maze: str, args: Settings) -> dict[str, float]:
    """The fraction of ants that reach the goal, and the mean first step at which those did."""
    env = sim.make(maze, num_envs=args.num_envs, backend="mujoco", seed=args.seed, nthread=1)
    act = waypoint_actor(env, args.noise, args.seed, reacher=str(reacher))
    obs = env.get_observations()
    reached = torch.full((args.num_envs,), -1)
    for t in range(STEPS[maze]):
        obs, _, _, _ = env.step(act(obs).clamp(-1, 1))
        xy = obs["policy"][:, 0:4].float()
        near = (xy[:, 0:2] - xy[:, 2:4]).norm(dim=-1) <= args.radius
        reached = torch.where((reached < 0) & near.cpu(), torch.full_like(reached, t + 1), reached)
    ok = reached >= 0
    return {"success": ok.float().mean().item(), "mean_steps": reached[ok].float().mean().item() if ok.any() else None}


def main() -> None:
    args = settings(Settings, __doc__)
    rows, start = [], time.time()
    for steps, folder in snapshots(args):
        for maze in args.mazes:
            row = {"snapshot": str(folder), "env_steps": steps, "maze": maze, **success(folder, maze, args)}
            rows.append(row)
            print(f"{steps:>9} {maze:<16} success {row['success']:.2f}  mean steps {row['mean_steps']}", flush=True)
    write_result(args.out or RESULTS / "antmaze_reacher_cpu.json", "antmaze_reacher",
                 {"settings": dataclasses.asdict(args), "rows": rows, "wall_s": time.time() - start})


if __name__ == "__main__":
    main()
