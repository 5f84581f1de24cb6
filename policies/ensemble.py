"""Batched ensembles and the squashed-Gaussian actor used by the off-policy algorithms.

An ensemble of E MLPs runs as one batched matmul per layer (`torch.baddbmm` over an [E, in, out]
weight), never as a Python loop over members: ten critics cost about what one wide critic costs.
Each member is initialised independently, like E separate `nn.Linear` stacks.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from policies.actor_critic import ACTIVATIONS
from policies.normalizer import FixedNorm


class EnsembleLinear(nn.Module):
    """E independent linear layers: x [E, B, in] -> [E, B, out]."""

    def __init__(self, num_members: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_members, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # nn.Linear's default initialisation, per member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """E MLPs evaluated together; optional LayerNorm after each hidden linear (Linear -> LN -> act, as RLPD).

    `forward(x)` takes [B, in] (the same input for every member) or [E, B, in] and returns [E, B, out].
    `obs_norm`: the input first goes through a `FixedNorm` (`obs_norm`, the identity until fitted on a dataset).
    """

    def __init__(self, num_members: int, in_dim: int, hidden: tuple[int, ...] | list[int], out_dim: int,
                 activation: str = "relu", layer_norm: bool = False, obs_norm: bool = False):
        super().__init__()
        self.obs_norm = FixedNorm(in_dim) if obs_norm else None
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        if num_members < 1:
            raise ValueError(f"an ensemble needs at least one member, got {num_members}")
        self.num_members = num_members
        layers: list[nn.Module] = []
        for h in hidden:
            layers.append(EnsembleLinear(num_members, in_dim, h))
            if layer_norm:  # normalises each member's features; the affine parameters are shared-shape per member
                layers.append(MemberLayerNorm(num_members, h))
            layers.append(ACTIVATIONS[activation]())
            in_dim = h
        layers.append(EnsembleLinear(num_members, in_dim, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.obs_norm is not None:
            x = self.obs_norm(x)
        if x.ndim == 2:
            x = x.unsqueeze(0).expand(self.num_members, *x.shape)
        return self.net(x)


class MemberLayerNorm(nn.Module):
    """LayerNorm over features with separate gain and bias per ensemble member."""

    def __init__(self, num_members: int, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.layer_norm(x, x.shape[-1:], eps=self.eps)
        return x * self.weight + self.bias


class QEnsemble(nn.Module):
    """E critics Q_i(o, a) in one batched network; returns [E, B] values or [E, B, bins] logits."""

    def __init__(self, obs_dim: int, num_actions: int, num_critics: int = 2, hidden: tuple[int, ...] = (256, 256),
                 activation: str = "relu", layer_norm: bool = False, num_bins: int = 1, obs_norm: bool = False):
        super().__init__()
        self.num_bins = num_bins
        # obs_norm: the [obs, action] input is normalised; fitting on observations sets the obs part only
        self.net = EnsembleMLP(num_critics, obs_dim + num_actions, hidden, num_bins, activation, layer_norm, obs_norm)

    @property
    def num_critics(self) -> int:
        return self.net.num_members

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        out = self.net(torch.cat([obs, actions], -1))
        return out.squeeze(-1) if self.num_bins == 1 else out


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class TanhGaussianActor(nn.Module):
    """pi(a|o) = tanh(N(mu(o), sigma(o))): actions in (-1, 1) with the exact squashed log-density.

    The log-std is squashed into [LOG_STD_MIN, LOG_STD_MAX] smoothly (tanh), as in SAC
    implementations that must stay differentiable at the bounds. `shared_std`: one learned log-std per action
    dimension for every state (a parameter, initialised at 0 and clipped to the bounds), the network giving the
    mean only: IQL's Gaussian policy in kostrikov/iql and CORL. Under advantage-weighted regression a per-state
    std lets the fit shrink sigma(o) where a few samples carry the weight, which then dominates the gradient of the
    mean everywhere else (IQL on a cheetah-run medium-expert: 6-10 with a per-state std, 26-37 with a shared one,
    BC 34-41; README, offline fidelity).
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden: tuple[int, ...] = (256, 256),
                 activation: str = "relu", layer_norm: bool = False, obs_norm: bool = False,
                 shared_std: bool = False):
        super().__init__()
        outputs = num_actions if shared_std else 2 * num_actions
        self.net = EnsembleMLP(1, obs_dim, hidden, outputs, activation, layer_norm, obs_norm)
        self.log_std = nn.Parameter(torch.zeros(num_actions)) if shared_std else None

    def _stats(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.log_std is not None:
            mean = self.net(obs)[0]
            return mean, self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).expand_as(mean)
        mean, log_std = self.net(obs)[0].chunk(2, -1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        return mean, log_std

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None,
               noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample and its log-probability [B]; `noise` (standard normal [B, A]) if given."""
        mean, log_std = self._stats(obs)
        if noise is None:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return self._squash(mean, log_std, noise)

    def sample_many(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """n samples per observation: obs [B, D], standard normal noise [B, n, A] -> actions [B, n, A], log-probs
        [B, n]. The network runs once per observation (CQL draws 10 actions at each state), not once per sample."""
        mean, log_std = self._stats(obs)
        return self._squash(mean.unsqueeze(1), log_std.unsqueeze(1), noise)

    @staticmethod
    def _squash(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pre = mean + log_std.exp() * noise
        action = torch.tanh(pre)
        # log N(pre) - sum log(1 - tanh(pre)^2), the latter written stably as 2 (log 2 - pre - softplus(-2 pre)).
        log_prob = (-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2.0 * (math.log(2.0) - pre - nn.functional.softplus(-2.0 * pre))).sum(-1)
        return action, log_prob

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor, squashed: bool = True,
                 eps: float = 1e-6) -> torch.Tensor:
        """[B] log-density of given actions in [-1, 1] (a dataset's), for behaviour cloning and AWR.

        `squashed`: under this tanh-Gaussian itself; the actions are clipped to +-(1 - eps) first, so that
        atanh stays finite for actions on the bounds. Otherwise under the Gaussian N(tanh(mu), sigma) centred
        on the same mode, the likelihood that IQL's advantage-weighted regression fits in kostrikov/iql and
        CORL: no atanh, so actions on the bounds pull no harder than any other.
        """
        mean, log_std = self._stats(obs)
        if squashed:
            a = actions.clamp(-1.0 + eps, 1.0 - eps)
            z = (torch.atanh(a) - mean) / log_std.exp()
            jacobian = torch.log1p(-a**2).sum(-1)  # log |d tanh(u) / du| at u = atanh(a)
        else:
            z = (actions - torch.tanh(mean)) / log_std.exp()
            jacobian = 0.0
        return (-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1) - jacobian

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action tanh(mu(o)), for evaluation and deployment."""
        return torch.tanh(self._stats(obs)[0])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mode(obs)


class DeterministicActor(nn.Module):
    """a = tanh(mu(o)): TD3's actor, an MLP with a squashed output."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: tuple[int, ...] = (256, 256),
                 activation: str = "relu", layer_norm: bool = False, obs_norm: bool = False):
        super().__init__()
        self.net = EnsembleMLP(1, obs_dim, hidden, num_actions, activation, layer_norm, obs_norm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)[0])

    mode = forward
