"""A frozen action-chunk policy steered through its initial noise: what DSRL (Wagenmaker et al. 2025) trains, as one
policy to evaluate and deploy.

The base (a `FlowPolicy` or `DiffusionPolicy`) maps initial noise to an action chunk deterministically (the flow's
ODE, DDIM); a latent actor (SAC's tanh-Gaussian) picks that noise per observation: w in [-1, 1]^(H * A), or ^A
when `shared` (one noise vector repeated over the chunk, DSRL-pi0's action space), scaled by `magnitude`.
`latent_noise` and `denoise` are the one definition of that map; `robolearn.algos.chunk.dsrl` trains through them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from policies.diffusion import DiffusionPolicy
from policies.ensemble import TanhGaussianActor
from policies.flow import FlowPolicy

BASES = {"flow": FlowPolicy, "diffusion": DiffusionPolicy}


def latent_noise(w: torch.Tensor, base: FlowPolicy | DiffusionPolicy, magnitude: float) -> torch.Tensor:
    """Initial noise [B, H, A] for latent actions w [B, H * A] (one per chunk element) or [B, A] (shared: one
    noise vector repeated over the chunk), scaled by `magnitude`."""
    per_step = w.shape[1] // base.action_dim
    return magnitude * w.reshape(w.shape[0], per_step, base.action_dim).expand(-1, base.chunk, -1)


def denoise(base: FlowPolicy | DiffusionPolicy, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The base policy's deterministic chunk [B, H, A] from initial noise [B, H, A]."""
    if isinstance(base, FlowPolicy):
        return base.sample(obs, "ode", noise=noise)[0]
    return base.sample(obs, noise)


class SteeredChunkPolicy(nn.Module):
    """obs [B, D] -> action chunks [B, H, A]: the latent actor's noise through the frozen base.

    `forward` plays the latent actor's mode tanh(mu) (the deterministic policy); `sample(obs, noise)` draws the
    latent from standard-normal `noise` [B, H, A] (its first latent-size entries per row, so a chunk policy's
    sampler interface fits)."""

    def __init__(self, base_kind: str, base_config: dict[str, Any], actor_config: dict[str, Any],
                 magnitude: float, shared: bool):
        super().__init__()
        if base_kind not in BASES:
            raise ValueError(f"a steered base must be one of {sorted(BASES)}, got {base_kind!r}")
        self.base = BASES[base_kind](**base_config).requires_grad_(False)
        self.latent_actor = TanhGaussianActor(**actor_config)
        self.magnitude, self.shared = float(magnitude), bool(shared)
        self.chunk, self.action_dim = self.base.chunk, self.base.action_dim
        self.latent_dim = self.action_dim * (1 if shared else self.chunk)
        if actor_config["num_actions"] != self.latent_dim:
            raise ValueError(f"the latent actor has {actor_config['num_actions']} actions; the base's latent has "
                             f"{self.latent_dim}")
        self.config = {"base_kind": base_kind, "base_config": dict(base_config), "actor_config": dict(actor_config),
                       "magnitude": self.magnitude, "shared": self.shared}

    @classmethod
    def wrap(cls, base: FlowPolicy | DiffusionPolicy, latent_actor: TanhGaussianActor,
             actor_config: dict[str, Any], magnitude: float, shared: bool) -> SteeredChunkPolicy:
        """A copy of trained networks: `base` and `latent_actor` (built from `actor_config`)."""
        kind = "flow" if isinstance(base, FlowPolicy) else "diffusion"
        policy = cls(kind, base.config, actor_config, magnitude, shared)
        policy.base.load_state_dict(base.state_dict())
        policy.latent_actor.load_state_dict(latent_actor.state_dict())
        return policy

    def steer(self, obs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The base's chunk [B, H, A] for latent actions w."""
        return denoise(self.base, obs, latent_noise(w, self.base, self.magnitude))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.steer(obs, self.latent_actor.mode(obs))

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.steer(obs, self.latent_actor.sample(obs, noise=noise.flatten(1)[:, :self.latent_dim])[0])
