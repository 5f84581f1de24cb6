"""Flow-policy RL fine-tuning on `arm-push` (pi_RL's recipe at toy scale, CPU): demonstrations of the scripted
controller, behaviour cloning of a flow-matching action-chunk policy (`robolearn.algos.chunk.chunk_bc`), then PPO with
Flow-SDE and GAE over chunks (`robolearn.algos.chunk.flow_rl`), and the same with GRPO; success of the ODE sampler on
100 held-out initial states along the way, with wall-clock. Then the speed side by side with the plain MLP PPO
on the same task and envs: env-steps/s of a rollout and gradient updates/s.

    python benchmarks/studies/flow_rl_arm.py               # -> benchmarks/results/flow_rl_arm-push_cpu.{json,png}
    python benchmarks/studies/flow_rl_arm.py algos=[ppo] rl.iterations=20 demos=20 out=/tmp/flow   # a quick look

`bc` is the behaviour cloning's `ChunkBCConfig` and `rl` the fine-tuning's `FlowRLConfig` (pi_RL's recipe here:
gamma 0.95 per chunk, 5 critic warm-up iterations, actor lr 3e-4); each of `algos` sets `rl.algo`, and `seed` sets
both configs' seeds.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from robolearn.algos.chunk.chunk_bc import ChunkBCConfig  # noqa: E402
from robolearn.algos.chunk.flow_rl import FlowRLConfig  # noqa: E402

TASK = "arm-push"


@dataclasses.dataclass
class Settings:
    """The demonstrations, the BC policy, the fine-tuning runs (`key=value` on the command line)."""

    algos: list[str] = dataclasses.field(default_factory=lambda: ["ppo", "grpo"])  # one run each (rl.algo)
    demos: int = 100                # noise-free episodes of the scripted controller
    num_envs: int = 128
    seed: int = 0                   # demos, BC, fine-tuning (bc.seed and rl.seed) and envs
    bc: ChunkBCConfig = dataclasses.field(default_factory=lambda: ChunkBCConfig(chunk=5, num_steps=4, steps=6000))
    rl: FlowRLConfig = dataclasses.field(default_factory=lambda: FlowRLConfig(
        iterations=100, actor_lr=3e-4, gamma=0.95, logprob_level="element", critic_warmup=5, eval_every=5))
    out: str = str(RESULTS / f"flow_rl_{TASK}_cpu")  # <out>.json and <out>.png


def demonstrations(episodes: int, seed: int, noise: float = 0.0) -> object:
    """`episodes` episodes of the task's scripted reference controller (the BC data of both arm benchmarks),
    noise-free unless `noise` (Gaussian action noise of that std: diverse demonstrations)."""
    from robolearn.collect.generate import CollectConfig, collect
    from robolearn.config import EnvConfig

    return collect(CollectConfig(env=EnvConfig(name=TASK, num_envs=min(episodes, 50)), kind="expert",
                                 policy="reference", episodes=episodes, seed=seed, progress=False, noise=noise,
                                 ref_min_score=0.0, ref_max_score=1.0))


def flow_policy(env: object, bc: ChunkBCConfig) -> object:
    """A `FlowPolicy` for `env`'s "policy" observations and actions, shaped as `bc` trains it."""
    from policies.flow import FlowPolicy

    return FlowPolicy(env.observation_shapes["policy"][0], env.num_actions, bc.chunk, bc.hidden, bc.num_steps)


def bc_policy(args: Settings) -> tuple[dict, dict]:
    """The BC flow policy's weights and what it took: `demos` noise-free episodes of the reference controller."""
    from robolearn.algos.chunk.chunk_bc import train_chunk_bc

    began = time.perf_counter()
    data = demonstrations(args.demos, args.seed)
    collected = time.perf_counter() - began
    policy, losses = train_chunk_bc(data, dataclasses.replace(args.bc, seed=args.seed))
    info = {"demos": args.demos, "demo_return": data.metadata["return_mean"], "collect_s": collected,
            "bc_steps": args.bc.steps, "bc_s": time.perf_counter() - began - collected, "bc_loss": losses[-1]}
    return policy.state_dict(), info


def finetune(job: tuple[str, dict, Settings]) -> tuple[str, list[dict]]:
    """One fine-tuning run from the BC weights (its own process, one thread)."""
    import sim
    from robolearn.runners.flow import finetune_flow

    algo, weights, args = job
    torch.set_num_threads(1)
    env = sim.make(TASK, num_envs=args.num_envs, seed=args.seed + 1, nthread=1)
    policy = flow_policy(env, args.bc)
    policy.load_state_dict(weights)
    eval_env = sim.make(TASK, num_envs=100, seed=args.seed + 2, nthread=1)
    cfg = dataclasses.replace(args.rl, algo=algo, seed=args.seed)
    _, history = finetune_flow(policy, env, cfg, eval_env=eval_env,
                               log=lambda r: print(algo, {k: round(v, 3) for k, v in r.items()}, flush=True))
    return algo, history


def speed(args: Settings) -> dict:
    """Env-steps/s of rollouts and updates/s: flow PPO (Flow-SDE, chunk H) vs the MLP PPO, same envs, one thread;
    both learners with their configs' defaults (the speed does not depend on the recipe's rates)."""
    import sim
    from robolearn.algos.chunk.flow_rl import FlowRL
    from robolearn.algos.online.ppo import PPO, PPOConfig, RolloutStorage
    from robolearn.runners.flow import collect_chunks

    torch.set_num_threads(1)
    env = sim.make(TASK, num_envs=args.num_envs, seed=0, nthread=1)
    chunk = args.bc.chunk
    decisions = env.max_episode_length // chunk
    out = {}
    # flow PPO: one rollout of `decisions` chunks, then one update (4 epochs x 4 minibatches)
    shapes = env.observation_shapes
    flow = FlowRL(flow_policy(env, args.bc), shapes["critic"][0], FlowRLConfig())
    g = torch.Generator().manual_seed(0)
    obs = env.reset(seed=0)
    collect_chunks(env, flow.policy, flow.critic, obs, 2, "sde", g)  # warm-up
    began = time.perf_counter()
    ro, obs = collect_chunks(env, flow.policy, flow.critic, obs, decisions, "sde", g)
    rollout_s = time.perf_counter() - began
    began = time.perf_counter()
    flow.update(ro, obs, train_actor=True, generator=g)
    update_s = time.perf_counter() - began
    steps = decisions * chunk * env.num_envs
    out["flow_ppo"] = {"env_steps_per_s": steps / rollout_s, "updates_per_s": 16 / update_s,
                       "samples_per_update": decisions * env.num_envs // 4}
    # MLP PPO (robolearn's default actor-critic) on the same envs and the same env steps per iteration
    cfg = PPOConfig(num_steps=decisions * chunk, num_epochs=4, num_minibatches=4)
    ppo = PPO.for_env(env, cfg, torch.device("cpu"))
    storage = RolloutStorage(cfg.num_steps, env.num_envs, env.observation_shapes, env.num_actions, torch.device("cpu"))
    obs = env.reset(seed=0)
    began = time.perf_counter()
    for _ in range(cfg.num_steps):
        actions, logp, values = ppo.rollout_step(obs)
        next_obs, rewards, dones, extras = env.step(actions)
        storage.add(obs, actions, logp, values, rewards, extras["terminated"], extras["time_outs"],
                    ppo.final_values(extras["final_obs"], extras["time_outs"]))
        obs = next_obs
    rollout_s = time.perf_counter() - began
    began = time.perf_counter()
    ppo.update(storage, obs, g)
    update_s = time.perf_counter() - began
    out["mlp_ppo"] = {"env_steps_per_s": steps / rollout_s, "updates_per_s": 16 / update_s,
                      "samples_per_update": cfg.num_steps * env.num_envs // 4}
    out["ratio_env_steps_flow_to_mlp"] = out["flow_ppo"]["env_steps_per_s"] / out["mlp_ppo"]["env_steps_per_s"]
    env.close()
    return out


def main() -> None:
    args = settings(Settings, __doc__)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    weights, bc = bc_policy(args)
    print("BC", bc, flush=True)
    jobs = [(a, weights, args) for a in args.algos]
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        curves = dict(pool.map(finetune, jobs))
    summary = {a: {"bc_success": h[0]["eval/success"], "final_success": h[-1]["eval/success"],
                   "best_success": max(r.get("eval/success", 0.0) for r in h),
                   "env_steps": h[-1]["env_steps"], "wall_s": h[-1]["wall_s"]} for a, h in curves.items()}
    result = {"machine": machine_info(), "task": TASK, "config": dataclasses.asdict(args), "bc": bc, "summary": summary,
              "speed": speed(args), "curves": curves}
    print(json.dumps({"bc": bc, "summary": summary, "speed": result["speed"]}, indent=1))
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))
    plot(curves, bc, args.out + ".png")


def plot(curves: dict[str, list[dict]], bc: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    names = {"ppo": "PPO (Flow-SDE, GAE per chunk)", "grpo": "GRPO (Flow-SDE, groups of 8)"}
    for algo, h in curves.items():
        rows = [r for r in h if "eval/success" in r]
        ax.plot([r["wall_s"] / 60 for r in rows], [100 * r["eval/success"] for r in rows], marker="o", ms=3,
                label=names.get(algo, algo))
    ax.axhline(90, color="grey", ls=":", lw=1)
    ax.set_xlabel("wall-clock of fine-tuning (min, one CPU thread)")
    ax.set_ylabel("success, ODE sampler, 100 starts (%)")
    ax.set_title(f"{TASK}: flow policy, BC on {bc['demos']} demos, then RL")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
