"""Advantage estimators shared by every on-policy trainer: robot, VLA or language model.

Convention: batch-major `[B, T]` tensors. A "step" is whatever the log-ratio attaches to: an env
step, an action chunk or a token. Inputs (all but `rewards` optional):

- `rewards[B, T]`: reward of each step (outcome rewards sit on the last valid step);
- `mask[B, T]`: steps that count (False on padding, after an episode ends without auto-reset, for
  filtered groups); masked steps carry the running estimate through unchanged;
- `dones[B, T]`: the episode reached a terminal state after step t (nothing to bootstrap);
- `truncs[B, T]`: the episode was cut by a time limit after step t (bootstrap the true next state);
- `values[B, T+1]`: critic values of every step's state plus the bootstrap value after the last;
- `bootstrap_values[B, T]`: value of the true next state where `truncs` is set. With auto-reset the
  state after a truncated step is the reset state, so `values[:, t+1]` is the wrong one; pass the
  critic's value of `extras["final_obs"]` here. Without it `values[:, t+1]` is used;
- `group_ids[B]`: rows that share a prompt / initial state, for group baselines (GRPO, RLOO, ...).

Estimators register by name (`compute_advantages("gae", ...)`) and return `(advantages, returns)`.
Returns are never normalised; advantage normalisation is a flag.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from robolearn.errors import ConfigError

Tensor = torch.Tensor
_REGISTRY: dict[str, Callable[..., tuple[Tensor, Tensor | None]]] = {}


def register(name: str):
    """Register an estimator under `name` (a duplicate name is an error, not a silent override)."""

    def wrap(fn):
        if name in _REGISTRY:
            raise ConfigError(f"advantage estimator {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return wrap


def estimators() -> list[str]:
    """Names of the registered estimators."""
    return sorted(_REGISTRY)


def compute_advantages(name: str, **inputs) -> tuple[Tensor, Tensor | None]:
    """Run the estimator `name` on `inputs` (see the module docstring for the tensor names)."""
    if name not in _REGISTRY:
        raise ConfigError(f"unknown advantage estimator {name!r}; available: {estimators()}")
    return _REGISTRY[name](**inputs)


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def masked_whiten(x: Tensor, mask: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """(x - mean) / std over the unmasked entries (unbiased variance); masked entries become 0."""
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    mask = mask.bool()
    n = mask.sum().clamp_min(2)
    mean = masked_mean(x, mask)
    var = (((x - mean) ** 2) * mask).sum() / (n - 1)
    return torch.where(mask, (x - mean) * torch.rsqrt(var + eps), torch.zeros_like(x))


def _check(rewards: Tensor, **others: Tensor | None) -> None:
    if rewards.ndim != 2:
        raise ConfigError(f"rewards must be [B, T], got shape {tuple(rewards.shape)}")
    b, t = rewards.shape
    for name, x in others.items():
        if x is None:
            continue
        want = (b, t + 1) if name == "values" else (b, t)
        if tuple(x.shape) != want:
            raise ConfigError(f"{name} must have shape {want} to match rewards [B, T], got {tuple(x.shape)}")


@register("gae")
def gae(rewards: Tensor, values: Tensor, mask: Tensor | None = None, dones: Tensor | None = None,
        truncs: Tensor | None = None, bootstrap_values: Tensor | None = None, gamma: float = 0.99,
        lam: float = 0.95, normalize: bool = False, **_: object) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) with correct episode boundaries.

    delta_t = r_t + gamma * V(next_t) * (1 - done_t) - V(s_t), where V(next_t) is
    `bootstrap_values[t]` after a truncation and `values[t + 1]` otherwise; the recursion
    A_t = delta_t + gamma * lam * A_{t+1} is cut after every done or truncation, so rows may hold
    several auto-reset episodes. A step that is both done and truncated counts as done.
    Returns `(advantages, returns = advantages + values[:, :T])`.
    """
    _check(rewards, values=values, mask=mask, dones=dones, truncs=truncs, bootstrap_values=bootstrap_values)
    b, t_len = rewards.shape
    zeros = torch.zeros_like(rewards, dtype=torch.bool)
    dones = zeros if dones is None else dones.bool()
    truncs = zeros if truncs is None else truncs.bool() & ~dones
    mask = ~zeros if mask is None else mask.bool()
    values = values.to(rewards.dtype)
    adv = torch.zeros_like(rewards)
    running = torch.zeros(b, dtype=rewards.dtype, device=rewards.device)
    next_value = values[:, t_len]
    for t in reversed(range(t_len)):
        boot = next_value if bootstrap_values is None else torch.where(truncs[:, t], bootstrap_values[:, t], next_value)
        delta = rewards[:, t] + gamma * boot * (~dones[:, t]) - values[:, t]
        a = delta + gamma * lam * (~(dones[:, t] | truncs[:, t])) * running
        m = mask[:, t]
        adv[:, t] = torch.where(m, a, torch.zeros_like(a))
        running = torch.where(m, a, running)
        next_value = torch.where(m, values[:, t], next_value)
    returns = adv + values[:, :t_len]
    if normalize:
        adv = masked_whiten(adv, mask)
    return adv, returns
