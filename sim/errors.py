"""Error types raised on bad input.

`sim` depends on nothing else of ours, so the base error types live here; `robolearn.errors`
re-exports them beside the learning-side ones. Every message names the offending field and the fix.
"""

from __future__ import annotations


class RobolearnError(Exception):
    """Base class of every error robolearn raises on bad input."""


class ConfigError(RobolearnError, ValueError):
    """A configuration value or override is unknown or out of range."""


class UnknownTaskError(ConfigError):
    """`sim.make` was asked for a task name that is not registered."""


class ActionError(RobolearnError, ValueError):
    """Actions passed to `step` have the wrong shape or non-finite values."""


class BackendError(RobolearnError, RuntimeError):
    """A physics backend cannot run here (missing package, no GPU, unsupported model)."""
