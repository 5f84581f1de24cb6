"""How precisely do arm-reach's camera frames place the goal? A baseline without learning: the green ball's centroid
in each view (a colour threshold) and a quadratic least-squares fit from the centroids to the goal's coordinates.

What a vision encoder could reach from the same frames: 64x64 views, front, side and both, frames of random-action
episodes (the gripper anywhere), fitted on 80% of the frames where the ball shows and scored on the rest.

    python benchmarks/studies/vla_goal_centroid.py      # -> benchmarks/results/vla_goal_centroid_cpu.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`

import sim  # noqa: E402,F401  (first: it picks the headless OpenGL before mujoco loads)
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from benchmarks.studies.vla_goal_source_probe import GOAL  # noqa: E402
from robolearn.algos.chunk.vla import collect_views  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The frames and where the fits go (`key=value` on the command line)."""

    episodes: int = 400             # random-action episodes of arm-reach
    length: int = 10                # steps per random-action episode
    size: int = 64
    seed: int = 3
    out: str = str(RESULTS / "vla_goal_centroid_cpu.json")


def centroids(frames: np.ndarray, views: int) -> np.ndarray:
    """[N, views, 3]: per view the green ball's centroid (x, y, as fractions of the view) and sqrt(its pixel count)
    / size (0 where it is hidden)."""
    f = frames.astype(np.int32)
    green = (f[..., 1] > 1.5 * f[..., 0] + 20) & (f[..., 1] > 1.5 * f[..., 2] + 20)
    size = frames.shape[1]
    ys, xs = np.mgrid[0:size, 0:size]
    out = []
    for k in range(views):
        g = green[:, :, k * size:(k + 1) * size]
        n = g.sum((1, 2)).astype(np.float64)
        out.append(np.stack([(g * xs).sum((1, 2)) / np.maximum(n, 1) / size,
                             (g * ys).sum((1, 2)) / np.maximum(n, 1) / size, np.sqrt(n) / size], -1))
    return np.stack(out, 1)


def quadratic(x: np.ndarray) -> np.ndarray:
    """[N, d] -> [N, 1 + d + d(d+1)/2]: a constant, the features and their pairwise products."""
    d = x.shape[1]
    return np.concatenate([np.ones((len(x), 1)), x] + [x[:, i:i + 1] * x[:, i:] for i in range(d)], 1)


def main() -> None:
    args = settings(Settings, __doc__)
    torch.set_num_threads(1)
    began = time.perf_counter()
    data = collect_views("arm-reach", args.episodes, args.size, args.seed, "front,side", args.length)
    index = np.asarray(data.obs_index)
    goals = np.asarray(data.observations["policy"])[index][:, GOAL]
    feats = centroids(np.asarray(data.observations["pixels"])[index], 2)
    result = {"machine": machine_info(), "config": dataclasses.asdict(args), "frames": len(goals),
              "collect_s": time.perf_counter() - began, "goal_std_cm": (goals.std(0) * 100).tolist(),
              "hidden_fraction": {"front": float(np.mean(feats[:, 0, 2] == 0)),
                                  "side": float(np.mean(feats[:, 1, 2] == 0))}, "fits": {}}
    seen = np.where((feats[:, 0, 2] > 0) & (feats[:, 1, 2] > 0))[0]
    train, test = seen[:int(0.8 * len(seen))], seen[int(0.8 * len(seen)):]
    for name, views in (("front", [0]), ("side", [1]), ("front+side", [0, 1])):
        x = quadratic(feats[:, views].reshape(len(feats), -1))
        weights, *_ = np.linalg.lstsq(x[train], goals[train], rcond=None)
        diff = x[test] @ weights - goals[test]
        error = np.linalg.norm(diff, axis=1)
        result["fits"][name] = {"heldout_median_cm": float(np.median(error) * 100),
                                "heldout_mean_cm": float(error.mean() * 100),
                                "heldout_median_abs_xyz_cm": (np.median(np.abs(diff), 0) * 100).tolist()}
        print(name, json.dumps(result["fits"][name]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
