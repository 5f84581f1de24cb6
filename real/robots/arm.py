"""The arm adapter: joint position or velocity commands, computed from the measured JointState.

Action i drives ``joints[i]``:

- ``mode: position`` (default): integrated joints move their target by ``a * scale[i] / rate_hz`` per tick
  (``scale`` in rad/s at |a| = 1), starting from the measured position at the first tick, so 0 holds the
  target: the sim arm's integrated-velocity servos. ``absolute`` joints (a gripper) map [-1, 1] onto
  [low, high]. Targets stay within [low, high], and integrated ones within ``max_lead`` rad of the measured
  position (default 0.3): a blocked arm does not wind its target up.
- ``mode: velocity``: ``a * scale[i]`` rad/s.

Output: ``sensor_msgs/JointState`` (names, and positions or velocities) or ``std_msgs/Float64MultiArray``
(ros2_control's forward command controllers), on the command topic. Stops and exit send `stop_msg`: in
position mode the MEASURED pose (the targets restart from it: a stop never sends a target the arm did not
reach), plus the stop command's step for integrated joints (zero unless ``safety.stop: brake``); in velocity
mode the stop command (zeros or the brake). After a stop the safety filter's limiter restarts from
`hold_command` (the held gripper opening, not the half-open 0).

Observations come from generic slots (``joints.position[elbow]``, ``goal.point.x`` minus ``ee...``); the
adapter offers no extra features.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from real import msgs
from real.observation import Received
from real.robots.base import RobotAdapter, check_keys
from robolearn.errors import ConfigError

OUTPUTS = {"joint_state": msgs.JOINT_STATE, "float64_multiarray": "std_msgs/msg/Float64MultiArray"}
KEYS = ("joints_input", "joints", "mode", "output", "scale", "absolute", "low", "high", "frame_id", "max_lead")


def _per_joint(cfg: Mapping[str, Any], key: str, n: int, default: Any) -> np.ndarray:
    value = cfg.get(key, default)
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)) if np.ndim(value) == 0 else np.asarray(
        value, dtype=np.float64)
    if arr.shape != (n,):
        raise ConfigError(f"adapter.{key} needs one value per joint ({n}), got {value!r}")
    return arr.copy()


class ArmAdapter(RobotAdapter):
    """See the module docstring; configured by the ``adapter`` section of configs/deploy/arm.yaml."""

    name = "arm"

    def __init__(self, cfg: dict[str, Any], rate_hz: float, run_config: dict[str, Any]) -> None:
        super().__init__(cfg, rate_hz, run_config)
        check_keys(cfg, KEYS, "adapter (arm)")
        self.joints = [str(j) for j in cfg.get("joints") or []]
        if not self.joints:
            raise ConfigError("adapter.joints must list the commanded joints, in action order")
        n = self.num_actions = len(self.joints)
        self.joints_input = str(cfg.get("joints_input", "joints"))
        self.inputs = (self.joints_input,)
        self.mode = str(cfg.get("mode", "position"))
        if self.mode not in ("position", "velocity"):
            raise ConfigError(f"adapter.mode must be 'position' or 'velocity', got {self.mode!r}")
        self.output = str(cfg.get("output", "joint_state"))
        if self.output not in OUTPUTS:
            raise ConfigError(f"adapter.output must be one of {sorted(OUTPUTS)}, got {self.output!r}")
        self.command_type = OUTPUTS[self.output]
        self.scale = _per_joint(cfg, "scale", n, 1.0)
        self.absolute = _per_joint(cfg, "absolute", n, False).astype(bool)
        self.low = _per_joint(cfg, "low", n, -np.inf)
        self.high = _per_joint(cfg, "high", n, np.inf)
        self.max_lead = _per_joint(cfg, "max_lead", n, 0.3)  # rad a target may lead the measured position
        if np.any(self.scale <= 0) or np.any(self.low >= self.high) or np.any(self.max_lead <= 0):
            raise ConfigError("adapter.scale and max_lead must be > 0 and low < high for every joint")
        if self.mode == "position" and np.any(self.absolute & ~(np.isfinite(self.low) & np.isfinite(self.high))):
            raise ConfigError("absolute joints need finite low and high")
        self.reset()

    def reset(self) -> None:
        self.measured: np.ndarray | None = None
        self.target: np.ndarray | None = None

    def update(self, snapshot: Mapping[str, Received], now_ns: int) -> dict[str, float]:
        msg = snapshot[self.joints_input].msg
        if msg is not None:
            names, position, _, _ = msgs.joint_state_to_arrays(msg)
            missing = [j for j in self.joints if j not in names]
            if missing:
                raise ConfigError(f"the JointState on input {self.joints_input!r} lacks joints {missing}; "
                                  f"it has {names}")
            if len(position) == len(names):
                self.measured = np.array([position[names.index(j)] for j in self.joints])
                if self.target is None:
                    self.target = np.clip(self.measured, self.low, self.high)
        return {}

    def status(self) -> dict[str, Any]:
        return {"target": None if self.target is None else self.target.tolist()}

    # --- messages ----------------------------------------------------------------------------------------

    def _positions(self, command: np.ndarray) -> np.ndarray:
        """Advance the targets by one tick of ``command`` (the first tick starts from the measured pose).

        Integrated targets stay within ``max_lead`` of the measured position, so a blocked joint's target
        does not wind up (and a stop never holds a pose far from where the arm is)."""
        base = self.target if self.target is not None else self.measured
        if base is None:
            raise RuntimeError("no JointState received yet: the arm's targets are unknown")
        step = base + command * self.scale / self.rate_hz
        if self.measured is not None:
            step = np.clip(step, self.measured - self.max_lead, self.measured + self.max_lead)
        a = self.absolute
        step[a] = self.low[a] + (command[a] + 1) / 2 * (self.high[a] - self.low[a])
        self.target = np.clip(step, self.low, self.high)
        return self.target.copy()

    def _msg(self, values: np.ndarray, stamp_ns: int) -> Any:
        if self.output == "float64_multiarray":
            msg = msgs.zero_msg(self.command_type)
            msg.data = np.asarray(values, dtype=np.float64)
            return msg
        field = {"position": values} if self.mode == "position" else {"velocity": values}
        return msgs.joint_state_from_arrays(self.joints, ns=stamp_ns, frame_id=self.frame_id, **field)

    def command_msg(self, command: np.ndarray, stamp_ns: int = 0) -> Any:
        command = np.asarray(command, dtype=np.float64)
        if self.mode == "velocity":
            return self._msg(command * self.scale, stamp_ns)
        return self._msg(self._positions(command), stamp_ns)

    def stop_msg(self, command: np.ndarray | None = None, stamp_ns: int = 0) -> Any:
        """Velocity mode: the stop command. Position mode: re-seed the targets from the measured pose and step
        the integrated joints by the stop command (0: hold); absolute joints hold their measured value. Before
        the first JointState: None (no pose to hold)."""
        command = np.zeros(self.num_actions) if command is None else np.asarray(command, dtype=np.float64)
        if self.mode == "velocity":
            return self._msg(command * self.scale, stamp_ns)
        if self.measured is None:
            return None
        self.target = np.clip(self.measured + np.where(self.absolute, 0.0, command * self.scale / self.rate_hz),
                              self.low, self.high)
        return self._msg(self.target.copy(), stamp_ns)

    def hold_command(self) -> np.ndarray | None:
        """Position mode: 0 for integrated joints (hold), the held target for absolute ones (the gripper keeps
        its opening when the policy resumes). Velocity mode: None (the stop command)."""
        base = self.target if self.target is not None else self.measured
        if self.mode == "velocity" or base is None:
            return None
        hold = np.zeros(self.num_actions)
        a = self.absolute
        hold[a] = 2 * (np.clip(base[a], self.low[a], self.high[a]) - self.low[a]) / (self.high[a] - self.low[a]) - 1
        return hold

    def teleop_action(self, msg: Any) -> np.ndarray:
        if self.output == "float64_multiarray":
            values = np.asarray(msg.data, dtype=np.float64)
        else:
            names, position, velocity, _ = msgs.joint_state_to_arrays(msg)
            field = position if self.mode == "position" else velocity
            values = np.array([field[names.index(j)] for j in self.joints])
        if self.mode == "velocity":
            return values / self.scale
        base = self.target if self.target is not None else self.measured
        if base is None:
            return np.zeros(self.num_actions)
        action = (values - base) * self.rate_hz / self.scale
        a = self.absolute
        action[a] = 2 * (values[a] - self.low[a]) / (self.high[a] - self.low[a]) - 1
        return action
