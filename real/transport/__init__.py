"""Transports between this process and a ROS 2 graph: rclpy, bare Cyclone DDS, or in-memory.

Import cost stays small: a backend (and Cyclone DDS or rclpy) loads only when `make_transport` asks for it.
"""

from __future__ import annotations

import importlib.util

from real.transport.base import (
    DEFAULT,
    LATCHED,
    PROFILES,
    SENSOR_DATA,
    SYSTEM_DEFAULT,
    Durability,
    MessageCallback,
    Publisher,
    QoS,
    RawCallback,
    Reliability,
    Subscription,
    Transport,
    resolve_qos,
)

KINDS = ("auto", "dds", "rclpy", "memory")


def rclpy_available() -> bool:
    """Whether ROS 2's rclpy can be imported (then "auto" uses it)."""
    return importlib.util.find_spec("rclpy") is not None


def make_transport(kind: str = "auto", domain_id: int | None = None) -> Transport:
    """A transport of ``kind``: "auto" (rclpy when importable, else "dds"), "dds", "rclpy" or "memory".

    ``domain_id`` defaults to ``ROS_DOMAIN_ID`` (or 0); the memory transport has no domain.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown transport kind {kind!r}; use one of {', '.join(KINDS)}")
    if kind == "auto":
        kind = "rclpy" if rclpy_available() else "dds"
    if kind == "memory":
        from real.transport.memory import MemoryTransport

        return MemoryTransport()
    if kind == "rclpy":
        if not rclpy_available():
            raise RuntimeError("transport 'rclpy' needs ROS 2's rclpy (source your ROS 2 setup); or use 'dds'")
        from real.transport.rclpy_backend import RclpyTransport

        return RclpyTransport(domain_id)
    from real.transport.dds import DdsTransport

    return DdsTransport(domain_id)


__all__ = [
    "DEFAULT", "KINDS", "LATCHED", "PROFILES", "SENSOR_DATA", "SYSTEM_DEFAULT", "Durability", "MessageCallback",
    "Publisher", "QoS", "RawCallback", "Reliability", "Subscription", "Transport", "make_transport",
    "rclpy_available", "resolve_qos",
]  # fmt: skip
