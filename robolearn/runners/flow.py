"""The flow-policy RL runner: collect action chunks from a VecEnv with a stochastic sampler, update with
`robolearn.algos.chunk.flow_rl.FlowRL` (PPO or GRPO, pi_RL), evaluate, checkpoint, resume. The algorithm (the
estimators, losses and the chunk rollout it consumes) lives in `flow_rl.py`; this module owns the loop.

    policy, history = finetune_flow(policy, env, FlowRLConfig(algo="ppo", iterations=40), eval_env=eval_env)

With `run_dir`, the run writes `checkpoints/latest` at every evaluation and `checkpoints/final` at the end: the
policy (`robolearn.checkpoints.policy.load_policy` loads it, e.g. to deploy), the critic, both optimizers, the
generator and the counters; `resume=True` goes on from `latest` (with fresh episodes: the sim's state is not saved).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from policies.flow import FlowPolicy
from robolearn.algos.chunk.flow_rl import ChunkRollout, Critic, FlowRL, FlowRLConfig, critic_obs
from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.policy import chunk_policy_checkpoint, lerobot_fields
from robolearn.core.chunks import run_chunk
from robolearn.errors import ConfigError
from robolearn.eval.episodes import run_episodes


@torch.no_grad()
def collect_chunks(env: Any, policy: FlowPolicy, critic: Critic | None, obs: Any, decisions: int, mode: str,
                   generator: torch.Generator) -> tuple[ChunkRollout, Any]:
    """Run `decisions` chunks of the stochastic policy from `obs`; returns the rollout and the next observations."""
    n = env.num_envs
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "critic_obs", "chains", "sde_steps", "log_probs",
                                                           "rewards", "dones", "truncs", "bootstrap", "alive")}
    started = torch.zeros(n, dtype=torch.bool)  # an env's episode began in this rollout (GRPO's mask follows it)
    running = torch.zeros(n)
    episodes: list[tuple[float, float]] = []
    for _ in range(decisions):
        o, co = obs["policy"].clone(), critic_obs(obs).clone()
        k = int(torch.randint(0, policy.num_steps, (1,), generator=generator)) if mode == "sde" else 0
        actions, chain, logp = policy.sample(o, mode, sde_step=k, generator=generator)
        step = run_chunk(env, actions)
        running += step.reward
        success = step.log.get("episode/success", float("nan"))  # the mean over the episodes ending in the chunk
        episodes += [(float(running[i]), success) for i in step.done.nonzero().flatten().tolist()]
        running[step.done] = 0.0
        rows["alive"].append(~started)
        started |= step.done
        obs = step.obs
        rows["obs"].append(o)
        rows["critic_obs"].append(co)
        rows["chains"].append(chain)
        rows["sde_steps"].append(torch.tensor(k))
        rows["log_probs"].append(logp)
        rows["rewards"].append(step.reward)
        rows["dones"].append(step.terminated)
        rows["truncs"].append(step.truncated)
        bootstrap = critic(critic_obs(step.final_obs)) if critic is not None and bool(step.truncated.any()) else None
        rows["bootstrap"].append(bootstrap if bootstrap is not None else torch.zeros(n))
    return ChunkRollout(**{k: torch.stack(v) for k, v in rows.items()}, episodes=episodes), obs


def evaluate_flow(env: Any, policy: FlowPolicy, seed: int = 12345) -> dict[str, float]:
    """Success rate (NaN where the task has none) and mean return of the deterministic sampler (ODE from Gaussian
    noise, pi_RL's evaluation) over one episode of every env, from the same initial states each call
    (`env.reset(seed)`): `robolearn.eval.episodes.run_episodes` over chunks, returns summed in float32."""
    generator = torch.Generator().manual_seed(seed)
    episodes = run_episodes(env, lambda obs: policy.sample(obs["policy"], "ode", generator=generator)[0], seed,
                            chunks=True, dtype=torch.float32)
    success = episodes.success if episodes.success is not None else float("nan")
    return {"success": success, "return": float(episodes.returns.mean())}


def _success_rate(episodes: list[tuple[float, float]]) -> float:
    rates = [s for _, s in episodes]
    return sum(rates) / len(rates) if rates else float("nan")


def save_flow_run(path: Any, learner: FlowRL, iteration: int, env_steps: int, generator: torch.Generator,
                  run: dict[str, Any] | None = None) -> Any:
    """A checkpoint of the fine-tuning at `iteration`: the policy as `load_policy` reads it, plus what resumes it."""
    policy_config, state = chunk_policy_checkpoint(learner.policy)
    optimizers = {"actor": learner.actor_opt}
    if learner.critic is not None:
        state.update({f"critic.{k}": v for k, v in learner.critic.state_dict().items()})
        optimizers["critic"] = learner.critic_opt
    tensors, meta = checkpoint.flatten_optimizers(optimizers)
    tensors["generator"] = generator.get_state()
    config = {**lerobot_fields(learner.policy), "policy": policy_config, "run": dict(run or {}),
              "flow_rl": dataclasses.asdict(learner.cfg)}
    return checkpoint.save(path, config, state, tensors, {"optimizers": meta, "iteration": iteration,
                                                         "env_steps": env_steps})


def restore_flow_run(path: Any, learner: FlowRL, generator: torch.Generator) -> tuple[int, int]:
    """Load `save_flow_run`'s checkpoint into `learner` and `generator`; returns (iteration, env_steps)."""
    config, state = checkpoint.load(path)
    meta, tensors = checkpoint.load_trainer(path)
    saved = config.get("flow_rl", {}).get("freeze_vision", False)
    if saved != learner.cfg.freeze_vision:  # the actor's optimizer holds other parameters
        raise ConfigError(f"{path} was trained with freeze_vision={saved}: resume with the same")
    learner.policy.load_state_dict({k[len("actor."):]: v for k, v in state.items() if k.startswith("actor.")})
    optimizers = {"actor": learner.actor_opt}
    if learner.critic is not None:
        learner.critic.load_state_dict({k[len("critic."):]: v for k, v in state.items() if k.startswith("critic.")})
        optimizers["critic"] = learner.critic_opt
    checkpoint.restore_optimizers(optimizers, tensors, meta["optimizers"])
    generator.set_state(tensors["generator"])
    return int(meta["iteration"]), int(meta["env_steps"])


def finetune_flow(policy: FlowPolicy, env: Any, cfg: FlowRLConfig, eval_env: Any | None = None,
                  log: Any = None, run_dir: str | Path | None = None, run: dict[str, Any] | None = None,
                  resume: bool = False) -> tuple[FlowPolicy, list[dict[str, float]]]:
    """Fine-tune `policy` in `env` for `cfg.iterations`; returns it and one row per iteration (env steps, wall
    time, rollout return and success, losses, and every `eval_every` iterations the evaluation of `eval_env`).

    `run_dir`: checkpoints there (`checkpoints/latest` at each evaluation, `checkpoints/final`), with `run` (the run
    config stored for `load_policy`; default: a sim env's task name, env count and control period, which `robolearn
    eval` needs; pass it to record task overrides); `resume`: continue from `checkpoints/latest` of `run_dir`."""
    if str(getattr(env, "device", "cpu")) != "cpu":
        raise ConfigError("flow RL keeps its policy, critic and rollouts on the CPU: make the env with device='cpu'")
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    episode_chunks = -(-env.max_episode_length // policy.chunk)
    if cfg.algo == "grpo" and env.num_envs % cfg.group_size:
        raise ConfigError(f"GRPO needs num_envs ({env.num_envs}) divisible by group_size ({cfg.group_size})")
    decisions = episode_chunks if cfg.algo == "grpo" or cfg.rollout_chunks is None else cfg.rollout_chunks
    obs = env.observation_shapes
    flags = [p.requires_grad for p in policy.parameters()]  # freeze_vision holds only for this run
    try:
        learner = FlowRL(policy, (obs.get("critic") or obs["policy"])[0], cfg)
        checkpoints = Path(run_dir) / "checkpoints" if run_dir is not None else None
        if run is None and hasattr(env, "task"):  # a sim VecEnv: enough for `robolearn eval` and deploy's control rate
            run = {"env": {"name": env.task.name, "num_envs": env.num_envs, "policy_dt": float(env.task.cfg.policy_dt)}}
            if getattr(env, "pixels", None):  # a VLA's camera: `robolearn eval` renders the same frames
                run["env"]["pixels"] = dict(env.pixels)
        if resume and checkpoints is None:
            raise ConfigError("resume=True needs the run_dir whose checkpoints/latest to continue from")
        history: list[dict[str, float]] = []
        start, env_steps = restore_flow_run(checkpoints / "latest", learner, generator) if resume else (0, 0)
        if not resume:
            row: dict[str, float] = {"iteration": 0, "env_steps": 0, "wall_s": 0.0}
            if eval_env is not None:
                row.update({f"eval/{k}": v for k, v in evaluate_flow(eval_env, policy).items()})
            history.append(row)
            if log:
                log(row)
        began = time.perf_counter()
        current = env.reset(seed=cfg.seed + start)
        for it in range(start + 1, cfg.iterations + 1):
            if cfg.algo == "grpo":  # each group of envs starts one episode from a shared state
                current = env.reset(seed=cfg.seed * 100_003 + it, group_size=cfg.group_size)
            ro, current = collect_chunks(env, policy, learner.critic, current, decisions, cfg.mode, generator)
            env_steps += decisions * policy.chunk * env.num_envs
            stats = learner.update(ro, current, train_actor=learner.trains_actor(it), generator=generator)
            row = {"iteration": it, "env_steps": env_steps, "wall_s": time.perf_counter() - began,
                   "rollout/return": sum(r for r, _ in ro.episodes) / max(len(ro.episodes), 1),
                   "rollout/success": _success_rate(ro.episodes), **stats}
            if it % cfg.eval_every == 0 or it == cfg.iterations:
                if eval_env is not None:
                    row.update({f"eval/{k}": v for k, v in evaluate_flow(eval_env, policy).items()})
                if checkpoints is not None:
                    save_flow_run(checkpoints / "latest", learner, it, env_steps, generator, run)
            history.append(row)
            if log:
                log(row)
        if checkpoints is not None:
            save_flow_run(checkpoints / "final", learner, cfg.iterations, env_steps, generator, run)
    finally:
        for p, flag in zip(policy.parameters(), flags, strict=True):
            p.requires_grad_(flag)
    return policy, history
