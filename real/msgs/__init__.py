"""ROS 2 messages for real/: one representation (rosbags dataclasses) for every transport.

`real.msgs.store` holds the type store and CDR (de)serialization, `real.msgs.convert` numpy helpers, and
`real.msgs.idl` (imported on demand: it loads Cyclone DDS) the generated IdlStruct classes.
"""

from real.msgs.convert import (
    IMAGE_ENCODINGS,
    ackermann_from_array,
    ackermann_to_array,
    bool_msg,
    float32_multiarray_from_array,
    float32_multiarray_to_array,
    header,
    image_from_array,
    image_to_array,
    imu_from_array,
    imu_to_array,
    joint_state_from_arrays,
    joint_state_to_arrays,
    odometry_from_array,
    odometry_to_array,
    stamp,
    stamp_ns,
    twist_from_array,
    twist_stamped_from_array,
    twist_to_array,
)
from real.msgs.store import (
    UnknownMessageTypeError,
    dds_type_name,
    deserialize,
    fields,
    msg_class,
    serialize,
    type_name,
    typestore,
    zero_msg,
)

# The message types real/ uses (and tests on the wire).
TWIST = "geometry_msgs/msg/Twist"
TWIST_STAMPED = "geometry_msgs/msg/TwistStamped"
ACKERMANN_DRIVE_STAMPED = "ackermann_msgs/msg/AckermannDriveStamped"
JOINT_STATE = "sensor_msgs/msg/JointState"
IMU = "sensor_msgs/msg/Imu"
IMAGE = "sensor_msgs/msg/Image"
ODOMETRY = "nav_msgs/msg/Odometry"
BOOL = "std_msgs/msg/Bool"
FLOAT32_MULTI_ARRAY = "std_msgs/msg/Float32MultiArray"
USED_TYPES = (
    TWIST, TWIST_STAMPED, ACKERMANN_DRIVE_STAMPED, JOINT_STATE, IMU, IMAGE, ODOMETRY, BOOL, FLOAT32_MULTI_ARRAY,
)  # fmt: skip

__all__ = [
    "ACKERMANN_DRIVE_STAMPED", "BOOL", "FLOAT32_MULTI_ARRAY", "IMAGE", "IMAGE_ENCODINGS", "IMU", "JOINT_STATE",
    "ODOMETRY", "TWIST", "TWIST_STAMPED", "USED_TYPES", "UnknownMessageTypeError", "ackermann_from_array",
    "ackermann_to_array", "bool_msg", "dds_type_name", "deserialize", "fields", "float32_multiarray_from_array",
    "float32_multiarray_to_array", "header", "image_from_array", "image_to_array", "imu_from_array", "imu_to_array",
    "joint_state_from_arrays", "joint_state_to_arrays", "msg_class", "odometry_from_array", "odometry_to_array",
    "serialize", "stamp", "stamp_ns", "twist_from_array", "twist_stamped_from_array", "twist_to_array",
    "type_name", "typestore", "zero_msg",
]  # fmt: skip
