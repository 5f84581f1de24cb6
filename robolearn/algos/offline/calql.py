"""Cal-QL (Nakamoto et al. 2023, "Calibrated Offline RL Pre-Training for Efficient Online Fine-Tuning").

CQL whose conservative term cannot push the policy's values below a reference: in the logsumexp, the
Q-values of pi's actions (its samples at s and at s', both scored at s) are replaced by
max(Q_i(s, a_pi), G(s, a)), G the Monte-Carlo discounted return-to-go of the dataset transition (s, a). The
learnt Q is then "calibrated": at least the behaviour policy's value, so fine-tuning online starts without
the drop that an over-pessimistic CQL shows. Everything else is `robolearn.algos.offline.cql`.

The batch must carry `mc_returns` [B]: G of each transition, computed from the rewards as the learner shapes
them (`reward_scale * r + reward_bias`): `CalQL.dataset_returns` computes them for a whole dataset,
`return_to_go` for one episode. Defaults:
CORL `algorithms/finetune/cal_ql.py` TrainConfig (CQL's locomotion values with q_n_hidden_layers 2); CORL
ships Cal-QL configs only for antmaze and adroit (`configs/finetune/cal_ql/*`, see `configs/algo/calql.yaml`).
CORL also switches the calibration off for its online phase (`switch_calibration`); set `calibrate: false`
for that.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.offline.cql import CQL, CQLConfig
from robolearn.errors import ConfigError


@dataclasses.dataclass
class CalQLConfig(CQLConfig):
    critic_hidden: tuple[int, ...] = (256, 256)  # CORL cal_ql.py q_n_hidden_layers: 2 (antmaze configs: 5)
    normalize_states: bool = False     # CORL cal_ql configs: normalize: false
    calibrate: bool = True             # bound pi's Q-values by the MC returns (CORL: on offline, off online)
    sparse_failure_reward: float | None = None  # CORL is_sparse_reward (antmaze: 0.0): see `return_to_go`

    def check_online(self) -> None:
        """Online, new transitions have no Monte-Carlo return: CORL switches the calibration off."""
        if self.calibrate:
            raise ConfigError("algo=calql online needs algo.calibrate=false (CORL switches the calibration off "
                              "online: new transitions have no Monte-Carlo return)")


def return_to_go(rewards: torch.Tensor, gamma: float, reward_scale: float = 1.0, reward_bias: float = 0.0,
                 failure_reward: float | None = None) -> torch.Tensor:
    """[T] G_t = sum_{k >= t} gamma^(k - t) r'_k of one episode's rewards [T], r' = reward_scale * r + reward_bias.

    Nothing is counted after the last step, whether the episode terminated or timed out (CORL's
    `get_return_to_go`). `failure_reward` (a raw reward): for sparse tasks, an episode whose last reward equals it
    never succeeded, and every step's return is r'_fail / (1 - gamma), the value of failing forever (CORL's
    `is_sparse_reward`: antmaze, adroit).
    """
    shaped = rewards.double() * reward_scale + reward_bias
    if failure_reward is not None and len(rewards) and float(rewards[-1]) == failure_reward and gamma < 1.0:
        return torch.full_like(shaped, (failure_reward * reward_scale + reward_bias) / (1.0 - gamma)).to(rewards.dtype)
    out, g = [], 0.0
    for r in reversed(shaped.tolist()):
        g = r + gamma * g
        out.append(g)
    return torch.tensor(out[::-1], dtype=rewards.dtype, device=rewards.device)


class CalQL(CQL):
    """CQL with the Monte-Carlo lower bound on the policy's Q-values in the conservative term."""

    name = "calql"

    def __init__(self, obs_dim: int, num_actions: int, cfg: CalQLConfig | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(obs_dim, num_actions, cfg if cfg is not None else CalQLConfig(), device)

    def dataset_returns(self, rewards: Any, step_starts: Any) -> torch.Tensor:
        """[N] every transition's `mc_returns` for a dataset of episodes: its rewards [N] (raw) and the index of
        each episode's first step plus the total, [E + 1] (`robolearn.data.Dataset.step_starts`)."""
        cfg, rewards = self.cfg, torch.tensor(np.asarray(rewards), dtype=torch.float64)  # a copy: may be read-only
        starts = [int(i) for i in step_starts]
        out = [return_to_go(rewards[s:t], cfg.gamma, cfg.reward_scale, cfg.reward_bias, cfg.sparse_failure_reward)
               for s, t in zip(starts[:-1], starts[1:], strict=True)]
        return torch.cat(out).float() if out else torch.zeros(0)

    def bound_policy_q(self, q_current: torch.Tensor, q_next: torch.Tensor, batch: dict[str, Any]
                       ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """max(Q_i(s, a_pi), G) for pi's samples [E, B, n] at s and s', G = batch["mc_returns"] [B]; unchanged when
        `calibrate` is off (the online phase, whose new transitions have no Monte-Carlo return yet)."""
        if not self.cfg.calibrate and "mc_returns" not in batch:
            return q_current, q_next, {}
        if "mc_returns" not in batch:
            raise ConfigError("Cal-QL needs batch['mc_returns'], the Monte-Carlo return-to-go of each transition "
                              "(robolearn.algos.offline.calql.return_to_go)")
        bound = batch["mc_returns"].view(1, -1, 1)
        stats = {"bound_rate": torch.cat([q_current, q_next], -1).detach().lt(bound).float().mean()}
        if self.cfg.calibrate:
            q_current, q_next = torch.maximum(q_current, bound), torch.maximum(q_next, bound)
        return q_current, q_next, stats


register(AlgoSpec("calql", CalQLConfig, "robolearn.algos.offline.calql:CalQL", runner="offline", actor="tanh_gaussian"))
