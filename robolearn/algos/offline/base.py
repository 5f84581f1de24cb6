"""The plumbing the offline algorithms (BC, TD3+BC, IQL, CQL, Cal-QL, ReBRAC) share; none of their math.

Each algorithm's file reads top to bottom: its config dataclass (defaults from CORL's D4RL locomotion
configs, cited there), its networks, its losses as methods that take the batch and explicit random draws
(so a test can recompute them by hand), and `update`: one gradient step of everything. What they all do
the same way lives here, in `OfflineAlgo`:

- `act(obs, deterministic)`: obs["policy"] [N, D] -> actions [N, A] in [-1, 1] (the mode, or a sample);
- `model_state` / `load_model_state`: every learned tensor, each network under `<name>.*` (the actor's
  under `actor.*`, which is what `robolearn.checkpoints.policy` reads) and scalars such as `log_alpha` by name;
- `config`: the JSON-able description a checkpoint stores, with the actor's fields at the top level
  (`actor` is "tanh_gaussian" or "deterministic"), so `load_policy` loads any of them by that actor kind;
- `optimizers`, `updates` (gradient steps done) and `_step`, one fused-Adam step on the gradient of a loss
  w.r.t. that optimizer's parameters only (`torch.autograd.grad`, as `robolearn.algos.online.sac`).

The batch is `robolearn.core.buffers.ReplayBuffer.sample`'s: `obs` / `next_obs` ({"policy": [B, D]}), `actions`,
`rewards`, `discount` (gamma^k, 0 after a termination: time-outs bootstrap) and `steps`; TD targets use
`discount`, never 1 - done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from policies.actor_critic import ACTIVATIONS
from policies.ensemble import DeterministicActor, QEnsemble, TanhGaussianActor
from policies.normalizer import FixedNorm
from robolearn.algos.common import compile_update, gradient_step, init_adam_state, shaped_rewards
from robolearn.algos.seeds import per_seed
from robolearn.errors import CheckpointError, ConfigError

#: The actors a checkpoint may hold: `robolearn.checkpoints.policy` loads "tanh_gaussian" as a SAC and
#: "deterministic" as a TD3 actor.
ACTORS = ("tanh_gaussian", "deterministic")

#: Std of the Gaussian noise `act(deterministic=False)` adds to a deterministic actor's action (TD3's
#: exploration noise, also `load_policy`'s default for deterministic actors).
EXPLORATION_NOISE = 0.1


def adam(params: Any, lr: float) -> torch.optim.Adam:
    """Adam with the fused (one kernel for all parameters) update, as the online learners use."""
    return torch.optim.Adam(params, lr=lr, fused=True)


def make_actor(kind: str, obs_dim: int, num_actions: int, cfg: Any) -> nn.Module:
    """The `kind` actor of `policies.ensemble` with the config's `actor_hidden`, `activation`, `actor_layer_norm`
    and `normalize_states`."""
    args = (obs_dim, num_actions, tuple(cfg.actor_hidden), cfg.activation, cfg.actor_layer_norm, normalizes_states(cfg))
    if kind == "tanh_gaussian":
        return TanhGaussianActor(*args, shared_std=getattr(cfg, "shared_std", False))
    return DeterministicActor(*args)


def normalizes_states(cfg: Any) -> bool:
    """Whether the config's networks carry a state normaliser (`normalize_states`, CORL's `normalize`)."""
    return bool(getattr(cfg, "normalize_states", False))


def frozen_copy(source: nn.Module, target: nn.Module) -> nn.Module:
    """`target` (built like `source`) holding `source`'s weights, without gradients: a target network to Polyak-average.

    Built, not deep-copied, so the random initialisation draws stay those of building both networks."""
    target.load_state_dict(source.state_dict())
    return target.requires_grad_(False)


def make_critics(obs_dim: int, num_actions: int, cfg: Any, device: torch.device) -> tuple[QEnsemble, QEnsemble]:
    """The config's critic ensemble (`num_critics`, `critic_hidden`, `activation`, `critic_layer_norm`), its target."""
    def build() -> QEnsemble:
        return QEnsemble(obs_dim, num_actions, cfg.num_critics, cfg.critic_hidden, cfg.activation,
                         cfg.critic_layer_norm, obs_norm=normalizes_states(cfg)).to(device)

    critic = build()
    return critic, frozen_copy(critic, build())


def check(condition: bool, message: str) -> None:
    """Raise `ConfigError(message)` unless `condition`: the configs' `validate` reads as a list of rules."""
    if not condition:
        raise ConfigError(message)


def check_common(cfg: Any, name: str) -> None:
    """The rules every offline config shares (networks, optimisation, discount)."""
    check(cfg.batch_size >= 1, f"{name}.batch_size must be >= 1, got {cfg.batch_size}")
    check(0.0 <= cfg.gamma <= 1.0, f"{name}.gamma must be in [0, 1], got {cfg.gamma}")
    check(cfg.activation in ACTIVATIONS,
          f"{name}.activation must be one of {sorted(ACTIVATIONS)}, got {cfg.activation!r}")
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if field.name.endswith("_lr"):
            check(value > 0, f"{name}.{field.name} must be > 0, got {value}")
        if field.name.endswith("_hidden"):
            check(len(value) >= 1 and all(int(h) >= 1 for h in value),
                  f"{name}.{field.name} must list at least one layer width >= 1, got {value}")
    if hasattr(cfg, "tau"):
        check(0.0 < cfg.tau <= 1.0, f"{name}.tau must be in (0, 1], got {cfg.tau}")
    if hasattr(cfg, "num_critics"):
        check(cfg.num_critics >= 1, f"{name}.num_critics must be >= 1, got {cfg.num_critics}")


def jsonable(cfg: Any) -> dict[str, Any]:
    """The config dataclass as a JSON-able dict (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


class OfflineAlgo:
    """The learner interface the offline runner relies on; subclasses build their networks and losses.

    A subclass sets `actor`, `_optimizers` and calls `_describe(kind)` in its `__init__`, lists its
    networks in `_networks` and its learned scalars in `_scalars`, and implements `update`.
    """

    name: str = ""                   # the algorithm's key in `config` ("iql", "td3_bc", ...)
    actor: nn.Module
    _optimizers: dict[str, torch.optim.Optimizer]

    def __init__(self, obs_dim: int, num_actions: int, cfg: Any, device: str | torch.device = "cpu"):
        cfg.validate()
        self.cfg = cfg
        self.device = torch.device(device)
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.updates = 0             # gradient steps done (the runner restores it on resume)
        self.compiled = bool(getattr(cfg, "compile", False))
        self.graph_methods: tuple[str, ...] = ()  # `_update_graphs`: what compiles and what a seed-batch vmaps
        self._seed_binding: Any = None            # set by a seed-batch while its vmapped update runs

    @classmethod
    def for_env(cls, env: Any, cfg: Any, device: str | torch.device = "cpu") -> OfflineAlgo:
        """The learner sized for `env`'s "policy" observations and actions (offline algorithms read no critic group)."""
        return cls(env.observation_shapes["policy"][0], env.num_actions, cfg, device)

    def _describe(self, actor_kind: str) -> None:
        """`config`: what a checkpoint stores to rebuild the actor (and the whole algorithm)."""
        cfg = self.cfg
        self.config = {"obs_dim": self.obs_dim, "num_actions": self.num_actions, "actor": actor_kind,
                       "actor_hidden": list(cfg.actor_hidden), "activation": cfg.activation,
                       "actor_layer_norm": cfg.actor_layer_norm, "normalize_states": normalizes_states(cfg),
                       "actor_shared_std": actor_kind == "tanh_gaussian" and getattr(cfg, "shared_std", False),
                       "algo": self.name, self.name: jsonable(cfg)}

    @torch.no_grad()
    def fit_state_normalizer(self, obs: torch.Tensor) -> None:
        """Fit every network's state normaliser (`policies.normalizer.FixedNorm`, targets' too) on the dataset's
        observations [N, D]: CORL normalises the dataset's states by their mean and std (+ 1e-3) and the
        evaluation env's by the same, ours live in the networks so a checkpoint's policy normalises itself.
        Nothing to do without `normalize_states`."""
        for net in self._networks().values():
            for module in net.modules():
                if isinstance(module, FixedNorm):
                    module.fit(obs)

    # --- acting ---------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: Mapping[str, torch.Tensor], deterministic: bool = False,
            generator: torch.Generator | None = None) -> torch.Tensor:
        """Actions in [-1, 1] for obs["policy"] [N, D]: the actor's mode, or a sample (a tanh-Gaussian's own,
        a deterministic actor's action plus N(0, EXPLORATION_NOISE^2) noise, clipped)."""
        x = obs["policy"].to(self.device)
        if isinstance(self.actor, TanhGaussianActor):
            return self.actor.mode(x) if deterministic else self.actor.sample(x, generator)[0]
        action = self.actor(x)
        if deterministic:
            return action
        noise = torch.randn(action.shape, generator=generator, device=self.device)
        return (action + EXPLORATION_NOISE * noise).clamp(-1.0, 1.0)

    # --- learning -------------------------------------------------------------------------------
    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _rewards(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """[B] the batch's rewards shaped by `reward_scale` and `reward_bias` (per summed step: `shaped_rewards`)."""
        rewards = batch["rewards"]
        steps = batch.get("steps")
        steps = torch.ones_like(rewards) if steps is None else steps
        return shaped_rewards(rewards, steps, self.cfg.gamma, self.cfg.reward_scale, self.cfg.reward_bias)

    def _draws(self, batch: Mapping[str, Any], generator: Any) -> Any:
        """The algorithm's random draws (`draw`) for `batch`; seed-batched (`generator` a list, one per seed, and
        the batch [S, B, ...]) each seed's from its own generator, stacked on a leading seed axis."""
        return per_seed(self.draw, batch["actions"].shape[-2], generator)

    def _step(self, opt: torch.optim.Optimizer, loss_fn: Callable[[], Any], lr: torch.Tensor | None = None) -> Any:
        """One step of `opt` on the loss `loss_fn()` returns (`robolearn.algos.common.gradient_step`; inside a
        seed-batch's vmapped update, the batch's functional step); returns what `loss_fn` returned."""
        if self._seed_binding is not None:
            return self._seed_binding.step(opt, loss_fn, lr)
        return gradient_step(opt, loss_fn, self.compiled, lr)

    def _seed_template(self) -> OfflineAlgo:
        """A fresh, uncompiled learner of this one's algorithm, sizes and config: a seed-batch's template."""
        return type(self)(self.obs_dim, self.num_actions, dataclasses.replace(self.cfg, compile=False), self.device)

    def _update_graphs(self, *names: str) -> None:
        """Name the methods that hold the tensor work of `update` (its draws and schedules stay outside): with
        `compile: true` each becomes one compiled graph (`compile_update`; Adam's state is created first), and a
        seed-batch (`robolearn.algos.seeds.SeedBatch`) runs each vmapped over its seeds."""
        self.graph_methods = names
        if self.compiled:
            self._ensure_adam_state()
            for name in names:
                setattr(self, name, compile_update(getattr(self, name), self.device))

    def _ensure_adam_state(self) -> None:
        """A compiled update needs Adam's state to exist (a graph cannot create it), also after a restore."""
        if self.compiled:
            for opt in self._optimizers.values():
                if len(opt.state) < sum(len(group["params"]) for group in opt.param_groups):
                    init_adam_state(opt)

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return self._optimizers

    # --- checkpoints ----------------------------------------------------------------------------
    def _networks(self) -> dict[str, nn.Module]:
        """Every network (targets included) by name; the actor as "actor"."""
        return {"actor": self.actor}

    def _scalars(self) -> dict[str, torch.Tensor]:
        """Learned scalars (log-temperatures) by name."""
        return {}

    def model_state(self) -> dict[str, torch.Tensor]:
        """Every learned tensor for `model.safetensors`: `<network>.<parameter>` and the scalars by name."""
        state = {f"{name}.{k}": v for name, net in self._networks().items() for k, v in net.state_dict().items()}
        state.update({name: t.detach() for name, t in self._scalars().items()})
        return state

    def load_model_state(self, state: Mapping[str, torch.Tensor]) -> None:
        try:
            for name, net in self._networks().items():
                prefix = name + "."
                net.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
            with torch.no_grad():
                for name, t in self._scalars().items():
                    t.copy_(state[name])
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(f"the model state does not fit this {self.name} learner: {e}") from e
