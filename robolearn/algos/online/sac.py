"""Soft actor-critic with the knobs that distinguish SAC, REDQ, RLPD, SERL and WSRL.

One learner, read top to bottom: a tanh-Gaussian actor, an ensemble of N critics evaluated in one
batched matmul, their Polyak-averaged targets, and a learned temperature. The published recipes
differ in details that are easy to get wrong; each one is a field of `SACConfig` (the presets in
`configs/algo/` set them as the official code does, with the file and value cited there):

- the TD target is the min over a random subset of M of the N target critics, drawn with
  replacement (SERL, WSRL) or without (REDQ, RLPD);
- the actor maximises the min (SAC, WSRL) or the mean (REDQ, RLPD, SERL) over all critics, or the
  first critic alone (TD3's Q1);
- LayerNorm on the critic and/or the actor; the MLP activation;
- the update-to-data ratio (critic updates per environment transition) and how many critic updates
  come per actor and temperature update;
- the entropy term in the backup on or off; target entropy -scale * |A|; temperature learned or fixed;
- n-step returns (`reward_scale` and `reward_bias` apply to every step of the window, see
  `shaped_rewards`); HL-Gauss classification critics instead of regression.

Critics read the `"critic"` observation group when the environment has one (asymmetric
actor-critic), the actor reads `"policy"`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from policies.ensemble import QEnsemble, TanhGaussianActor
from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import (
    ACTOR_Q,
    actor_objective_q,
    compile_update,
    gradient_step,
    init_adam_state,
    max_backup,
    polyak_update,
    q_many,
    shaped_rewards,
    subset_indices,
)
from robolearn.algos.seeds import per_seed
from robolearn.core.buffers import ReplayConfig, check_replay
from robolearn.core.losses import HLGauss
from robolearn.errors import ConfigError


@dataclasses.dataclass
class SACConfig(ReplayConfig):
    # data and schedule: ReplayConfig's fields (utd_ratio, buffer_size, n_step, offline_ratio, learning_starts,
    # random_warmup)
    # networks
    actor_hidden: tuple[int, ...] = (256, 256)
    critic_hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    actor_layer_norm: bool = False
    critic_layer_norm: bool = False
    normalize_states: bool = False  # fixed state normalisers in the networks: a warm start from an offline run
    #                                 that normalised (CORL `normalize`) loads its dataset statistics; else identity
    # critic ensemble
    num_critics: int = 2          # N
    num_min_critics: int = 2      # M: the TD target is the min over M of the N target critics
    subset_replace: bool = False  # draw the M with replacement (SERL, WSRL) or without (REDQ, RLPD)
    actor_q: str = "min"          # the actor objective's Q: one of ACTOR_Q (see `actor_objective_q`)
    # optimisation
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    actor_every: int = 1          # one actor (and temperature) update per this many critic updates;
    #                               0: per round(utd_ratio) of them, i.e. one per transition (RLPD, REDQ)
    # entropy
    backup_entropy: bool = True   # subtract alpha * log pi(a'|s') in the TD target
    max_target_backup: bool = False  # a' is the best of `backup_samples` draws from pi(s') under the target min
    backup_samples: int = 10         # (WSRL on antmaze, as CQL's max backup: `robolearn.algos.common.max_backup`)
    init_temperature: float = 1.0
    warm_start_temperature: bool = True  # a warm start (init=) takes the checkpoint's temperature; false: the online
    #                                      phase starts from init_temperature (WSRL here: `configs/finetune.yaml`)
    learn_temperature: bool = True
    target_entropy_scale: float = 1.0  # target entropy = -scale * |A|
    # critic head
    hl_gauss: bool = False        # classification critics (HL-Gauss) instead of squared error
    hl_bins: int = 101
    v_min: float = -100.0
    v_max: float = 100.0
    # rewards
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    # execution
    compile: bool = False         # torch.compile the critic and actor updates into fused graphs (see `compile_update`)

    def validate(self) -> None:
        if self.num_min_critics < 1 or (not self.subset_replace and self.num_min_critics > self.num_critics):
            raise ConfigError(f"num_min_critics ({self.num_min_critics}) must be in [1, num_critics "
                              f"({self.num_critics})] when drawn without replacement")
        if self.actor_q not in ACTOR_Q:
            raise ConfigError(f"actor_q must be one of {', '.join(map(repr, ACTOR_Q))}, got {self.actor_q!r}")
        if self.backup_samples < 1:
            raise ConfigError(f"backup_samples must be >= 1, got {self.backup_samples}")
        if self.actor_every < 0 or self.batch_size < 1:
            raise ConfigError("need actor_every >= 0 and batch_size >= 1")
        check_replay(self)


class SAC:
    """The learner: `act` for collection, `update` per minibatch (the critics every time, the actor and the
    temperature every `actor_period` updates through `update_actor`).

    Random draws take an optional `torch.Generator` on the learner's device. The updates return
    their statistics as detached 0-d tensors, so a GPU never synchronises per update: callers
    average them and convert once per logging interval.
    """

    def __init__(self, obs_dim: int, critic_obs_dim: int, num_actions: int, cfg: SACConfig | None = None,
                 device: str | torch.device = "cpu"):
        self.cfg = cfg = cfg if cfg is not None else SACConfig()
        cfg.validate()
        self.device = torch.device(device)
        self.obs_dim, self.critic_obs_dim, self.num_actions = obs_dim, critic_obs_dim, num_actions
        self.actor = self._make_actor(obs_dim, num_actions).to(self.device)
        self.critic = self._make_critic(critic_obs_dim, num_actions).to(self.device)
        self.critic_target = self._make_critic(critic_obs_dim, num_actions).to(self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        self.hl = HLGauss(cfg.v_min, cfg.v_max, cfg.hl_bins).to(self.device) if cfg.hl_gauss else None
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=self.device, requires_grad=True)
        self.target_entropy = -cfg.target_entropy_scale * num_actions
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, fused=True)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, fused=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.temperature_lr, fused=True)
        self.updates = 0
        self.compiled = cfg.compile
        self.graph_methods: tuple[str, ...] = ("_critic_update", "_actor_update")  # compiled; vmapped in a seed-batch
        self._seed_binding: Any = None  # set by a seed-batch (`robolearn.algos.seeds`) while its update runs
        if cfg.compile:
            self._ensure_adam_state()
            self._critic_update = compile_update(self._critic_update, self.device)
            self._actor_update = compile_update(self._actor_update, self.device)
        self.config = {"obs_dim": obs_dim, "critic_obs_dim": critic_obs_dim, "num_actions": num_actions,
                       "sac": {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}}

    def _make_actor(self, obs_dim: int, num_actions: int) -> torch.nn.Module:
        cfg = self.cfg
        return TanhGaussianActor(obs_dim, num_actions, cfg.actor_hidden, cfg.activation, cfg.actor_layer_norm,
                                 cfg.normalize_states)

    def _make_critic(self, critic_obs_dim: int, num_actions: int) -> QEnsemble:
        cfg = self.cfg
        return QEnsemble(critic_obs_dim, num_actions, cfg.num_critics, cfg.critic_hidden, cfg.activation,
                         cfg.critic_layer_norm, cfg.hl_bins if cfg.hl_gauss else 1, cfg.normalize_states)

    @classmethod
    def for_env(cls, env: Any, cfg: SACConfig | None = None, device: str | torch.device = "cpu") -> SAC:
        shapes = env.observation_shapes
        obs_dim = shapes["policy"][0]
        critic_dim = shapes["critic"][0] if "critic" in shapes else obs_dim
        return cls(obs_dim, critic_dim, env.num_actions, cfg, device)

    # --- acting ---------------------------------------------------------------------------------
    @staticmethod
    def critic_obs(obs: Any) -> torch.Tensor:
        return obs["critic"] if "critic" in obs.keys() else obs["policy"]

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
        policy_obs = obs["policy"].to(self.device)
        if deterministic:
            return self.actor.mode(policy_obs)
        return self.actor.sample(policy_obs, generator)[0]

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    # --- learning -------------------------------------------------------------------------------
    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        """[E, B] values from the critic outputs (expectations under HL-Gauss)."""
        return self.hl.value(out) if self.hl is not None else out

    def _subset(self, generator: torch.Generator | None) -> torch.Tensor:
        cfg = self.cfg
        return per_seed(lambda _, g: subset_indices(cfg.num_critics, cfg.num_min_critics, cfg.subset_replace, g,
                                                    self.device), 0, generator)

    def _noise(self, batch_size: int, generator: torch.Generator | None, samples: int | None = None) -> torch.Tensor:
        """[B, A] N(0, 1) draws ([B, samples, A] with `samples`; [S, ...], one block per seed's generator, given a
        seed-batch's list)."""
        shape = (self.num_actions,) if samples is None else (samples, self.num_actions)
        return per_seed(lambda n, g: torch.randn(n, *shape, generator=g, device=self.device), batch_size, generator)

    def _target_min(self, next_obs_c: torch.Tensor, next_actions: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """[B] min over the subset `idx` of the target critics at (o', a')."""
        return self._q_values(self.critic_target(next_obs_c, next_actions))[idx].min(0).values

    def _ensure_adam_state(self) -> None:
        """Compiled updates need Adam's state to exist (a graph cannot create it), also after a restore."""
        if self.cfg.compile:
            for opt in (self.actor_opt, self.critic_opt, self.alpha_opt):
                if len(opt.state) < sum(len(group["params"]) for group in opt.param_groups):
                    init_adam_state(opt)

    def _step(self, opt: torch.optim.Optimizer, loss_fn: Callable[[], Any]) -> Any:
        """One step of `opt` on the loss `loss_fn()` returns (`robolearn.algos.common.gradient_step`; inside a
        seed-batch's vmapped update, the batch's functional step); returns what `loss_fn` returned."""
        if self._seed_binding is not None:
            return self._seed_binding.step(opt, loss_fn, None)
        return gradient_step(opt, loss_fn, self.compiled)

    def _critic_loss(self, obs_c: torch.Tensor, actions: torch.Tensor, target: torch.Tensor
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Every critic's loss towards `target` (squared error or HL-Gauss cross-entropy), summed; statistics."""
        out = self.critic(obs_c, actions)
        if self.hl is not None:
            loss = self.hl.loss(out, target.expand(self.cfg.num_critics, -1)).mean(-1).sum()
            q = self.hl.value(out.detach())
        else:
            loss = 0.5 * ((out - target) ** 2).mean(-1).sum()
            q = out.detach()
        return loss, {"critic_loss": loss.detach().clone(), "q_mean": q.mean()}

    def _critic_step(self, obs_c: torch.Tensor, actions: torch.Tensor, target: torch.Tensor
                     ) -> dict[str, torch.Tensor]:
        """One optimizer step of every critic towards `target`."""
        return self._step(self.critic_opt, lambda: self._critic_loss(obs_c, actions, target))[1]

    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None
                      ) -> dict[str, torch.Tensor]:
        """One critic step on a minibatch; every `actor_period` steps also the actor and temperature.

        `generator`, if given, must be on the learner's device (the draws are made there).
        The random draws happen here, the tensor work in `_critic_update` / `_actor_update`, which
        `compile=True` turns into fused graphs.
        """
        self._ensure_adam_state()  # a restore may have replaced it with an empty state
        next_policy = batch["next_obs"]["policy"]
        b, cfg = next_policy.shape[-2], self.cfg
        noise = self._noise(b, generator, cfg.backup_samples) if cfg.max_target_backup else self._noise(b, generator)
        idx = self._subset(generator)
        rewards = batch["rewards"]
        steps = batch.get("steps")  # rewards summed per sample (n-step); a batch without it holds 1-step rewards
        steps = torch.ones_like(rewards) if steps is None else steps
        stats = self._critic_update(self.critic_obs(batch["obs"]), batch["actions"], rewards, steps,
                                    batch["discount"], next_policy, self.critic_obs(batch["next_obs"]), noise, idx)
        self.updates += 1
        if self.updates % self.actor_period == 0:
            stats.update(self.update_actor(batch, generator))
        return stats

    def _critic_update(self, obs_c: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                       steps: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                       next_obs_c: torch.Tensor, noise: torch.Tensor, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """TD target from a' = pi(o') (drawn with `noise`; with max backup the best of its [B, n] draws) and the
        target critics in `idx`, a critic step, Polyak."""
        cfg = self.cfg
        with torch.no_grad():
            if cfg.max_target_backup:
                next_actions, next_logp = self.actor.sample_many(next_obs, noise)  # [B, n, A], [B, n]
                q = self._q_values(q_many(self.critic_target, next_obs_c, next_actions))  # [E, B, n]
                next_v, next_logp = max_backup(q[idx], next_logp)
            else:
                next_actions, next_logp = self.actor.sample(next_obs, noise=noise)
                next_v = self._target_min(next_obs_c, next_actions, idx)
            if cfg.backup_entropy:
                next_v = next_v - self.alpha * next_logp
            shaped = shaped_rewards(rewards, steps, cfg.gamma, cfg.reward_scale, cfg.reward_bias)
            target = shaped + discount * next_v
        stats = self._critic_step(obs_c, actions, target)
        polyak_update(self.critic_target, self.critic, cfg.tau)
        return stats

    @property
    def actor_period(self) -> int:
        """Critic updates per actor update: `actor_every`, or round(utd_ratio) when it is 0."""
        return self.cfg.actor_every or max(1, round(self.cfg.utd_ratio))

    def update_actor(self, batch: dict[str, Any], generator: torch.Generator | None = None
                     ) -> dict[str, torch.Tensor]:
        """One actor (and temperature) step on a minibatch."""
        policy_obs = batch["obs"]["policy"]
        noise = self._noise(policy_obs.shape[-2], generator)
        return self._actor_update(policy_obs, self.critic_obs(batch["obs"]), noise)

    def _policy_q(self, obs_c: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[E, B] the critics the actor climbs (DSRL-NA swaps in its noise critic)."""
        return self._q_values(self.critic(obs_c, actions))

    def _actor_update(self, obs: torch.Tensor, obs_c: torch.Tensor, noise: torch.Tensor) -> dict[str, torch.Tensor]:
        """Maximise E[Q(s, a) - alpha log pi(a|s)] (Q as `actor_q` says), then fit the temperature."""
        def actor_loss() -> tuple[torch.Tensor, torch.Tensor]:
            actions, logp = self.actor.sample(obs, noise=noise)
            q = actor_objective_q(self._policy_q(obs_c, actions), self.cfg.actor_q)
            return (self.alpha * logp - q).mean(), logp

        loss, logp = self._step(self.actor_opt, actor_loss)
        stats = {"actor_loss": loss.detach().clone(), "entropy": -logp.detach().mean()}
        if self.cfg.learn_temperature:
            self._step(self.alpha_opt, lambda: -(self.log_alpha * (logp.detach() + self.target_entropy)).mean())
        stats["alpha"] = self.alpha
        return stats

    # --- checkpoints ----------------------------------------------------------------------------
    def _networks(self) -> dict[str, torch.nn.Module]:
        """Every learned network by name (what `model_state` saves, what a seed-batch stacks)."""
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _scalars(self) -> dict[str, torch.Tensor]:
        return {"log_alpha": self.log_alpha}

    def _seed_template(self) -> SAC:
        """A fresh, uncompiled learner of this one's class, sizes and config: a seed-batch's template."""
        return type(self)(self.obs_dim, self.critic_obs_dim, self.num_actions,
                          dataclasses.replace(self.cfg, compile=False), self.device)

    def model_state(self) -> dict[str, torch.Tensor]:
        """Every learned tensor (actor, critics, targets, temperature) for `model.safetensors`."""
        state = {f"actor.{k}": v for k, v in self.actor.state_dict().items()}
        state.update({f"critic.{k}": v for k, v in self.critic.state_dict().items()})
        state.update({f"critic_target.{k}": v for k, v in self.critic_target.state_dict().items()})
        state["log_alpha"] = self.log_alpha.detach()
        return state

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        for name, module in (("actor", self.actor), ("critic", self.critic), ("critic_target", self.critic_target)):
            prefix = name + "."
            module.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_opt, "critic": self.critic_opt, "alpha": self.alpha_opt}


register(AlgoSpec("sac", SACConfig, "robolearn.algos.online.sac:SAC", runner="off_policy", actor="tanh_gaussian"))
