"""IQL (Kostrikov et al. 2022, "Offline RL with Implicit Q-Learning"): never query Q at an unseen action.

Three fits per step, all on dataset actions only:

1. the value V(s) is the `expectile` (tau) of the target critics' min_i Q'_i(s, a) over the data's actions:
   minimise mean(|tau - 1(u < 0)| u^2), u = Q'(s, a) - V(s)   (tau 0.5: the mean; tau -> 1: the max);
2. the critics regress onto y = r + discount * V(s');
3. the actor by advantage-weighted regression: maximise mean(w log pi(a|s)), w = min(exp(beta (Q'(s, a) - V(s))),
   max_weight); a deterministic actor minimises mean(w ||pi(s) - a||^2) instead (CORL `iql_deterministic`).

V(s') and the advantages come from the value network before its step, as CORL's `ImplicitQLearning.train`.
The stochastic actor's likelihood is that of N(tanh(mu(s)), sigma(s)), a Gaussian around the tanh-Gaussian's
mode, as CORL's and kostrikov/iql's policies (a tanh'd mean, no squashing of the samples): it fits the same
deterministic action tanh(mu) without atanh of actions on the bounds (`act(deterministic=False)` and
`load_policy`'s sample mode draw from the tanh-Gaussian, whose mode is the same). `squashed_likelihood: true`
uses the exact tanh-Gaussian density instead. The actor's learning rate follows CORL's cosine decay to 0 over
`actor_lr_decay_steps` updates (CosineAnnealingLR(T_max=max_timesteps)), computed from `updates`, so it
resumes exactly. Defaults: CORL `algorithms/offline/iql.py`, `configs/offline/iql/halfcheetah/medium_v2.yaml`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from policies.ensemble import EnsembleMLP
from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import polyak_update
from robolearn.algos.offline import base as offline
from robolearn.algos.offline.base import ACTORS, OfflineAlgo, adam, check, check_common, make_actor, make_critics
from robolearn.core.losses import expectile_loss


@dataclasses.dataclass
class IQLConfig:
    actor_hidden: tuple[int, ...] = (256, 256)   # CORL GaussianPolicy / TwinQ / ValueFunction: 2x256, ReLU
    critic_hidden: tuple[int, ...] = (256, 256)
    value_hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    actor_layer_norm: bool = False
    critic_layer_norm: bool = False
    normalize_states: bool = True      # CORL normalize: true (dataset mean/std, inside every network)
    actor: str = "tanh_gaussian"       # or "deterministic" (CORL iql_deterministic: true on hopper-medium(-replay))
    squashed_likelihood: bool = False  # AWR under the tanh-Gaussian itself rather than N(tanh(mu), sigma)
    shared_std: bool = True            # CORL GaussianPolicy: log_std a parameter, one per action dim, all states
    num_critics: int = 2               # CORL TwinQ
    actor_lr: float = 3e-4             # CORL actor_lr: 3e-4
    critic_lr: float = 3e-4            # CORL qf_lr: 3e-4
    value_lr: float = 3e-4             # CORL vf_lr: 3e-4
    actor_lr_decay_steps: int = 1_000_000  # CORL cosine schedule over max_timesteps: 1e6; 0: constant lr
    batch_size: int = 256              # CORL batch_size: 256
    gamma: float = 0.99                # CORL discount: 0.99
    tau: float = 0.005                 # CORL tau: 0.005 (Polyak rate of the target critics)
    expectile: float = 0.7             # CORL iql_tau: 0.7 (locomotion; antmaze 0.9)
    beta: float = 3.0                  # CORL beta: 3.0 (inverse temperature; antmaze 10.0)
    max_weight: float = 100.0          # CORL EXP_ADV_MAX: 100 (clip of exp(beta * advantage))
    reward_scale: float = 1.0          # r <- scale * r + bias (CORL antmaze: r - 1, reward_bias -1)
    reward_bias: float = 0.0
    compile: bool = False              # torch.compile the whole update (three fits, Adam, Polyak) into one graph

    def validate(self) -> None:
        check(self.actor in ACTORS, f"iql.actor must be one of {ACTORS}, got {self.actor!r}")
        check_common(self, "iql")
        check(0.0 < self.expectile < 1.0, f"iql.expectile must be in (0, 1), got {self.expectile}")
        check(self.beta >= 0, f"iql.beta must be >= 0, got {self.beta}")
        check(self.max_weight > 0, f"iql.max_weight must be > 0, got {self.max_weight}")
        check(self.actor_lr_decay_steps >= 0, f"iql.actor_lr_decay_steps must be >= 0, got {self.actor_lr_decay_steps}")


class IQL(OfflineAlgo):
    """IQL: `value_loss`, `critic_loss` and `actor_loss` are the three objectives; `update` steps all three."""

    name = "iql"

    def __init__(self, obs_dim: int, num_actions: int, cfg: IQLConfig | None = None,
                 device: str | torch.device = "cpu"):
        cfg = cfg if cfg is not None else IQLConfig()
        super().__init__(obs_dim, num_actions, cfg, device)
        self.actor = make_actor(cfg.actor, obs_dim, num_actions, cfg).to(self.device)
        self.critic, self.critic_target = make_critics(obs_dim, num_actions, cfg, self.device)
        self.value = EnsembleMLP(1, obs_dim, cfg.value_hidden, 1, cfg.activation,  # V(s)
                                 obs_norm=offline.normalizes_states(cfg)).to(self.device)
        self._optimizers = {"actor": adam(self.actor.parameters(), cfg.actor_lr),
                            "critic": adam(self.critic.parameters(), cfg.critic_lr),
                            "value": adam(self.value.parameters(), cfg.value_lr)}
        self._describe(cfg.actor)
        self._update_graphs("_fit")

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target, "value": self.value}

    def v(self, obs: torch.Tensor) -> torch.Tensor:
        """[B] V(s)."""
        return self.value(obs)[0, :, 0]

    # --- losses ---------------------------------------------------------------------------------
    def value_loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The expectile loss of u = min_i Q'_i(s, a) - V(s); also returns u (the advantages, detached)."""
        obs = batch["obs"]["policy"]
        with torch.no_grad():
            q = self.critic_target(obs, batch["actions"]).min(0).values
        adv = q - self.v(obs)
        return expectile_loss(adv, self.cfg.expectile), adv.detach()

    def critic_loss(self, batch: dict[str, Any], next_v: torch.Tensor) -> torch.Tensor:
        """Mean over the critics of each one's mean squared error to y = r + discount * V(s') (CORL: their average)."""
        target = self._rewards(batch) + batch["discount"] * next_v
        q = self.critic(batch["obs"]["policy"], batch["actions"])
        return ((q - target) ** 2).mean()

    def actor_loss(self, batch: dict[str, Any], adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """mean(w * -log pi(a|s)) (deterministic: mean(w * ||pi(s) - a||^2)), w = min(exp(beta * adv), max_weight);
        also returns w."""
        obs, actions = batch["obs"]["policy"], batch["actions"]
        weights = torch.exp(self.cfg.beta * adv).clamp(max=self.cfg.max_weight)
        if self.cfg.actor == "deterministic":
            per_sample = ((self.actor(obs) - actions) ** 2).sum(-1)
        else:
            per_sample = -self.actor.log_prob(obs, actions, squashed=self.cfg.squashed_likelihood)
        return (weights * per_sample).mean(), weights

    def actor_lr(self) -> float:
        """The actor's learning rate at this update: cosine from actor_lr down to 0 over actor_lr_decay_steps."""
        cfg = self.cfg
        if cfg.actor_lr_decay_steps == 0:
            return cfg.actor_lr
        progress = min(self.updates, cfg.actor_lr_decay_steps) / cfg.actor_lr_decay_steps
        return cfg.actor_lr * 0.5 * (1.0 + math.cos(math.pi * progress))

    # --- one gradient step ----------------------------------------------------------------------
    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Value, critic (+ Polyak) and actor steps on one batch; V(s') and the advantages from V before its step."""
        self._ensure_adam_state()  # a restore may have replaced it with an empty state
        lr = self.actor_lr()
        for group in self._optimizers["actor"].param_groups:  # CORL steps its scheduler after each actor step:
            group["lr"] = lr                                   # lr(t) for step t + 1 (and the checkpoint keeps it)
        steps = batch.get("steps")
        stats = self._fit(batch["obs"]["policy"], batch["actions"], batch["rewards"],
                          torch.ones_like(batch["rewards"]) if steps is None else steps, batch["discount"],
                          batch["next_obs"]["policy"], torch.tensor(lr, device=self.device) if self.compiled else None)
        self.updates += 1
        return stats

    def _fit(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, steps: torch.Tensor,
             discount: torch.Tensor, next_obs: torch.Tensor, actor_lr: torch.Tensor | None
             ) -> dict[str, torch.Tensor]:
        """The tensor work of `update` (what `compile: true` makes one graph, the actor's rate a graph input;
        eager Adam reads it from the param group)."""
        batch = {"obs": {"policy": obs}, "actions": actions, "rewards": rewards, "steps": steps,
                 "discount": discount, "next_obs": {"policy": next_obs}}
        with torch.no_grad():
            next_v = self.v(next_obs)
        value_loss, adv = self._step(self._optimizers["value"], lambda: self.value_loss(batch))
        critic_loss = self._step(self._optimizers["critic"], lambda: self.critic_loss(batch, next_v))
        polyak_update(self.critic_target, self.critic, self.cfg.tau)
        actor_loss, weights = self._step(self._optimizers["actor"], lambda: self.actor_loss(batch, adv), actor_lr)
        return {"value_loss": value_loss.detach(), "critic_loss": critic_loss.detach(),
                "actor_loss": actor_loss.detach(), "adv_mean": adv.mean(), "weight_mean": weights.detach().mean()}


register(AlgoSpec("iql", IQLConfig, "robolearn.algos.offline.iql:IQL", runner="offline", actor="tanh_gaussian"))
