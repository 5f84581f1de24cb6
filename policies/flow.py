"""A flow-matching action-chunk policy with the samplers that make it trainable by RL (pi_RL's Flow-SDE and
Flow-Noise), as RLinf's `openpi_action_model.py` writes them.

The policy maps an observation to a chunk of `chunk` actions of size `action_dim` by integrating a learned velocity
field v(x_t, t, obs) from noise (t = 1) to the action (t = 0) over `num_steps` (K) steps of the grid
t_k = 1, 1 - 1/K, ..., 1/K, 0 (openpi / pi0 conventions). With delta = t_k - t_{k+1}, x0_hat = x - t v and
x1_hat = x + (1 - t) v, each step draws x' ~ N(mean, std^2):

- "ode": mean = x - delta v, std = 0 (Euler; deterministic; evaluation and deployment);
- "sde" (Flow-SDE): sigma_k = a sqrt(t / (1 - t)) (at t = 1 the denominator is 1 - t_1), mean = (1 - (t - delta))
  x0_hat + w1 x1_hat with w1 = (t - delta) - sigma^2 delta / (2 t), std = sqrt(delta) sigma. Only one step, `sde_step`,
  is stochastic, the others are ODE; the log-likelihood is that single transition's Gaussian density;
- "noise" (Flow-Noise): mean as ODE, std from a learned noise head (its log-variance squashed into the range of
  `noise_std`); every step is stochastic and the log-likelihood is the mean over the K transitions and the prior
  N(x_1; 0, I) of their log-densities (RLinf's `log_probs.mean`, not the exact joint sum).

Log-likelihoods are per action element ([B, chunk, action_dim]): sum them over (chunk, dim) for one ratio per chunk.
`sample` returns the whole denoising chain, so `log_prob` re-evaluates the same transitions under new weights (the
PPO ratio). Every random number is an argument (`noise`, `step_noise`), so tests and resumed runs replay them.
Behaviour cloning: `bc_loss`, the flow-matching regression of v towards x_1 - a on x_t = t x_1 + (1 - t) a.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from policies.normalizer import RunningNorm

MODES = ("ode", "sde", "noise")
LOG_2PI = math.log(2 * math.pi)


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(in_dim, h), nn.SiLU()]
        in_dim = h
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Element-wise log N(x; mean, std^2)."""
    return -0.5 * ((x - mean) / std) ** 2 - std.log() - 0.5 * LOG_2PI


class FlowPolicy(nn.Module):
    """Velocity field over action chunks conditioned on observations; see the module docstring for the samplers."""

    def __init__(self, obs_dim: int, action_dim: int, chunk: int = 4, hidden: tuple[int, ...] = (256, 256),
                 num_steps: int = 4, noise_level: float = 0.5, noise_std: tuple[float, float] = (0.08, 0.16),
                 noise_head: bool = False, cond_dim: int | None = None):
        """`cond_dim`: the width of `condition(obs)` when a subclass encodes the observation (`policies.vla`);
        by default the normalised observation itself (`obs_dim`)."""
        super().__init__()
        if num_steps < 1 or chunk < 1:
            raise ValueError(f"num_steps and chunk must be >= 1, got {num_steps} and {chunk}")
        if not 0 < noise_std[0] <= noise_std[1]:
            raise ValueError(f"noise_std must be (min, max) with 0 < min <= max, got {noise_std}")
        self.obs_dim, self.action_dim, self.chunk, self.num_steps = obs_dim, action_dim, chunk, num_steps
        # the constructor's arguments, JSON-able: what a checkpoint stores to rebuild the policy
        self.config = {"obs_dim": obs_dim, "action_dim": action_dim, "chunk": chunk, "hidden": list(hidden),
                       "num_steps": num_steps, "noise_level": noise_level, "noise_std": list(noise_std),
                       "noise_head": noise_head}
        self.noise_level = noise_level
        self.log_var_range = (2 * math.log(noise_std[0]), 2 * math.log(noise_std[1]))
        size, cond = chunk * action_dim, obs_dim if cond_dim is None else cond_dim
        self.velocity_net = mlp(cond + size + 1, hidden, size)
        self.noise_net = mlp(cond + size + 1, hidden, size) if noise_head else None
        self.obs_norm = RunningNorm(obs_dim)  # identity until fitted (`obs_norm.update` on the BC data)
        self.register_buffer("times", torch.cat([torch.linspace(1.0, 1.0 / num_steps, num_steps), torch.zeros(1)]))

    # --- the field ---------------------------------------------------------------------------------
    def condition(self, obs: torch.Tensor) -> torch.Tensor:
        """What the field is conditioned on: the normalised observation (a VLA encodes pixels and words here)."""
        return self.obs_norm(obs)

    def fit_normalizer(self, obs: torch.Tensor) -> None:
        """Fit the observation statistics on training data (behaviour cloning does, before its first step)."""
        self.obs_norm.update(obs)

    def _input(self, cond: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """[B, cond + chunk * action_dim + 1]: the condition, the flattened chunk and the time (a number or [B])."""
        t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
        t = t.reshape(-1, 1) if t.ndim else t.expand(x.shape[0], 1)
        return torch.cat([cond, x.flatten(1), t], -1)

    def velocity(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """v(x_t, t, obs) [B, chunk, action_dim] for x [B, chunk, action_dim] and t (a number or [B])."""
        return self._velocity(self.condition(obs), x, t)

    def noise_std(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """Flow-Noise's std [B, chunk, action_dim]: the noise head's log-variance squashed into its range."""
        return self._noise_std(self.condition(obs), x, t)

    def step_stats(self, obs: torch.Tensor, x: torch.Tensor, k: int | torch.Tensor, mode: str
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of x_{k+1} given x_k under `mode` ("ode": std 0); `k` is one step for the batch or one per
        row ([B], a rollout's minibatch mixes chains whose Flow-SDE step differed)."""
        return self._step_stats(self.condition(obs), x, k, mode)

    # the same on an encoded condition: samplers encode the observation once for all K steps (a VLA's prefix)
    def _velocity(self, cond: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        return self.velocity_net(self._input(cond, x, t)).view_as(x)

    def _noise_std(self, cond: torch.Tensor, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        if self.noise_net is None:
            raise ValueError("this FlowPolicy has no noise head: build it with noise_head=True for Flow-Noise")
        lo, hi = self.log_var_range
        h = torch.tanh(self.noise_net(self._input(cond, x, t))).view_as(x)
        return (0.5 * (lo + (hi - lo) * (h + 1) / 2)).exp()

    def _step_stats(self, cond: torch.Tensor, x: torch.Tensor, k: int | torch.Tensor, mode: str
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        t, t_next = self.times[k], self.times[k + 1]
        v = self._velocity(cond, x, t)
        if t.ndim:  # one time per row: broadcast over (chunk, action_dim)
            t, t_next = t.view(-1, 1, 1), t_next.view(-1, 1, 1)
        delta = t - t_next
        if mode == "sde":
            # at t = 1 the denominator 1 - t is replaced by 1 - t_1 (which is 1 when K = 1)
            sigma = self.noise_level * torch.sqrt(t / torch.where(t < 1, 1 - t, 1 - self.times[1]))
            x0_hat, x1_hat = x - t * v, x + (1 - t) * v
            w1 = t_next - sigma**2 * delta / (2 * t)
            return (1 - t_next) * x0_hat + w1 * x1_hat, (delta.sqrt() * sigma).expand_as(x)
        mean = x - delta * v
        if mode == "noise":
            return mean, self._noise_std(cond, x, t if not t.ndim else t.flatten())
        return mean, torch.zeros_like(x)

    # --- sampling and likelihoods ------------------------------------------------------------------
    def sample(self, obs: torch.Tensor, mode: str = "ode", noise: torch.Tensor | None = None,
               step_noise: torch.Tensor | None = None, sde_step: int = 0, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Denoise from `noise` (x_1 [B, chunk, action_dim], standard normal when None) with `step_noise`
        [K, B, chunk, action_dim] for the stochastic steps. Returns the actions [B, chunk, action_dim] (x at t = 0),
        the chain [K + 1, B, chunk, action_dim] and the log-likelihood [B, chunk, action_dim] (zeros for "ode")."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        shape = (obs.shape[0], self.chunk, self.action_dim)
        if noise is None:
            noise = torch.randn(shape, generator=generator, device=obs.device)
        if step_noise is None and mode != "ode":
            step_noise = torch.randn((self.num_steps, *shape), generator=generator, device=obs.device)
        cond = self.condition(obs)
        x, chain = noise, [noise]
        for k in range(self.num_steps):
            stochastic = mode == "noise" or (mode == "sde" and k == sde_step)
            mean, std = self._step_stats(cond, x, k, mode if stochastic else "ode")
            x = mean + std * step_noise[k] if stochastic else mean
            chain.append(x)
        chain_t = torch.stack(chain)
        logp = self._log_prob(cond, chain_t, mode, sde_step) if mode != "ode" else torch.zeros_like(x)
        return x, chain_t, logp

    def log_prob(self, obs: torch.Tensor, chain: torch.Tensor, mode: str, sde_step: int | torch.Tensor = 0
                 ) -> torch.Tensor:
        """Re-evaluate a stored chain's log-likelihood [B, chunk, action_dim] under the current weights: Flow-SDE's
        one transition `sde_step` (one for the batch, or [B] one per row), or Flow-Noise's mean over the prior and
        all K transitions."""
        return self._log_prob(self.condition(obs), chain, mode, sde_step)

    def _log_prob(self, cond: torch.Tensor, chain: torch.Tensor, mode: str, sde_step: int | torch.Tensor = 0
                  ) -> torch.Tensor:
        if mode == "sde":
            if isinstance(sde_step, torch.Tensor):
                rows = torch.arange(chain.shape[1], device=chain.device)
                x, x_next = chain[sde_step, rows], chain[sde_step + 1, rows]
            else:
                x, x_next = chain[sde_step], chain[sde_step + 1]
            mean, std = self._step_stats(cond, x, sde_step, "sde")
            return gaussian_log_prob(x_next, mean, std)
        if mode == "noise":
            terms = [gaussian_log_prob(chain[0], torch.zeros_like(chain[0]), torch.ones_like(chain[0]))]
            for k in range(self.num_steps):
                mean, std = self._step_stats(cond, chain[k], k, "noise")
                terms.append(gaussian_log_prob(chain[k + 1], mean, std))
            return torch.stack(terms).mean(0)
        raise ValueError(f"log_prob needs a stochastic mode ('sde' or 'noise'), got {mode!r}")

    def log_prob_and_entropy(self, obs: torch.Tensor, chain: torch.Tensor, mode: str,
                             sde_step: int | torch.Tensor = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`log_prob` and, for Flow-Noise, `entropy`, encoding the observation once (None for Flow-SDE)."""
        cond = self.condition(obs)
        logp = self._log_prob(cond, chain, mode, sde_step)
        return logp, self._entropy(cond, chain) if mode == "noise" else None

    def entropy(self, obs: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        """Flow-Noise's Gaussian entropy 0.5 log(2 pi e std^2), averaged over the K steps [B, chunk, action_dim]."""
        return self._entropy(self.condition(obs), chain)

    def _entropy(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        stds = [self._step_stats(cond, chain[k], k, "noise")[1] for k in range(self.num_steps)]
        return torch.stack([0.5 * (LOG_2PI + 1) + s.log() for s in stds]).mean(0)

    # --- behaviour cloning -------------------------------------------------------------------------
    def bc_loss(self, obs: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Flow matching: mean || v(x_t, t, obs) - (x_1 - a) ||^2 with x_t = t x_1 + (1 - t) a, for action chunks a
        [B, chunk, action_dim], noise x_1 of that shape and times t [B] in [0, 1]."""
        tt = t.view(-1, 1, 1)
        x_t = tt * noise + (1 - tt) * actions
        return ((self._velocity(self.condition(obs), x_t, t) - (noise - actions)) ** 2).mean()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """A deterministic action chunk for evaluation and deployment: the ODE from x_1 = 0, the noise's mean."""
        shape = (obs.shape[0], self.chunk, self.action_dim)
        return self.sample(obs, "ode", noise=torch.zeros(shape, device=obs.device))[0]
