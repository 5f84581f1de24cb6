"""Pieces every actor-critic learner shares (SAC, TD3, the offline algorithms, DSRL): Polyak averaging, the
actor's reduction of the critic ensemble, shaped rewards, target-subset sampling and the fused (compiled) Adam
step. None of an algorithm's own math lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from robolearn.core import distributed

#: How the actor objective reduces the critic ensemble: the min or the mean over all N members, or the
#: first member alone (TD3's Q1, Fujimoto et al. 2018).
ACTOR_Q = ("min", "mean", "first")


def actor_objective_q(q: torch.Tensor, how: str) -> torch.Tensor:
    """[B] the Q the actor maximises, from the ensemble's [N, B] values; `how` is one of `ACTOR_Q`.

    "first" differentiates through critic 0 only, as the original TD3's `critic.Q1(s, actor(s))`.
    """
    if how == "first":
        return q[0]
    return q.min(0).values if how == "min" else q.mean(0)


def shaped_rewards(rewards: torch.Tensor, steps: torch.Tensor, gamma: float, scale: float, bias: float
                   ) -> torch.Tensor:
    """The discounted sum of shaped rewards, sum_{i<k} gamma^i (scale * r_i + bias), from the buffer's sums.

    The replay buffer returns R = sum_{i<k} gamma^i r_i over the k <= n steps it summed (fewer at an
    episode end or the newest step) and k as `steps`. A bias added once per sample would shift an
    n-step target by `bias` instead of bias * (1 - gamma^k) / (1 - gamma): the per-step shaping the
    1-step target has. SAC and TD3, eager and compiled, all build their TD targets with this.
    """
    if bias == 0.0:
        return rewards * scale
    weight = steps if gamma == 1.0 else (1.0 - torch.pow(gamma, steps)) / (1.0 - gamma)
    return rewards * scale + bias * weight


def q_many(critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Every critic at (s_b, actions[b, k]) for obs [B, D] and actions [B, n, A], in one pass: the critics' outputs
    with [E, B, n] leading ([E, B, n, bins] for HL-Gauss critics). The states are repeated, not the network run per
    sample (CQL scores 30 actions per state, a max backup 10)."""
    b, n, a = actions.shape
    return critic(obs.repeat_interleave(n, 0), actions.reshape(b * n, a)).unflatten(1, (b, n))


def max_backup(q: torch.Tensor, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The max target backup (CQL's and WSRL's on antmaze): of the n actions sampled from pi(s') per state, the one
    whose min over the target critics q [E, B, n] is largest; returns ([B] that min, [B] its log-prob from logp
    [B, n])."""
    next_q, best = q.min(0).values.max(-1)
    return next_q, logp.gather(-1, best.unsqueeze(-1)).squeeze(-1)


def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) target + tau source, one fused op over all parameters (per tensor inside a seed-batch's
    vmap, which has no batching rule for the fused op)."""
    targets, sources = list(target.parameters()), list(source.parameters())
    with torch.no_grad():
        if targets and torch._C._functorch.is_batchedtensor(targets[0]):
            for t, s in zip(targets, sources, strict=True):
                t.mul_(1.0 - tau).add_(s, alpha=tau)
        else:
            torch._foreach_lerp_(targets, sources, tau)


def adam_update_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 step: torch.Tensor, lr: float | torch.Tensor, betas: tuple[float, float], eps: float) -> None:
    """One parameter's `torch.optim.Adam` update (no weight decay, no amsgrad), in place on the given tensors.

    Written with in-place ops that `torch.func.vmap` has batching rules for (`mul_`, `add_`, `sub_`; not `lerp_` or
    `addcmul_`), so the same code steps one learner, a compiled graph, or S seeds at once inside a vmapped update
    (`robolearn.algos.seeds`). The bias corrections are computed in float32 (fused Adam uses float64): they
    agree to about 1e-6 over thousands of steps.
    """
    beta1, beta2 = betas
    step.add_(1)
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
    denom = (exp_avg_sq.sqrt() / (1 - beta2**step).sqrt()).add_(eps)
    with torch.no_grad():
        param.sub_(exp_avg / denom * (lr / (1 - beta1**step)))


def adam_step_(opt: torch.optim.Optimizer, grads: list[torch.Tensor], lr: torch.Tensor | None = None) -> None:
    """`torch.optim.Adam`'s update written out (`adam_update_` per parameter), on the optimizer's own state.

    `torch.optim` breaks a compiled graph around every `step()` on purpose; this traces into it, so a
    compiled update is one graph from the forward pass to the new parameters. `init_adam_state`
    must have run first (no state is created inside a graph). `lr`, a tensor, replaces the groups' learning rate:
    a scheduled rate passed in as a graph input does not recompile the graph each step (a Python float in a param
    group is a constant of the compiled graph).
    """
    flat = iter(grads)
    for group in opt.param_groups:
        rate = group["lr"] if lr is None else lr
        for p in group["params"]:
            state = opt.state[p]
            adam_update_(p, next(flat), state["exp_avg"], state["exp_avg_sq"], state["step"], rate,
                         group["betas"], group["eps"])


def gradient_step(opt: torch.optim.Optimizer, loss_fn: Callable[[], Any], compiled: bool,
                  lr: torch.Tensor | Callable[[Any], torch.Tensor] | None = None,
                  max_grad_norm: float | None = None) -> Any:
    """One step of `opt` on the gradient of the loss `loss_fn()` returns (alone, or first of a tuple) w.r.t. that
    optimizer's parameters only; returns what `loss_fn` returned.

    `torch.autograd.grad` instead of `backward()`: no gradient lands on the other networks the loss passes through
    (the critic under the actor loss), and it traces into a compiled graph. `compiled`: the Adam step written out
    (`adam_step_`, at `lr` if given) so that it is part of the graph; else fused Adam at the group's rate. The loss
    comes as a function so that a seed-batch (`robolearn.algos.seeds`) can take `torch.func.grad` of it instead.
    `lr` may also be a function of what `loss_fn` returned (PPO's rate, adapted to the minibatch's KL): it then sets
    the rate in both modes. `max_grad_norm`: the gradients are scaled to that global norm first
    (`clip_grad_norm`). In a `torchrun` job the gradients are first averaged over all ranks
    (`robolearn.core.distributed`).
    """
    if not callable(loss_fn):
        raise TypeError("a learner's _step takes the loss as a function (`lambda: loss`), not a tensor: a seed-batch "
                        "(robolearn.algos.seeds) takes its gradient per seed")
    out = loss_fn()
    params = [p for group in opt.param_groups for p in group["params"]]
    grads = list(torch.autograd.grad(out[0] if isinstance(out, tuple) else out, params))
    if distributed.active():  # a torchrun job: every rank steps on the mean gradient, so parameters stay equal
        distributed.average_(grads)
    if max_grad_norm is not None:
        grads = clip_grad_norm(grads, max_grad_norm)
    adapted = callable(lr)
    if adapted:
        lr = lr(out)
    if compiled:
        adam_step_(opt, grads, lr)
        return out
    if adapted:
        for group in opt.param_groups:
            group["lr"] = float(lr)
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt.step()
    return out


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """The gradients scaled so that their global L2 norm is at most `max_norm`, as `torch.nn.utils.clip_grad_norm_`
    scales them (coefficient max_norm / (norm + 1e-6), at most 1), without writing into them (a vmapped update's
    gradients are values, not `.grad`)."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return [g * coef for g in grads]


def init_adam_state(opt: torch.optim.Optimizer) -> None:
    """Create Adam's per-parameter state (step, first and second moments) as `torch.optim.Adam` would."""
    for group in opt.param_groups:
        for p in group["params"]:
            if not opt.state[p]:
                opt.state[p].update(step=torch.zeros((), dtype=torch.float32, device=p.device),
                                    exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))


def compile_update(fn: Any, device: str | torch.device | None = None, cuda_graphs: bool = False) -> Any:
    """`torch.compile` of one whole update: forward, `torch.autograd.grad`, Adam step, Polyak.

    Tracing the gradient and the optimizer step into the graph is what pays: on one CPU core it
    measured 2.3-3x the eager update at 64x64 networks and 1.3x at 256x256
    (`benchmarks/speed/offpolicy_fused_ops.py`, `benchmarks/peers/sac_vs_peers.py sac.compile=true`); compiling takes
    tens of seconds per graph. `cuda_graphs` (a CUDA device only): Inductor's CUDA graphs ("reduce-overhead"), which
    replay the graph's kernels as one CUDA graph; the tensors the update writes in place must have static addresses
    (`torch._dynamo.mark_static_address`, as `robolearn.algos.seeds.SeedBatch` marks its stacks).
    """
    import torch._dynamo

    torch._dynamo.config.trace_autograd_ops = True  # let torch.autograd.grad become part of the graph
    if device is not None and torch.device(device).type != "cpu":
        # Under torch 2.11 on an H200 the solo SAC and IQL graphs failed in Inductor's loop reordering during
        # fusion (`reorder_loops_by_dep_pair`: AssertionError; benchmarks/results/gpu_suite_h200/run3_seed_batch),
        # with and without cpp_wrapper, while the seed-batched (vmapped) graphs compiled: that pass is off here.
        return torch.compile(fn, options={"loop_ordering_after_fusion": False, "triton.cudagraphs": cuda_graphs})
    # cpp_wrapper: the graph's kernel calls run from generated C++, not Python (1.4x at 64x64 on CPU)
    return torch.compile(fn, options={"cpp_wrapper": True})


def fresh_graphs() -> None:
    """Forget every graph compiled so far in this process, before a new learner compiles its own.

    The seed-batch's vmapped `run` is one code object for every learner. Once it has compiled for one learner,
    Dynamo turns the floats that differ for the next (its learning rates) into symbolic ones, which Inductor could
    not lower in the vmapped Adam step ("x must be Tensor or scalar, got SymFloat": WSRL's pack, then RO2O's, in one
    bench worker). Forgetting the graphs first keeps them constants. (Within one learner a rate that changes every
    step, IQL's cosine schedule, must stay symbolic: `dynamic=False` would recompile it each step.) Called by a bench
    worker before each cell and by `robolearn finetune` before each phase."""
    import torch._dynamo

    torch._dynamo.reset()


def subset_indices(num_critics: int, size: int, replace: bool, generator: torch.Generator | None,
                   device: torch.device) -> torch.Tensor:
    """Indices of the M critics whose min forms the TD target (with or without replacement).

    Drawn on `device` (the generator, if given, must live there), so a GPU update never waits on a copy.
    """
    if replace:
        return torch.randint(0, num_critics, (size,), generator=generator, device=device)
    return torch.randperm(num_critics, generator=generator, device=device)[:size]
