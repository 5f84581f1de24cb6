"""real.msgs: the type store, ROS 2 CDR identical between rosbags and the generated IdlStructs, helpers."""

import zlib

import numpy as np
import pytest
from cyclonedds.idl import IdlStruct, make_idl_struct
from rosbags.interfaces import Nodetype

from real import msgs
from real.msgs.idl import from_idl, idl_class, list_idl_class, to_idl
from real.msgs.store import NUMPY_DTYPES

INT_RANGES = {"int8": 7, "uint8": 8, "char": 8, "byte": 8, "int16": 15, "uint16": 16, "int32": 31, "uint32": 32,
              "int64": 63, "uint64": 64}  # fmt: skip


def random_value(desc: tuple, rng: np.random.Generator):
    """A random value for one rosbags field description (numpy arrays for numeric arrays/sequences)."""
    kind, arg = desc
    if kind == Nodetype.BASE:
        base = arg[0]
        if base == "string":
            return "".join(rng.choice(list("abcxyz_/019"), size=rng.integers(0, 12)))
        if base == "bool":
            return bool(rng.integers(2))
        if base.startswith("float"):
            return float(rng.normal() * 10.0 ** rng.integers(-3, 4))
        bits = INT_RANGES[base]
        return int(rng.integers(-(2**bits), 2**bits)) if base.startswith("int") else int(rng.integers(0, 2**bits))
    if kind == Nodetype.NAME:
        return random_msg(arg, rng)
    sub, count = arg
    n = count if kind == Nodetype.ARRAY else int(rng.integers(0, 7))
    if sub[0] == Nodetype.BASE and sub[1][0] in NUMPY_DTYPES:
        return np.array([random_value(sub, rng) for _ in range(n)], dtype=NUMPY_DTYPES[sub[1][0]])
    return [random_value(sub, rng) for _ in range(n)]


def random_msg(msg_type: str, rng: np.random.Generator):
    return msgs.msg_class(msg_type)(**{name: random_value(desc, rng) for name, desc in msgs.fields(msg_type)})


@pytest.mark.parametrize("msg_type", msgs.USED_TYPES)
def test_cdr_identical_to_rosbags(msg_type):
    rng = np.random.default_rng(zlib.crc32(msg_type.encode()))
    cls = idl_class(msg_type)
    assert cls.__idl_typename__ == msgs.dds_type_name(msg_type)
    for _ in range(20):
        msg = random_msg(msg_type, rng)
        ros = msgs.serialize(msg)
        assert ros[:4] == b"\x00\x01\x00\x00"  # CDR_LE, XCDR1
        assert to_idl(msg).serialize() == ros
        assert to_idl(msg, fast=False).serialize() == ros  # the list-typed twin (differs only for Image)
        assert msgs.serialize(from_idl(cls.deserialize(ros))) == ros
        assert msgs.serialize(msgs.deserialize(ros, msg_type)) == ros


def test_zero_messages_serialize():
    for msg_type in msgs.USED_TYPES:
        assert to_idl(msgs.zero_msg(msg_type)).serialize() == msgs.serialize(msgs.zero_msg(msg_type))


def test_image_fast_path_shares_type_information_with_list_twin():
    fast, twin = idl_class(msgs.IMAGE), list_idl_class(msgs.IMAGE)
    assert fast is not twin and fast.__idl_typename__ == twin.__idl_typename__ == "sensor_msgs::msg::dds_::Image_"
    assert fast.__annotations__["data"] is bytes
    twin.__idl__.fill_type_data()
    assert fast.__idl__._xt_bytedata == twin.__idl__._xt_bytedata  # private attributes of cyclonedds 11.0.1
    assert fast.__idl__.get_type_info() is twin.__idl__.get_type_info()
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    msg = msgs.image_from_array(pixels, "rgb8", ns=5)
    data = to_idl(msg).serialize()
    assert isinstance(fast.deserialize(data).data, bytes)
    assert isinstance(twin.deserialize(data).data, list)
    np.testing.assert_array_equal(msgs.image_to_array(from_idl(twin.deserialize(data))), pixels)


def type_ids(cls: type[IdlStruct]) -> set[bytes]:
    """The serialized XTypes identifiers, minimal and complete, of a class's type and every type it uses."""
    info, mapping = cls.__idl__.get_type_info(), cls.__idl__.get_type_mapping()
    ids = [info.minimal.typeid_with_size.type_id, info.complete.typeid_with_size.type_id]
    ids += [pair.type_identifier for pair in
            mapping.identifier_object_pair_minimal + mapping.identifier_object_pair_complete]
    return {type_id.serialize(use_version_2=True) for type_id in ids}


def test_type_objects_are_private():
    """The type objects behind the wire classes share no identifier with those any other participant builds for ROS
    types (here: a default cyclonedds application's, equal to Fast DDS's for types without collections, e.g. Header):
    Cyclone's TypeLookup service then has nothing to answer other participants with (docs/real-robots.md)."""
    from benchmarks.peers.cyclone_app import idl_class as default_idl_class

    for msg_type in (t for t in msgs.USED_TYPES if t != msgs.ACKERMANN_DRIVE_STAMPED):  # not in the app's type store
        ours, default = type_ids(idl_class(msg_type)), type_ids(default_idl_class(msg_type))
        assert len(ours) == len(default) >= 2 and not ours & default, msg_type
        assert idl_class(msg_type).__idl_typename__ == default_idl_class(msg_type).__idl_typename__


def test_plain_bytes_member_has_no_type_information():
    """Why the twin is needed: cyclonedds cannot describe a bare `bytes` member in XTypes."""
    cls = make_idl_struct("Blob_", "test::msg::dds_::Blob_", {"data": bytes})
    assert issubclass(cls, IdlStruct)
    with pytest.raises(Exception, match="typeobject"):
        cls.__idl__.fill_type_data()


def test_type_names():
    assert msgs.type_name("geometry_msgs/Twist") == msgs.TWIST
    assert msgs.type_name(msgs.msg_class(msgs.TWIST)) == msgs.TWIST
    assert msgs.type_name(msgs.zero_msg(msgs.BOOL)) == msgs.BOOL
    assert msgs.dds_type_name(msgs.TWIST) == "geometry_msgs::msg::dds_::Twist_"
    assert msgs.dds_type_name(msgs.ACKERMANN_DRIVE_STAMPED) == "ackermann_msgs::msg::dds_::AckermannDriveStamped_"
    for bad in ("geometry_msgs/msg/Twits", "Twist", "a/b/c/d", 42):
        with pytest.raises(msgs.UnknownMessageTypeError, match="unknown ROS message type"):
            msgs.type_name(bad)
    with pytest.raises(KeyError):  # also a KeyError for callers that look types up
        idl_class("nope_msgs/msg/Nope")


def test_command_helpers():
    twist = msgs.twist_from_array([1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(msgs.twist_to_array(twist), [1, 2, 3, 4, 5, 6])
    stamped = msgs.twist_stamped_from_array([0.5, 0, 0, 0, 0, -0.25], ns=3_000_000_007, frame_id="base_link")
    assert (stamped.header.stamp.sec, stamped.header.stamp.nanosec) == (3, 7)
    assert msgs.stamp_ns(stamped.header.stamp) == 3_000_000_007
    np.testing.assert_array_equal(msgs.twist_to_array(stamped), [0.5, 0, 0, 0, 0, -0.25])
    drive = msgs.ackermann_from_array([0.3, 2.0], ns=1)
    back = msgs.deserialize(msgs.serialize(drive), msgs.ACKERMANN_DRIVE_STAMPED)
    np.testing.assert_allclose(msgs.ackermann_to_array(back), [0.3, 2.0], rtol=1e-6)  # float32 on the wire
    assert back.drive.steering_angle_velocity == back.drive.acceleration == back.drive.jerk == 0
    with pytest.raises(ValueError, match="needs 6 values"):
        msgs.twist_from_array([1, 2])
    with pytest.raises(ValueError, match="negative"):
        msgs.stamp(-1)


def test_state_helpers():
    js = msgs.joint_state_from_arrays(["a", "b"], [1, 2], [3, 4], ns=10)
    names, pos, vel, eff = msgs.joint_state_to_arrays(msgs.deserialize(msgs.serialize(js), msgs.JOINT_STATE))
    assert names == ["a", "b"] and eff.size == 0
    np.testing.assert_array_equal(pos, [1, 2])
    np.testing.assert_array_equal(vel, [3, 4])
    with pytest.raises(ValueError, match="velocity has 1 values for 2 joints"):
        msgs.joint_state_from_arrays(["a", "b"], [1, 2], [3])
    imu = np.arange(10.0)
    np.testing.assert_array_equal(msgs.imu_to_array(msgs.imu_from_array(imu)), imu)
    odom = np.arange(13.0)
    back = msgs.deserialize(msgs.serialize(msgs.odometry_from_array(odom, child_frame_id="base")), msgs.ODOMETRY)
    np.testing.assert_array_equal(msgs.odometry_to_array(back), odom)
    assert back.header.frame_id == "odom" and back.child_frame_id == "base"


def test_image_helpers():
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    msg = msgs.image_from_array(rgb, "rgb8")
    assert (msg.height, msg.width, msg.step) == (4, 5, 15)
    np.testing.assert_array_equal(msgs.image_to_array(msgs.deserialize(msgs.serialize(msg), msgs.IMAGE)), rgb)
    depth = rng.integers(0, 2**16, (3, 2), dtype=np.uint16)
    # a big-endian mono16 image with 4 bytes of row padding, as some drivers send
    rows = np.zeros((3, 8), dtype=np.uint8)
    rows[:, :4] = depth.astype(">u2").view(np.uint8).reshape(3, 4)
    padded = msgs.zero_msg(msgs.IMAGE)
    padded.height, padded.width, padded.encoding, padded.is_bigendian, padded.step = 3, 2, "mono16", 1, 8
    padded.data = rows.reshape(-1)
    np.testing.assert_array_equal(msgs.image_to_array(padded)[:, :, 0], depth)
    with pytest.raises(ValueError, match="unsupported image encoding"):
        msgs.image_from_array(rgb, "yuv422")
    with pytest.raises(ValueError, match="needs"):
        msgs.image_from_array(rgb.astype(np.float32), "rgb8")


def test_std_helpers():
    assert msgs.bool_msg(1).data is True
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    msg = msgs.float32_multiarray_from_array(arr, labels=["rows", "cols"])
    assert [(d.label, d.size, d.stride) for d in msg.layout.dim] == [("rows", 2, 6), ("cols", 3, 3)]
    back = msgs.deserialize(msgs.serialize(msg), msgs.FLOAT32_MULTI_ARRAY)
    np.testing.assert_array_equal(msgs.float32_multiarray_to_array(back), arr)
