"""The contract between `real.runner.PolicyRunner` and a robot adapter.

The runner owns timing, inputs, the policy and the safety filter; an adapter owns what differs per robot:

- `update`: derived observation values (``robot.<feature>`` slots) from the tick's input snapshot, and the
  robot's own bookkeeping (e.g. course progress);
- `override`: an autonomous manoeuvre that replaces the policy this tick (e.g. the RC car's recovery),
  still passed through the safety filter;
- `after_tick`: learn what was sent and in which mode (e.g. to detect being stuck while the policy drives);
- `command_msg` / `stop_msg`: the normalized command ([-1, 1] per action) as the robot's ROS message;
- `teleop_action`: the inverse, for a human's command on the teleop topic;
- `status`: counters and events for logs and for an actor computing rewards.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from real.observation import Received
from robolearn.errors import ConfigError


def check_keys(cfg: Mapping[str, Any], valid: Iterable[str], where: str) -> None:
    """Raise `ConfigError` naming the unknown keys of ``cfg`` and the valid ones."""
    unknown = set(cfg) - set(valid)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; valid: {sorted(valid)}")


class RobotAdapter(abc.ABC):
    """Robot-specific parts of a deployment. Subclasses set the class and instance attributes below."""

    name: ClassVar[str] = ""
    #: Robot features offered to observation slots as ``robot.<name>``.
    features: tuple[str, ...] = ()
    #: Names of inputs the adapter reads itself (the runner watches them for staleness too).
    inputs: tuple[str, ...] = ()
    #: Of those, the inputs whose every message of the control period the adapter needs.
    period_inputs: tuple[str, ...] = ()

    def __init__(self, cfg: dict[str, Any], rate_hz: float, run_config: dict[str, Any]) -> None:
        self.cfg, self.rate_hz, self.run_config = cfg, float(rate_hz), run_config
        self.num_actions: int = 0
        self.command_type: str = ""
        self.frame_id: str = str(cfg.get("frame_id", ""))

    def check(self, observation_names: list[str]) -> None:  # noqa: B027 (optional hook)
        """Reject an observation layout the policy was not trained on (default: accept)."""

    def update(self, snapshot: Mapping[str, Received], now_ns: int) -> dict[str, float]:
        """The ``robot.<feature>`` values for this tick (NaN for unknown ones)."""
        return {}

    def override(self, now_ns: int) -> tuple[np.ndarray, str] | None:
        """An action and mode name that replace the policy this tick, or None."""
        return None

    def after_tick(self, mode: str, command: np.ndarray, now_ns: int) -> None:  # noqa: B027 (optional hook)
        """What was sent (normalized) and in which mode: "policy", "recovery", "teleop", "stale" or "estop"."""

    @abc.abstractmethod
    def command_msg(self, command: np.ndarray, stamp_ns: int = 0) -> Any:
        """The ROS message for a normalized command."""

    def stop_msg(self, command: np.ndarray | None = None, stamp_ns: int = 0) -> Any:
        """The message for the safety filter's stop ``command`` (zero or brake; None: zero), sent on stops and on
        exit. Default: `command_msg` of it. An adapter whose zero command is not a stop (an arm's position
        targets) holds the measured state instead; None: send nothing (nothing safe is known yet)."""
        return self.command_msg(np.zeros(self.num_actions) if command is None else command, stamp_ns)

    def hold_command(self) -> np.ndarray | None:
        """The normalized command that keeps what a stop left (the limiter restarts from it after stops);
        None: the stop command itself (default)."""
        return None

    @abc.abstractmethod
    def teleop_action(self, msg: Any) -> np.ndarray:
        """The normalized action a human's command message (on the teleop topic, of `command_type`) stands for."""

    def status(self) -> dict[str, Any]:
        """Counters and events of the last tick (progress, recoveries), JSON-friendly."""
        return {}

    def reset(self) -> None:  # noqa: B027 (optional hook)
        """Forget per-episode state (e.g. before a new run)."""
