"""Behaviour cloning: fit the actor to the dataset's actions, nothing else.

CORL's `algorithms/offline/any_percent_bc.py`: a deterministic 2x256 ReLU MLP with a tanh output, trained
with the mean squared error to the data's actions (Adam 3e-4, batch 256). `actor: tanh_gaussian` instead
fits a tanh-Gaussian by maximum likelihood of the data's actions (clipped to +-(1 - 1e-6) before atanh).
CORL's "10% BC" (train on the best 10% of trajectories, `frac: 0.1`) is a filter on the dataset, not on
the learner: select those episodes before filling the buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from robolearn.algos.base import AlgoSpec, register
from robolearn.algos.offline.base import ACTORS, OfflineAlgo, adam, check, check_common, make_actor


@dataclasses.dataclass
class BCConfig:
    actor_hidden: tuple[int, ...] = (256, 256)  # CORL Actor: Linear(256) ReLU Linear(256) ReLU Linear Tanh
    activation: str = "relu"
    actor_layer_norm: bool = False
    normalize_states: bool = True  # CORL any_percent_bc normalize: true (dataset mean/std, in the actor)
    actor: str = "deterministic"   # "deterministic": MSE to the data (CORL); "tanh_gaussian": max likelihood
    actor_lr: float = 3e-4         # CORL: torch.optim.Adam(actor.parameters(), lr=3e-4)
    batch_size: int = 256          # CORL batch_size: 256
    gamma: float = 0.99            # CORL discount: 0.99 (BC does not use it; the buffer's discount does)
    compile: bool = False          # torch.compile the update into one graph (`compile_update`)

    def validate(self) -> None:
        check(self.actor in ACTORS, f"bc.actor must be one of {ACTORS}, got {self.actor!r}")
        check_common(self, "bc")


class BC(OfflineAlgo):
    """Behaviour cloning; `actor_loss` is the whole objective."""

    name = "bc"

    def __init__(self, obs_dim: int, num_actions: int, cfg: BCConfig | None = None,
                 device: str | torch.device = "cpu"):
        cfg = cfg if cfg is not None else BCConfig()
        super().__init__(obs_dim, num_actions, cfg, device)
        self.actor = make_actor(cfg.actor, obs_dim, num_actions, cfg).to(self.device)
        self._optimizers = {"actor": adam(self.actor.parameters(), cfg.actor_lr)}
        self._describe(cfg.actor)
        self._update_graphs("_fit")

    def actor_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        """mean((pi(s) - a)^2) over batch and action dimensions, or -mean(log pi(a|s)) for a tanh-Gaussian."""
        obs, actions = batch["obs"]["policy"], batch["actions"]
        if self.cfg.actor == "tanh_gaussian":
            return -self.actor.log_prob(obs, actions).mean()
        return ((self.actor(obs) - actions) ** 2).mean()

    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        self.updates += 1
        return self._fit(batch)

    def _fit(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        loss = self._step(self._optimizers["actor"], lambda: self.actor_loss(batch))
        return {"actor_loss": loss.detach()}


register(AlgoSpec("bc", BCConfig, "robolearn.algos.offline.bc:BC", runner="offline", actor="deterministic",
                   online=False, needs_dataset=True))
