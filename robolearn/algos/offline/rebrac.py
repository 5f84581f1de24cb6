"""ReBRAC (Tarasov et al. 2023, "Revisiting the Minimalist Approach to Offline RL"): TD3+BC, tuned.

What it changes over `robolearn.algos.offline.td3_bc`, each a field below:

- LayerNorm in the critics, deeper networks (3x256), larger batches (1024) and learning rates (1e-3);
- a BC penalty in the actor, beta_actor * sum_j (pi(s)_j - a_j)^2, against the min over the critics
  scaled by 1 / mean|Q| (`normalize_q`):   loss = mean(beta_actor * ||pi(s) - a||^2 - Q(s, pi(s)) / mean|Q|);
- a BC penalty in the critic's target as well, on the next state, against the dataset's next action a'_data:
      y = r + discount * (min_i Q'_i(s', a') - beta_critic * ||a' - a'_data||^2),   a' = clip(pi'(s') + noise).

The batch must therefore carry `next_actions` [B, A], the dataset's action at `next_obs` (any value where
`discount` is 0), unless beta_critic is 0: `ReBRAC.dataset_next_actions` makes them for a dataset.

Defaults are CORL's `algorithms/offline/rebrac.py` with `configs/offline/rebrac/hopper/medium_v2.yaml`
(actor_bc_coef 0.01, critic_bc_coef 0.01; see `configs/algo/rebrac.yaml` for the other datasets). Unlike CORL's
flax networks, LayerNorm comes before the activation (`policies.ensemble`, as RLPD) rather than after it, and
the layers keep PyTorch's default init (CORL: bias 0.1, final layer uniform +-3e-3 for the critic and +-1e-3
for the actor).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.offline.base import check, check_common
from robolearn.algos.offline.td3_bc import TD3BC
from robolearn.errors import ConfigError


@dataclasses.dataclass
class ReBRACConfig:
    actor_hidden: tuple[int, ...] = (256, 256, 256)   # CORL hidden_dim 256, actor_n_hiddens 3
    critic_hidden: tuple[int, ...] = (256, 256, 256)  # CORL critic_n_hiddens 3
    activation: str = "relu"
    actor_layer_norm: bool = False     # CORL actor_ln: false
    critic_layer_norm: bool = True     # CORL critic_ln: true
    normalize_states: bool = False     # CORL normalize_states: false
    num_critics: int = 2               # CORL EnsembleCritic(num_critics=2)
    actor_lr: float = 1e-3             # CORL actor_learning_rate: 0.001 (locomotion)
    critic_lr: float = 1e-3            # CORL critic_learning_rate: 0.001 (locomotion)
    batch_size: int = 1024             # CORL batch_size: 1024 (locomotion)
    gamma: float = 0.99                # CORL gamma: 0.99
    tau: float = 0.005                 # CORL tau: 5e-3
    policy_noise: float = 0.2          # CORL policy_noise: 0.2
    noise_clip: float = 0.5            # CORL noise_clip: 0.5
    actor_every: int = 2               # CORL policy_freq: 2
    beta_actor: float = 0.01           # CORL actor_bc_coef (hopper-medium-v2: 0.01)
    beta_critic: float = 0.01          # CORL critic_bc_coef (hopper-medium-v2: 0.01)
    normalize_q: bool = True           # CORL normalize_q: true (lambda = 1 / mean|Q|)
    reward_scale: float = 1.0          # r <- scale * r + bias (CORL antmaze: normalize_reward, r * 100)
    reward_bias: float = 0.0
    compile: bool = False              # torch.compile the update steps into graphs (`compile_update`)

    def validate(self) -> None:
        check_common(self, "rebrac")
        check(self.beta_actor >= 0 and self.beta_critic >= 0,
              f"rebrac.beta_actor and beta_critic must be >= 0, got {self.beta_actor}, {self.beta_critic}")
        check(self.policy_noise >= 0 and self.noise_clip >= 0,
              f"rebrac.policy_noise and noise_clip must be >= 0, got {self.policy_noise}, {self.noise_clip}")
        check(self.actor_every >= 1, f"rebrac.actor_every must be >= 1, got {self.actor_every}")


class ReBRAC(TD3BC):
    """TD3+BC's networks, delays and targets; ReBRAC's penalised target and actor loss."""

    name = "rebrac"

    def __init__(self, obs_dim: int, num_actions: int, cfg: ReBRACConfig | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(obs_dim, num_actions, cfg if cfg is not None else ReBRACConfig(), device)

    @staticmethod
    def dataset_next_actions(actions: Any, step_starts: Any) -> torch.Tensor:
        """[N, A] every transition's `next_actions` for a dataset of episodes: its actions [N, A] shifted by one
        within each episode (`step_starts` [E + 1] as `robolearn.data.Dataset`'s). An episode's last step has no
        next action in the data: it repeats its own, which matters only where a time-out bootstraps (CORL drops
        time-out transitions instead)."""
        actions = torch.tensor(actions, dtype=torch.float32)  # a copy: the data may be a read-only memory map
        following = torch.cat([actions[1:], actions[-1:]])
        last = torch.as_tensor(step_starts[1:], dtype=torch.long) - 1  # each episode's last step
        following[last] = actions[last]
        return following

    @torch.no_grad()
    def target(self, batch: dict[str, Any], noise: torch.Tensor) -> torch.Tensor:
        """[B] r + discount * (min_i Q'_i(s', a') - beta_critic * ||a' - a'_data||^2), a' = clip(pi'(s') + noise)."""
        next_obs = batch["next_obs"]["policy"]
        next_actions = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
        next_q = self.critic_target(next_obs, next_actions).min(0).values
        if self.cfg.beta_critic > 0:
            if "next_actions" not in batch:
                raise ConfigError("ReBRAC's critic penalty needs batch['next_actions'] (the dataset's action at "
                                  "next_obs); give the batches that key or set rebrac.beta_critic=0")
            next_q = next_q - self.cfg.beta_critic * ((next_actions - batch["next_actions"]) ** 2).sum(-1)
        return self._rewards(batch) + batch["discount"] * next_q

    def actor_loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """mean(beta_actor * ||pi(s) - a||^2 - lambda * min_i Q_i(s, pi(s))), lambda = 1 / mean|min_i Q_i|
        (detached; 1 without `normalize_q`)."""
        obs, actions = batch["obs"]["policy"], batch["actions"]
        pi = self.actor(obs)
        q = self.critic(obs, pi).min(0).values
        lmbda = 1.0 / q.abs().mean().detach() if self.cfg.normalize_q else torch.ones((), device=self.device)
        bc = ((pi - actions) ** 2).sum(-1)
        loss = (self.cfg.beta_actor * bc - lmbda * q).mean()
        return loss, {"actor_loss": loss.detach(), "bc_loss": bc.detach().mean(), "lambda": lmbda}


register(AlgoSpec("rebrac", ReBRACConfig, "robolearn.algos.offline.rebrac:ReBRAC", runner="offline",
                   actor="deterministic"))
