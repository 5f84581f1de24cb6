"""Is vision what keeps the small VLA from learning an arm task? One task's scripted demos, several policies cloned
from them the same way (flow matching on chunks, same action expert, same steps), each scored on held-out starts:

- `state_flow`: `FlowPolicy` on the task's full state (goal and cube coordinates included): the ceiling of BC;
- `vla_goal`: the VLA given the goal's coordinates beside its proprioception (`state_dim` 21): vision optional;
- `vla_<camera>_<size>`: the VLA from pixels only (proprioception 15), per camera setting and frame size.

    python benchmarks/studies/vla_vision_probe.py task=arm-reach    # -> benchmarks/results/vla_vision_probe_cpu.json
    python benchmarks/studies/vla_vision_probe.py demos=10 vla.steps=200 out=/tmp/probe   # a quick look

`vla` is every VLA's config (`VLAConfig`; here BC for 2,000 steps on 15 proprioception values), its `camera` and
`state_dim` set per entry of `views` (camera[:size[:goal]], cameras tiled by "+"; ":goal" gives the VLA the goal,
`state_dim` 21); the state flow policy is cloned with the same chunk, flow steps and BC steps. `seed` sets the seeds.
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

import sim  # noqa: E402  (first: it picks the headless OpenGL before mujoco loads)
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from robolearn.algos.chunk.vla import VLAConfig  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The task, the demos, the variants and the VLA (`key=value` on the command line)."""

    task: str = "arm-reach"
    demos: int = 50
    views: list[str] = dataclasses.field(default_factory=lambda: ["side:32", "side:32:goal", "front+side:48"])
    #                                 VLA variants: camera[:size[:goal]]; cameras tiled by '+'
    pretrain_random: int = 0        # + random-action episodes' frames for pre-training (train_vla_bc pretrain_views)
    pretrain_random_length: int = 10  # their length in steps
    eval_envs: int = 50
    seed: int = 0
    vla: VLAConfig = dataclasses.field(default_factory=lambda: VLAConfig(steps=2000, state_dim=15))
    #                                 state_dim: the VLA's proprioception, the first N of the policy group (6: joint
    #                                 angles and opening, no velocities; 15: + velocities and grasp point)
    out: str = str(RESULTS / "vla_vision_probe_cpu")  # <out>.json


def main() -> None:
    args = settings(Settings, __doc__)
    torch.set_num_threads(1)
    from robolearn.algos.chunk.chunk_bc import ChunkBCConfig, train_chunk_bc
    from robolearn.algos.chunk.vla import (
        ARM_INSTRUCTIONS,
        VLAEnv,
        camera,
        collect_demos,
        collect_views,
        train_vla_bc,
    )
    from robolearn.runners.flow import evaluate_flow

    words = ARM_INSTRUCTIONS[args.task]
    results: dict = {"machine": machine_info(), "config": dataclasses.asdict(args), "variants": {}}
    vla = dataclasses.replace(args.vla, seed=args.seed)

    def record(name: str, value: dict) -> None:
        results["variants"][name] = value
        print(name, json.dumps(value), flush=True)
        Path(args.out + ".json").write_text(json.dumps(results, indent=1))

    demos: dict[tuple[str, int], object] = {}
    for spec in args.views:
        cam, size, *goal = spec.split(":")
        cam, size = cam.replace("+", ","), int(size)
        if (cam, size) not in demos:
            began = time.perf_counter()
            demos[cam, size] = collect_demos(args.task, args.demos, size, seed=args.seed, num_envs=args.demos,
                                             camera=cam)
            print(f"demos {cam} {size}: {demos[cam, size].num_steps} frames in {time.perf_counter() - began:.0f} s",
                  flush=True)
        data = demos[cam, size]
        if "state_flow" not in results["variants"]:  # the same demos' states, no pixels
            began = time.perf_counter()
            flow, losses = train_chunk_bc(data, ChunkBCConfig(chunk=vla.chunk, num_steps=vla.num_steps,
                                                              steps=vla.steps, seed=args.seed))
            env = sim.make(args.task, num_envs=args.eval_envs, seed=args.seed + 7, nthread=1)
            record("state_flow", {"success": float(evaluate_flow(env, flow)["success"]),
                                  "bc_loss": float(np.mean(losses[-100:])), "bc_s": time.perf_counter() - began})
            env.close()
        cfg = dataclasses.replace(vla, camera=cam, state_dim=21 if goal else vla.state_dim)
        views = None
        if args.pretrain_random and cfg.pretrain_steps:  # the gripper away from the goal, which demos seldom show
            views = {args.task: collect_views(args.task, args.pretrain_random, size, args.seed + 3, cam,
                                              args.pretrain_random_length)}
        began = time.perf_counter()
        policy, losses = train_vla_bc({args.task: data}, cfg, pretrain_views=views)
        bc_s = time.perf_counter() - began
        env = VLAEnv(sim.make(args.task, num_envs=args.eval_envs, seed=args.seed + 7, nthread=1,
                              pixels=camera(size, cam)), policy, words)
        name = f"vla_{cam.replace(',', '+')}_{size}" + ("_goal" if goal else "")
        name += f"_shift{cfg.shift}" if cfg.shift else ""
        name += f"_stem{cfg.stem_stride}" if cfg.stem_stride > 1 else ""
        name += f"_pretrain{cfg.pretrain_steps}" if cfg.pretrain_steps else ""
        name += f"_random{args.pretrain_random}" if views else ""
        name += f"_fine{cfg.fine_keypoints}" if cfg.fine_keypoints else ""
        name += "_frozen" if cfg.freeze_vision else ""
        name += f"_state{cfg.state_dim}" if cfg.state_dim != 15 and not goal else ""
        record(name, {"success": float(evaluate_flow(env, policy)["success"]), "bc_loss": float(np.mean(losses[-100:])),
                      "bc_s": bc_s, "frame": list(policy.image_shape), "state_dim": cfg.state_dim,
                      "demos": args.demos, "steps": cfg.steps})
        env.close()


if __name__ == "__main__":
    main()
