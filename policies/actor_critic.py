"""MLP actor-critic for PPO: a Gaussian actor with state-independent log-std and a value critic.

The actor reads the `"policy"` observation group; the critic reads `"critic"` (privileged) when the
environment provides it, else `"policy"` (asymmetric actor-critic, as rsl_rl and Playground do).
Each has its own running observation normaliser, saved with the checkpoint.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from policies.normalizer import RunningNorm

ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}


def mlp(in_dim: int, hidden: list[int] | tuple[int, ...], out_dim: int, activation: str = "elu") -> nn.Sequential:
    """A plain MLP: Linear + activation per hidden layer, then a linear output."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(in_dim, h), ACTIVATIONS[activation]()]
        in_dim = h
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Gaussian policy N(mu(o), diag(exp(log_std))^2) and value V(o_critic)."""

    def __init__(self, obs_dim: int, num_actions: int, critic_obs_dim: int | None = None,
                 actor_hidden: tuple[int, ...] = (256, 256, 256), critic_hidden: tuple[int, ...] = (256, 256, 256),
                 activation: str = "elu", init_std: float = 1.0, normalize_obs: bool = True):
        super().__init__()
        critic_obs_dim = critic_obs_dim or obs_dim
        self.config = {"obs_dim": obs_dim, "num_actions": num_actions, "critic_obs_dim": critic_obs_dim,
                       "actor_hidden": list(actor_hidden), "critic_hidden": list(critic_hidden),
                       "activation": activation, "init_std": init_std, "normalize_obs": normalize_obs}
        self.actor = mlp(obs_dim, actor_hidden, num_actions, activation)
        self.critic = mlp(critic_obs_dim, critic_hidden, 1, activation)
        self.log_std = nn.Parameter(torch.full((num_actions,), float(torch.tensor(init_std).log())))
        self.actor_norm = RunningNorm(obs_dim) if normalize_obs else nn.Identity()
        self.critic_norm = RunningNorm(critic_obs_dim) if normalize_obs else nn.Identity()
        # Small last-layer weights: actions start near zero, values near zero (common PPO practice).
        nn.init.orthogonal_(self.actor[-1].weight, gain=0.01)
        nn.init.zeros_(self.actor[-1].bias)

    @staticmethod
    def actor_obs(obs: TensorDict) -> torch.Tensor:
        return obs["policy"]

    @staticmethod
    def critic_obs(obs: TensorDict) -> torch.Tensor:
        return obs["critic"] if "critic" in obs.keys() else obs["policy"]

    def update_normalizers(self, obs: TensorDict) -> None:
        if isinstance(self.actor_norm, RunningNorm):
            self.actor_norm.update(self.actor_obs(obs))
            self.critic_norm.update(self.critic_obs(obs))

    def distribution(self, obs: TensorDict) -> torch.distributions.Normal:
        mean = self.actor(self.actor_norm(self.actor_obs(obs)))
        # no argument validation: its data-dependent checks cannot run inside a seed-batch's vmapped update
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False)

    def value(self, obs: TensorDict) -> torch.Tensor:
        return self.critic(self.critic_norm(self.critic_obs(obs))).squeeze(-1)

    def act(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (actions, log-probabilities, values)."""
        dist = self.distribution(obs)
        actions = dist.sample()
        return actions, dist.log_prob(actions).sum(-1), self.value(obs)

    def act_deterministic(self, obs: TensorDict) -> torch.Tensor:
        return self.actor(self.actor_norm(self.actor_obs(obs)))

    def forward(self, obs: TensorDict) -> torch.Tensor:
        """The deployed policy: the mean action."""
        return self.act_deterministic(obs)
