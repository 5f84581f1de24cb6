"""DSRL on `arm-push` (CPU): the same demonstrations as `benchmarks/studies/flow_rl_arm.py` (the scripted controller,
noise-free), behaviour cloning of a diffusion action-chunk policy (DDPM, DDIM with 10 steps, chunks of 5), then SAC
over its initial noise with the policy frozen (`robolearn.algos.chunk.dsrl`);
success of the latent policy on 100 held-out
initial states along the way, with wall-clock.

Before DSRL starts, the frozen base policy itself is scored on the same starts under fixed noise distributions
(`base_success`): zero noise (its deterministic chunk), N(0, I) (the usual way to sample it), and uniform in the
DSRL box [-magnitude, magnitude]. These are the levels DSRL's first evaluation (its untrained actor plays latents
near zero) and its warm-up data come from, so an improvement is measured against them.

    python benchmarks/studies/dsrl_arm.py                  # -> benchmarks/results/dsrl_arm-push_cpu.json
    python benchmarks/studies/dsrl_arm.py plot=[a.json,b.json] out=results/x   # their curves -> results/x.png
    python benchmarks/studies/dsrl_arm.py demos=10 bc.steps=200 num_envs=4 iterations=2 dsrl.eval_every=120 \\
        sac.learning_starts=60 out=/tmp/dsrl                                     # a quick look

Three library configs: `bc` (`ChunkBCConfig`: a diffusion policy, DDIM with 10 steps, chunks of 5), `dsrl`
(`DSRLConfig`: here DSRL-NA over the whole chunk's noise, as the paper; its steps per iteration are one episode's
decisions) and `sac` (`SACConfig`, the latent policy's SAC: LayerNorm critics, UTD 2, target entropy 0, learning
from decision 1,500 on). `seed` sets `bc.seed`; `sparse=true` sets the task's reward and `sac.reward_bias` -1;
`dsrl.warmup=uniform` sets `sac.random_warmup`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from benchmarks.studies.flow_rl_arm import TASK, demonstrations  # noqa: E402
from robolearn.algos.chunk.chunk_bc import ChunkBCConfig  # noqa: E402
from robolearn.algos.chunk.dsrl import DSRLConfig  # noqa: E402
from robolearn.algos.online.sac import SACConfig  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The demonstrations, the base policy, DSRL and its SAC (`key=value` on the command line)."""

    demos: int = 100
    demo_noise: float = 0.0         # Gaussian action noise of the scripted demonstrations (diverse data: a base whose
    #                                 noise selects among behaviours, what DSRL steers)
    num_envs: int = 16
    iterations: int = 25            # x one episode's decisions x num_envs
    sparse: bool = False            # the paper's reward: -1 per chunk decision, 0 at success, success terminal (the
    #                                 task's shaped=False + terminate_on_success=True, SAC's reward_bias=-1); default:
    #                                 the shaped reward of the BC benchmarks
    seed: int = 0
    bc: ChunkBCConfig = dataclasses.field(default_factory=lambda: ChunkBCConfig(
        policy="diffusion", chunk=5, num_steps=10, steps=6000))
    dsrl: DSRLConfig = dataclasses.field(default_factory=lambda: DSRLConfig(
        eval_every=2400, variant="na", latent="chunk"))  # eval_every: decisions (all envs)
    sac: SACConfig = dataclasses.field(default_factory=lambda: SACConfig(
        utd_ratio=2.0, learning_starts=1500, critic_layer_norm=True, target_entropy_scale=0.0))
    #                                 learning_starts: warm-up decisions (dsrl.warmup's policy) first; init_temperature
    #                                 1.0 as SB3's auto entropy (with target entropy 0 and a low UTD a high one keeps
    #                                 the latent policy near-uniform over the box for thousands of decisions); gamma
    #                                 per chunk decision; critic_hidden: the paper's 3x2048 robomimic, 3x128 gym
    plot: list[str] | None = None   # only plot these results' curves to <out>.png
    out: str = str(RESULTS / f"dsrl_{TASK}_cpu")  # <out>.json


def main() -> None:
    import sim
    from robolearn.algos.chunk.chunk_bc import train_chunk_bc
    from robolearn.runners.dsrl import dsrl_runner

    args = settings(Settings, __doc__)
    if args.plot:
        plot([json.loads(Path(p).read_text()) for p in args.plot], args.out + ".png")
        return
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    began = time.perf_counter()
    data = demonstrations(args.demos, args.seed, args.demo_noise)
    bc_cfg = dataclasses.replace(args.bc, seed=args.seed)
    base, losses = train_chunk_bc(data, bc_cfg)
    bc = {"demos": args.demos, "demo_noise": args.demo_noise, "demo_return": data.metadata["return_mean"],
          "bc_steps": bc_cfg.steps, "bc_loss": losses[-1], "bc_s": time.perf_counter() - began}
    reward = {"shaped": False, "terminate_on_success": True} if args.sparse else {}
    env = sim.make(TASK, num_envs=args.num_envs, seed=args.seed + 1, nthread=1, **reward)
    eval_env = sim.make(TASK, num_envs=100, seed=args.seed + 2, nthread=1, **reward)
    sac = dataclasses.replace(args.sac, random_warmup=args.dsrl.warmup == "uniform",
                              reward_bias=-1.0 if args.sparse else args.sac.reward_bias)
    run_dir = Path(tempfile.mkdtemp(prefix="dsrl-"))
    cfg = dataclasses.replace(args.dsrl, steps_per_iteration=env.max_episode_length // bc_cfg.chunk)
    base_success = score_base(base, eval_env, cfg.magnitude, args.seed + 1000)
    print(f"base policy success: {base_success}", flush=True)
    runner = dsrl_runner(base, env, eval_env, sac, run_dir, cfg, seed=args.seed)
    rows = runner.learn(args.iterations, checkpoint_interval=args.iterations)
    shutil.rmtree(run_dir, ignore_errors=True)
    curve = [{"decisions": r["env_steps"], "env_steps": r["env_steps"] * bc_cfg.chunk, "wall_s": r.get("wall_s", 0.0),
              "success": r["eval/success"], "return": r["eval/return"]} for r in rows if "eval/success" in r]
    summary = {"bc_success": curve[0]["success"], "final_success": curve[-1]["success"],
               "best_success": max(c["success"] for c in curve), "env_steps": curve[-1]["env_steps"],
               "wall_s": curve[-1]["wall_s"], "updates": runner.updates}
    result = {"machine": machine_info(), "task": TASK, "config": dataclasses.asdict(args), "bc": bc,
              "base_success": base_success, "summary": summary, "curve": curve}
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
