"""RO2O (Wen et al., "Towards Robust Offline-to-Online Reinforcement Learning via Uncertainty and Smoothness").

SAC-N (an ensemble of N critics, the TD target and the actor both take the min over all of them, entropy in the
backup, a learned temperature) with three regularisers, all computed on states perturbed by uniform noise
delta ~ U[-eps, eps]^D: `sample_size` perturbations per update, shared by the batch, and of those the one with
the largest loss per state (the "adversarial" one; no gradient attack), as the official code
(BattleWen/RO2O `algorithms/offline/ro2o_mujoco.py`):

- Q smoothness (critic): per critic i, diff = Q_i(s + delta, a) - Q_i(s, a), penalised asymmetrically,
  (1 - tau) * max(diff, 0)^2 + tau * min(diff, 0)^2 (tau = `q_smooth_tau`), averaged over the ensemble, maxed over
  delta, averaged over states, times `beta_q_smooth` (the paper's eta_1);
- policy smoothness (actor): the symmetric KL between the pre-tanh Gaussians at s and at s + delta, maxed over
  delta, averaged, times `beta_policy`;
- OOD penalty (critic): for a' ~ pi(s + delta), regress every Q_i(s + delta, a') towards the fixed target
  Q_i(s + delta, a') - lambda * std_i Q_i(s + delta, a') (the ensemble's unbiased std), MSE times `beta_ood`;
  lambda (`ood_reg`) decays linearly by `ood_reg_decay` per update down to `ood_reg_min`.

The antmaze variant (`actor_objective: lcb`, BattleWen/RO2O `ro2o_antmaze_LCB.py`, `ro2o_ft_ant_LCB.py`): the actor
maximises a lower confidence bound of the ensemble, mean_i V_i + lcb_beta * std_i V_i with V_i = Q_i(s, a) -
alpha log pi(a|s) and lcb_beta = -4, plus beta_bc * MSE(a ~ pi(s), the batch's action); each critic regresses to its
own target critic's backup instead of the ensemble's min.

One update runs the temperature, then the actor, then the critics, then the Polyak update (EDAC's order, which the
official code keeps). The same learner fine-tunes online (`robolearn finetune algo=ro2o`): lambda frozen at its
minimum (`ood_reg_decay: 0`), no offline data, 2500 transitions of the pre-trained policy first. The paper keeps the
regularisers online; the official fine-tuning scripts (`algorithms/finetune/ro2o_ft_*.py`) compute them but leave
them out of the losses (`loss = critic_loss1  # + noise_Q_loss + ood_loss`), i.e. online SAC-N: set the three
`beta_*` to 0 for that (a term whose weight is 0 is not computed). The losses take every random number explicitly
(`draw`), so a test can recompute them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from policies.normalizer import FixedNorm
from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.common import polyak_update
from robolearn.algos.offline.base import OfflineAlgo, adam, check, check_common, make_actor, make_critics


@dataclasses.dataclass
class RO2OConfig:
    actor_hidden: tuple[int, ...] = (256, 256, 256)   # ro2o_mujoco.py: 3 x hidden_dim 256
    critic_hidden: tuple[int, ...] = (256, 256, 256)  # VectorizedCritic: 3 x 256
    activation: str = "relu"
    actor_layer_norm: bool = False      # no LayerNorm in RO2O's networks
    critic_layer_norm: bool = False
    normalize_states: bool = True       # RO2O's scripts always normalise states (dataset mean/std)
    num_critics: int = 10               # num_critics: 10
    actor_lr: float = 3e-4              # actor_learning_rate
    critic_lr: float = 3e-4             # critic_learning_rate
    temperature_lr: float = 3e-4        # alpha_learning_rate
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    init_temperature: float = 1.0       # log_alpha = 0
    target_entropy_scale: float = 1.0   # target entropy -|A|
    beta_q_smooth: float = 1e-4         # eta_1 (the code's constant 0.0001)
    q_smooth_tau: float = 0.2           # the asymmetry of the Q-smoothness penalty
    beta_policy: float = 1.0            # eta_3
    beta_ood: float = 0.1               # eta_2 (mujoco; antmaze 0.3-0.5)
    q_smooth_eps: float = 0.01          # eps_Q
    policy_smooth_eps: float = 0.01     # eps_P
    ood_smooth_eps: float = 0.01        # eps_ood
    sample_size: int = 20               # perturbations per update
    ood_reg: float = 1.0                # lambda at the start (q_ood_uncertainty_reg)
    ood_reg_min: float = 0.1            # q_ood_uncertainty_reg_min
    ood_reg_decay: float = 5e-7         # per update (q_ood_uncertainty_decay); online: 0
    #: The actor's objective. "min": alpha log pi - min_i Q_i with the TD target's min over the critics
    #: (ro2o_mujoco.py). "lcb": the antmaze LCB scripts' -(mean_i + lcb_beta std_i) of Q_i - alpha log pi, each
    #: critic regressing to its own target critic's backup (ro2o_antmaze_LCB.py, ro2o_ft_ant_LCB.py).
    actor_objective: str = "min"
    lcb_beta: float = -4.0              # beta (offline) and beta_online (fine-tuning) of the LCB scripts
    beta_bc: float = 0.0                # the antmaze scripts' BC term: beta_bc * MSE(a ~ pi(s), the batch's action)
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    compile: bool = False               # torch.compile the update steps into one graph (`compile_update`)

    def validate(self) -> None:
        check_common(self, "ro2o")
        check(self.sample_size >= 1, f"ro2o.sample_size must be >= 1, got {self.sample_size}")
        check(self.num_critics >= 2, f"ro2o.num_critics must be >= 2 (the OOD penalty is their std), got "
              f"{self.num_critics}")
        check(min(self.q_smooth_eps, self.policy_smooth_eps, self.ood_smooth_eps) >= 0, "ro2o's eps must be >= 0")
        check(0.0 <= self.q_smooth_tau <= 1.0, f"ro2o.q_smooth_tau must be in [0, 1], got {self.q_smooth_tau}")
        check(self.ood_reg_decay >= 0 and self.ood_reg_min >= 0, "ro2o.ood_reg_decay and ood_reg_min must be >= 0")
        check(self.actor_objective in ("min", "lcb"),
              f"ro2o.actor_objective must be 'min' or 'lcb', got {self.actor_objective!r}")
        check(self.beta_bc >= 0, f"ro2o.beta_bc must be >= 0, got {self.beta_bc}")
        check(self.init_temperature > 0, f"ro2o.init_temperature must be > 0, got {self.init_temperature}")


def gaussian_kl(mean1: torch.Tensor, log_std1: torch.Tensor, mean2: torch.Tensor, log_std2: torch.Tensor
                ) -> torch.Tensor:
    """KL(N(mean1, std1^2) || N(mean2, std2^2)) per dimension."""
    var1, var2 = (2 * log_std1).exp(), (2 * log_std2).exp()
    return log_std2 - log_std1 + (var1 + (mean1 - mean2) ** 2) / (2 * var2) - 0.5


class RO2O(OfflineAlgo):
    """The learner: `draw` the random numbers, `alpha_loss` / `actor_loss` / `critic_loss`, `update`."""

    name = "ro2o"

    def __init__(self, obs_dim: int, num_actions: int, cfg: RO2OConfig | None = None,
                 device: str | torch.device = "cpu"):
        cfg = cfg if cfg is not None else RO2OConfig()
        super().__init__(obs_dim, num_actions, cfg, device)
        self.actor = make_actor("tanh_gaussian", obs_dim, num_actions, cfg).to(self.device)
        self.critic, self.critic_target = make_critics(obs_dim, num_actions, cfg, self.device)
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=self.device, requires_grad=True)
        self.target_entropy = -cfg.target_entropy_scale * num_actions
        self._optimizers = {"actor": adam(self.actor.parameters(), cfg.actor_lr),
                            "critic": adam(self.critic.parameters(), cfg.critic_lr),
                            "alpha": adam([self.log_alpha], cfg.temperature_lr)}
        self._describe("tanh_gaussian")
        self._update_graphs("_fit")

    def _networks(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _scalars(self) -> dict[str, torch.Tensor]:
        return {"log_alpha": self.log_alpha}

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    @property
    def ood_reg(self) -> float:
        """lambda of this update: `ood_reg` decayed linearly by the updates done, floored at `ood_reg_min`
        (a function of the counter, so a resumed run continues it exactly)."""
        cfg = self.cfg
        return max(cfg.ood_reg - cfg.ood_reg_decay * self.updates, cfg.ood_reg_min)

    # --- random draws ---------------------------------------------------------------------------
    def draw(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Every random number of one update: the perturbations [n, D] of each regulariser (uniform in [-eps, eps],
        shared by the batch) and standard normals for pi's samples: "alpha", "actor", "target" [B, A], "ood"
        [B, n, A] (the actions at the OOD-perturbed states)."""
        cfg, b, n, a, d = self.cfg, batch_size, self.cfg.sample_size, self.num_actions, self.obs_dim

        def uniform(eps: float) -> torch.Tensor:
            return (torch.rand((n, d), generator=generator, device=self.device) * 2.0 - 1.0) * eps

        def normal(*shape: int) -> torch.Tensor:
            return torch.randn(shape, generator=generator, device=self.device)

        return {"q_delta": uniform(cfg.q_smooth_eps), "policy_delta": uniform(cfg.policy_smooth_eps),
                "ood_delta": uniform(cfg.ood_smooth_eps), "alpha": normal(b, a), "actor": normal(b, a),
                "target": normal(b, a), "ood": normal(b, n, a)}

    def perturbed(self, obs: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """[B * n, D]: each raw state of obs [B, D] plus each of the n perturbations delta [n, D] (state-major).

        The eps are in normalised units, as the official code perturbs states after normalising them: delta is
        scaled by the state normaliser's std (the identity without `normalize_states`), so the networks, which
        normalise raw states themselves, see s_norm + delta."""
        scale = self._state_std()
        return (obs.unsqueeze(1) + (delta * scale).unsqueeze(0)).reshape(-1, obs.shape[-1])

    def _state_std(self) -> torch.Tensor:
        """The per-dimension std the networks divide raw states by [D] (ones when they do not normalise)."""
        for module in self.actor.modules():
            if isinstance(module, FixedNorm):
                return module.std[: self.obs_dim]
        return torch.ones(self.obs_dim, device=self.device)

    # --- losses ---------------------------------------------------------------------------------
    def alpha_loss(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """-mean(log alpha * (log pi(a|s) + target_entropy)), a ~ pi(s) from `noise` (no gradient to the actor)."""
        with torch.no_grad():
            _, logp = self.actor.sample(obs, noise=noise)
        return -(self.log_alpha * (logp + self.target_entropy)).mean()

    def policy_smoothness(self, obs: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """beta_policy * mean_s max_delta [KL(pi(s) || pi(s + delta)) + KL(pi(s + delta) || pi(s))], pre-tanh."""
        b, n = obs.shape[0], delta.shape[0]
        mean, log_std = self.actor._stats(obs)
        mean_p, log_std_p = self.actor._stats(self.perturbed(obs, delta))
        mean, log_std = mean.repeat_interleave(n, 0), log_std.repeat_interleave(n, 0)
        kl = (gaussian_kl(mean, log_std, mean_p, log_std_p) + gaussian_kl(mean_p, log_std_p, mean, log_std)).sum(-1)
        return self.cfg.beta_policy * kl.view(b, n).max(-1).values.mean()

    def actor_loss(self, obs: torch.Tensor, noise: torch.Tensor, delta: torch.Tensor, alpha: torch.Tensor,
                   data_actions: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """mean(alpha log pi(a|s) - min_i Q_i(s, a)) ("min"), or -mean(mean_i V_i + lcb_beta std_i V_i) with
        V_i = Q_i(s, a) - alpha log pi(a|s) ("lcb"); a ~ pi(s) from `noise`. Plus the policy-smoothness term and
        beta_bc * MSE(a, `data_actions`) (the batch's actions)."""
        cfg, zero = self.cfg, torch.zeros((), device=self.device)
        actions, logp = self.actor.sample(obs, noise=noise)
        q = self.critic(obs, actions)
        if cfg.actor_objective == "lcb":
            value = q - alpha * logp
            sac_loss = -(value.mean(0) + cfg.lcb_beta * value.std(0)).mean()
        else:
            sac_loss = (alpha * logp - q.min(0).values).mean()
        smooth = self.policy_smoothness(obs, delta) if cfg.beta_policy else zero
        bc = ((actions - data_actions) ** 2).mean() if cfg.beta_bc and data_actions is not None else zero
        stats = {"actor_sac_loss": sac_loss.detach(), "policy_smooth_loss": smooth.detach(), "bc_loss": bc.detach(),
                 "entropy": -logp.detach().mean(), "q_std": q.detach().std(0).mean()}
        return sac_loss + smooth + cfg.beta_bc * bc, stats

    @torch.no_grad()
    def target(self, batch: dict[str, Any], noise: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """[B] r + discount * (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s') from `noise`; with the "lcb"
        objective [E, B], each critic's own backup r + discount * (Q'_i(s', a') - alpha log pi(a'|s'))."""
        next_obs = batch["next_obs"]["policy"]
        next_actions, next_logp = self.actor.sample(next_obs, noise=noise)
        next_q = self.critic_target(next_obs, next_actions)
        next_q = (next_q if self.cfg.actor_objective == "lcb" else next_q.min(0).values) - alpha * next_logp
        return self._rewards(batch) + batch["discount"] * next_q

    def q_smoothness(self, obs: torch.Tensor, actions: torch.Tensor, delta: torch.Tensor,
                     q: torch.Tensor | None = None) -> torch.Tensor:
        """beta_q_smooth * mean_s max_delta mean_i [(1 - tau) max(d, 0)^2 + tau min(d, 0)^2],
        d = Q_i(s + delta, a) - Q_i(s, a); `q`: Q_i(s, a) [E, B] when the caller has it (with its graph)."""
        cfg, b, n = self.cfg, obs.shape[0], delta.shape[0]
        q_p = self.critic(self.perturbed(obs, delta), actions.repeat_interleave(n, 0)).view(-1, b, n)
        diff = q_p - (self.critic(obs, actions) if q is None else q).unsqueeze(-1)
        penalty = (1 - cfg.q_smooth_tau) * diff.clamp(min=0) ** 2 + cfg.q_smooth_tau * diff.clamp(max=0) ** 2
        return cfg.beta_q_smooth * penalty.mean(0).max(-1).values.mean()

    def ood_penalty(self, obs: torch.Tensor, delta: torch.Tensor, noise: torch.Tensor,
                    ood_reg: float | torch.Tensor | None = None) -> torch.Tensor:
        """beta_ood * mean (Q_i(s~, a~) - [Q_i(s~, a~) - lambda std_i Q_i(s~, a~)])^2 with the bracket fixed,
        s~ = s + delta, a~ ~ pi(s~) from `noise` [B, n, A]; lambda is `ood_reg` (this update's, `self.ood_reg`, when
        None)."""
        ood_reg = self.ood_reg if ood_reg is None else ood_reg
        obs_p = self.perturbed(obs, delta)
        with torch.no_grad():
            actions_p, _ = self.actor.sample(obs_p, noise=noise.reshape(obs_p.shape[0], -1))
        q = self.critic(obs_p, actions_p)                               # [E, B * n]
        target = (q - ood_reg * q.std(0)).detach()
        return self.cfg.beta_ood * ((q - target) ** 2).mean()

    def critic_loss(self, batch: dict[str, Any], draws: dict[str, torch.Tensor], alpha: torch.Tensor,
                    ood_reg: float | torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """TD (the sum of each critic's MSE) + Q smoothness + OOD penalty (at lambda `ood_reg`), and statistics."""
        obs, actions = batch["obs"]["policy"], batch["actions"]
        q = self.critic(obs, actions)
        td = ((q - self.target(batch, draws["target"], alpha)) ** 2).mean(-1).sum()
        zero = torch.zeros((), device=self.device)
        smooth = self.q_smoothness(obs, actions, draws["q_delta"], q) if self.cfg.beta_q_smooth else zero
        ood = self.ood_penalty(obs, draws["ood_delta"], draws["ood"], ood_reg) if self.cfg.beta_ood else zero
        loss = td + smooth + ood
        return loss, {"critic_loss": loss.detach(), "td_loss": td.detach(), "q_smooth_loss": smooth.detach(),
                      "ood_loss": ood.detach(), "q_mean": q.detach().mean()}

    # --- one gradient step ----------------------------------------------------------------------
    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Temperature, actor, critics (each with the temperature just updated), then the Polyak update. The draws and
        lambda's schedule happen here, the tensor work in `_fit` (one graph with `compile: true`)."""
        self._ensure_adam_state()  # a restore may have replaced it with an empty state
        draws = self._draws(batch, generator)
        stats = self._fit(batch, draws, torch.tensor(self.ood_reg, device=self.device))  # a tensor: no recompiles
        self.updates += 1
        return stats

    def _fit(self, batch: dict[str, Any], draws: dict[str, torch.Tensor], ood_reg: torch.Tensor
             ) -> dict[str, torch.Tensor]:
        obs = batch["obs"]["policy"]
        self._step(self._optimizers["alpha"], lambda: self.alpha_loss(obs, draws["alpha"]))
        alpha = self.alpha
        actor_loss, actor_stats = self._step(
            self._optimizers["actor"],
            lambda: self.actor_loss(obs, draws["actor"], draws["policy_delta"], alpha, batch["actions"]))
        critic_loss, critic_stats = self._step(self._optimizers["critic"],
                                               lambda: self.critic_loss(batch, draws, alpha, ood_reg))
        polyak_update(self.critic_target, self.critic, self.cfg.tau)
        return {"ood_reg": ood_reg.clone(), **actor_stats, **critic_stats, "actor_loss": actor_loss.detach(),
                "alpha": alpha}


register(AlgoSpec("ro2o", RO2OConfig, "robolearn.algos.offline.ro2o:RO2O", runner="offline", actor="tanh_gaussian"))
