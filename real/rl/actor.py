"""The robot side of real-world RL: control ticks -> transitions for the learner, new parameters -> the policy.

`Actor.on_tick` is a per-tick hook (`real.runner.PolicyRunner.add_hook`, or any loop that produces records with
the fields of `TickLike`). It runs on the control thread and never waits on the network: transitions go into
`ActorClient`'s bounded queue, and parameters that arrived are handed to ``swap`` (e.g. the runner's
``swap_policy``), which installs them between two ticks.

Transitions follow the recorder's conventions (`real.recorder`): the reward and end flags computed at a tick
belong to the step that ended there. Ticks whose mode is not in ``learn_modes`` (recovery manoeuvres,
stale inputs, e-stop) are not learning data: the step that led into one is closed as truncated (FastRLAP marks
recovery resets truncated), and the next episode starts at the next learning tick. The stored action is the
command that went out (normalized), which is the human's during an intervention, as SERL and HIL-SERL store it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from policies.ensemble import TanhGaussianActor
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

RewardFn = Callable[[Any, Any], "float | tuple[float, str | None]"]
"""``reward_fn(previous_tick, tick) -> reward`` or ``(reward, "terminated" | "truncated" | None)``."""


class TickLike(Protocol):
    """The fields of a control tick the actor reads (`real.runner.Tick` has them)."""

    mode: str
    obs: np.ndarray
    action: np.ndarray
    command: np.ndarray
    safety: Any  # SafetyInfo: .intervention
    policy_version: int
    status: dict[str, Any]


class SampledPolicy(torch.nn.Module):
    """The SAC actor as the acting policy, ``{"policy": obs[N, D]} -> actions[N, A]`` in (-1, 1).

    Samples (exploration, as SAC collects data) unless ``deterministic``. Its parameter names (``actor.*``)
    are those the learner publishes and a SAC checkpoint's deployable policy has.
    """

    def __init__(self, obs_dim: int, num_actions: int, actor_hidden: Sequence[int] = (256, 256),
                 activation: str = "relu", actor_layer_norm: bool = False, deterministic: bool = False,
                 seed: int = 0) -> None:  # fmt: skip
        super().__init__()
        self.actor = TanhGaussianActor(obs_dim, num_actions, tuple(actor_hidden), activation, actor_layer_norm)
        self.deterministic = deterministic
        self.generator = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, policy: Mapping[str, Any], **kwargs: Any) -> SampledPolicy:
        """From a learner's policy config (``{"obs_dim", "num_actions", "sac": {...}}``, as a SAC checkpoint)."""
        sac = policy["sac"]
        return cls(policy["obs_dim"], policy["num_actions"], sac["actor_hidden"], sac["activation"],
                   sac["actor_layer_norm"], **kwargs)  # fmt: skip

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        x = obs["policy"]
        if self.deterministic:
            return self.actor.mode(x)
        return self.actor.sample(x, self.generator if x.device.type == "cpu" else None)[0]


class Actor:
    """Builds transitions from ticks and ships them; swaps in parameters the learner publishes.

    Args:
        client: an `ActorClient` (or anything with ``send_transitions`` and ``latest_parameters``).
        reward_fn: see `RewardFn`; the robot's task reward (e.g. from ``tick.status``).
        swap: ``swap(version, state_dict)`` installs new parameters (e.g. ``runner.swap_policy``).
        batch_size: transitions per queued batch (SERL ships every 30 steps); episode ends ship at once.
        learn_modes: tick modes that are learning data (policy acting, or a human intervening).
    """

    def __init__(self, client: Any, reward_fn: RewardFn, swap: Callable[[int, dict[str, torch.Tensor]], None],
                 batch_size: int = 32, learn_modes: Sequence[str] = ("policy", "teleop")) -> None:  # fmt: skip
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        self.client, self.reward_fn, self.swap = client, reward_fn, swap
        self.batch_size, self.learn_modes = batch_size, tuple(learn_modes)
        self.stats = {"ticks": 0, "transitions": 0, "episodes": 0, "swaps": 0, "swap_errors": 0}
        self._prev: Any = None  # the previous learning tick (start of the pending step)
        self._rows: list[tuple] = []

    def on_tick(self, tick: TickLike) -> None:
        """The per-tick hook: close the pending step, maybe ship a batch, maybe swap parameters."""
        self.stats["ticks"] += 1
        learning = tick.mode in self.learn_modes and np.all(np.isfinite(tick.obs))
        if self._prev is not None:
            if learning:
                reward, done = self._reward(self._prev, tick)
                self._add(self._prev, tick, reward, done)
            elif np.all(np.isfinite(tick.obs)):  # a reset or stop begins: the episode is cut here
                reward, _ = self._reward(self._prev, tick)
                self._add(self._prev, tick, reward, "truncated")
                done = "truncated"
            else:  # no next observation for the pending step: drop it, the step before ends the episode
                done = "truncated"
                if self._rows:
                    self._rows[-1] = (*self._rows[-1][:5], True, *self._rows[-1][6:])
            if done:
                self.stats["episodes"] += 1
                self._flush()
                self._prev = None
            else:
                self._prev = tick
        elif learning:
            self._prev = tick
        if len(self._rows) > self.batch_size:
            self._flush(keep_last=True)  # the last step of an episode may still get its end flag
        self._maybe_swap()

    def _reward(self, prev: Any, tick: Any) -> tuple[float, str | None]:
        out = self.reward_fn(prev, tick)
        reward, done = out if isinstance(out, tuple) else (out, None)
        if done not in (None, "terminated", "truncated"):
            raise ValueError(f"reward_fn's end flag must be None, 'terminated' or 'truncated', got {done!r}")
        return float(reward), done

    def _add(self, prev: Any, tick: Any, reward: float, done: str | None) -> None:
        intervention = bool(getattr(prev.safety, "intervention", False))
        self._rows.append((prev.obs, prev.command, reward, tick.obs, done == "terminated", done == "truncated",
                           intervention, prev.policy_version))  # fmt: skip

    def _flush(self, keep_last: bool = False) -> None:
        rows, self._rows = (self._rows[:-1], self._rows[-1:]) if keep_last else (self._rows, [])
        if not rows:
            return
        cols = list(zip(*rows, strict=True))
        batch = {
            "obs": np.stack(cols[0]).astype(np.float32), "actions": np.stack(cols[1]).astype(np.float32),
            "rewards": np.asarray(cols[2], np.float32), "next_obs": np.stack(cols[3]).astype(np.float32),
            "terminated": np.asarray(cols[4]), "truncated": np.asarray(cols[5]),
            "interventions": np.asarray(cols[6]), "policy_versions": np.asarray(cols[7], np.int64),
        }  # fmt: skip
        self.client.send_transitions(batch)
        self.stats["transitions"] += len(cols[0])

    def _maybe_swap(self) -> None:
        params = self.client.latest_parameters()
        if params is None:
            return
        version, state = params
        try:
            self.swap(version, state)
            self.stats["swaps"] += 1
        except (ValueError, RuntimeError) as e:  # another architecture: keep acting with the current policy
            self.stats["swap_errors"] += 1
            log.error("parameters v%d do not fit the acting policy: %s", version, e)

    def flush(self) -> None:
        """Queue the pending transitions now (e.g. before closing)."""
        self._flush()
