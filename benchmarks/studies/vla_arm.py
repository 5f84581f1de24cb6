"""The small VLA on the arm tasks (CPU): pixels demos of the scripted controllers of arm-reach, arm-push and
arm-pick-place, one VLA cloned on all three (told apart only by the instruction), its success per task from the
camera, then Flow-Noise PPO fine-tuning on one task through the same `finetune_flow` as the state flow policy;
and the speed of a VLA rollout and update against the state flow policy's on the same envs.

    python benchmarks/studies/vla_arm.py                   # -> benchmarks/results/vla_arm_cpu.{json,png}
    python benchmarks/studies/vla_arm.py demos=10 vla.steps=500 rl.iterations=2 out=/tmp/vla   # a quick look
    python benchmarks/studies/vla_arm.py tasks=[arm-reach] save=runs/vla-reach-bc ...   # BC on one task, kept
    python benchmarks/studies/vla_arm.py load=runs/vla-reach-bc rl.freeze_vision=true   # PPO again from that BC

`vla` is the VLA's shape and behaviour cloning (`VLAConfig`; `vla.camera` is the demos' and the envs' camera,
"front,side" tiles two views) and `rl` the Flow-Noise PPO fine-tuning (`FlowRLConfig`: here gamma 0.95, entropy
0.005, 3 critic warm-up iterations, actor lr 1e-4, 30 iterations); `seed` sets both configs' seeds.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`

import sim  # noqa: E402  (first: it picks the headless OpenGL before mujoco loads)
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from robolearn.algos.chunk.flow_rl import FlowRLConfig  # noqa: E402
from robolearn.algos.chunk.vla import VLAConfig  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The demos, the VLA, the fine-tuning (`key=value` on the command line)."""

    demos: int = 50                 # episodes per task
    size: int = 32                  # camera frames of size x size (per view)
    pretrain_random: int = 0        # + random-action episodes' frames per task for pre-training (pretrain_views)
    pretrain_random_length: int = 10  # their length in steps
    tasks: list[str] = dataclasses.field(default_factory=lambda: ["arm-reach", "arm-push", "arm-pick-place"])
    #                                 the tasks cloned
    save: str | None = None         # write the BC policy there (a checkpoint)
    load: str | None = None         # skip collection and BC: fine-tune this BC checkpoint
    task: str = "arm-reach"         # the task fine-tuned by Flow-Noise PPO
    num_envs: int = 32
    eval_envs: int = 50
    seed: int = 0
    vla: VLAConfig = dataclasses.field(default_factory=lambda: VLAConfig(steps=6000, camera="side"))
    rl: FlowRLConfig = dataclasses.field(default_factory=lambda: FlowRLConfig(
        mode="noise", iterations=30, actor_lr=1e-4, gamma=0.95, entropy_coef=0.005, critic_warmup=3, eval_every=5))
    out: str = str(RESULTS / "vla_arm_cpu")  # <out>.json and <out>.png


def success(policy, task: str, args: Settings, instruction: str) -> float:
    """Success rate of the ODE sampler over `eval_envs` held-out starts of `task` under `instruction`."""
    from robolearn.algos.chunk.vla import VLAEnv, camera
    from robolearn.runners.flow import evaluate_flow

    env = VLAEnv(sim.make(task, num_envs=args.eval_envs, seed=args.seed + 7, nthread=1,
                          pixels=camera(args.size, args.vla.camera)), policy, instruction)
    try:
        return float(evaluate_flow(env, policy)["success"])
    finally:
        env.close()


def speed(policy, args: Settings) -> dict:
    """Env-steps/s of a Flow-Noise rollout and PPO minibatch steps/s: the VLA (frames rendered every step) vs the
    state flow policy of the same action expert, same task and envs, one thread."""
    from policies.flow import FlowPolicy
    from robolearn.algos.chunk.flow_rl import FlowRL
    from robolearn.algos.chunk.vla import ARM_INSTRUCTIONS, VLAEnv, camera
    from robolearn.runners.flow import collect_chunks

    out = {}
    cfg = FlowRLConfig(mode="noise")
    for name in ("vla", "state_flow"):
        env = sim.make(args.task, num_envs=args.num_envs, seed=0, nthread=1,
                       pixels=camera(args.size, args.vla.camera) if name == "vla" else None)
        if name == "vla":
            env, net = VLAEnv(env, policy, ARM_INSTRUCTIONS[args.task]), policy
        else:
            net = FlowPolicy(env.observation_shapes["policy"][0], env.num_actions, policy.chunk,
                             tuple(policy.config["hidden"]), policy.num_steps, noise_head=True)
        learner = FlowRL(net, env.observation_shapes["critic"][0], cfg)
        g = torch.Generator().manual_seed(0)
        obs = env.reset(seed=0)
        decisions = 10
        began = time.perf_counter()
        ro, obs = collect_chunks(env, net, learner.critic, obs, decisions, "noise", g)
        rollout_s = time.perf_counter() - began
        began = time.perf_counter()
        learner.update(ro, obs, train_actor=True, generator=g)
        update_s = time.perf_counter() - began
        out[name] = {"env_steps_per_s": decisions * net.chunk * env.num_envs / rollout_s,
                     "updates_per_s": cfg.epochs * cfg.minibatches / update_s}
        env.close()
    out["ratio_env_steps_vla_to_state"] = out["vla"]["env_steps_per_s"] / out["state_flow"]["env_steps_per_s"]
    out["ratio_updates_vla_to_state"] = out["vla"]["updates_per_s"] / out["state_flow"]["updates_per_s"]
    return out


def behaviour_cloning(args: Settings, tasks: dict[str, str]) -> dict:
    """Pixels demos of `tasks` (and random-action views for pre-training), then `train_vla_bc`: the policy and
    what it took."""
    from robolearn.algos.chunk.vla import collect_demos, collect_views, train_vla_bc

    cam = args.vla.camera
    began = time.perf_counter()
    data = {task: collect_demos(task, args.demos, args.size, seed=args.seed, num_envs=args.demos, camera=cam)
            for task in tasks}
    views = None
    if args.pretrain_random and args.vla.pretrain_steps:  # the gripper away from the goal and cube
        views = {task: collect_views(task, args.pretrain_random, args.size, args.seed + 3, cam,
                                     args.pretrain_random_length) for task in tasks}
    collect_s = time.perf_counter() - began
    began = time.perf_counter()
    cfg = dataclasses.replace(args.vla, seed=args.seed)
    policy, losses = train_vla_bc(data, cfg, instructions=tasks, pretrain_views=views)
    return {"policy": policy, "demos_per_task": args.demos, "frames": sum(d.num_steps for d in data.values()),
            "collect_s": collect_s, "bc_steps": cfg.steps, "bc_s": time.perf_counter() - began,
            "bc_loss": sum(losses[-100:]) / 100, "parameters": sum(p.numel() for p in policy.parameters())}


def main() -> None:
    args = settings(Settings, __doc__)
    torch.set_num_threads(1)
    from robolearn.algos.chunk.vla import ARM_INSTRUCTIONS, VLAEnv, camera
    from robolearn.checkpoints.policy import load_policy, save_chunk_policy
    from robolearn.runners.flow import finetune_flow

    tasks = {task: ARM_INSTRUCTIONS[task] for task in args.tasks}
    if args.load:  # a BC policy from an earlier run (its settings must match size= / vla.camera=)
        policy = load_policy(args.load).actor.train()
        bc = {"loaded": args.load}
    else:
        bc = behaviour_cloning(args, tasks)
        policy = bc.pop("policy")
        if args.save:
            save_chunk_policy(args.save, policy, {"env": {"name": args.task,
                                                          "pixels": camera(args.size, args.vla.camera)}})
    bc["success"] = {task: success(policy, task, args, words) for task, words in tasks.items()}
    if "arm-push" in tasks:  # the instruction matters: the reach task under the push instruction
        bc["success_reach_told_push"] = success(policy, "arm-reach", args, ARM_INSTRUCTIONS["arm-push"])
    print("BC", json.dumps(bc), flush=True)

    env = VLAEnv(sim.make(args.task, num_envs=args.num_envs, seed=args.seed + 1, nthread=1,
                          pixels=camera(args.size, args.vla.camera)), policy, ARM_INSTRUCTIONS[args.task])
    eval_env = VLAEnv(sim.make(args.task, num_envs=args.eval_envs, seed=args.seed + 7, nthread=1,
                               pixels=camera(args.size, args.vla.camera)), policy, ARM_INSTRUCTIONS[args.task])
    cfg = dataclasses.replace(args.rl, seed=args.seed)
    _, history = finetune_flow(policy, env, cfg, eval_env=eval_env,
                               log=lambda r: print({k: round(v, 3) for k, v in r.items()}, flush=True))
    env.close()
    eval_env.close()
    after = {task: success(policy, task, args, words) for task, words in tasks.items()}
    result = {"machine": machine_info(), "config": dataclasses.asdict(args), "bc": bc, "finetune": history,
              "success_after_finetune": after, "speed": speed(policy, args)}
    print(json.dumps({k: v for k, v in result.items() if k != "finetune"}, indent=1))
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))
    plot(history, bc, args)


def plot(history: list[dict], bc: dict, args: Settings) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in history if "eval/success" in r]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([r["env_steps"] / 1e3 for r in rows], [100 * r["eval/success"] for r in rows], marker="o",
            label=f"VLA, Flow-Noise PPO on {args.task}")
    ax.set_xlabel("env steps (thousands)")
    ax.set_ylabel(f"success on {args.eval_envs} starts (%)")
    ax.set_title(f"small VLA from {args.vla.camera} {args.size}x{args.size} (BC: {args.demos} demos per task)")
    ax.set_ylim(0, 100)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=120)


if __name__ == "__main__":
    main()
