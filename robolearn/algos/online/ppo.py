"""Proximal Policy Optimization (Schulman et al. 2017) for batched environments.

Reads top to bottom: rollout storage, then `PPO.update` (advantages, minibatch epochs, losses,
KL-adaptive learning rate). The runner (`robolearn.runners.on_policy`) owns the loop; this file
owns the math, which lives once in `robolearn.core.advantages` and `robolearn.core.losses`.

Time-outs bootstrap from the critic's value of the true final observation (`extras["final_obs"]`),
terminations do not; rsl_rl instead adds gamma * V(s_t) of the *current* state at time-outs.
"""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict

from policies.actor_critic import ActorCritic
from robolearn.algos.base import AlgoSpec, register
from robolearn.core.advantages import gae
from robolearn.core.losses import ppo_clip_loss, value_loss
from robolearn.errors import ConfigError


@dataclasses.dataclass
class PPOConfig:
    num_steps: int = 32            # rollout length per env and iteration
    num_epochs: int = 5
    num_minibatches: int = 4
    gamma: float = 0.99
    lam: float = 0.95
    clip: float = 0.2
    clip_high: float | None = None  # clip-higher (DAPO); None = symmetric
    dual_clip: float | None = None
    value_clip: float | None = None  # PPO2 value clipping; off: it stalls critics on 1000-step returns
    value_coef: float = 1.0
    entropy_coef: float = 0.01
    learning_rate: float = 1e-3
    schedule: str = "adaptive"     # "adaptive" (KL-driven, rsl_rl style) or "fixed"
    desired_kl: float = 0.01
    max_grad_norm: float = 1.0
    normalize_advantages: bool = True
    actor_hidden: tuple[int, ...] = (64, 64)
    critic_hidden: tuple[int, ...] = (64, 64)
    activation: str = "elu"
    init_std: float = 1.0
    normalize_obs: bool = True

    def __post_init__(self) -> None:
        if self.schedule not in ("adaptive", "fixed"):
            raise ConfigError(f"algo.schedule must be 'adaptive' or 'fixed', got {self.schedule!r}")
        for name in ("num_steps", "num_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ConfigError(f"algo.{name} must be >= 1, got {getattr(self, name)}")
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)


class RolloutStorage:
    """One iteration's transitions, `[T, N, ...]`, on the learner's device."""

    def __init__(self, num_steps: int, num_envs: int, obs_shapes: dict[str, tuple[int, ...]], num_actions: int,
                 device: torch.device):
        t, n = num_steps, num_envs
        self.obs = TensorDict({k: torch.zeros(t, n, *s, device=device) for k, s in obs_shapes.items()},
                              batch_size=[t, n], device=device)
        self.actions = torch.zeros(t, n, num_actions, device=device)
        self.log_probs = torch.zeros(t, n, device=device)
        self.values = torch.zeros(t + 1, n, device=device)
        self.rewards = torch.zeros(t, n, device=device)
        self.dones = torch.zeros(t, n, dtype=torch.bool, device=device)
        self.truncs = torch.zeros(t, n, dtype=torch.bool, device=device)
        self.bootstrap_values = torch.zeros(t, n, device=device)
        self.step = 0

    def add(self, obs: TensorDict, actions: torch.Tensor, log_probs: torch.Tensor, values: torch.Tensor,
            rewards: torch.Tensor, terminated: torch.Tensor, time_outs: torch.Tensor,
            final_values: torch.Tensor | None) -> None:
        t = self.step
        self.obs[t] = obs
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.values[t] = values
        self.rewards[t] = rewards
        self.dones[t] = terminated
        self.truncs[t] = time_outs
        if final_values is not None:
            self.bootstrap_values[t] = final_values
        self.step += 1


class PPO:
    """The PPO learner: owns the actor-critic, its optimizer and the update."""

    @classmethod
    def for_env(cls, env, cfg: PPOConfig, device: torch.device) -> PPO:
        """PPO with an actor-critic sized for `env`'s observation groups and actions, as `cfg` says."""
        shapes = env.observation_shapes
        policy = ActorCritic(shapes["policy"][0], env.num_actions, shapes.get("critic", shapes["policy"])[0],
                             actor_hidden=cfg.actor_hidden, critic_hidden=cfg.critic_hidden,
                             activation=cfg.activation, init_std=cfg.init_std, normalize_obs=cfg.normalize_obs)
        return cls(policy, cfg, device)

    def __init__(self, policy: ActorCritic, cfg: PPOConfig, device: torch.device):
        self.policy = policy.to(device)
        self.cfg = cfg
        self.device = device
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.learning_rate)
        self.learning_rate = cfg.learning_rate

    @torch.no_grad()
    def rollout_step(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled actions with their log-probabilities and the critic's values: what a rollout stores."""
        return self.policy.act(obs)

    @torch.no_grad()
    def act(self, obs: TensorDict, deterministic: bool = False, generator: torch.Generator | None = None
            ) -> torch.Tensor:
        """Actions for `obs`: the Gaussian's mean, or a sample (the learner protocol's `act`)."""
        if deterministic:
            return self.policy.act_deterministic(obs)
        dist = self.policy.distribution(obs)
        noise = torch.randn(dist.mean.shape, generator=generator, device=dist.mean.device)
        return dist.mean + dist.stddev * noise

    # --- checkpoints (the learner protocol) -----------------------------------------------------
    @property
    def config(self) -> dict:
        """What `load_policy` rebuilds the actor-critic from (a checkpoint's `policy` entry)."""
        return self.policy.config

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.optimizer}

    def model_state(self) -> dict[str, torch.Tensor]:
        return self.policy.state_dict()

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        self.policy.load_state_dict(state)

    @torch.no_grad()
    def final_values(self, final_obs: TensorDict, time_outs: torch.Tensor) -> torch.Tensor | None:
        """Critic values of the true final observations, where an episode timed out."""
        if not bool(time_outs.any()):
            return None
        return self.policy.value(final_obs)

    def update(self, storage: RolloutStorage, last_obs: TensorDict, generator: torch.Generator) -> dict[str, float]:
        cfg = self.cfg
        with torch.no_grad():
            storage.values[-1] = self.policy.value(last_obs)
        # [T, N] -> [N, T]: the shared estimator is batch-major.
        adv, returns = gae(storage.rewards.T, storage.values.T, dones=storage.dones.T, truncs=storage.truncs.T,
                           bootstrap_values=storage.bootstrap_values.T, gamma=cfg.gamma, lam=cfg.lam)
        adv, returns = adv.T.reshape(-1), returns.T.reshape(-1)
        obs = storage.obs.reshape(-1)
        actions = storage.actions.reshape(-1, storage.actions.shape[-1])
        old_logp = storage.log_probs.reshape(-1)
        old_values = storage.values[:-1].reshape(-1)

        batch = adv.shape[0]
        mb_size = batch // cfg.num_minibatches
        stats = {"loss/policy": 0.0, "loss/value": 0.0, "loss/entropy": 0.0, "kl": 0.0, "clip_fraction": 0.0}
        updates = 0
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(batch, generator=generator, device="cpu").to(self.device)
            for start in range(0, mb_size * cfg.num_minibatches, mb_size):
                idx = perm[start:start + mb_size]
                mb_adv = adv[idx]
                if cfg.normalize_advantages:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                dist = self.policy.distribution(obs[idx])
                logp = dist.log_prob(actions[idx]).sum(-1)
                entropy = dist.entropy().sum(-1).mean()
                pg_loss, info = ppo_clip_loss(logp, old_logp[idx], mb_adv, clip_low=cfg.clip,
                                              clip_high=cfg.clip_high, dual_clip=cfg.dual_clip)
                v_loss = value_loss(self.policy.value(obs[idx]), old_values[idx], returns[idx], clip=cfg.value_clip)
                loss = pg_loss + cfg.value_coef * v_loss - cfg.entropy_coef * entropy

                if cfg.schedule == "adaptive":
                    self._adapt_learning_rate(float(info["approx_kl"]))
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                stats["loss/policy"] += pg_loss.item()
                stats["loss/value"] += v_loss.item()
                stats["loss/entropy"] += entropy.item()
                stats["kl"] += float(info["approx_kl"])
                stats["clip_fraction"] += float(info["clip_fraction"])
                updates += 1
        # Normalisers learn from this rollout only after the update, so ratios start at exactly 1.
        self.policy.update_normalizers(storage.obs.reshape(-1))
        storage.step = 0
        out = {k: v / max(updates, 1) for k, v in stats.items()}
        out["learning_rate"] = self.learning_rate
        out["action_std"] = self.policy.log_std.detach().exp().mean().item()
        return out

    def _adapt_learning_rate(self, kl: float) -> None:
        """rsl_rl's rule: shrink the step when the policy moved too far, grow it when it barely moved."""
        if kl > 2.0 * self.cfg.desired_kl:
            self.learning_rate = max(1e-5, self.learning_rate / 1.5)
        elif 0.0 < kl < 0.5 * self.cfg.desired_kl:
            self.learning_rate = min(1e-2, self.learning_rate * 1.5)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate


register(AlgoSpec("ppo", PPOConfig, "robolearn.algos.online.ppo:PPO", runner="on_policy", actor="gaussian"))
