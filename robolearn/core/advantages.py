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


# --- outcome estimators (LLM-RL; critic-free robot and VLA fine-tuning) ----------------------------------------
# A step is a token, an env step or an action chunk; each row's score is the sum of its unmasked rewards (an
# outcome reward sits on the last valid step), so the same code serves a language model's answer and a robot's
# episode. Rows whose mask is all False (padding, groups removed by dynamic sampling) take no part in any mean or
# std and get advantage 0. Groups are explicit `group_ids`, never a reshape of the batch.

LEVELS = ("group", "batch", "none")


def sequence_scores(rewards: Tensor, mask: Tensor | None = None) -> Tensor:
    """[B] the sum of each row's unmasked rewards."""
    _check(rewards, mask=mask)
    return rewards.sum(-1) if mask is None else (rewards * mask.to(rewards.dtype)).sum(-1)


def broadcast(scores: Tensor, mask: Tensor | None, steps: int) -> Tensor:
    """[B] per-row values spread over the row's unmasked steps ([B, T], 0 where masked)."""
    out = scores.unsqueeze(-1).expand(-1, steps)
    return out if mask is None else out * mask.to(scores.dtype)


def group_normalize(scores: Tensor, group_ids: Tensor | None = None, valid: Tensor | None = None,
                    mean_level: str = "group", std_level: str = "group", leave_one_out: bool = False,
                    eps: float = 1e-6) -> Tensor:
    """[B] (scores - baseline) / scale over the `valid` rows (others give and get 0).

    baseline: the mean of the row's group ("group"; with `leave_one_out`, of the other members of its group, as
    RLOO: a singleton keeps its score), of every valid row ("batch"), or 0 ("none"). scale: the unbiased std of the
    row's group ("group", GRPO; a singleton group has std 1, as verl), of every valid row's score ("batch", Lite PPO
    / TRL's scale_rewards="batch"), or 1 ("none", Dr. GRPO); `eps` is added to the std.
    """
    if mean_level not in LEVELS or std_level not in LEVELS:
        raise ConfigError(f"mean_level and std_level must be one of {LEVELS}, got {mean_level!r}, {std_level!r}")
    b = scores.shape[0]
    valid = torch.ones(b, dtype=torch.bool, device=scores.device) if valid is None else valid.bool()
    if group_ids is None:
        if "group" in (mean_level, std_level):
            raise ConfigError("group baselines need group_ids [B] (rows that share a prompt or an initial state)")
        group_ids = torch.zeros(b, dtype=torch.long, device=scores.device)
    if tuple(group_ids.shape) != (b,):
        raise ConfigError(f"group_ids must have shape ({b},), got {tuple(group_ids.shape)}")
    _, inverse = torch.unique(group_ids, return_inverse=True)
    w = valid.to(scores.dtype)
    num_groups = int(inverse.max()) + 1 if b else 0
    count = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, inverse, w)
    total = torch.zeros_like(count).index_add_(0, inverse, scores * w)
    n = count[inverse]
    group_mean = total[inverse] / n.clamp_min(1.0)
    if mean_level == "group" and leave_one_out:
        baseline = torch.where(n > 1, (total[inverse] - scores) / (n - 1).clamp_min(1.0), torch.zeros_like(scores))
    elif mean_level == "group":
        baseline = torch.where(n > 1, group_mean, torch.zeros_like(scores))
    elif mean_level == "batch":
        baseline = (scores * w).sum() / w.sum().clamp_min(1.0)
    else:
        baseline = torch.zeros_like(scores)
    if std_level == "group":
        sq = torch.zeros_like(count).index_add_(0, inverse, (scores - group_mean) ** 2 * w)[inverse]
        std = torch.where(n > 1, (sq / (n - 1).clamp_min(1.0)).sqrt(), torch.ones_like(scores))
    elif std_level == "batch":
        m = w.sum()
        mean = (scores * w).sum() / m.clamp_min(1.0)
        std = (((scores - mean) ** 2 * w).sum() / (m - 1).clamp_min(1.0)).sqrt()
    else:
        std = torch.ones((), dtype=scores.dtype, device=scores.device)
        eps = 0.0
    return torch.where(valid, (scores - baseline) / (std + eps), torch.zeros_like(scores))


def discounted_returns(rewards: Tensor, mask: Tensor | None = None, dones: Tensor | None = None,
                       gamma: float = 1.0) -> Tensor:
    """[B, T] G_t = r_t + gamma G_{t+1}, cut after every done; masked steps add nothing and hold 0."""
    _check(rewards, mask=mask, dones=dones)
    b, t_len = rewards.shape
    keep = torch.ones_like(rewards) if mask is None else mask.to(rewards.dtype)
    cont = torch.ones_like(rewards) if dones is None else 1.0 - dones.to(rewards.dtype)
    out = torch.zeros_like(rewards)
    running = torch.zeros(b, dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(t_len)):
        running = (rewards[:, t] + gamma * cont[:, t] * running) * keep[:, t] + running * (1 - keep[:, t])
        out[:, t] = running * keep[:, t]
    return out


def _outcome(rewards: Tensor, mask: Tensor | None, group_ids: Tensor | None, mean_level: str, std_level: str,
             leave_one_out: bool = False, eps: float = 1e-6) -> Tensor:
    valid = None if mask is None else mask.bool().any(-1)
    scores = group_normalize(sequence_scores(rewards, mask), group_ids, valid, mean_level, std_level, leave_one_out,
                             eps)
    return broadcast(scores, mask, rewards.shape[1])


@register("grpo")
def grpo(rewards: Tensor, mask: Tensor | None = None, group_ids: Tensor | None = None, norm_by_std: bool = True,
         eps: float = 1e-6, **_: object) -> tuple[Tensor, None]:
    """GRPO (Shao et al. 2024): (s - mean_group) / (std_group + eps) on every step of the row; `norm_by_std=False`
    leaves the std out (Dr. GRPO; verl's norm_adv_by_std_in_grpo)."""
    return _outcome(rewards, mask, group_ids, "group", "group" if norm_by_std else "none", eps=eps), None


@register("dr_grpo")
def dr_grpo(rewards: Tensor, mask: Tensor | None = None, group_ids: Tensor | None = None, **_: object
            ) -> tuple[Tensor, None]:
    """Dr. GRPO (Liu et al. 2025): s - mean_group, no std (pair it with agg "seq-mean-token-sum-norm")."""
    return _outcome(rewards, mask, group_ids, "group", "none"), None


@register("lite_ppo")
def lite_ppo(rewards: Tensor, mask: Tensor | None = None, group_ids: Tensor | None = None, eps: float = 1e-6,
             **_: object) -> tuple[Tensor, None]:
    """Lite PPO ("Tricks or Traps?", arXiv 2508.08221): (s - mean_group) / (std of the batch's scores + eps), with
    token-level aggregation in the loss."""
    return _outcome(rewards, mask, group_ids, "group", "batch", eps=eps), None


@register("rloo")
def rloo(rewards: Tensor, mask: Tensor | None = None, group_ids: Tensor | None = None, **_: object
         ) -> tuple[Tensor, None]:
    """RLOO (Ahmadian et al. 2024): s_i minus the mean of the other members of its group (n / (n - 1) times
    s_i - mean_group, as verl); a singleton group keeps its score."""
    return _outcome(rewards, mask, group_ids, "group", "none", leave_one_out=True), None


@register("reinforce_pp")
def reinforce_pp(rewards: Tensor, mask: Tensor | None = None, dones: Tensor | None = None, gamma: float = 1.0,
                 **_: object) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025): discounted returns G_t (`discounted_returns`), whitened over the batch's unmasked
    steps; no groups. Returns (advantages, G)."""
    returns = discounted_returns(rewards, mask, dones, gamma)
    return masked_whiten(returns, mask), returns


@register("reinforce_pp_baseline")
def reinforce_pp_baseline(rewards: Tensor, mask: Tensor | None = None, group_ids: Tensor | None = None,
                          **_: object) -> tuple[Tensor, None]:
    """REINFORCE++-baseline: s - mean_group on every step of the row, then whitened over the batch's unmasked steps
    (verl's compute_reinforce_plus_plus_baseline_outcome_advantage)."""
    return masked_whiten(_outcome(rewards, mask, group_ids, "group", "none"), mask), None


@register("remax")
def remax(rewards: Tensor, reward_baselines: Tensor, mask: Tensor | None = None, **_: object) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al. 2024): G_t (undiscounted reward-to-go) minus the greedy rollout's reward b [B] on every
    unmasked step. Returns (advantages, G)."""
    if tuple(reward_baselines.shape) != (rewards.shape[0],):
        raise ConfigError(f"reward_baselines must have shape ({rewards.shape[0]},), got "
                          f"{tuple(reward_baselines.shape)}")
    returns = discounted_returns(rewards, mask, None, 1.0)
    return returns - broadcast(reward_baselines.to(rewards.dtype), mask, rewards.shape[1]), returns
