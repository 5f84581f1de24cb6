"""Is vision what keeps the small VLA from learning an arm task? One task's scripted demos, several policies cloned
from them the same way (flow matching on chunks, same action expert, same steps), each scored on held-out starts:

- `state_flow`: `FlowPolicy` on the task's full state (goal and cube coordinates included): the ceiling of BC;
- `vla_goal`: the VLA given the goal's coordinates beside its proprioception (`state_dim` 21): vision optional;
- `vla_<camera>_<size>`: the VLA from pixels only (proprioception 15), per camera setting and frame size.

    python benchmarks/vla_vision_probe.py --task arm-reach          # -> benchmarks/results/vla_vision_probe_cpu.json
    python benchmarks/vla_vision_probe.py --demos 10 --steps 200    # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim  # noqa: E402  (first: it picks the headless OpenGL before mujoco loads)
from benchmarks.sim_throughput import machine_info  # noqa: E402

OUT = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="arm-reach")
    parser.add_argument("--demos", type=int, default=50)
    parser.add_argument("--steps", type=int, default=2000, help="BC steps of every policy")
    parser.add_argument("--views", default="side:32,side:32:goal,front+side:48",
                        help="VLA variants, comma-separated camera[:size[:goal]]; cameras tiled by '+' ")
    parser.add_argument("--shift", type=int, default=0, help="random-shift augmentation of the VLA's frames (pixels)")
    parser.add_argument("--state-dim", type=int, default=15,
                        help="the VLA's proprioception: the first N of the policy group (6: joint angles and opening, "
                             "no velocities; 15: + velocities and grasp point)")
    parser.add_argument("--pretrain-steps", type=int, default=0, help="vision pre-training on privileged state")
    parser.add_argument("--freeze-vision", action="store_true", help="keep the encoder fixed during BC")
    parser.add_argument("--stem-stride", type=int, default=1, help="the VLA CNN's first stride")
    parser.add_argument("--fine-keypoints", type=int, default=0, help="pointing maps on the CNN stem (VLAConfig)")
    parser.add_argument("--pretrain-random", type=int, default=0,
                        help="+ random-action episodes' frames for pre-training (train_vla_bc pretrain_views)")
    parser.add_argument("--pretrain-random-length", type=int, default=10, help="their length in steps")
    parser.add_argument("--eval-envs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(OUT / "vla_vision_probe_cpu"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    from robolearn.algos.chunk.chunk_bc import ChunkBCConfig, train_chunk_bc
    from robolearn.algos.chunk.vla import (
        ARM_INSTRUCTIONS,
        VLAConfig,
        VLAEnv,
        camera,
        collect_demos,
        collect_views,
        train_vla_bc,
    )
    from robolearn.runners.flow import evaluate_flow

    words = ARM_INSTRUCTIONS[args.task]
    results: dict = {"machine": machine_info(), "config": vars(args), "variants": {}}

    def record(name: str, value: dict) -> None:
        results["variants"][name] = value
        print(name, json.dumps(value), flush=True)
        Path(args.out + ".json").write_text(json.dumps(results, indent=1))

    demos: dict[tuple[str, int], object] = {}
    for spec in args.views.split(","):
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
            flow, losses = train_chunk_bc(data, ChunkBCConfig(chunk=5, num_steps=4, steps=args.steps, seed=args.seed))
            env = sim.make(args.task, num_envs=args.eval_envs, seed=args.seed + 7, nthread=1)
            record("state_flow", {"success": float(evaluate_flow(env, flow)["success"]),
                                  "bc_loss": float(np.mean(losses[-100:])), "bc_s": time.perf_counter() - began})
            env.close()
        cfg = VLAConfig(steps=args.steps, seed=args.seed, camera=cam, state_dim=21 if goal else args.state_dim,
                        shift=args.shift, stem_stride=args.stem_stride, pretrain_steps=args.pretrain_steps,
                        freeze_vision=args.freeze_vision, fine_keypoints=args.fine_keypoints)
        views = None
        if args.pretrain_random and args.pretrain_steps:  # the gripper away from the goal, which demos seldom show
            views = {args.task: collect_views(args.task, args.pretrain_random, size, args.seed + 3, cam,
                                              args.pretrain_random_length)}
        began = time.perf_counter()
        policy, losses = train_vla_bc({args.task: data}, cfg, pretrain_views=views)
        bc_s = time.perf_counter() - began
        env = VLAEnv(sim.make(args.task, num_envs=args.eval_envs, seed=args.seed + 7, nthread=1,
                              pixels=camera(size, cam)), policy, words)
        name = f"vla_{cam.replace(',', '+')}_{size}" + ("_goal" if goal else "")
        name += f"_shift{args.shift}" if args.shift else ""
        name += f"_stem{args.stem_stride}" if args.stem_stride > 1 else ""
        name += f"_pretrain{args.pretrain_steps}" if args.pretrain_steps else ""
        name += f"_random{args.pretrain_random}" if views else ""
        name += f"_fine{args.fine_keypoints}" if args.fine_keypoints else ""
        name += "_frozen" if args.freeze_vision else ""
        name += f"_state{args.state_dim}" if args.state_dim != 15 and not goal else ""
        record(name, {"success": float(evaluate_flow(env, policy)["success"]), "bc_loss": float(np.mean(losses[-100:])),
                      "bc_s": bc_s, "frame": list(policy.image_shape), "state_dim": cfg.state_dim,
                      "demos": args.demos, "steps": args.steps})
        env.close()


if __name__ == "__main__":
    main()
