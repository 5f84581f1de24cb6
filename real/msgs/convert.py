"""numpy <-> message helpers for the types real/ uses.

Vectors are float64 numpy arrays in a fixed, documented order; stamps are integer nanoseconds. The
Ackermann order ``[steering_angle, speed]`` matches the sim's RC-car action order ``[steering, throttle]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from real.msgs.store import msg_class, zero_msg

# sensor_msgs/image_encodings: encoding -> (dtype, channels)
IMAGE_ENCODINGS: dict[str, tuple[str, int]] = {
    "rgb8": ("uint8", 3), "bgr8": ("uint8", 3), "rgba8": ("uint8", 4), "bgra8": ("uint8", 4),
    "mono8": ("uint8", 1), "8UC1": ("uint8", 1), "8UC3": ("uint8", 3),
    "mono16": ("uint16", 1), "16UC1": ("uint16", 1), "rgb16": ("uint16", 3), "bgr16": ("uint16", 3),
    "32FC1": ("float32", 1), "64FC1": ("float64", 1),
}  # fmt: skip


def _vec(values: ArrayLike, size: int, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.shape != (size,):
        raise ValueError(f"{what} needs {size} values, got shape {np.shape(values)}")
    return arr


# --- time and header ---------------------------------------------------------------------------------


def stamp(ns: int) -> object:
    """builtin_interfaces/msg/Time from integer nanoseconds (>= 0)."""
    if ns < 0:
        raise ValueError(f"ROS time cannot be negative: {ns}")
    return msg_class("builtin_interfaces/msg/Time")(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def stamp_ns(time_msg: object) -> int:
    """Integer nanoseconds of a builtin_interfaces/msg/Time."""
    return int(time_msg.sec) * 1_000_000_000 + int(time_msg.nanosec)


def header(ns: int = 0, frame_id: str = "") -> object:
    """std_msgs/msg/Header. A zero stamp tells diff_drive_controller to stamp on arrival."""
    return msg_class("std_msgs/msg/Header")(stamp=stamp(ns), frame_id=frame_id)


# --- commands ----------------------------------------------------------------------------------------


def _vector3(xyz: np.ndarray) -> object:
    return msg_class("geometry_msgs/msg/Vector3")(x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2]))


def twist_from_array(values: ArrayLike) -> object:
    """geometry_msgs/msg/Twist from ``[vx, vy, vz, wx, wy, wz]``."""
    v = _vec(values, 6, "Twist")
    return msg_class("geometry_msgs/msg/Twist")(linear=_vector3(v[:3]), angular=_vector3(v[3:]))


def twist_to_array(msg: object) -> np.ndarray:
    """``[vx, vy, vz, wx, wy, wz]`` of a Twist (or the twist of a TwistStamped)."""
    t = getattr(msg, "twist", msg)
    return np.array([t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z])


def twist_stamped_from_array(values: ArrayLike, ns: int = 0, frame_id: str = "") -> object:
    """geometry_msgs/msg/TwistStamped from ``[vx, vy, vz, wx, wy, wz]``."""
    return msg_class("geometry_msgs/msg/TwistStamped")(header=header(ns, frame_id), twist=twist_from_array(values))


def ackermann_from_array(values: ArrayLike, ns: int = 0, frame_id: str = "") -> object:
    """ackermann_msgs/msg/AckermannDriveStamped from ``[steering_angle (rad), speed (m/s)]``."""
    steering, speed = _vec(values, 2, "AckermannDriveStamped")
    drive = zero_msg("ackermann_msgs/msg/AckermannDrive")
    drive.steering_angle, drive.speed = float(steering), float(speed)
    return msg_class("ackermann_msgs/msg/AckermannDriveStamped")(header=header(ns, frame_id), drive=drive)


def ackermann_to_array(msg: object) -> np.ndarray:
    """``[steering_angle, speed]`` of an AckermannDriveStamped (or an AckermannDrive)."""
    d = getattr(msg, "drive", msg)
    return np.array([d.steering_angle, d.speed])


# --- state -------------------------------------------------------------------------------------------


def joint_state_from_arrays(
    names: Sequence[str],
    position: ArrayLike = (),
    velocity: ArrayLike = (),
    effort: ArrayLike = (),
    ns: int = 0,
    frame_id: str = "",
) -> object:
    """sensor_msgs/msg/JointState; each of position/velocity/effort is empty or one value per name."""
    # contiguous copies: the CDR serializer writes raw buffers (a strided view would fail to serialize)
    arrays = [np.ascontiguousarray(np.asarray(a, dtype=np.float64).reshape(-1)) for a in (position, velocity, effort)]
    for label, arr in zip(("position", "velocity", "effort"), arrays, strict=True):
        if arr.size not in (0, len(names)):
            raise ValueError(f"JointState {label} has {arr.size} values for {len(names)} joints")
    return msg_class("sensor_msgs/msg/JointState")(
        header=header(ns, frame_id), name=list(names), position=arrays[0], velocity=arrays[1], effort=arrays[2]
    )


def joint_state_to_arrays(msg: object) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(names, position, velocity, effort)`` of a JointState (float64 arrays, possibly empty)."""
    f64 = [np.asarray(a, dtype=np.float64) for a in (msg.position, msg.velocity, msg.effort)]
    return list(msg.name), f64[0], f64[1], f64[2]


def imu_to_array(msg: object) -> np.ndarray:
    """``[qx, qy, qz, qw, wx, wy, wz, ax, ay, az]`` of a sensor_msgs/msg/Imu."""
    o, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return np.array([o.x, o.y, o.z, o.w, w.x, w.y, w.z, a.x, a.y, a.z])


def imu_from_array(values: ArrayLike, ns: int = 0, frame_id: str = "") -> object:
    """sensor_msgs/msg/Imu from ``[qx, qy, qz, qw, wx, wy, wz, ax, ay, az]`` (covariances zero: unknown)."""
    v = _vec(values, 10, "Imu")
    msg = zero_msg("sensor_msgs/msg/Imu")
    msg.header = header(ns, frame_id)
    msg.orientation = msg_class("geometry_msgs/msg/Quaternion")(x=v[0], y=v[1], z=v[2], w=v[3])
    msg.angular_velocity, msg.linear_acceleration = _vector3(v[4:7]), _vector3(v[7:10])
    return msg


def odometry_to_array(msg: object) -> np.ndarray:
    """``[x, y, z, qx, qy, qz, qw, vx, vy, vz, wx, wy, wz]`` of a nav_msgs/msg/Odometry (twist in child frame)."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    return np.concatenate([[p.x, p.y, p.z, q.x, q.y, q.z, q.w], twist_to_array(msg.twist.twist)])


def odometry_from_array(values: ArrayLike, ns: int = 0, frame_id: str = "odom", child_frame_id: str = "") -> object:
    """nav_msgs/msg/Odometry from ``[x, y, z, qx, qy, qz, qw, vx, vy, vz, wx, wy, wz]`` (covariances zero)."""
    v = _vec(values, 13, "Odometry")
    msg = zero_msg("nav_msgs/msg/Odometry")
    msg.header, msg.child_frame_id = header(ns, frame_id), child_frame_id
    msg.pose.pose.position = msg_class("geometry_msgs/msg/Point")(x=v[0], y=v[1], z=v[2])
    msg.pose.pose.orientation = msg_class("geometry_msgs/msg/Quaternion")(x=v[3], y=v[4], z=v[5], w=v[6])
    msg.twist.twist = twist_from_array(v[7:])
    return msg


# --- images ------------------------------------------------------------------------------------------


def image_from_array(pixels: np.ndarray, encoding: str = "rgb8", ns: int = 0, frame_id: str = "") -> object:
    """sensor_msgs/msg/Image from an (H, W) or (H, W, C) array whose dtype and channels fit ``encoding``."""
    if encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"unsupported image encoding {encoding!r}; known: {sorted(IMAGE_ENCODINGS)}")
    dtype, channels = IMAGE_ENCODINGS[encoding]
    arr = np.asarray(pixels)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] != channels or arr.dtype != np.dtype(dtype):
        raise ValueError(f"{encoding} needs (H, W, {channels}) {dtype}, got {arr.shape} {arr.dtype}")
    height, width = arr.shape[:2]
    data = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    return msg_class("sensor_msgs/msg/Image")(
        header=header(ns, frame_id), height=height, width=width, encoding=encoding,
        is_bigendian=int(np.dtype(dtype).byteorder == ">"), step=width * channels * np.dtype(dtype).itemsize,
        data=data,
    )  # fmt: skip


def image_to_array(msg: object) -> np.ndarray:
    """(H, W, C) array of a sensor_msgs/msg/Image (row padding dropped, byte order fixed; a view where possible)."""
    if msg.encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"unsupported image encoding {msg.encoding!r}; known: {sorted(IMAGE_ENCODINGS)}")
    dtype, channels = IMAGE_ENCODINGS[msg.encoding]
    dt = np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<")
    row_bytes = msg.width * channels * dt.itemsize
    if msg.step < row_bytes or len(msg.data) < msg.step * msg.height:
        raise ValueError(f"Image step {msg.step} / data {len(msg.data)} B too small for {msg.width}x{msg.height}")
    rows = np.asarray(msg.data, dtype=np.uint8)[: msg.step * msg.height].reshape(msg.height, msg.step)
    pixels = rows[:, :row_bytes].view(dt).reshape(msg.height, msg.width, channels)
    return pixels.astype(dt.newbyteorder("="), copy=False)


# --- std_msgs ----------------------------------------------------------------------------------------


def bool_msg(value: bool) -> object:
    """std_msgs/msg/Bool."""
    return msg_class("std_msgs/msg/Bool")(data=bool(value))


def float32_multiarray_from_array(values: ArrayLike, labels: Sequence[str] = ()) -> object:
    """std_msgs/msg/Float32MultiArray with a row-major layout describing ``values``' shape."""
    arr = np.ascontiguousarray(values, dtype=np.float32)
    labels = list(labels) or [""] * arr.ndim
    if len(labels) != arr.ndim:
        raise ValueError(f"{len(labels)} labels for a {arr.ndim}-d array")
    dim_cls = msg_class("std_msgs/msg/MultiArrayDimension")
    strides = np.cumprod(arr.shape[::-1])[::-1] if arr.ndim else []
    dims = [
        dim_cls(label=lab, size=int(n), stride=int(s)) for lab, n, s in zip(labels, arr.shape, strides, strict=True)
    ]
    layout = msg_class("std_msgs/msg/MultiArrayLayout")(dim=dims, data_offset=0)
    return msg_class("std_msgs/msg/Float32MultiArray")(layout=layout, data=arr.reshape(-1))


def float32_multiarray_to_array(msg: object) -> np.ndarray:
    """The float32 array of a Float32MultiArray, shaped by its layout when the layout is dense row-major."""
    data = np.asarray(msg.data, dtype=np.float32)[msg.layout.data_offset :]
    shape = tuple(int(d.size) for d in msg.layout.dim)
    return data.reshape(shape) if shape and int(np.prod(shape)) == data.size else data
