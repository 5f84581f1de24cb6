"""Seed-batched learning: S seeds of one algorithm trained in one process by one vmapped update.

A benchmark table needs several seeds per cell, and at the networks off-policy and offline RL use (2 x 256) one
seed's update is a chain of small matrix products that leaves most of a GPU idle. A `SeedBatch` trains S learners
of one algorithm and config as if each ran alone (the offline learners, `robolearn.algos.offline.base.OfflineAlgo`,
SAC / TD3, `robolearn.algos.online.sac.SAC`, and PPO):

- every learned tensor of the S learners (network parameters and buffers, learned scalars such as log-temperatures,
  Adam's moments and step counts) is stacked on a new leading seed axis, and each learner's own tensors become views
  of its row, so acting, evaluating and checkpointing one seed (`learners[k]`) reads the live values;
- `update(batch, generators)` takes one batch per seed ([S, B, ...]) and one generator per seed. The algorithm's own
  `update` runs once on a template learner whose tensors are the stacks: its schedules and draws happen as usual
  (each seed's draws from its own generator, `per_seed`), and each method it lists in `graph_methods` (the tensor
  work, what `compile: true` compiles) runs under `torch.func.vmap` over the seed axis. Inside, every network is
  bound to its seed's row, `_step` takes `torch.func.grad` of the loss in that optimizer's parameters, and
  `adam_update_` writes the step into the row.

Adam is elementwise and each seed's losses read only its own row, so seed k follows its solo run with the same
batches and draws, to float rounding (tests/robolearn/algos/test_seed_batch.py). The matrix products become
batched ones ([S, B, in] x [S, in, out]): on a GPU, one launch does the work of S
(`benchmarks/speed/gpu_suite.py`, part offpolicy). With `compile: true` the vmapped methods are compiled
(`compile_update`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from robolearn.algos.common import adam_update_, clip_grad_norm, compile_update, init_adam_state
from robolearn.errors import ConfigError

#: A learner a seed-batch can hold: `_networks()` and `_scalars()` (every learned tensor), `optimizers`,
#: `graph_methods`, `_seed_template()`, `_seed_binding`, `cfg`, `compiled`, `device`, `updates`, `update`.
Learner = Any

#: The Adam state a seed-batch stacks for each optimised tensor (`torch.optim.Adam`'s own keys).
ADAM_KEYS = ("exp_avg", "exp_avg_sq", "step")


def per_seed(draw: Callable[..., Any], batch_size: int, generator: Any) -> Any:
    """`draw(batch_size, generator)`; with a list of generators (one per seed, in a seed-batch) each seed's draw
    from its own generator, stacked on a leading seed axis (each generator sees the draws its solo run would)."""
    if isinstance(generator, (list, tuple)):
        return stack_batches([draw(batch_size, g) for g in generator])
    return draw(batch_size, generator)


def named_tensors(learner: Learner) -> dict[str, tuple[Any, str, str, torch.Tensor]]:
    """Every learned tensor of `learner` by a stable name: (owner, kind, attribute, tensor), kind "param" or
    "buffer" of a module, or "scalar" (an attribute of the learner itself, `_scalars`)."""
    out: dict[str, tuple[Any, str, str, torch.Tensor]] = {}
    for net_name, net in learner._networks().items():
        for mod_name, module in net.named_modules():
            prefix = f"{net_name}.{mod_name}." if mod_name else f"{net_name}."
            for attr, p in module._parameters.items():
                if p is not None:
                    out[prefix + attr] = (module, "param", attr, p)
            for attr, b in module._buffers.items():
                if b is not None:
                    out[prefix + attr] = (module, "buffer", attr, b)
    for name, t in learner._scalars().items():
        out[name] = (learner, "scalar", name, t)
    return out


def stack_batches(batches: list[Any]) -> Any:
    """S replay batches (`ReplayBuffer.sample`'s dicts) or S seeds' draws as one with a leading seed axis on every
    tensor, same structure (a value that is no tensor, e.g. None, is the first one's)."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(batches)
    if isinstance(first, dict):
        return {k: stack_batches([b[k] for b in batches]) for k in first}
    return first


class _Binding:
    """What the template learner's `_step` reads inside the vmapped update: each name's current (per-seed) tensor,
    and which name each of the template's optimised tensors has."""

    def __init__(self, owners: dict[str, tuple[Any, str, str]], names: dict[int, str], tensors: dict[str, Any]):
        self.owners, self.names, self.tensors = owners, names, tensors

    @contextmanager
    def bound(self, tensors: dict[str, torch.Tensor]) -> Iterator[None]:
        """Put `tensors` (by name) where the template's modules and scalars read them, and back afterwards."""
        saved = []
        for name, t in tensors.items():
            owner, kind, attr = self.owners[name]
            if kind == "scalar":
                saved.append((owner, kind, attr, getattr(owner, attr)))
                setattr(owner, attr, t)
            else:
                store = owner._parameters if kind == "param" else owner._buffers
                saved.append((owner, kind, attr, store[attr]))
                store[attr] = t
        try:
            yield
        finally:
            for owner, kind, attr, old in reversed(saved):
                if kind == "scalar":
                    setattr(owner, attr, old)
                else:
                    (owner._parameters if kind == "param" else owner._buffers)[attr] = old

    def step(self, opt: torch.optim.Optimizer, loss_fn: Callable[[], Any],
             lr: torch.Tensor | Callable[[Any], torch.Tensor] | None, max_grad_norm: float | None = None) -> Any:
        """A learner's `_step` for one seed inside the vmap: grad of `loss_fn` in `opt`'s tensors, then Adam (at `lr`,
        or `lr` of what `loss_fn` returned; clipped to `max_grad_norm` first: `gradient_step`'s semantics)."""
        names = [self.names[id(p)] for group in opt.param_groups for p in group["params"]]

        def loss_of(params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
            with self.bound(params):
                out = loss_fn()
            return (out[0] if isinstance(out, tuple) else out), out

        grads, out = torch.func.grad(loss_of, has_aux=True)({n: self.tensors[n] for n in names})
        if max_grad_norm is not None:
            grads = dict(zip(names, clip_grad_norm([grads[n] for n in names], max_grad_norm), strict=True))
        if callable(lr):
            lr = lr(out)
        for group in opt.param_groups:
            rate = group["lr"] if lr is None else lr
            for p in group["params"]:
                n = self.names[id(p)]
                adam_update_(self.tensors[n], grads[n], *(self.tensors[f"{n}#{k}"] for k in ADAM_KEYS),
                             rate, group["betas"], group["eps"])
        return out


class SeedBatch:
    """S learners of one algorithm and config trained in lockstep by one vmapped update (see the module doc).

    `cuda_graphs`: with compiled learners on a CUDA device, the vmapped update is captured and replayed as a CUDA
    graph (`compile_update`), its launches one replay.
    """

    def __init__(self, learners: list[Learner], cuda_graphs: bool = False):
        if not learners:
            raise ConfigError("a seed-batch needs at least one learner")
        first = learners[0]
        if not first.graph_methods:
            raise ConfigError(f"{type(first).__name__} has no seed-batched update (its update names no graph methods)")
        if any(type(learner) is not type(first) or learner.cfg != first.cfg for learner in learners):
            raise ConfigError("a seed-batch's learners must share one algorithm and config (they differ by seed)")
        if len({learner.updates for learner in learners}) != 1:
            raise ConfigError("a seed-batch's learners must have made the same number of updates (a resume restores "
                              "them together)")
        self.learners = learners
        # the template runs `update`; its methods are not compiled itself (the vmapped ones are, with compile: true)
        self.template = template = first._seed_template()
        template.compiled = first.compiled  # so `update` passes scheduled rates as tensors (graph inputs)
        template.updates = first.updates    # schedules (learning rates, delayed actors) go on from a resume
        for learner in (template, *learners):
            for opt in learner.optimizers.values():
                init_adam_state(opt)
        self.stacks = self._stack(learners, template)
        self.cuda_graphs = cuda_graphs and first.compiled and first.device.type == "cuda"
        if self.cuda_graphs:  # the graph replays write into the stacks: they must stay where they are
            for t in self.stacks.values():
                torch._dynamo.mark_static_address(t)
        for name in template.graph_methods:
            setattr(template, name, self._vmapped(getattr(type(template), name), first.compiled, first.device))

    @property
    def num_seeds(self) -> int:
        return len(self.learners)

    def _stack(self, learners: list[Learner], template: Learner) -> dict[str, torch.Tensor]:
        """Stack every learned tensor and Adam state on a seed axis; make the template hold the stacks and each
        learner a view of its row (`.data` rebinding, so modules and optimizers keep their tensor objects)."""
        per_learner = [self._tensors(learner) for learner in learners]
        stacks = {}
        for name, t in self._tensors(template).items():
            stacks[name] = torch.stack([tensors[name].detach() for tensors in per_learner])
            t.data = stacks[name]
            for k, tensors in enumerate(per_learner):
                tensors[name].data = stacks[name][k]
        return stacks

    @staticmethod
    def _tensors(learner: Learner) -> dict[str, torch.Tensor]:
        """Every tensor a seed-batch stacks, by name: the learned ones and each optimised tensor's Adam state."""
        named = named_tensors(learner)
        out = {name: t for name, (_, _, _, t) in named.items()}
        ids = {id(t): name for name, t in out.items()}
        for opt in learner.optimizers.values():
            for group in opt.param_groups:
                for p in group["params"]:
                    for key in ADAM_KEYS:
                        out[f"{ids[id(p)]}#{key}"] = opt.state[p][key]
        return out

    def restack(self) -> None:
        """Rebuild the stacks from the learners' own tensors, after something replaced them (a checkpoint restore
        loads optimizer state as new tensors) rather than writing into them."""
        for k, learner in enumerate(self.learners):
            for opt in learner.optimizers.values():
                init_adam_state(opt)
            with torch.no_grad():
                for name, t in self._tensors(learner).items():
                    row = self.stacks[name][k]
                    if t.data_ptr() != row.data_ptr():  # copied in: the stacks keep their addresses (CUDA graphs)
                        row.copy_(t.detach())
                        t.data = row
        self.template.updates = self.learners[0].updates

    def _vmapped(self, method: Callable[..., Any], compiled: bool, device: torch.device) -> Callable[..., Any]:
        """`method` of the template run once per seed under `torch.func.vmap`: tensors of one or more dimensions are
        split on their first (seed) axis, 0-d tensors and everything else passed to every seed as they are."""
        template = self.template
        named = named_tensors(template)
        owners = {name: (owner, kind, attr) for name, (owner, kind, attr, _) in named.items()}
        ids = {id(t): name for name, (_, _, _, t) in named.items()}

        def one_seed(tensors: dict[str, torch.Tensor], args: tuple[Any, ...]) -> Any:
            binding = _Binding(owners, ids, tensors)
            with binding.bound({n: t for n, t in tensors.items() if n in owners}):
                template._seed_binding = binding
                try:
                    return method(template, *args)
                finally:
                    template._seed_binding = None

        def run(stacks: dict[str, torch.Tensor], *args: Any) -> Any:
            in_dims = torch.utils._pytree.tree_map(
                lambda x: 0 if isinstance(x, torch.Tensor) and x.ndim >= 1 else None, args)
            return torch.func.vmap(one_seed, in_dims=(0, in_dims))(stacks, args)

        run = compile_update(run, device, self.cuda_graphs) if compiled else run
        return lambda *args: run(self.stacks, *args)

    def update(self, *args: Any) -> dict[str, torch.Tensor]:
        """One update of every seed: the learner's `update` arguments with one batch (or rollout) per seed on a
        leading axis ([S, B, ...]; see `stack_batches`), the last argument one generator per seed (its draws).
        Returns each statistic per seed, [S]."""
        *inputs, generators = args
        if len(generators) != self.num_seeds:
            raise ValueError(f"{self.num_seeds} seeds need {self.num_seeds} generators, got {len(generators)}")
        stats = self.template.update(*inputs, list(generators))
        for learner in self.learners:
            learner.updates = self.template.updates
        return stats
