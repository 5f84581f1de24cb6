"""TD3 (Fujimoto et al. 2018): a deterministic actor, clipped double-Q targets, target-policy smoothing
and delayed actor updates. It shares SAC's critic ensemble, target subset and Polyak update, so the
ensemble knobs (N critics, min over a subset of M) apply here too, and runs in the same off-policy runner.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from policies.ensemble import DeterministicActor
from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import actor_objective_q, polyak_update, shaped_rewards
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.errors import ConfigError


@dataclasses.dataclass
class TD3Config(SACConfig):
    exploration_noise: float = 0.1   # std of the Gaussian noise added to actions while collecting
    policy_noise: float = 0.2        # std of the target-policy smoothing noise
    noise_clip: float = 0.5          # the smoothing noise is clipped to +-noise_clip
    actor_every: int = 2             # policy delay: one actor (and target) update per 2 critic updates
    actor_q: str = "first"           # the actor maximises Q1 alone (sfujim/TD3: -critic.Q1(s, actor(s)).mean())

    def validate(self) -> None:
        super().validate()
        if self.max_target_backup:  # a deterministic actor has one next action: nothing to take the max over
            raise ConfigError("td3 has no max_target_backup (its target action is the deterministic actor's)")


class TD3(SAC):
    """The learner; `act`, `update`, `model_state` and `optimizers` as `SAC`'s, for the runner."""

    def __init__(self, obs_dim: int, critic_obs_dim: int, num_actions: int, cfg: TD3Config | None = None,
                 device: str | torch.device = "cpu"):
        cfg = cfg if cfg is not None else TD3Config()
        super().__init__(obs_dim, critic_obs_dim, num_actions, cfg, device)
        self.actor_target = self._make_actor(obs_dim, num_actions).to(self.device)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_target.requires_grad_(False)
        self.config["td3"] = self.config.pop("sac")

    def _make_actor(self, obs_dim: int, num_actions: int) -> torch.nn.Module:
        cfg = self.cfg
        return DeterministicActor(obs_dim, num_actions, cfg.actor_hidden, cfg.activation, cfg.actor_layer_norm,
                                  cfg.normalize_states)

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
        action = self.actor(obs["policy"].to(self.device))
        if deterministic:
            return action
        noise = torch.randn(action.shape, generator=generator, device=self.device) * self.cfg.exploration_noise
        return (action + noise).clamp(-1.0, 1.0)

    def _noise(self, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
        """Target-policy smoothing noise: N(0, policy_noise^2) clipped to +-noise_clip."""
        cfg = self.cfg
        return (super()._noise(batch_size, generator) * cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)

    def _critic_update(self, obs_c: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                       steps: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                       next_obs_c: torch.Tensor, noise: torch.Tensor, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """Clipped double-Q target at the smoothed target action; the targets move with the actor (delayed)."""
        cfg = self.cfg
        with torch.no_grad():
            next_actions = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
            shaped = shaped_rewards(rewards, steps, cfg.gamma, cfg.reward_scale, cfg.reward_bias)
            target = shaped + discount * self._target_min(next_obs_c, next_actions, idx)
        return self._critic_step(obs_c, actions, target)

    def update_actor(self, batch: dict[str, Any], generator: torch.Generator | None = None
                     ) -> dict[str, torch.Tensor]:
        return self._actor_update(batch["obs"]["policy"], self.critic_obs(batch["obs"]), None)

    def _actor_update(self, obs: torch.Tensor, obs_c: torch.Tensor, noise: torch.Tensor | None
                      ) -> dict[str, torch.Tensor]:
        """Maximise Q(s, mu(s)) as `actor_q` says (default: the first critic, as the original TD3);
        then the delayed Polyak update of both targets. The actor is deterministic: no `noise`."""
        loss = self._step(self.actor_opt, lambda: -actor_objective_q(
            self._q_values(self.critic(obs_c, self.actor(obs))), self.cfg.actor_q).mean())
        stats = {"actor_loss": loss.detach().clone()}
        polyak_update(self.critic_target, self.critic, self.cfg.tau)
        polyak_update(self.actor_target, self.actor, self.cfg.tau)
        return stats

    def model_state(self) -> dict[str, torch.Tensor]:
        state = super().model_state()
        state.update({f"actor_target.{k}": v for k, v in self.actor_target.state_dict().items()})
        return state

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        super().load_model_state(state)
        self.actor_target.load_state_dict({k[13:]: v for k, v in state.items() if k.startswith("actor_target.")})

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_opt, "critic": self.critic_opt}

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {**super()._networks(), "actor_target": self.actor_target}

    def _scalars(self) -> dict[str, torch.Tensor]:
        return {}  # no temperature


register(AlgoSpec("td3", TD3Config, "robolearn.algos.online.td3:TD3", runner="off_policy", actor="deterministic"))
