"""Transports between this process and a ROS 2 graph: rclpy, bare Cyclone DDS, or in-memory.

Import cost stays small: a backend (and Cyclone DDS or rclpy) loads only when `make_transport` asks for it.
"auto" means rclpy inside a sourced ROS 2 environment (``ROS_DISTRO`` set and rclpy importable), else DDS:
rclpy installed from wheels into a virtualenv lacks message packages a robot may need (ackermann_msgs), which
the DDS transport carries itself.
"""

from __future__ import annotations

import importlib.util
import os

from real.transport.base import (
    DEFAULT,
    LATCHED,
    PROFILES,
    SENSOR_DATA,
    SYSTEM_DEFAULT,
    Durability,
    MessageCallback,
    ParameterValue,
    Publisher,
    QoS,
    RawCallback,
    Reliability,
    Subscription,
    Transport,
    resolve_qos,
    ros_parameters,
)

KINDS = ("auto", "dds", "rclpy", "memory")


def rclpy_available() -> bool:
    """Whether ROS 2's rclpy can be imported (then "auto" uses it)."""
    return importlib.util.find_spec("rclpy") is not None


def resolve_kind(kind: str) -> str:
    """The backend "auto" stands for here: "rclpy" in a sourced ROS 2 environment with rclpy, else "dds"."""
    if kind not in KINDS:
        raise ValueError(f"unknown transport kind {kind!r}; use one of {', '.join(KINDS)}")
    if kind == "auto":
        return "rclpy" if os.environ.get("ROS_DISTRO") and rclpy_available() else "dds"
    return kind


def make_transport(kind: str = "auto", domain_id: int | None = None, node_name: str | None = None) -> Transport:
    """A transport of ``kind``: "auto" (see `resolve_kind`), "dds", "rclpy" or "memory".

    ``domain_id`` defaults to ``ROS_DOMAIN_ID`` (or 0); the memory transport has no domain. ``node_name``
    names the rclpy node (default ``robolearn_<pid>``).
    """
    kind = resolve_kind(kind)
    if kind == "memory":
        from real.transport.memory import MemoryTransport

        return MemoryTransport()
    if kind == "rclpy":
        if not rclpy_available():
            raise RuntimeError("transport 'rclpy' needs ROS 2's rclpy (pip install '.[ros]' or source a ROS 2 "
                               "install); or use 'dds'")
        from real.transport.rclpy_backend import RclpyTransport

        return RclpyTransport(domain_id, node_name)
    from real.transport.dds import DdsTransport

    return DdsTransport(domain_id)


__all__ = [
    "DEFAULT", "KINDS", "LATCHED", "PROFILES", "SENSOR_DATA", "SYSTEM_DEFAULT", "Durability", "MessageCallback",
    "ParameterValue", "Publisher", "QoS", "RawCallback", "Reliability", "Subscription", "Transport", "make_transport",
    "rclpy_available", "resolve_kind", "resolve_qos", "ros_parameters",
]  # fmt: skip
