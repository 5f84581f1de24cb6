"""Error types of robolearn; the simulator's live in `sim.errors` and are re-exported here."""

from __future__ import annotations

from sim.errors import ActionError, BackendError, ConfigError, RobolearnError, UnknownTaskError

__all__ = ["RobolearnError", "ConfigError", "UnknownTaskError", "ActionError", "BackendError",
           "CheckpointError", "DatasetError"]


class CheckpointError(RobolearnError, ValueError):
    """A checkpoint is missing, corrupt or does not match the model it is loaded into."""


class DatasetError(RobolearnError, ValueError):
    """A dataset file is missing fields or has inconsistent shapes."""
