"""A DDPM action-chunk policy with DDIM sampling from an explicit initial noise, the base policy of DSRL.

Training (Ho et al. 2020, epsilon prediction, as LeRobot's Diffusion Policy): for an action chunk a [B, H, A], a
step k ~ U{0..T-1} and noise e, x_k = sqrt(abar_k) a + sqrt(1 - abar_k) e and the loss is ||eps(x_k, k, o) - e||^2,
with the "squaredcos_cap_v2" schedule (Nichol & Dhariwal's cosine abar, betas capped at 0.999) over T = 100
training steps. Sampling is DDIM with eta = 0 (Song et al. 2021) over `inference_steps` evenly spaced steps,
starting from x_T = `noise`: deterministic given the noise, so the noise is an input the way DSRL needs it (a
latent action steering the frozen policy). Each step predicts a0 = (x - sqrt(1 - abar) eps) / sqrt(abar), clips it
to [-clip_sample, clip_sample] (actions live in [-1, 1]) and re-derives eps from the clipped a0 (diffusers'
`use_clipped_model_output=True`; its default, which LeRobot uses, keeps the unclipped eps).
Observations are normalised by a `RunningNorm` fitted on the BC data, so the checkpoint carries it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from policies.flow import mlp
from policies.normalizer import RunningNorm


def cosine_alphas_cumprod(steps: int, max_beta: float = 0.999) -> torch.Tensor:
    """abar_k for k = 0..steps-1 of the "squaredcos_cap_v2" schedule (betas from the cosine abar, capped)."""
    def f(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    betas = torch.tensor([min(1 - f((i + 1) / steps) / f(i / steps), max_beta) for i in range(steps)],
                         dtype=torch.float64)
    return torch.cumprod(1 - betas, 0).float()


class DiffusionPolicy(nn.Module):
    """Noise-prediction network over action chunks conditioned on observations; DDIM sampling from given noise."""

    def __init__(self, obs_dim: int, action_dim: int, chunk: int = 4, hidden: tuple[int, ...] = (256, 256),
                 train_steps: int = 100, inference_steps: int = 10, clip_sample: float = 1.0):
        super().__init__()
        if not 1 <= inference_steps <= train_steps:
            raise ValueError(f"need 1 <= inference_steps <= train_steps, got {inference_steps} and {train_steps}")
        self.obs_dim, self.action_dim, self.chunk = obs_dim, action_dim, chunk
        # the constructor's arguments, JSON-able: what a checkpoint stores to rebuild the policy
        self.config = {"obs_dim": obs_dim, "action_dim": action_dim, "chunk": chunk, "hidden": list(hidden),
                       "train_steps": train_steps, "inference_steps": inference_steps, "clip_sample": clip_sample}
        self.train_steps, self.inference_steps, self.clip_sample = train_steps, inference_steps, clip_sample
        self.eps_net = mlp(obs_dim + chunk * action_dim + 1, hidden, chunk * action_dim)
        self.obs_norm = RunningNorm(obs_dim)  # identity until fitted (`obs_norm.update` on the BC data)
        self.register_buffer("alphas_cumprod", cosine_alphas_cumprod(train_steps))
        # DDIM's steps, high to low: (S - 1) * T // S, ..., 0 (diffusers' "leading" spacing)
        stride = train_steps // inference_steps
        self.register_buffer("timesteps", torch.arange(inference_steps - 1, -1, -1) * stride)

    def fit_normalizer(self, obs: torch.Tensor) -> None:
        """Fit the observation statistics on training data (behaviour cloning does, before its first step)."""
        self.obs_norm.update(obs)

    def eps(self, obs: torch.Tensor, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Predicted noise [B, chunk, A] for noisy chunks x at integer steps k ([B] or a 0-d tensor)."""
        k = k.to(x.device, x.dtype).reshape(-1, 1).expand(x.shape[0], 1) / self.train_steps
        return self.eps_net(torch.cat([self.obs_norm(obs), x.flatten(1), k], -1)).view_as(x)

    def bc_loss(self, obs: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """DDPM's epsilon regression for chunks `actions` [B, H, A], noise of that shape and steps k [B] (long)."""
        abar = self.alphas_cumprod[k].view(-1, 1, 1)
        x_k = abar.sqrt() * actions + (1 - abar).sqrt() * noise
        return ((self.eps(obs, x_k, k) - noise) ** 2).mean()

    def sample(self, obs: torch.Tensor, noise: torch.Tensor | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """DDIM (eta = 0) from x_T = `noise` [B, H, A] (standard normal when None): action chunks [B, H, A]."""
        if noise is None:
            noise = torch.randn((obs.shape[0], self.chunk, self.action_dim), generator=generator, device=obs.device)
        x = noise
        steps = self.timesteps.tolist()
        for i, k in enumerate(steps):
            abar = self.alphas_cumprod[k]
            abar_prev = self.alphas_cumprod[steps[i + 1]] if i + 1 < len(steps) else torch.ones_like(abar)
            eps = self.eps(obs, x, torch.tensor(k))
            a0 = (x - (1 - abar).sqrt() * eps) / abar.sqrt()
            if self.clip_sample:
                a0 = a0.clamp(-self.clip_sample, self.clip_sample)
                eps = (x - abar.sqrt() * a0) / (1 - abar).sqrt()
            x = abar_prev.sqrt() * a0 + (1 - abar_prev).sqrt() * eps
        return x

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """A deterministic chunk for evaluation and deployment: DDIM from x_T = 0."""
        return self.sample(obs, torch.zeros(obs.shape[0], self.chunk, self.action_dim, device=obs.device))
