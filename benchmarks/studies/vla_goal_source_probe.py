"""Where does the goal get lost between the VLA's vision and its actions? The state flow policy (`FlowPolicy`, the
BC that reaches 100% on arm-reach) cloned from the same scripted demos with the goal given in different ways, each
scored on held-out starts:

- `full`: proprioception + the goal + goal - grasp (the task's whole "policy" group, 21 values);
- `goal`: proprioception + the goal (18): the policy must subtract the grasp point itself, as a VLA must;
- `goal_noise<cm>`: the goal off by a fixed random offset per episode (N(0, sigma^2) per axis), in demos and
  evaluation alike: how precise must a goal estimate be?
- `goal_head`: the goal as estimated from the camera frame by the VLA's own encoder (`VLAPolicy.see` + a linear
  head, fitted by regression on the demo frames; `vla_goal_regression.fit_goal_regressor`), every step, in demos
  and evaluation: the VLA's feature path with BC's part replaced by a 3-value bottleneck. `head_random=N` adds
  frames of random-action episodes (the gripper away from the goal); `head_keypoints=W` also trains keypoint
  maps to point at the gripper and the goal in every view (`robolearn.algos.chunk.vla.point_pixels`), as the VLA's
  pre-training does.

If `goal_head` succeeds where the VLA from pixels does not, the encoder sees well enough and the loss of the goal
is in how BC reads the features; if it fails like `goal_noise` at the head's error, the encoder is not precise
enough.

    python benchmarks/studies/vla_goal_source_probe.py     # -> benchmarks/results/vla_goal_source_probe_cpu.json
    python benchmarks/studies/vla_goal_source_probe.py variants=[full,goal_head] head_random=300 camera=front,side

Every policy is cloned with `bc` (`ChunkBCConfig`: chunks of 5, 4 flow steps, 2,000 steps); `seed` sets its seed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`

import sim  # noqa: E402  (first: it picks the headless OpenGL before mujoco loads)
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from benchmarks.studies.vla_goal_regression import fit_goal_regressor  # noqa: E402
from robolearn.algos.chunk.chunk_bc import ChunkBCConfig  # noqa: E402

PROPRIO, GRASP, GOAL = slice(0, 15), slice(12, 15), slice(15, 18)  # arm-reach's "policy" group (sim/tasks/arm.py)

#: A view: (policy values [N, 21], frames [N, H, W, 3] uint8, per-row goal offsets [N, 3]) -> the policy's input.
View = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class ViewEnv:
    """`env` with its "policy" group replaced by `view` of it (and of the frame); one goal offset per env, drawn at
    construction (evaluation plays one episode per env)."""

    def __init__(self, env: Any, view: View, offsets: torch.Tensor):
        self.env, self.view, self.offsets = env, view, offsets
        self.num_envs, self.num_actions = env.num_envs, env.num_actions
        self.max_episode_length, self.device, self.task = env.max_episode_length, env.device, env.task

    def _view(self, obs: Any) -> TensorDict:
        groups = {k: v for k, v in obs.items() if k != "pixels"}
        groups["policy"] = self.view(obs["policy"], obs["pixels"], self.offsets)
        return TensorDict(groups, batch_size=[self.num_envs])

    def reset(self, seed: int | None = None, group_size: int = 1) -> TensorDict:
        return self._view(self.env.reset(seed=seed, group_size=group_size))

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs, rewards, dones, extras = self.env.step(actions)
        view = self._view(obs)  # final_obs is read only where an episode ended: view it (run the estimator) then only
        final = self._view(extras["final_obs"]) if bool(dones.any()) else view
        return view, rewards, dones, {**extras, "final_obs": final}

    def close(self) -> None:
        self.env.close()


def views(predict: Callable[[torch.Tensor], torch.Tensor], noises_cm: list[float],
          errors: list[torch.Tensor]) -> dict[str, View]:
    """Every variant's view of (policy values, frames, offsets); the head's views append their estimate's error
    (metres, per row) to `errors`."""

    def estimate(p: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        goal = predict(f)
        errors.append((goal - p[:, GOAL]).norm(dim=-1))
        return goal

    out: dict[str, View] = {
        "full": lambda p, f, o: p[:, :21],
        "goal": lambda p, f, o: torch.cat([p[:, PROPRIO], p[:, GOAL]], -1),
        "goal_head": lambda p, f, o: torch.cat([p[:, PROPRIO], estimate(p, f)], -1),
        "goal_head_offset": lambda p, f, o: torch.cat([p[:, PROPRIO], g := estimate(p, f), g - p[:, GRASP]], -1),
    }
    for cm in noises_cm:
        out[f"goal_noise{cm:g}cm"] = lambda p, f, o, s=cm / 100: torch.cat([p[:, PROPRIO], p[:, GOAL] + s * o], -1)
    return out


@dataclasses.dataclass
class Settings:
    """The demos, the goal estimator, the variants (`key=value` on the command line)."""

    demos: int = 50
    camera: str = "front"           # camera(s): "front,side" tiles two views
    size: int = 64
    stem_stride: int = 2            # the estimator CNN's first stride
    head_steps: int = 1500          # regression steps of the goal estimator
    head_demos: int = 0             # the estimator's own training episodes (one goal each; 0: the BC demos)
    head_demo_noise: float = 0.0    # action noise of the head_demos episodes (the gripper hovering around the goal)
    head_random: int = 0            # + episodes of uniform random actions for the estimator (the gripper away from
    #                                 the goal)
    head_random_length: int = 0     # their length in steps (0: the task's)
    head_keypoints: float = 0.0     # weight of keypoint supervision for the estimator (gripper and goal in every
    #                                 view; robolearn.algos.chunk.vla.point_pixels); 0: regression only
    head_lr: float = 3e-4
    head_fine: int = 0              # keypoint maps on the CNN stem's maps (VLAPolicy fine_keypoints; they take the
    #                                 supervision); 0: none
    noise_cm: list[float] = dataclasses.field(default_factory=lambda: [1.0, 3.0, 5.0])  # per-episode goal offsets
    variants: list[str] = dataclasses.field(default_factory=lambda: [
        "full", "goal", "goal_noise", "goal_head", "goal_head_offset"])
    eval_envs: int = 50
    seed: int = 0
    bc: ChunkBCConfig = dataclasses.field(default_factory=lambda: ChunkBCConfig(chunk=5, num_steps=4, steps=2000))
    out: str = str(RESULTS / "vla_goal_source_probe_cpu")  # <out>.json


def main() -> None:
    args = settings(Settings, __doc__)
    torch.set_num_threads(1)
    from robolearn.algos.chunk.chunk_bc import train_chunk_bc
    from robolearn.algos.chunk.vla import camera, collect_demos, collect_views, point_pixels
    from robolearn.runners.flow import evaluate_flow

    results: dict = {"machine": machine_info(), "config": dataclasses.asdict(args), "variants": {}}
    began = time.perf_counter()
    data = collect_demos("arm-reach", args.demos, args.size, seed=args.seed, num_envs=args.demos, camera=args.camera)
    held = collect_demos("arm-reach", 10, args.size, seed=args.seed + 1, num_envs=10, camera=args.camera)
    print(f"demos: {data.num_steps} frames in {time.perf_counter() - began:.0f} s", flush=True)

    def rows(d: Any) -> tuple[torch.Tensor, torch.Tensor]:
        index = np.asarray(d.obs_index)
        return (torch.as_tensor(np.asarray(d.observations["policy"])[index], dtype=torch.float32),
                torch.as_tensor(np.asarray(d.observations["pixels"])[index]))

    policy_rows, frames = rows(data)
    wanted = list(args.variants)
    predict: Callable[[torch.Tensor], torch.Tensor] = lambda f: torch.full((len(f), 3), float("nan"))  # noqa: E731
    if any(v.startswith("goal_head") for v in wanted):
        began = time.perf_counter()
        held_policy, held_frames = rows(held)
        head_policy, head_frames = policy_rows, frames
        if args.head_demos:  # more goals than the BC demos have (seeded apart from them and from the held-out ones)
            head_policy, head_frames = rows(collect_demos("arm-reach", args.head_demos, args.size, seed=args.seed + 2,
                                                          num_envs=100, camera=args.camera,
                                                          noise=args.head_demo_noise))
        if args.head_random:  # frames where the gripper is not at the goal, which scripted demos seldom show
            random_policy, random_frames = rows(collect_views("arm-reach", args.head_random, args.size, args.seed + 3,
                                                              args.camera, args.head_random_length))
            head_policy, head_frames = torch.cat([head_policy, random_policy]), torch.cat([head_frames, random_frames])
        points = held_points = None
        if args.head_keypoints:
            points = point_pixels("arm-reach", args.camera, args.size, head_policy)
            held_points = point_pixels("arm-reach", args.camera, args.size, held_policy)
        test = (held_frames, held_policy[:, GOAL]) + ((held_points,) if held_points is not None else ())
        predict, curve = fit_goal_regressor(head_frames, head_policy[:, GOAL], args.head_steps, args.stem_stride,
                                            args.seed, test, points=points, point_weight=args.head_keypoints,
                                            lr=args.head_lr, fine_keypoints=args.head_fine,
                                            camera=args.camera)
        results["goal_head"] = {"curve": curve, "fit_s": time.perf_counter() - began, "frames": len(head_frames)}
    generator = torch.Generator().manual_seed(args.seed + 3)
    episode_offsets = torch.randn(data.num_episodes, 3, generator=generator)
    row_offsets = episode_offsets.repeat_interleave(torch.as_tensor(data.lengths), 0)
    eval_offsets = torch.randn(args.eval_envs, 3, generator=generator)
    errors: list[torch.Tensor] = []
    all_views = views(predict, list(args.noise_cm), errors)
    for name, view in all_views.items():
        if not any(name == v or (v == "goal_noise" and name.startswith("goal_noise")) for v in wanted):
            continue
        began = time.perf_counter()
        with torch.no_grad():
            values = torch.cat([view(p, f, o) for p, f, o in zip(policy_rows.split(1024), frames.split(1024),
                                                                 row_offsets.split(1024), strict=True)])
        # the per-step values sit on the obs rows (an episode stores T + 1; the extra row is never an input)
        obs = np.zeros((len(data.observations["policy"]), values.shape[1]), np.float32)
        obs[np.asarray(data.obs_index)] = values.numpy()
        probe = dataclasses.replace(data, observations={**data.observations, "probe": obs}, check_values=False)
        flow, losses = train_chunk_bc(probe, dataclasses.replace(args.bc, seed=args.seed), group="probe")
        env = ViewEnv(sim.make("arm-reach", num_envs=args.eval_envs, seed=args.seed + 7, nthread=1,
                               pixels=camera(args.size, args.camera)), view, eval_offsets)
        errors.clear()
        results["variants"][name] = {"success": float(evaluate_flow(env, flow)["success"]),
                                     "bc_loss": float(np.mean(losses[-100:])), "inputs": int(values.shape[1]),
                                     "wall_s": time.perf_counter() - began}
        if errors:  # the estimate's error along the policy's own evaluation episodes (closed loop)
            closed = torch.cat(errors)
            results["variants"][name].update(closed_loop_median_m=closed.median().item(),
                                             closed_loop_mean_m=closed.mean().item())
        env.close()
        print(name, json.dumps(results["variants"][name]), flush=True)
        Path(args.out + ".json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
