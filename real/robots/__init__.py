"""Robot adapters: what is robot-specific in a deployment (derived observations, command messages, recovery).

`make_adapter("rc_car" | "arm", cfg, rate_hz, run_config)` builds one from the ``adapter`` section of a deploy
config (configs/deploy/<robot>.yaml); see `real.robots.base.RobotAdapter` for the contract.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from real.robots.base import RobotAdapter
from robolearn.errors import ConfigError

ADAPTERS = {
    "rc_car": "real.robots.rc_car:RcCarAdapter",
    "arm": "real.robots.arm:ArmAdapter",
}


def make_adapter(name: str, cfg: Mapping[str, Any] | None, rate_hz: float,
                 run_config: Mapping[str, Any] | None = None) -> RobotAdapter:
    """The adapter of robot ``name`` configured by ``cfg`` (the deploy config's ``adapter`` section)."""
    if name not in ADAPTERS:
        raise ConfigError(f"unknown robot {name!r}; available: {sorted(ADAPTERS)}")
    module, cls = ADAPTERS[name].split(":")
    return getattr(importlib.import_module(module), cls)(dict(cfg or {}), rate_hz, dict(run_config or {}))


__all__ = ["ADAPTERS", "RobotAdapter", "make_adapter"]
