"""real.transport: memory and Cyclone DDS backends, ROS 2 naming, QoS matching, loopback round trips.

DDS tests stay on 127.0.0.1 (`LOOPBACK_CONFIG`) with a fresh domain id per test (conftest's `dds_domain`), so
parallel workers and tests never see each other; every wait is bounded.
"""

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import wait_until

from real import msgs
from real.transport import (
    DEFAULT,
    LATCHED,
    SENSOR_DATA,
    SYSTEM_DEFAULT,
    Durability,
    QoS,
    Reliability,
    make_transport,
    rclpy_available,
    resolve_kind,
    resolve_qos,
)
from real.transport.memory import FakeClock, MemoryBus, MemoryTransport

RELIABLE = QoS(10, Reliability.RELIABLE)
BEST_EFFORT = QoS(10, Reliability.BEST_EFFORT)
QOS_MATRIX = [  # (writer, reader, matches)
    (RELIABLE, RELIABLE, True),
    (RELIABLE, BEST_EFFORT, True),
    (BEST_EFFORT, BEST_EFFORT, True),
    (BEST_EFFORT, RELIABLE, False),
]


class Inbox:
    """Collects (msg, receive_time_ns) from a subscription callback, thread-safe."""

    def __init__(self) -> None:
        self.items: list = []
        self.lock = threading.Lock()

    def __call__(self, msg, receive_time_ns) -> None:
        with self.lock:
            self.items.append((msg, receive_time_ns))

    def wait(self, n: int = 1, timeout: float = 5.0) -> list:
        assert wait_until(lambda: len(self.items) >= n, timeout), f"got {len(self.items)} of {n} messages"
        return [m for m, _ in self.items]


# --- QoS ------------------------------------------------------------------------------------------------


def test_qos_profiles_follow_rmw():
    assert (DEFAULT.depth, DEFAULT.reliability, DEFAULT.durability) == (10, Reliability.RELIABLE, Durability.VOLATILE)
    assert (SENSOR_DATA.depth, SENSOR_DATA.reliability) == (5, Reliability.BEST_EFFORT)
    assert (SYSTEM_DEFAULT.depth, SYSTEM_DEFAULT.reliability) == (1, Reliability.RELIABLE)
    assert (LATCHED.depth, LATCHED.durability) == (1, Durability.TRANSIENT_LOCAL)
    assert resolve_qos(None) is DEFAULT and resolve_qos("Sensor_Data") is SENSOR_DATA
    with pytest.raises(ValueError, match="unknown QoS"):
        resolve_qos("fast")
    with pytest.raises(ValueError, match="depth"):
        QoS(0)
    with pytest.raises(TypeError, match="reliability"):
        QoS(1, "reliable")
    for writer, reader, ok in QOS_MATRIX:
        assert writer.matches(reader) is ok
    assert LATCHED.matches(QoS(1, durability=Durability.TRANSIENT_LOCAL))  # TL -> TL matches
    assert not DEFAULT.matches(LATCHED)  # a VOLATILE writer cannot serve a TRANSIENT_LOCAL reader


# --- memory backend -------------------------------------------------------------------------------------


def test_memory_delivers_copies_with_receive_times():
    clock = FakeClock(1_000)
    with MemoryTransport(clock=clock) as bus:
        first, second = Inbox(), Inbox()
        bus.subscribe("cmd_vel", msgs.TWIST, first)
        bus.subscribe("/cmd_vel", "geometry_msgs/Twist", second)
        pub = bus.publisher("/cmd_vel", msgs.TWIST)
        sent = msgs.twist_from_array([1, 0, 0, 0, 0, 0.5])
        clock.advance(0.25)
        pub.publish(sent)
        (got, t), (other, _) = first.items[0], second.items[0]
        assert t == 250_001_000 and bus.now() == t
        np.testing.assert_array_equal(msgs.twist_to_array(got), [1, 0, 0, 0, 0, 0.5])
        assert got is not sent and got is not other
        assert pub.subscriber_count() == 2


def test_memory_transports_on_one_bus_see_each_other():
    bus = MemoryBus()
    robot, runner = MemoryTransport(bus), MemoryTransport(bus)
    inbox = Inbox()
    runner.subscribe("/odom", msgs.ODOMETRY, inbox, SENSOR_DATA)
    robot.publisher("/odom", msgs.ODOMETRY, SENSOR_DATA).publish(msgs.odometry_from_array(np.arange(13.0)))
    np.testing.assert_array_equal(msgs.odometry_to_array(inbox.wait()[0]), np.arange(13.0))
    robot.close()
    assert runner.subscribe("/odom", msgs.ODOMETRY, inbox, SENSOR_DATA).publisher_count() == 0
    other_bus = MemoryTransport()
    other_bus.publisher("/odom", msgs.ODOMETRY, SENSOR_DATA)
    assert other_bus.subscribe("/odom", msgs.ODOMETRY, inbox, SENSOR_DATA).publisher_count() == 1
    assert runner.subscribe("/odom", msgs.ODOMETRY, inbox, SENSOR_DATA).publisher_count() == 0


@pytest.mark.parametrize("writer,reader,ok", QOS_MATRIX)
def test_memory_qos_matching(writer, reader, ok):
    with MemoryTransport() as bus:
        inbox = Inbox()
        sub = bus.subscribe("/x", msgs.BOOL, inbox, reader)
        pub = bus.publisher("/x", msgs.BOOL, writer)
        pub.publish(msgs.bool_msg(True))
        assert len(inbox.items) == int(ok)
        assert pub.subscriber_count() == sub.publisher_count() == int(ok)


def test_memory_latched_history():
    with MemoryTransport() as bus:
        pub = bus.publisher("/estop", msgs.BOOL, QoS(2, durability=Durability.TRANSIENT_LOCAL))
        for value in (False, True, True):
            pub.publish(msgs.bool_msg(value))
        late, latest, volatile = Inbox(), Inbox(), Inbox()
        bus.subscribe("/estop", msgs.BOOL, late, QoS(5, durability=Durability.TRANSIENT_LOCAL))
        bus.subscribe("/estop", msgs.BOOL, latest, LATCHED)
        bus.subscribe("/estop", msgs.BOOL, volatile)
        assert [m.data for m, _ in late.items] == [True, True]  # the writer keeps its depth (2)
        assert [m.data for m, _ in latest.items] == [True]  # and the reader its own (1)
        assert volatile.items == []
        bus.publisher("/plain", msgs.BOOL).publish(msgs.bool_msg(True))
        assert bus.subscribe("/plain", msgs.BOOL, Inbox(), LATCHED).publisher_count() == 0


def test_memory_raw_subscription_gets_cdr():
    with MemoryTransport() as bus:
        inbox = Inbox()
        bus.subscribe_raw("/drive", msgs.ACKERMANN_DRIVE_STAMPED, inbox)
        msg = msgs.ackermann_from_array([0.1, 1.5], ns=42)
        bus.publisher("/drive", msgs.ACKERMANN_DRIVE_STAMPED).publish(msg)
        assert inbox.wait()[0] == msgs.serialize(msg)


def test_memory_errors_and_close(caplog):
    bus = MemoryTransport()
    inbox = Inbox()

    def broken(msg, t):
        raise RuntimeError("boom")

    bus.subscribe("/a", msgs.BOOL, broken)
    sub = bus.subscribe("/a", msgs.BOOL, inbox)
    pub = bus.publisher("/a", msgs.BOOL)
    with caplog.at_level(logging.ERROR):
        pub.publish(msgs.bool_msg(True))
    assert "callback for /a raised" in caplog.text and len(inbox.items) == 1  # the next callback still ran
    with pytest.raises(TypeError, match="carries std_msgs/msg/Bool"):
        bus.publisher("/a", msgs.TWIST)
    with pytest.raises(TypeError, match="expected a std_msgs/msg/Bool message, got geometry_msgs/msg/Twist"):
        pub.publish(msgs.zero_msg(msgs.TWIST))
    with pytest.raises(msgs.UnknownMessageTypeError):
        bus.publisher("/b", "std_msgs/msg/Boolean")
    with pytest.raises(ValueError, match="invalid ROS topic name"):
        bus.publisher("//", msgs.BOOL)
    with pytest.raises(ValueError, match="unknown QoS"):
        bus.subscribe("/a", msgs.BOOL, inbox, "sometimes")
    sub.close()
    pub.publish(msgs.bool_msg(True))
    assert len(inbox.items) == 1
    bus.close()
    bus.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pub.publish(msgs.bool_msg(True))
    with pytest.raises(RuntimeError, match="closed"):
        bus.subscribe("/a", msgs.BOOL, inbox)


def test_make_transport(dds_domain, monkeypatch):
    import real.transport as transport_module

    assert isinstance(make_transport("memory"), MemoryTransport)
    with pytest.raises(ValueError, match="unknown transport kind 'zenoh'"):
        make_transport("zenoh")
    # "auto" is rclpy only in a sourced ROS 2 environment (ROS_DISTRO set) where rclpy imports
    monkeypatch.delenv("ROS_DISTRO", raising=False)
    assert resolve_kind("auto") == "dds" and resolve_kind("rclpy") == "rclpy"
    monkeypatch.setenv("ROS_DISTRO", "kilted")
    assert resolve_kind("auto") == ("rclpy" if rclpy_available() else "dds")
    monkeypatch.setattr(transport_module, "rclpy_available", lambda: False)
    assert resolve_kind("auto") == "dds"
    with pytest.raises(RuntimeError, match="needs ROS 2's rclpy"):
        make_transport("rclpy")
    from real.transport.dds import DdsTransport

    with make_transport() as transport:  # auto -> dds on ROS_DOMAIN_ID
        assert isinstance(transport, DdsTransport) and transport.domain_id == dds_domain


# --- DDS backend ----------------------------------------------------------------------------------------


@pytest.fixture
def dds(dds_domain):
    """A factory of DDS transports on this test's domain, closed afterwards."""
    from real.transport.dds import DdsTransport

    made = []

    def make():
        made.append(DdsTransport(dds_domain))
        return made[-1]

    yield make
    for transport in made:
        transport.close()


def test_domain_id_resolution(monkeypatch):
    from real.transport.dds import resolve_domain_id

    monkeypatch.setenv("ROS_DOMAIN_ID", "17")
    assert resolve_domain_id(None) == 17 and resolve_domain_id(3) == 3
    monkeypatch.delenv("ROS_DOMAIN_ID")
    assert resolve_domain_id(None) == 0
    monkeypatch.setenv("ROS_DOMAIN_ID", "seven")
    with pytest.raises(ValueError, match="ROS_DOMAIN_ID must be an integer"):
        resolve_domain_id(None)
    for bad in (-1, 233, True, 1.0):
        with pytest.raises(ValueError, match="domain id"):
            resolve_domain_id(bad)


def test_dds_loopback_command_types(dds):
    robot, runner = dds(), dds()
    twists, drives = Inbox(), Inbox()
    robot.subscribe("/cmd_vel", msgs.TWIST, twists)
    robot.subscribe("/drive", msgs.ACKERMANN_DRIVE_STAMPED, drives, SYSTEM_DEFAULT)
    cmd_vel = runner.publisher("/cmd_vel", msgs.TWIST)
    drive = runner.publisher("/drive", msgs.ACKERMANN_DRIVE_STAMPED, SYSTEM_DEFAULT)
    assert wait_until(lambda: cmd_vel.subscriber_count() == 1 and drive.subscriber_count() == 1)
    before = runner.now()
    for i in range(5):
        cmd_vel.publish(msgs.twist_from_array([i, 0, 0, 0, 0, -i]))
    drive.publish(msgs.ackermann_from_array([0.25, 1.5], ns=123, frame_id="base_link"))
    assert [msgs.twist_to_array(m)[0] for m in twists.wait(5)] == [0, 1, 2, 3, 4]
    assert before <= twists.items[0][1] <= robot.now()
    got = drives.wait()[0]
    np.testing.assert_allclose(msgs.ackermann_to_array(got), [0.25, 1.5])
    assert (msgs.stamp_ns(got.header.stamp), got.header.frame_id) == (123, "base_link")


def test_dds_loopback_image_and_raw(dds):
    robot, runner = dds(), dds()
    images, raw = Inbox(), Inbox()
    runner.subscribe("/camera/image_raw", msgs.IMAGE, images, SENSOR_DATA)
    runner.subscribe_raw("/camera/image_raw", msgs.IMAGE, raw, SENSOR_DATA)
    pub = robot.publisher("/camera/image_raw", msgs.IMAGE, SENSOR_DATA)
    assert wait_until(lambda: pub.subscriber_count() == 2)
    pixels = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    msg = msgs.image_from_array(pixels, "rgb8", ns=7, frame_id="camera")
    pub.publish(msg)
    np.testing.assert_array_equal(msgs.image_to_array(images.wait()[0]), pixels)
    data = raw.wait()[0]
    cdr = msgs.serialize(msg)
    assert data[: len(cdr)] == cdr and set(data[len(cdr) :]) <= {0} and len(data) % 4 == 0


def test_dds_interoperates_with_plain_cyclonedds_endpoints(dds):
    """Code that uses generated IdlStructs directly (either Image variant) talks to the transport."""
    from cyclonedds.domain import DomainParticipant
    from cyclonedds.pub import DataWriter
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic

    from real.msgs.idl import from_idl, idl_class, list_idl_class, to_idl
    from real.transport.dds import dds_qos

    transport = dds()
    participant = DomainParticipant(transport.domain_id)
    qos = dds_qos(DEFAULT, writer=False)
    fast_reader = DataReader(participant, Topic(participant, "rt/image", idl_class(msgs.IMAGE)), qos=qos)
    list_topic = Topic(participant, "rt/image", list_idl_class(msgs.IMAGE))
    list_reader = DataReader(participant, list_topic, qos=qos)
    list_writer = DataWriter(participant, list_topic, qos=dds_qos(DEFAULT, writer=True))
    inbox = Inbox()
    transport.subscribe("/image", msgs.IMAGE, inbox)
    pub = transport.publisher("/image", msgs.IMAGE)
    assert wait_until(lambda: pub.subscriber_count() == 3 and len(list_writer.get_matched_subscriptions()) == 3)
    pixels = np.arange(4 * 6, dtype=np.uint8).reshape(4, 6)
    pub.publish(msgs.image_from_array(pixels, "mono8"))
    for reader in (fast_reader, list_reader):
        assert wait_until(lambda r=reader: (s := r.read()) and len(s) == 1)
        sample = reader.take()[0]
        np.testing.assert_array_equal(msgs.image_to_array(from_idl(sample))[:, :, 0], pixels)
    list_writer.write(to_idl(msgs.image_from_array(pixels.T.copy(), "mono8"), fast=False))
    assert wait_until(lambda: len(inbox.items) == 2)
    np.testing.assert_array_equal(msgs.image_to_array(inbox.items[1][0])[:, :, 0], pixels.T)
    for entity in (list_writer, list_reader, fast_reader, participant):
        entity.__del__()


@pytest.mark.parametrize("writer,reader,ok", QOS_MATRIX)
def test_dds_qos_matching(dds, writer, reader, ok):
    a, b = dds(), dds()
    inbox = Inbox()
    sub = b.subscribe("/scan", msgs.BOOL, inbox, reader)
    pub = a.publisher("/scan", msgs.BOOL, writer)
    if ok:
        assert wait_until(lambda: pub.subscriber_count() == 1 and sub.publisher_count() == 1)
        pub.publish(msgs.bool_msg(True))
        assert inbox.wait()[0].data is True
    else:
        assert wait_until(lambda: sub.reader.get_requested_incompatible_qos_status().total_count == 1)
        pub.publish(msgs.bool_msg(True))
        time.sleep(0.1)
        assert inbox.items == [] and pub.subscriber_count() == 0 and sub.publisher_count() == 0


def test_dds_latched_topic(dds):
    a, b = dds(), dds()
    pub = a.publisher("/estop", msgs.BOOL, LATCHED)
    pub.publish(msgs.bool_msg(False))
    pub.publish(msgs.bool_msg(True))
    late = Inbox()
    b.subscribe("/estop", msgs.BOOL, late, LATCHED)
    assert [m.data for m in late.wait()] == [True]
    time.sleep(0.05)
    assert len(late.items) == 1


def test_dds_names_seen_by_ros_graph(dds):
    """What `ros2 topic list -t` (via DCPSPublication) would see: rmw_cyclonedds' names and our QoS, and, as from
    rmw_cyclonedds, no XTypes type identifier on any endpoint (peers match them by type name)."""
    from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication, BuiltinTopicDcpsSubscription
    from cyclonedds.core import Policy
    from cyclonedds.domain import DomainParticipant

    transport = dds()
    transport.publisher("/cmd_vel", msgs.TWIST)
    transport.publisher("/drive", msgs.ACKERMANN_DRIVE_STAMPED, SENSOR_DATA)
    transport.subscribe("/odom", msgs.ODOMETRY, lambda m, t: None)
    spy = DomainParticipant(transport.domain_id)
    reader = BuiltinDataReader(spy, BuiltinTopicDcpsPublication)
    sub_reader = BuiltinDataReader(spy, BuiltinTopicDcpsSubscription)
    seen = {}

    def collect():
        for r in (reader, sub_reader):
            seen.update({s.topic_name: s for s in r.take(N=64) if hasattr(s, "topic_name")})
        return {"rt/cmd_vel", "rt/drive", "rt/odom"} <= set(seen)

    assert wait_until(collect)
    cmd_vel, drive = seen["rt/cmd_vel"], seen["rt/drive"]
    assert [seen[t].type_id for t in ("rt/cmd_vel", "rt/drive", "rt/odom")] == [None, None, None]
    assert seen["rt/odom"].type_name == "nav_msgs::msg::dds_::Odometry_"
    assert cmd_vel.type_name == "geometry_msgs::msg::dds_::Twist_"
    assert drive.type_name == "ackermann_msgs::msg::dds_::AckermannDriveStamped_"
    assert cmd_vel.qos[Policy.Reliability].__class__ is Policy.Reliability.Reliable
    assert cmd_vel.qos[Policy.History] == Policy.History.KeepLast(10)
    assert drive.qos[Policy.Reliability] == Policy.Reliability.BestEffort
    assert cmd_vel.qos[Policy.DataRepresentation].use_cdrv0_representation  # XCDR1 only, as rmw_cyclonedds
    assert not cmd_vel.qos[Policy.DataRepresentation].use_xcdrv2_representation
    twist_hash = "RIHS01_9c45bf16fe0983d80e3cfe750d6835843d265a9a6c46bd2e609fcddde6fb8d2a"  # ROS 2's, for Twist
    assert cmd_vel.qos[Policy.Userdata].data == f"typehash={twist_hash};".encode()
    reader.__del__()
    sub_reader.__del__()
    spy.__del__()


def test_dds_errors_and_close(dds, caplog):
    transport = dds()
    pub = transport.publisher("/a", msgs.BOOL)
    bad = Inbox()
    with caplog.at_level(logging.ERROR):
        transport.subscribe("/a", msgs.BOOL, bad)._deliver(b"\x00\x01\x00\x00", 0)  # truncated CDR
    assert bad.items == [] and "undecodable std_msgs/msg/Bool sample on /a" in caplog.text
    with pytest.raises(TypeError, match="carries std_msgs/msg/Bool"):
        transport.subscribe("/a", msgs.TWIST, Inbox())
    with pytest.raises(TypeError, match="expected a std_msgs/msg/Bool"):
        pub.publish(msgs.twist_from_array(np.zeros(6)))
    inbox = Inbox()
    sub = transport.subscribe("/a", msgs.BOOL, inbox)
    sub.close()
    sub.close()
    pub.publish(msgs.bool_msg(True))
    time.sleep(0.05)
    assert inbox.items == [] and sub.publisher_count() == 0
    transport.close()
    transport.close()
    with pytest.raises(RuntimeError, match="closed"):
        transport.publisher("/b", msgs.BOOL)
    with pytest.raises(RuntimeError, match="closed"):
        pub.publish(msgs.bool_msg(True))


ECHO = textwrap.dedent(
    """
    import sys, time
    from real import msgs
    from real.transport.dds import DdsTransport

    transport = DdsTransport()
    pubs = {}
    for name, msg_type in [("twist", msgs.TWIST), ("drive", msgs.ACKERMANN_DRIVE_STAMPED), ("image", msgs.IMAGE)]:
        pubs[name] = transport.publisher("/echo/" + name, msg_type)
        transport.subscribe("/ping/" + name, msg_type, lambda m, t, p=pubs[name]: p.publish(m))
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    transport.close()
    """
)


def test_dds_two_process_echo(dds):
    """Through the network stack (RTPS over UDP on 127.0.0.1), not Cyclone's in-process shortcut."""
    child = subprocess.Popen(
        [sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )  # fmt: skip
    try:
        transport = dds()
        sent = {
            "twist": (msgs.TWIST, msgs.twist_from_array([0.5, 0, 0, 0, 0, 1.0])),
            "drive": (msgs.ACKERMANN_DRIVE_STAMPED, msgs.ackermann_from_array([-0.2, 3.0], ns=99)),
            "image": (msgs.IMAGE, msgs.image_from_array(np.full((120, 160, 3), 7, np.uint8), "bgr8")),
        }
        inboxes, pubs, subs = {}, {}, {}
        for name, (msg_type, _) in sent.items():
            inboxes[name] = Inbox()
            subs[name] = transport.subscribe("/echo/" + name, msg_type, inboxes[name])
            pubs[name] = transport.publisher("/ping/" + name, msg_type)
        # both directions: the child's readers of /ping and its writers of /echo (else an echo can go unheard)
        assert wait_until(lambda: all(p.subscriber_count() == 1 for p in pubs.values())
                          and all(s.publisher_count() == 1 for s in subs.values()), timeout=15), "no discovery"
        for name, (_, msg) in sent.items():
            pubs[name].publish(msg)
        for name, (_, msg) in sent.items():
            assert msgs.serialize(inboxes[name].wait(timeout=10)[0]) == msgs.serialize(msg), name
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
