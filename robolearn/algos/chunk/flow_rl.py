"""RL fine-tuning of a flow-matching action-chunk policy (`policies.flow.FlowPolicy`) in the batched simulator:
PPO with GAE over chunks and a critic on observations, or GRPO over groups of envs reset to the same state, as
pi_RL (RLinf's embodied PPO / GRPO) trains pi0.

A decision is a chunk: the policy samples H actions with a stochastic sampler (Flow-SDE: one random denoising step
is an SDE step, drawn once per decision for the whole batch; Flow-Noise: every step, with the learned std), the env
executes them one by one (`robolearn.core.chunks.run_chunk`), and the chunk's reward is the sum of its steps' rewards
(RLinf's `chunk_level`) up to the step an episode ends; choose H dividing the episode length (arm-push: 150 steps,
H = 5) so chunks stay aligned with episodes.

- PPO: GAE (gamma, lambda per chunk) on the chunk rewards with V(o) from a separate critic MLP (on the privileged
  "critic" group when the task has one); time-outs bootstrap from V of the true final observation; advantages
  normalised over the batch. The ratio is per action element (the default, RLinf's `token_level`, Flow-Noise on
  ManiSkill) or per chunk (`logprob_level: chunk`, log-likelihoods summed over the chunk and action dims, Flow-SDE
  on LIBERO); on arm-push the element ratios learned, the chunk ratios (30 dims summed) barely moved. The first
  `critic_warmup` iterations train only the critic, so the first policy steps do not follow a random critic.
- GRPO: every iteration resets the envs in groups of `group_size` sharing one initial state, runs one episode,
  and gives every chunk of an episode its group-normalised return (`robolearn.core.advantages.grpo`); no critic.

The estimators and the clipped loss are `robolearn.core.advantages` and `robolearn.core.losses`, the ones PPO
on robots and the language-model trainer use. Every random number comes from one generator seeded by `seed`.

The loop (collection, evaluation, checkpoints, resume) is `robolearn.runners.flow.finetune_flow`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from policies.actor_critic import ActorCritic
from policies.flow import FlowPolicy, mlp
from policies.normalizer import RunningNorm
from robolearn.core.advantages import gae, grpo, masked_whiten
from robolearn.core.losses import ppo_clip_loss, value_loss
from robolearn.errors import ConfigError

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
        """(advantages, returns, loss mask) [N, T] (batch-major, as `robolearn.core.advantages` wants) and the critic's
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

    def trains_actor(self, iteration: int) -> bool:
        """Whether iteration `iteration` (from 1) updates the policy: PPO trains only its critic for the first
        `critic_warmup` iterations, so the first policy steps do not follow a random critic."""
        return not (self.cfg.algo == "ppo" and iteration <= self.cfg.critic_warmup)

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
