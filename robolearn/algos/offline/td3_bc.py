"""TD3+BC (Fujimoto & Gu 2021): TD3 whose actor also regresses onto the dataset's actions.

The critics learn exactly as TD3's (clipped double-Q target at a smoothed target-policy action); the actor,
every second step, minimises

    -lambda * Q1(s, pi(s)) + mean((pi(s) - a)^2),     lambda = alpha / mean|Q1(s, pi(s))|  (no gradient)

so the Q term is scale-free and `alpha` alone trades RL against BC. Defaults are CORL's
`algorithms/offline/td3_bc.py` with `configs/offline/td3_bc/*` (every D4RL locomotion config: alpha 2.5,
policy_noise 0.2, noise_clip 0.5, policy_freq 2, tau 0.005, batch 256, lr 3e-4, 2x256 networks). CORL also
normalises the states with the dataset's mean and std (`normalize: true`): `normalize_states`, a normaliser inside
every network that the offline runner fits on the dataset (`OfflineAlgo.fit_state_normalizer`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import polyak_update
from robolearn.algos.offline.base import OfflineAlgo, adam, check, check_common, frozen_copy, make_actor, make_critics


@dataclasses.dataclass
class TD3BCConfig:
    actor_hidden: tuple[int, ...] = (256, 256)   # CORL Actor / Critic: 2 hidden layers of 256, ReLU
    critic_hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    actor_layer_norm: bool = False
    critic_layer_norm: bool = False
    normalize_states: bool = True  # CORL normalize: true (dataset mean/std, inside actor and critics)
    num_critics: int = 2           # the clipped double-Q pair
    actor_lr: float = 3e-4         # CORL: Adam lr 3e-4 for actor and critics
    critic_lr: float = 3e-4
    batch_size: int = 256          # CORL batch_size: 256
    gamma: float = 0.99            # CORL discount: 0.99
    tau: float = 0.005             # CORL tau: 0.005
    policy_noise: float = 0.2      # CORL policy_noise: 0.2 (target-policy smoothing std)
    noise_clip: float = 0.5        # CORL noise_clip: 0.5
    actor_every: int = 2           # CORL policy_freq: 2 (actor and target updates every 2nd step)
    alpha: float = 2.5             # CORL alpha: 2.5
    reward_scale: float = 1.0      # r <- scale * r + bias (CORL normalize_reward is false on locomotion)
    reward_bias: float = 0.0
    compile: bool = False              # torch.compile the update steps into graphs (`compile_update`)

    def validate(self) -> None:
        check_common(self, "td3_bc")
        check(self.alpha >= 0, f"td3_bc.alpha must be >= 0, got {self.alpha}")
        check(self.policy_noise >= 0 and self.noise_clip >= 0,
              f"td3_bc.policy_noise and noise_clip must be >= 0, got {self.policy_noise}, {self.noise_clip}")
        check(self.actor_every >= 1, f"td3_bc.actor_every must be >= 1, got {self.actor_every}")


class TD3BC(OfflineAlgo):
    """TD3+BC; ReBRAC (`robolearn.algos.offline.rebrac`) changes only `target` and `actor_loss`."""

    name = "td3_bc"

    def __init__(self, obs_dim: int, num_actions: int, cfg: TD3BCConfig | None = None,
                 device: str | torch.device = "cpu"):
        cfg = cfg if cfg is not None else TD3BCConfig()
        super().__init__(obs_dim, num_actions, cfg, device)
        self.actor = make_actor("deterministic", obs_dim, num_actions, cfg).to(self.device)
        target = make_actor("deterministic", obs_dim, num_actions, cfg).to(self.device)
        self.actor_target = frozen_copy(self.actor, target)
        self.critic, self.critic_target = make_critics(obs_dim, num_actions, cfg, self.device)
        self._optimizers = {"actor": adam(self.actor.parameters(), cfg.actor_lr),
                            "critic": adam(self.critic.parameters(), cfg.critic_lr)}
        self._describe("deterministic")
        self._update_graphs("_critic_fit", "_actor_fit")

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "actor_target": self.actor_target,
                "critic": self.critic, "critic_target": self.critic_target}

    # --- losses ---------------------------------------------------------------------------------
    def draw(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Target-policy smoothing noise [B, A]: N(0, policy_noise^2) clipped to +-noise_clip."""
        cfg = self.cfg
        noise = torch.randn(batch_size, self.num_actions, generator=generator, device=self.device)
        return (noise * cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)

    @torch.no_grad()
    def target(self, batch: dict[str, Any], noise: torch.Tensor) -> torch.Tensor:
        """[B] r + discount * min_i Q'_i(s', a'), a' = clip(pi'(s') + noise, -1, 1) (TD3's clipped double Q)."""
        next_obs = batch["next_obs"]["policy"]
        next_actions = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
        next_q = self.critic_target(next_obs, next_actions).min(0).values
        return self._rewards(batch) + batch["discount"] * next_q

    def critic_loss(self, batch: dict[str, Any], noise: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Sum over the critics of each one's mean squared TD error (CORL: mse(Q1, y) + mse(Q2, y))."""
        q = self.critic(batch["obs"]["policy"], batch["actions"])
        loss = ((q - self.target(batch, noise)) ** 2).mean(-1).sum()
        return loss, {"critic_loss": loss.detach(), "q_mean": q.detach().mean()}

    def actor_loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """-lambda * mean Q1(s, pi(s)) + mean((pi(s) - a)^2), lambda = alpha / mean|Q1(s, pi(s))| (detached)."""
        obs, actions = batch["obs"]["policy"], batch["actions"]
        pi = self.actor(obs)
        q = self.critic(obs, pi)[0]
        lmbda = self.cfg.alpha / q.abs().mean().detach()
        bc = ((pi - actions) ** 2).mean()
        loss = -lmbda * q.mean() + bc
        return loss, {"actor_loss": loss.detach(), "bc_loss": bc.detach(), "lambda": lmbda}

    # --- one gradient step ----------------------------------------------------------------------
    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """A critic step; every `actor_every`-th call also an actor step and the Polyak update of both targets.
        The draws happen here, the tensor work in `_critic_fit` / `_actor_fit` (graphs with `compile: true`)."""
        self._ensure_adam_state()  # a restore may have replaced it with an empty state
        self.updates += 1
        stats = self._critic_fit(batch, self._draws(batch, generator))
        if self.updates % self.cfg.actor_every == 0:
            stats.update(self._actor_fit(batch))  # on the critic just updated, as CORL
        return stats

    def _critic_fit(self, batch: dict[str, Any], noise: torch.Tensor) -> dict[str, torch.Tensor]:
        _, stats = self._step(self._optimizers["critic"], lambda: self.critic_loss(batch, noise))
        return stats

    def _actor_fit(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        _, stats = self._step(self._optimizers["actor"], lambda: self.actor_loss(batch))
        polyak_update(self.critic_target, self.critic, self.cfg.tau)
        polyak_update(self.actor_target, self.actor, self.cfg.tau)
        return stats


register(AlgoSpec("td3_bc", TD3BCConfig, "robolearn.algos.offline.td3_bc:TD3BC", runner="offline",
                   actor="deterministic"))
