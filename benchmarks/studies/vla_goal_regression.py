"""Can the small VLA's vision encoder see the goal? The VLA's CNN + spatial softmax (`VLAPolicy.vision`), trained by
plain regression onto the arm-reach goal's coordinates from the scripted demos' frames, scored on frames of other
episodes: the held-out error, in metres, bounds how well any policy on these features can place the gripper
(arm-reach succeeds within 5 cm). Cheaper than BC, and it separates "the pixels don't show it" from "BC does
not teach it".

    python benchmarks/studies/vla_goal_regression.py size=64 camera=front stem_stride=2
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`

import sim  # noqa: E402, F401  (first: it picks the headless OpenGL before mujoco loads)
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402

GOAL = slice(15, 18)  # the goal's coordinates in arm-reach's "policy" group (after the 15 proprioception values)


def frames_and_goals(episodes: int, size: int, camera: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    from robolearn.algos.chunk.vla import collect_demos

    data = collect_demos("arm-reach", episodes, size, seed=seed, num_envs=episodes, camera=camera)
    index = np.asarray(data.obs_index)
    frames = torch.as_tensor(np.asarray(data.observations["pixels"])[index])
    return frames, torch.as_tensor(np.asarray(data.observations["policy"])[index][:, GOAL], dtype=torch.float32)


def fit_goal_regressor(frames: torch.Tensor, goals: torch.Tensor, steps: int, stem_stride: int = 1, seed: int = 0,
                       test: tuple[torch.Tensor, ...] | None = None, every: int = 300,
                       points: torch.Tensor | None = None, point_weight: float = 1.0, lr: float = 3e-4,
                       fine_keypoints: int = 0, camera: str | None = None,
                       ) -> tuple[Callable[[torch.Tensor], torch.Tensor], list[dict]]:
    """The VLA's encoder (`VLAPolicy.see`) + a linear head, fitted by regression of `goals` [N, 3] on `frames`
    [N, H, W, 3] (uint8); returns `predict` (frames -> goals, metres) and a curve of the held-out error on `test`
    (frames, goals[, points]).

    `points` [N, K, 2]: pixel positions (`robolearn.algos.chunk.vla.point_pixels`) that the first K keypoint
    maps learn to
    point at, by cross-entropy of each map's spatial softmax against a Gaussian around its point
    (`VLAPolicy.keypoint_loss`), `point_weight` times the regression loss beside it: the dense signal of a
    pretrained detector, where the regression alone reaches a keypoint only through the linear head."""
    from policies.vla import VLAPolicy

    mean, std = goals.mean(0), goals.std(0)
    torch.manual_seed(seed)
    policy = VLAPolicy(tuple(frames.shape[1:]), 15, 6, stem_stride=stem_stride, fine_keypoints=fine_keypoints,
                       camera=camera)  # (its views: fine keypoint k looks in view k mod views)
    head = torch.nn.Linear(policy.vision_proj.out_features, 3)
    params = [*policy.vision_parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    softmax = policy.pointing

    def encode(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        maps, features = policy.encode(batch.permute(0, 3, 1, 2).float() / 255.0)
        return maps, head(torch.nn.functional.silu(features)) * std + mean

    def predict(batch: torch.Tensor) -> torch.Tensor:
        return encode(batch)[1]

    def point_error(maps: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Each supervised keypoint's distance to its target, in pixels of the frame."""
        k = target.shape[1]
        h_img, w_img, _ = policy.image_shape
        scale = torch.tensor([w_img, h_img]) / 2 * (torch.tensor(maps.shape[-1:-3:-1]) - 1) / torch.tensor(
            maps.shape[-1:-3:-1])
        keys = softmax(maps[:, :k]).view(len(maps), 3, k)[:, :2].transpose(1, 2)  # [B, k, 2]
        return ((keys - policy.pixel_to_keypoint(target, maps.shape[-2:])) * scale).norm(dim=-1)

    curve, began = [], time.perf_counter()
    for step in range(1, steps + 1):
        i = torch.randint(0, len(frames), (256,), generator=generator)
        maps, guess = encode(frames[i])
        loss = (((guess - goals[i]) / std) ** 2).mean()
        if points is not None:
            loss = loss + point_weight * policy.keypoint_loss(maps, points[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if test is not None and step % every == 0:
            with torch.no_grad():
                diffs, pixel_errors = [], []
                for j in range(0, len(test[0]), 512):
                    maps, guess = encode(test[0][j:j + 512])
                    diffs.append(guess - test[1][j:j + 512])
                    if len(test) > 2:
                        pixel_errors.append(point_error(maps, test[2][j:j + 512]))
            diff = torch.cat(diffs)
            error = diff.norm(dim=-1)
            curve.append({"step": step, "train_loss": loss.item(), "heldout_median_m": error.median().item(),
                          "heldout_mean_m": error.mean().item(),
                          "heldout_median_abs_xyz_m": diff.abs().median(0).values.tolist(),
                          "wall_s": time.perf_counter() - began})
            if pixel_errors:
                curve[-1]["heldout_keypoint_median_px"] = torch.cat(pixel_errors).median(0).values.tolist()
            print(curve[-1], flush=True)

    def frozen(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return predict(batch)

    return frozen, curve


@dataclasses.dataclass
class Settings:
    """The frames and the regression (`key=value` on the command line)."""

    size: int = 32                  # camera frames of size x size (per view)
    camera: str = "side"            # camera(s): "front,side" tiles two views
    stem_stride: int = 1            # the CNN's first stride (as VLAConfig.stem_stride)
    demos: int = 50                 # training episodes (one goal each)
    steps: int = 1500               # regression steps
    seed: int = 0
    out: str | None = None          # null: results/vla_goal_regression_<camera><size>_stem<stride>_cpu.json


def main() -> None:
    args = settings(Settings, __doc__)
    torch.set_num_threads(1)
    frames, goals = frames_and_goals(args.demos, args.size, args.camera, args.seed)
    test = frames_and_goals(10, args.size, args.camera, args.seed + 1)
    _, curve = fit_goal_regressor(frames, goals, args.steps, args.stem_stride, args.seed, test)
    name = f"vla_goal_regression_{args.camera.replace(',', '+')}{args.size}_stem{args.stem_stride}_cpu"
    config = {k: v for k, v in dataclasses.asdict(args).items() if k != "out"}
    result = {"machine": machine_info(), "config": config, "frames": list(frames.shape[1:]), "curve": curve}
    Path(args.out or RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
