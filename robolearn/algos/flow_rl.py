"""RL fine-tuning of a flow-matching action-chunk policy (`policies.flow.FlowPolicy`) in the batched simulator:
PPO with GAE over chunks and a critic on observations, or GRPO over groups of envs reset to the same state, as
pi_RL (RLinf's embodied PPO / GRPO) trains pi0.

A decision is a chunk: the policy samples H actions with a stochastic sampler (Flow-SDE: one random denoising step
is an SDE step, drawn once per decision for the whole batch; Flow-Noise: every step, with the learned std), the env
executes them one by one (`robolearn.chunks.run_chunk`), and the chunk's reward is the sum of its steps' rewards
(RLinf's `chunk_level`) up to the step an episode ends; choose H dividing the episode length (arm-push: 150 steps,
H = 5) so chunks stay aligned with episodes.

- PPO: GAE (gamma, lambda per chunk) on the chunk rewards with V(o) from a separate critic MLP (on the privileged
  "critic" group when the task has one); time-outs bootstrap from V of the true final observation; advantages
  normalised over the batch. The ratio is per action element (the default, RLinf's `token_level`, Flow-Noise on
  ManiSkill) or per chunk (`logprob_level: chunk`, log-likelihoods summed over the chunk and action dims, Flow-SDE
  on LIBERO); on arm-push the element ratios learned, the chunk ratios (30 dims summed) barely moved. The first
  `critic_warmup` iterations train only the critic, so the first policy steps do not follow a random critic.
- GRPO: every iteration resets the envs in groups of `group_size` sharing one initial state, runs one episode,
  and gives every chunk of an episode its group-normalised return (`robolearn.advantages.grpo`); no critic.

The estimators and the clipped loss are `robolearn.advantages` and `robolearn.losses`, the ones PPO on robots and
the language-model trainer use. Every random number comes from one generator seeded by `seed`.

    policy, history = finetune_flow(policy, env, FlowRLConfig(algo="ppo", iterations=40), eval_env=eval_env)

With `run_dir`, the run writes `checkpoints/latest` at every evaluation and `checkpoints/final` at the end: the
policy (`robolearn.policy_io.load_policy` loads it, e.g. to deploy), the critic, both optimizers, the generator and
the counters; `resume=True` goes on from `latest` (with fresh episodes: the sim's state is not saved).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from policies.actor_critic import ActorCritic
from policies.flow import FlowPolicy, mlp
from policies.normalizer import RunningNorm
from robolearn import checkpoint
from robolearn.advantages import gae, grpo, masked_whiten
from robolearn.chunks import run_chunk
from robolearn.errors import ConfigError
from robolearn.losses import ppo_clip_loss, value_loss
from robolearn.policy_io import chunk_policy_checkpoint, lerobot_fields

critic_obs = ActorCritic.critic_obs  # the privileged "critic" group when the task has one, else "policy"


@dataclasses.dataclass
class FlowRLConfig:
    algo: str = "ppo"                # ppo (GAE per chunk, critic) | grpo (group-normalised returns, no critic)
    mode: str = "sde"                # sde (Flow-SDE) | noise (Flow-Noise: the policy needs its noise head)
    iterations: int = 40
    rollout_chunks: int | None = None  # decisions per env per iteration; None: one episode's worth
    group_size: int = 8              # GRPO: envs per reset state
    gamma: float = 0.99              # per chunk
    lam: float = 0.95
    epochs: int = 4
    minibatches: int = 4
    clip_low: float = 0.2
    clip_high: float | None = None   # None: clip_low (pi_RL: 0.2 / 0.2)
    dual_clip: float | None = 3.0
    logprob_level: str = "element"   # element: one ratio per action element | chunk: one per chunk
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    critic_hidden: tuple[int, ...] = (256, 256)
    critic_warmup: int = 2           # PPO: iterations that train only the critic
    entropy_coef: float = 0.0        # Flow-Noise's Gaussian entropy bonus (pi_RL: 0.005)
    max_grad_norm: float = 1.0
    eval_every: int = 5              # iterations between evaluations (and after the last)
    freeze_vision: bool = False      # a VLA: keep its CNN and keypoints as BC left them; the rest trains
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {"algo": ("ppo", "grpo"), "mode": ("sde", "noise"), "logprob_level": ("chunk", "element")}
        for name, allowed in checks.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"flow RL {name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("iterations", "epochs", "minibatches", "group_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"flow RL {name} must be >= 1, got {getattr(self, name)}")
        self.critic_hidden = tuple(self.critic_hidden)


class Critic(nn.Module):
    """V(o): an MLP on running-normalised observations (updated from each rollout after the update)."""

    def __init__(self, obs_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        self.norm = RunningNorm(obs_dim)
        self.net = mlp(obs_dim, hidden, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(self.norm(obs)).squeeze(-1)


@dataclasses.dataclass
class ChunkRollout:
    """`T` decisions of `N` envs, time-major: what the update needs to re-score the chains and run GAE / GRPO."""

    obs: torch.Tensor          # [T, N, obs]          the policy's observation at each decision
    critic_obs: torch.Tensor   # [T, N, critic_obs]
    chains: torch.Tensor       # [T, K + 1, N, H, A]  denoising chains
    sde_steps: torch.Tensor    # [T]                  Flow-SDE's stochastic step of each decision
    log_probs: torch.Tensor    # [T, N, H, A]
    rewards: torch.Tensor      # [T, N]               summed over the chunk's steps within the episode
    dones: torch.Tensor        # [T, N]               an episode terminated inside the chunk
    truncs: torch.Tensor       # [T, N]               an episode timed out inside the chunk
    bootstrap: torch.Tensor    # [T, N]               V(final observation) where truncated
    alive: torch.Tensor        # [T, N]               the decision began inside the episode (GRPO's mask)
    episodes: list[tuple[float, float]]  # (return, success) of each episode that ended, for logging


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


@torch.no_grad()
def evaluate_flow(env: Any, policy: FlowPolicy, seed: int = 12345) -> dict[str, float]:
    """Success rate and mean return of the deterministic sampler (ODE from Gaussian noise, pi_RL's evaluation)
    over one episode of every env, from the same initial states each call (`env.reset(seed)`)."""
    obs = env.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros(env.num_envs)
    for _ in range(-(-env.max_episode_length // policy.chunk)):
        step = run_chunk(env, policy.sample(obs["policy"], "ode", generator=generator)[0])
        total += step.reward
        obs = step.obs
        if bool(step.done.all()):  # every env started together, so they all end at the time limit together
            return {"success": step.log.get("episode/success", float("nan")), "return": float(total.mean())}
    raise ConfigError("evaluate_flow needs episodes that all end together (no early termination)")


def _success_rate(episodes: list[tuple[float, float]]) -> float:
    rates = [s for _, s in episodes]
    return sum(rates) / len(rates) if rates else float("nan")


class FlowRL:
    """The learner: the flow policy, its critic (PPO) and their optimizers, and `update` on a `ChunkRollout`."""

    def __init__(self, policy: FlowPolicy, critic_obs_dim: int, cfg: FlowRLConfig):
        if cfg.mode == "noise" and policy.noise_net is None:
            raise ConfigError("Flow-Noise (mode=noise) needs a policy built with noise_head=True")
        self.policy, self.cfg = policy, cfg
        self.critic = Critic(critic_obs_dim, cfg.critic_hidden) if cfg.algo == "ppo" else None
        self.actor_params = self.trainable(policy, cfg.freeze_vision)
        self.actor_opt = torch.optim.Adam(self.actor_params, lr=cfg.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr) if self.critic else None

    @staticmethod
    def trainable(policy: FlowPolicy, freeze_vision: bool) -> list[nn.Parameter]:
        """The parameters the actor's optimizer steps: all of them, or a VLA's without its keypoint path."""
        if not freeze_vision:
            return list(policy.parameters())
        if not hasattr(policy, "keypoint_parameters"):
            raise ConfigError(f"freeze_vision needs a policy with vision (a VLAPolicy), got {type(policy).__name__}")
        frozen = {id(p) for p in policy.keypoint_parameters()}
        for p in policy.keypoint_parameters():
            p.requires_grad_(False)  # no gradient is computed through the CNN at all
        return [p for p in policy.parameters() if id(p) not in frozen]

    def advantages(self, ro: ChunkRollout, last_obs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(advantages, returns, loss mask) [N, T] (batch-major, as `robolearn.advantages` wants) and the critic's
        values of the decisions [T, N] (PPO; None for GRPO)."""
        cfg = self.cfg
        if cfg.algo == "grpo":
            n = ro.rewards.shape[1]
            group_ids = torch.arange(n) // cfg.group_size
            adv, _ = grpo(ro.rewards.T, mask=ro.alive.T, group_ids=group_ids)
            return adv, torch.zeros_like(adv), ro.alive.T, None
        with torch.no_grad():
            values = torch.cat([self.critic(ro.critic_obs), self.critic(critic_obs(last_obs))[None]])  # [T + 1, N]
        adv, returns = gae(ro.rewards.T, values.T, dones=ro.dones.T, truncs=ro.truncs.T,
                           bootstrap_values=ro.bootstrap.T, gamma=cfg.gamma, lam=cfg.lam)
        return masked_whiten(adv), returns, torch.ones_like(adv, dtype=torch.bool), values[:-1]

    def update(self, ro: ChunkRollout, last_obs: Any, train_actor: bool, generator: torch.Generator
               ) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        adv, returns, mask, values = self.advantages(ro, last_obs)
        t, n = ro.rewards.shape
        # flatten decisions to samples, decision-major: sample s = (t, env) with t = s // n
        flat = lambda x: x.reshape(t * n, *x.shape[2:])  # noqa: E731
        obs, obs_c, old_logp = flat(ro.obs), flat(ro.critic_obs), flat(ro.log_probs)
        chains = ro.chains.transpose(0, 1).reshape(ro.chains.shape[1], t * n, *ro.chains.shape[3:])
        sde_steps = ro.sde_steps.repeat_interleave(n)
        adv, returns, mask = adv.T.reshape(-1), returns.T.reshape(-1), mask.T.reshape(-1)
        old_values = values.reshape(-1) if values is not None else None
        keep = mask.nonzero().flatten()  # GRPO: only decisions inside the episode take part
        mb = max(1, len(keep) // cfg.minibatches)
        stats = {"loss/policy": 0.0, "loss/value": 0.0, "entropy": 0.0, "kl": 0.0, "clip_fraction": 0.0}
        count = 0
        for _ in range(cfg.epochs):
            perm = keep[torch.randperm(len(keep), generator=generator)]
            for start in range(0, mb * cfg.minibatches, mb):
                idx = perm[start:start + mb]
                if self.critic is not None:
                    v_loss = value_loss(self.critic(obs_c[idx]), old_values[idx], returns[idx], clip=None)
                    self.critic_opt.zero_grad(set_to_none=True)
                    v_loss.backward()
                    nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                    self.critic_opt.step()
                    stats["loss/value"] += v_loss.item()
                if train_actor:
                    logp, entropy = policy.log_prob_and_entropy(obs[idx], chains[:, idx], cfg.mode, sde_steps[idx])
                    old, a = old_logp[idx], adv[idx]
                    if cfg.logprob_level == "chunk":
                        logp, old = logp.sum((1, 2)), old.sum((1, 2))
                    else:
                        a = a[:, None, None].expand_as(logp)
                    pg_loss, info = ppo_clip_loss(logp, old, a, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                                  dual_clip=cfg.dual_clip)
                    loss = pg_loss
                    if entropy is not None and cfg.entropy_coef:
                        entropy = entropy.mean()
                        loss = loss - cfg.entropy_coef * entropy
                        stats["entropy"] += entropy.item()
                    self.actor_opt.zero_grad(set_to_none=True)
                    loss.backward()
                    nn.utils.clip_grad_norm_(self.actor_params, cfg.max_grad_norm)
                    self.actor_opt.step()
                    stats["loss/policy"] += pg_loss.item()
                    stats["kl"] += float(info["approx_kl"])
                    stats["clip_fraction"] += float(info["clip_fraction"])
                count += 1
        if self.critic is not None:  # after the update, so the critic's inputs were fixed during it
            self.critic.norm.update(obs_c)
        return {k: v / max(count, 1) for k, v in stats.items()}


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
            task_cfg = env.task.cfg
            run = {"env": {"name": env.task.name, "num_envs": env.num_envs,
                           "policy_dt": float(task_cfg.ctrl_dt * task_cfg.action_repeat)}}
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
            warm = cfg.algo == "ppo" and it <= cfg.critic_warmup
            stats = learner.update(ro, current, train_actor=not warm, generator=generator)
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
