"""CQL (Kumar et al. 2020, "Conservative Q-Learning for Offline RL"), the SAC-based CQL(H) of young-geng/CQL.

SAC (tanh-Gaussian actor, twin critics, learned temperature), whose critics also minimise, per critic i,

    alpha_cql * mean_s[ temp * logsumexp_a(Q_i(s, a) / temp) - Q_i(s, a_data) ]      (clipped to [min, max] per s)

pushing Q down on actions the dataset does not contain and up on those it does. The logsumexp runs over
`cql_n_actions` actions of each of three kinds: uniform in [-1, 1]^A, and pi's samples at s and at s', all
scored at s (as young-geng/CQL and CORL). With `cql_importance_sample` each Q is divided by its proposal
density first, i.e. log 0.5^A resp. log pi(a|.) is subtracted, and the data's own Q stays out of the set;
without it the data's Q joins it, unweighted. `cql_lagrange` replaces the fixed weight by
alpha' * alpha_cql with alpha' = exp(log_alpha') learned to hold the gap at `cql_target_action_gap`
(alpha' rises while the gap exceeds it): loss_alpha' = -mean_i alpha' * alpha_cql * (gap_i - target_gap).

The TD target is min_i Q'_i(s', a') for a' ~ pi(s') (with `cql_max_target_backup`, the max over
`cql_n_actions` such a' of that min, antmaze's recipe), minus alpha * log pi(a'|s') if `backup_entropy`. The
actor maximises min_i Q_i(s, a) - alpha log pi(a|s) (the first `bc_steps` steps it maximises log pi(a_data|s)
instead), the temperature aims the entropy at -target_entropy_scale * |A|. Steps come in the order critic,
alpha', actor, temperature, then the Polyak update; the losses are methods that take explicit random draws
(`draw`). Defaults: CORL `algorithms/offline/cql.py` with `configs/offline/cql/halfcheetah/medium_v2.yaml`
(every locomotion dataset shares them). Not reproduced: CORL's orthogonal initialisation and its actor's
log-std parametrisation (policies.ensemble squashes log sigma into [-5, 2] instead).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import max_backup, polyak_update, q_many, subset_indices
from robolearn.algos.offline.base import OfflineAlgo, adam, check, check_common, make_actor, make_critics

#: alpha' is clipped to at most this (CORL: torch.clamp(exp(log_alpha_prime), 0, 1e6)).
ALPHA_PRIME_MAX = 1e6


@dataclasses.dataclass
class CQLConfig:
    actor_hidden: tuple[int, ...] = (256, 256, 256)    # CORL TanhGaussianPolicy: 3 hidden layers of 256
    critic_hidden: tuple[int, ...] = (256, 256, 256)   # CORL q_n_hidden_layers: 3 (antmaze 5)
    activation: str = "relu"
    actor_layer_norm: bool = False
    critic_layer_norm: bool = False
    normalize_states: bool = True      # CORL cql normalize: true (dataset mean/std, inside every network)
    num_critics: int = 2               # CORL critic_1, critic_2
    num_min_critics: int = 0           # the TD target's min runs over this many target critics drawn at random each
    #                                    step (0: all, as CORL); WSRL pre-trains Cal-QL with 10 critics, min of 2
    subset_replace: bool = True        # draw them with replacement (WSRL's jax.random.randint) or without
    actor_lr: float = 3e-5             # CORL policy_lr: 3e-5 (antmaze 1e-4)
    critic_lr: float = 3e-4            # CORL qf_lr: 3e-4 (also alpha' 's learning rate)
    temperature_lr: float = 3e-5       # CORL: the temperature's Adam uses policy_lr
    batch_size: int = 256              # CORL batch_size: 256
    gamma: float = 0.99                # CORL discount: 0.99
    tau: float = 0.005                 # CORL soft_target_update_rate: 5e-3, target_update_period: 1
    init_temperature: float = 1.0      # CORL log_alpha = Scalar(0.0)
    learn_temperature: bool = True     # CORL use_automatic_entropy_tuning: true
    target_entropy_scale: float = 1.0  # target entropy -scale * |A| (CORL: -action_dim)
    backup_entropy: bool = False       # CORL backup_entropy: false
    cql_alpha: float = 10.0            # CORL cql_alpha: 10.0 (antmaze 5.0)
    cql_n_actions: int = 10            # CORL cql_n_actions: 10
    cql_importance_sample: bool = True  # CORL cql_importance_sample: true
    cql_temp: float = 1.0              # CORL cql_temp: 1.0
    cql_lagrange: bool = False         # CORL cql_lagrange: false (antmaze true)
    cql_target_action_gap: float = -1.0  # CORL cql_target_action_gap: -1.0 (antmaze 0.8; used with cql_lagrange)
    cql_max_target_backup: bool = False  # CORL cql_max_target_backup: false (antmaze true)
    cql_clip_diff_min: float | None = None  # CORL cql_clip_diff_min: -inf (antmaze -200); null: no clip
    cql_clip_diff_max: float | None = None  # CORL cql_clip_diff_max: inf
    bc_steps: int = 0                  # CORL bc_steps: 0 (steps of BC for the actor at the start)
    reward_scale: float = 1.0          # r <- scale * r + bias (CORL antmaze: 10 and -5)
    reward_bias: float = 0.0
    compile: bool = False              # torch.compile the update steps into graphs (`compile_update`)

    def validate(self) -> None:
        name = type(self).__name__.removesuffix("Config").lower()
        check_common(self, name)
        check(self.cql_n_actions >= 1, f"{name}.cql_n_actions must be >= 1, got {self.cql_n_actions}")
        check(self.cql_alpha >= 0, f"{name}.cql_alpha must be >= 0, got {self.cql_alpha}")
        check(self.cql_temp > 0, f"{name}.cql_temp must be > 0, got {self.cql_temp}")
        check(self.init_temperature > 0, f"{name}.init_temperature must be > 0, got {self.init_temperature}")
        check(self.bc_steps >= 0, f"{name}.bc_steps must be >= 0, got {self.bc_steps}")
        check(0 <= self.num_min_critics and (self.subset_replace or self.num_min_critics <= self.num_critics),
              f"{name}.num_min_critics must be in [0, num_critics] (0: all), got {self.num_min_critics}")
        lo, hi = self.cql_clip_diff_min, self.cql_clip_diff_max
        check(lo is None or hi is None or lo <= hi,
              f"{name}.cql_clip_diff_min ({lo}) must be <= cql_clip_diff_max ({hi})")


class CQL(OfflineAlgo):
    """CQL; Cal-QL (`robolearn.algos.offline.calql`) changes only `bound_policy_q`."""

    name = "cql"

    def __init__(self, obs_dim: int, num_actions: int, cfg: CQLConfig | None = None,
                 device: str | torch.device = "cpu"):
        cfg = cfg if cfg is not None else CQLConfig()
        super().__init__(obs_dim, num_actions, cfg, device)
        self.actor = make_actor("tanh_gaussian", obs_dim, num_actions, cfg).to(self.device)
        self.critic, self.critic_target = make_critics(obs_dim, num_actions, cfg, self.device)
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=self.device, requires_grad=True)
        self.log_alpha_prime = torch.tensor(1.0, device=self.device, requires_grad=True)  # CORL Scalar(1.0)
        self.target_entropy = -cfg.target_entropy_scale * num_actions
        self._optimizers = {"actor": adam(self.actor.parameters(), cfg.actor_lr),
                            "critic": adam(self.critic.parameters(), cfg.critic_lr),
                            "alpha": adam([self.log_alpha], cfg.temperature_lr)}
        if cfg.cql_lagrange:
            self._optimizers["alpha_prime"] = adam([self.log_alpha_prime], cfg.critic_lr)
        self._describe("tanh_gaussian")
        self._update_graphs("_fit")

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _scalars(self) -> dict[str, torch.Tensor]:
        return {"log_alpha": self.log_alpha, "log_alpha_prime": self.log_alpha_prime}

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    @property
    def alpha_prime(self) -> torch.Tensor:
        return self.log_alpha_prime.exp().clamp(0.0, ALPHA_PRIME_MAX)

    # --- random draws ---------------------------------------------------------------------------
    def draw(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Every random number of one update: standard normals for pi's samples, uniform random actions.

        "target" [B, A] ([B, n, A] with max-target backup): a' ~ pi(s'); "random" [B, n, A] uniform in
        [-1, 1]; "current" / "next" [B, n, A]: pi's samples at s and s' for the logsumexp; "actor" [B, A];
        "subset" [M]: the target critics whose min is the TD target (all of them unless `num_min_critics`).
        """
        b, n, a = batch_size, self.cfg.cql_n_actions, self.num_actions

        def normal(*shape: int) -> torch.Tensor:
            return torch.randn(shape, generator=generator, device=self.device)

        target = normal(b, n, a) if self.cfg.cql_max_target_backup else normal(b, a)
        random = torch.rand((b, n, a), generator=generator, device=self.device) * 2.0 - 1.0
        cfg = self.cfg
        if cfg.num_min_critics:
            subset = subset_indices(cfg.num_critics, cfg.num_min_critics, cfg.subset_replace, generator, self.device)
        else:
            subset = torch.arange(cfg.num_critics, device=self.device)
        return {"target": target, "random": random, "current": normal(b, n, a), "next": normal(b, n, a),
                "actor": normal(b, a), "subset": subset}

    # --- losses ---------------------------------------------------------------------------------
    @torch.no_grad()
    def target(self, batch: dict[str, Any], noise: torch.Tensor, subset: torch.Tensor | None = None) -> torch.Tensor:
        """[B] r + discount * (min_i Q'_i(s', a') [- alpha log pi(a'|s')]), a' ~ pi(s') (max over n with max backup),
        the min over the target critics in `subset` (all when None)."""
        next_obs = batch["next_obs"]["policy"]
        if self.cfg.cql_max_target_backup:
            next_actions, next_logp = self.actor.sample_many(next_obs, noise)
            q = q_many(self.critic_target, next_obs, next_actions)
            next_q, next_logp = max_backup(q if subset is None else q[subset], next_logp)
        else:
            next_actions, next_logp = self.actor.sample(next_obs, noise=noise)
            q = self.critic_target(next_obs, next_actions)
            next_q = (q if subset is None else q[subset]).min(0).values
        if self.cfg.backup_entropy:
            next_q = next_q - self.alpha * next_logp
        return self._rewards(batch) + batch["discount"] * next_q

    def bound_policy_q(self, q_current: torch.Tensor, q_next: torch.Tensor, batch: dict[str, Any]
                       ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The Q-values [E, B, n] of pi's actions as the conservative term sees them: unchanged in CQL."""
        return q_current, q_next, {}

    def critic_loss(self, batch: dict[str, Any], draws: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The critics' loss (TD + conservative term), alpha' 's loss, and statistics."""
        cfg = self.cfg
        obs, actions = batch["obs"]["policy"], batch["actions"]
        q = self.critic(obs, actions)                                    # [E, B]
        target = self.target(batch, draws["target"], draws.get("subset"))
        td_loss = ((q - target) ** 2).mean(-1).sum()                      # the sum of each critic's MSE

        with torch.no_grad():
            current, current_logp = self.actor.sample_many(obs, draws["current"])
            nxt, next_logp = self.actor.sample_many(batch["next_obs"]["policy"], draws["next"])
        n = cfg.cql_n_actions
        q_all = q_many(self.critic, obs, torch.cat([draws["random"], nxt, current], 1))  # [E, B, 3n]
        q_random, q_next, q_current = q_all.split(n, -1)
        q_current, q_next, stats = self.bound_policy_q(q_current, q_next, batch)
        if cfg.cql_importance_sample:
            random_log_density = self.num_actions * math.log(0.5)        # uniform on [-1, 1]^A
            cat = torch.cat([q_random - random_log_density, q_next - next_logp, q_current - current_logp], -1)
        else:
            cat = torch.cat([q_random, q.unsqueeze(-1), q_next, q_current], -1)
        ood = cfg.cql_temp * torch.logsumexp(cat / cfg.cql_temp, -1)    # [E, B]
        diff = ood - q
        if cfg.cql_clip_diff_min is not None or cfg.cql_clip_diff_max is not None:
            diff = diff.clamp(cfg.cql_clip_diff_min, cfg.cql_clip_diff_max)
        gap = diff.mean(-1)                                              # [E]

        if cfg.cql_lagrange:
            alpha_prime = self.alpha_prime.detach()
            conservative = alpha_prime * cfg.cql_alpha * (gap - cfg.cql_target_action_gap)
        else:
            alpha_prime = torch.zeros((), device=self.device)
            conservative = cfg.cql_alpha * gap
        loss = td_loss + conservative.sum()
        stats.update({"critic_loss": loss.detach(), "td_loss": td_loss.detach(), "cql_gap": gap.detach().mean(),
                      "q_mean": q.detach().mean(), "q_random": q_random.detach().mean(), "alpha_prime": alpha_prime,
                      "alpha_prime_loss": torch.zeros((), device=self.device)})
        return loss, gap.detach(), stats

    def alpha_prime_loss(self, gap: torch.Tensor) -> torch.Tensor:
        """alpha' 's Lagrange loss -mean_i alpha' * alpha_cql * (gap_i - target_gap) on the critics' gaps [E]."""
        cfg = self.cfg
        return -(self.alpha_prime * cfg.cql_alpha * (gap - cfg.cql_target_action_gap)).mean()

    def actor_loss(self, batch: dict[str, Any], noise: torch.Tensor, alpha: torch.Tensor, bc_phase: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """mean(alpha log pi(a|s) - min_i Q_i(s, a)), a ~ pi(s) from `noise` (in the `bc_phase`, the first bc_steps:
        - log pi(a_data|s) in place of the Q); also returns log pi(a|s) [B] for the temperature."""
        obs = batch["obs"]["policy"]
        actions, logp = self.actor.sample(obs, noise=noise)
        if bc_phase:
            value = self.actor.log_prob(obs, batch["actions"])
        else:
            value = self.critic(obs, actions).min(0).values
        return (alpha * logp - value).mean(), logp

    def temperature_loss(self, logp: torch.Tensor) -> torch.Tensor:
        """-mean(log alpha * (log pi + target_entropy)): alpha grows while the entropy is below its target."""
        return -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()

    # --- one gradient step ----------------------------------------------------------------------
    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Critic, alpha' (Lagrange), actor and temperature steps on one batch, then the Polyak update. The draws
        happen here, the tensor work in `_fit` (one graph with `compile: true`)."""
        self._ensure_adam_state()  # a restore may have replaced it with an empty state
        draws = self._draws(batch, generator)
        # this step's temperature, before its own update; `updates` counts the steps before this one
        stats = self._fit(batch, draws, self.alpha, self.updates < self.cfg.bc_steps)
        self.updates += 1
        return stats

    def _fit(self, batch: dict[str, Any], draws: dict[str, torch.Tensor], alpha: torch.Tensor, bc_phase: bool
             ) -> dict[str, torch.Tensor]:
        _, gap, stats = self._step(self._optimizers["critic"], lambda: self.critic_loss(batch, draws))
        if self.cfg.cql_lagrange:
            stats["alpha_prime_loss"] = self._step(self._optimizers["alpha_prime"],
                                                   lambda: self.alpha_prime_loss(gap)).detach()
        actor_loss, logp = self._step(self._optimizers["actor"],
                                      lambda: self.actor_loss(batch, draws["actor"], alpha, bc_phase))
        if self.cfg.learn_temperature:
            self._step(self._optimizers["alpha"], lambda: self.temperature_loss(logp))
        polyak_update(self.critic_target, self.critic, self.cfg.tau)
        stats.update({"actor_loss": actor_loss.detach(), "entropy": -logp.detach().mean(), "alpha": alpha})
        return stats


register(AlgoSpec("cql", CQLConfig, "robolearn.algos.offline.cql:CQL", runner="offline", actor="tanh_gaussian"))
