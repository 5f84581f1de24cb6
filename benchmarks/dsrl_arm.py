"""DSRL on `arm-push` (CPU): the same demonstrations as `benchmarks/flow_rl_arm.py` (the scripted controller,
noise-free), behaviour cloning of a diffusion action-chunk policy (DDPM, DDIM with 10 steps, chunks of 5), then SAC
over its initial noise with the policy frozen (`robolearn.algos.chunk.dsrl`);
success of the latent policy on 100 held-out
initial states along the way, with wall-clock.

Before DSRL starts, the frozen base policy itself is scored on the same starts under fixed noise distributions
(`base_success`): zero noise (its deterministic chunk), N(0, I) (the usual way to sample it), and uniform in the
DSRL box [-magnitude, magnitude]. These are the levels DSRL's first evaluation (its untrained actor plays latents
near zero) and its warm-up data come from, so an improvement is measured against them.

    python benchmarks/dsrl_arm.py                  # -> benchmarks/results/dsrl_arm-push_cpu.json
    python benchmarks/dsrl_arm.py --plot a.json b.json --out results/x   # their curves -> results/x.png
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flow_rl_arm import OUT, TASK, demonstrations  # noqa: E402
from benchmarks.sim_throughput import machine_info  # noqa: E402


def main() -> None:
    import sim
    from robolearn.algos.chunk.chunk_bc import ChunkBCConfig, train_chunk_bc
    from robolearn.algos.chunk.dsrl import DSRLConfig
    from robolearn.algos.online.sac import SACConfig
    from robolearn.runners.dsrl import dsrl_runner

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demos", type=int, default=100)
    parser.add_argument("--demo-noise", type=float, default=0.0,
                        help="Gaussian action noise of the scripted demonstrations (diverse data: a base whose noise "
                             "selects among behaviours, what DSRL steers)")
    parser.add_argument("--bc-steps", type=int, default=6000)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=25)   # x 30 decisions x num_envs
    parser.add_argument("--magnitude", type=float, default=1.5)
    parser.add_argument("--utd", type=float, default=2.0)
    parser.add_argument("--eval-every", type=int, default=2400)  # decisions (all envs)
    parser.add_argument("--variant", default="na", choices=["sac", "na"])
    parser.add_argument("--noise-critic-steps", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1500)      # warm-up decisions (--warmup-policy) first
    parser.add_argument("--target-entropy-scale", type=float, default=0.0)  # the paper's target_ent 0
    parser.add_argument("--gamma", type=float, default=0.99)    # per chunk decision
    parser.add_argument("--init-temperature", type=float, default=1.0,
                        help="SAC's initial temperature (1.0 as SB3's auto entropy; with target entropy 0 and a low "
                             "UTD a high one keeps the latent policy near-uniform over the box for thousands of "
                             "decisions)")
    parser.add_argument("--warmup-policy", default="base", choices=["base", "uniform"])
    parser.add_argument("--eval-deterministic", action="store_true")  # default: sampled latents, as the paper
    parser.add_argument("--sparse", action="store_true",
                        help="the paper's reward: -1 per chunk decision, 0 at success, success terminal (the task's "
                             "shaped=False + terminate_on_success=True, SAC's reward_bias=-1); default: the shaped "
                             "reward of the BC benchmarks")
    parser.add_argument("--critic-hidden", default="256,256", help="critic widths, comma-separated (paper: "
                        "3x2048 robomimic, 3x128 gym)")
    parser.add_argument("--latent", default="chunk", choices=["chunk", "shared"],
                        help="shared: one noise vector for the whole chunk (DSRL-pi0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", nargs="+", default=None, help="only plot these results' curves to <out>.png")
    parser.add_argument("--out", default=str(OUT / f"dsrl_{TASK}_cpu"))
    args = parser.parse_args()
    if args.plot:
        plot([json.loads(Path(p).read_text()) for p in args.plot], args.out + ".png")
        return
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    began = time.perf_counter()
    data = demonstrations(args.demos, args.seed, args.demo_noise)
    base, losses = train_chunk_bc(data, ChunkBCConfig(policy="diffusion", chunk=args.chunk, num_steps=10,
                                                      hidden=(256, 256), steps=args.bc_steps, seed=args.seed))
    bc = {"demos": args.demos, "demo_noise": args.demo_noise, "demo_return": data.metadata["return_mean"],
          "bc_steps": args.bc_steps, "bc_loss": losses[-1], "bc_s": time.perf_counter() - began}
    reward = {"shaped": False, "terminate_on_success": True} if args.sparse else {}
    env = sim.make(TASK, num_envs=args.num_envs, seed=args.seed + 1, nthread=1, **reward)
    eval_env = sim.make(TASK, num_envs=100, seed=args.seed + 2, nthread=1, **reward)
    sac = SACConfig(utd_ratio=args.utd, learning_starts=args.warmup, random_warmup=args.warmup_policy == "uniform",
                    critic_layer_norm=True, reward_bias=-1.0 if args.sparse else 0.0,
                    critic_hidden=tuple(int(w) for w in args.critic_hidden.split(",")),
                    target_entropy_scale=args.target_entropy_scale, gamma=args.gamma,
                    init_temperature=args.init_temperature)
    run_dir = Path(tempfile.mkdtemp(prefix="dsrl-"))
    decisions = env.max_episode_length // args.chunk
    cfg = DSRLConfig(args.magnitude, decisions, args.eval_every, args.variant, args.noise_critic_steps,
                     args.warmup_policy, args.eval_deterministic, args.latent)
    base_success = score_base(base, eval_env, args.magnitude, args.seed + 1000)
    print(f"base policy success: {base_success}", flush=True)
    runner = dsrl_runner(base, env, eval_env, sac, run_dir, cfg, seed=args.seed)
    rows = runner.learn(args.iterations, checkpoint_interval=args.iterations)
    shutil.rmtree(run_dir, ignore_errors=True)
    curve = [{"decisions": r["env_steps"], "env_steps": r["env_steps"] * args.chunk, "wall_s": r.get("wall_s", 0.0),
              "success": r["eval/success"], "return": r["eval/return"]} for r in rows if "eval/success" in r]
    summary = {"bc_success": curve[0]["success"], "final_success": curve[-1]["success"],
               "best_success": max(c["success"] for c in curve), "env_steps": curve[-1]["env_steps"],
               "wall_s": curve[-1]["wall_s"], "updates": runner.updates}
    result = {"machine": machine_info(), "task": TASK, "config": vars(args), "bc": bc, "base_success": base_success,
              "summary": summary, "curve": curve}
    print(json.dumps({"bc": bc, "base_success": base_success, "summary": summary}, indent=1))
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))


def plot(results: list[dict], path: str) -> None:
    """Success against env steps, one line per result (seed), each base's zero-noise success dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for r in results:
        line, = ax.plot([c["env_steps"] / 1e3 for c in r["curve"]], [100 * c["success"] for c in r["curve"]],
                        marker="o", ms=3, label=f"DSRL, seed {r['config']['seed']}")
        ax.axhline(100 * r["base_success"]["zero"], ls=":", color=line.get_color())
    ax.set_xlabel("env steps (thousands)")
    ax.set_ylabel(f"success on 100 starts of {results[0]['task']} (%)")
    ax.set_title("DSRL over a BC diffusion policy (dotted: the base, zero noise)", fontsize=9)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def score_base(base: torch.nn.Module, eval_env: object, magnitude: float, seed: int) -> dict[str, float]:
    """Success of the frozen base policy on `eval_env`'s starts with initial noise zero, N(0, I) and uniform in
    [-magnitude, magnitude] (fixed distributions, no learning), through DSRL's own noise-action wrapper."""
    from robolearn.algos.chunk.dsrl import NoiseActionEnv
    from robolearn.runners.base import evaluate_policy

    wrapped = NoiseActionEnv(eval_env, base, magnitude=1.0)  # actions are the noise itself here
    shape = (wrapped.num_envs, wrapped.num_actions)

    class FixedNoise:
        def __init__(self, draw: object) -> None:
            self.draw = draw

        def act(self, obs: object, deterministic: bool = True, generator: object = None) -> torch.Tensor:
            return self.draw()

    gen = torch.Generator().manual_seed(seed)
    draws = {"zero": lambda: torch.zeros(shape),
             "normal": lambda: torch.randn(shape, generator=gen),
             f"uniform_{magnitude:g}": lambda: (torch.rand(shape, generator=gen) * 2 - 1) * magnitude}
    return {name: evaluate_policy(wrapped, FixedNoise(draw), seed=seed, reference=None)["eval/success"]
            for name, draw in draws.items()}


if __name__ == "__main__":
    main()
