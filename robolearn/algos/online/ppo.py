"""Proximal Policy Optimization (Schulman et al. 2017) for batched environments.

Reads top to bottom: rollout storage, then `PPO.update` (advantages, minibatch epochs, losses,
KL-adaptive learning rate). The runner (`robolearn.runners.on_policy`) owns the loop; this file
owns the math, which lives once in `robolearn.core.advantages` and `robolearn.core.losses`.

Time-outs bootstrap from the critic's value of the true final observation (`extras["final_obs"]`),
terminations do not; rsl_rl instead adds gamma * V(s_t) of the *current* state at time-outs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from policies.actor_critic import ActorCritic
from policies.normalizer import RunningNorm
from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import gradient_step
from robolearn.algos.seeds import per_seed
from robolearn.core import distributed
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
    """The PPO learner: owns the actor-critic, its optimizer and the update.

    The update's tensor work lives in three methods named by `graph_methods` (the advantages, one minibatch step,
    the normalisers) and the learning rate is a tensor (`lr`), so a seed-batch (`robolearn.algos.seeds.SeedBatch`)
    runs S seeds' updates as one: `robolearn train algo=ppo seeds=[...]`.
    """

    name = "ppo"
    #: the tensor work of `update`: vmapped over the seed axis in a seed-batch
    graph_methods: tuple[str, ...] = ("_advantages", "_minibatch_step", "_update_normalizers")

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
        self.device = torch.device(device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.learning_rate)
        # the KL-adapted learning rate: a tensor, so the adaptation needs no host sync inside a seed-batch
        self.lr = torch.tensor(cfg.learning_rate, device=self.device)
        self.updates = 0
        self.compiled = False
        self._seed_binding: Any = None  # set by a seed-batch while its update runs

    @property
    def learning_rate(self) -> float:
        return float(self.lr)

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        with torch.no_grad():
            self.lr.fill_(value)
        for group in self.optimizer.param_groups:
            group["lr"] = float(value)

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

    def _networks(self) -> dict[str, torch.nn.Module]:
        """Every learned network (what a seed-batch stacks): the actor-critic with its normalisers."""
        return {"policy": self.policy}

    def _scalars(self) -> dict[str, torch.Tensor]:
        return {"lr": self.lr}

    def _seed_template(self) -> PPO:
        """A fresh learner of this one's sizes and config: a seed-batch's template."""
        return type(self)(ActorCritic(**self.policy.config), self.cfg, self.device)

    @torch.no_grad()
    def final_values(self, final_obs: TensorDict, time_outs: torch.Tensor) -> torch.Tensor | None:
        """Critic values of the true final observations, where an episode timed out."""
        if not bool(time_outs.any()):
            return None
        return self.policy.value(final_obs)

    # --- the update -------------------------------------------------------------------------------
    def update(self, storage: RolloutStorage, last_obs: TensorDict, generator: torch.Generator | list
               ) -> dict[str, torch.Tensor]:
        """Advantages, then `num_epochs` passes of `num_minibatches` minibatch steps, then the normalisers.

        Returns the statistics as tensors, means over the minibatch steps (each [S] in a seed-batch, where `storage`
        and `last_obs` hold S seeds' rollouts on a leading axis and `generator` is one generator per seed).
        """
        cfg = self.cfg
        obs = _groups(storage.obs)
        flat_obs, actions, old_logp, old_values, adv, returns = self._advantages(
            obs, storage.actions, storage.log_probs, storage.values, storage.rewards, storage.dones, storage.truncs,
            storage.bootstrap_values, _groups(last_obs))
        batch = adv.shape[-1]
        mb_size = batch // cfg.num_minibatches
        sums: dict[str, torch.Tensor] = {}
        for _ in range(cfg.num_epochs):
            perm = per_seed(lambda n, g: torch.randperm(n, generator=g, device="cpu"), batch, generator)
            perm = perm.to(self.device)
            for start in range(0, mb_size * cfg.num_minibatches, mb_size):
                stats = self._minibatch_step(flat_obs, actions, old_logp, old_values, adv, returns,
                                             perm[..., start:start + mb_size])
                for k, v in stats.items():
                    sums[k] = sums[k] + v if k in sums else v
        steps = cfg.num_epochs * cfg.num_minibatches
        # Normalisers learn from this rollout only after the update, so ratios start at exactly 1.
        out = self._update_normalizers(flat_obs)
        self.updates += 1
        storage.step = 0
        return {**{k: v / steps for k, v in sums.items()}, **out}

    def _advantages(self, obs: dict[str, torch.Tensor], actions: torch.Tensor, log_probs: torch.Tensor,
                    values: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor, truncs: torch.Tensor,
                    bootstrap_values: torch.Tensor, last_obs: dict[str, torch.Tensor]) -> tuple[Any, ...]:
        """GAE over the rollout ([T, N]) with the critic's value of `last_obs`; the rollout flattened to [T * N]."""
        cfg = self.cfg
        with torch.no_grad():
            values = torch.cat([values[:-1], self.policy.value(last_obs)[None]])
        # [T, N] -> [N, T]: the shared estimator is batch-major.
        adv, returns = gae(rewards.T, values.T, dones=dones.T, truncs=truncs.T, bootstrap_values=bootstrap_values.T,
                           gamma=cfg.gamma, lam=cfg.lam)
        flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in obs.items()}
        return (flat, actions.reshape(-1, actions.shape[-1]), log_probs.reshape(-1), values[:-1].reshape(-1),
                adv.T.reshape(-1), returns.T.reshape(-1))

    def _minibatch_step(self, obs: dict[str, torch.Tensor], actions: torch.Tensor, old_logp: torch.Tensor,
                        old_values: torch.Tensor, adv: torch.Tensor, returns: torch.Tensor, idx: torch.Tensor
                        ) -> dict[str, torch.Tensor]:
        """One clipped-surrogate step on the minibatch `idx`, at the learning rate the minibatch's KL adapts."""
        cfg = self.cfg
        mb = {k: v[idx] for k, v in obs.items()}
        mb_adv = adv[idx]
        if cfg.normalize_advantages:
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)

        def loss_fn() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            dist = self.policy.distribution(mb)
            logp = dist.log_prob(actions[idx]).sum(-1)
            entropy = dist.entropy().sum(-1).mean()
            pg_loss, info = ppo_clip_loss(logp, old_logp[idx], mb_adv, clip_low=cfg.clip, clip_high=cfg.clip_high,
                                          dual_clip=cfg.dual_clip)
            v_loss = value_loss(self.policy.value(mb), old_values[idx], returns[idx], clip=cfg.value_clip)
            loss = pg_loss + cfg.value_coef * v_loss - cfg.entropy_coef * entropy
            return loss, {"loss/policy": pg_loss.detach(), "loss/value": v_loss.detach(),
                          "loss/entropy": entropy.detach(), "kl": info["approx_kl"],
                          "clip_fraction": info["clip_fraction"]}

        _, stats = self._step(self.optimizer, loss_fn)
        return stats

    def _adapted_lr(self, out: tuple[torch.Tensor, dict[str, torch.Tensor]]) -> torch.Tensor:
        """The rate of this minibatch's step from its KL before the step (rsl_rl's rule: shrink the step when the
        policy moved too far, grow it when it barely moved); `lr` keeps it."""
        if self.cfg.schedule == "adaptive":
            lr, kl, target = self.lr, out[1]["kl"], self.cfg.desired_kl
            if distributed.active():  # every rank adapts by the mean KL: the rates stay equal
                kl = distributed.mean(kl)
            new = torch.where(kl > 2.0 * target, torch.clamp(lr / 1.5, min=1e-5),
                              torch.where((kl > 0.0) & (kl < 0.5 * target), torch.clamp(lr * 1.5, max=1e-2), lr))
            with torch.no_grad():
                self.lr.copy_(new)
        return self.lr

    def _step(self, opt: torch.optim.Optimizer, loss_fn: Callable[[], Any]) -> Any:
        """One Adam step at the adapted rate on the gradient of `loss_fn()`, clipped to `max_grad_norm`
        (`gradient_step`; inside a seed-batch's vmapped update, the batch's functional step)."""
        if self._seed_binding is not None:
            return self._seed_binding.step(opt, loss_fn, self._adapted_lr, self.cfg.max_grad_norm)
        return gradient_step(opt, loss_fn, self.compiled, self._adapted_lr, self.cfg.max_grad_norm)

    @torch.no_grad()
    def _update_normalizers(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fold the rollout into the observation normalisers (in a torchrun job every rank's rollout, so the
        normalisers stay equal); the rate and the action std for the log."""
        if distributed.active():
            self._merge_normalizers(obs)
        else:
            self.policy.update_normalizers(obs)
        return {"learning_rate": self.lr.clone(), "action_std": self.policy.log_std.exp().mean()}


    def _merge_normalizers(self, obs: dict[str, torch.Tensor]) -> None:
        """`update_normalizers` over the rollouts of all ranks: each normaliser merges the union's moments."""
        policy = self.policy
        for norm, x in ((policy.actor_norm, policy.actor_obs(obs)), (policy.critic_norm, policy.critic_obs(obs))):
            if isinstance(norm, RunningNorm):
                x = x.reshape(-1, *norm.mean.shape).to(norm.mean.dtype)
                norm.merge(*distributed.merge_moments(x.mean(0), x.var(0, unbiased=False), x.shape[0]))


def _groups(obs: Any) -> dict[str, torch.Tensor]:
    """A TensorDict's (or dict's) observation groups as a plain dict, what the vmapped methods take."""
    return {k: obs[k] for k in obs.keys()}


register(AlgoSpec("ppo", PPOConfig, "robolearn.algos.online.ppo:PPO", runner="on_policy", actor="gaussian"))
