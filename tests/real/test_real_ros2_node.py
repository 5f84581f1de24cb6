"""The deployer as a ROS 2 node (``robolearn deploy transport=rclpy``) and the launch file that starts it with a
recorder (real/launch/deploy.launch.py).

- the deployer's settings are read-only ROS 2 parameters by dotted names, readable by another node through the
  standard parameter services (what ``ros2 param list/get`` call; tests/real/ros2_peer.py's ``params``), and a set
  is refused;
- the launch file's command lines (built without ``launch``, which has no wheel) run: the deployer node and
  ``robolearn record``, whose bag holds the robot's topics, the commands, the e-stop and the loop statistics;
- the e-stop and the loop statistics are on the topics the docs list (``/estop``, ``/robolearn/loop_stats``):
  the node's statistics arrive there, and its Bool e-stop there stops the deployer.

The ROS 2 wheels are required (a missing one fails, never skips); every wait is bounded.
"""

from __future__ import annotations

import importlib.util
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import wait_until
from test_real_ros2 import DEMO_POLICY, Ros2Peer, is_zero_twist, plain, require_ros2, ros_env, samples  # noqa: F401

from real import msgs
from real.deploy import LAUNCH_FILE, compose_deploy, robots
from real.timing import STAT_NAMES
from real.transport import make_transport, ros_parameters

DOCS = Path(__file__).parents[2] / "docs" / "real-robots.md"
ESTOP_TOPIC, STATS_TOPIC = "/estop", "/robolearn/loop_stats"  # the topics docs/real-robots.md lists


def load_launch_file() -> ModuleType:
    """real/launch/deploy.launch.py as a module, the way ``ros2 launch`` loads it (by path)."""
    spec = importlib.util.spec_from_file_location("deploy_launch", LAUNCH_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_settings_become_ros2_parameters_by_dotted_names() -> None:
    """Nested settings flatten to ROS 2 names and types; transports without a node take them as a no-op."""
    settings = {"rate_hz": 20.0, "robot": "rc_car", "require_estop": False, "seed": 3, "checkpoint": None,
                "safety": {"low": [-1, -1.0], "max_rate": [4, 4], "stop": "zero", "flags": [True, False]},
                "inputs": {"odom": {"topic": "/odom", "max_age": None}}, "teleop": {}, "empty": [],
                "observation": [{"name": "v", "from": "odom.x"}], "path": Path("a/b")}
    assert ros_parameters(settings) == {
        "rate_hz": 20.0, "robot": "rc_car", "require_estop": False, "seed": 3, "checkpoint": None,
        "safety.low": [-1.0, -1.0], "safety.max_rate": [4, 4], "safety.stop": "zero", "safety.flags": [True, False],
        "inputs.odom.topic": "/odom", "inputs.odom.max_age": None, "empty": None,
        "observation": ['{"name":"v","from":"odom.x"}'], "path": "a/b",
    }  # fmt: skip
    with make_transport("memory") as transport:
        transport.declare_parameters({"rate_hz": 20.0})


def test_the_launch_file_builds_deploy_and_record_without_launch() -> None:
    """The launch file imports without ``launch``; its command lines follow the arguments, and the recorder gets
    the deploy config's topics with their types (the command's from the adapter output)."""
    module = load_launch_file()
    assert "launch" not in sys.modules and set(module.ARGUMENTS) >= {"checkpoint", "robot", "bag", "domain_id"}
    argv = module.commands({"checkpoint": "runs/car/checkpoints/final", "bag": "bags/run1", "domain_id": "7",
                            "deploy_args": "adapter.output=twist command.topic=/cmd"})
    assert argv["deploy"] == ["robolearn", "deploy", "robot=rc_car", "transport=rclpy", "node_name=robolearn_deploy",
                              "domain_id=7", "checkpoint=runs/car/checkpoints/final", "adapter.output=twist",
                              "command.topic=/cmd"]
    assert argv["record"][:3] == ["robolearn", "record", "out=bags/run1"]
    assert argv["record"][4:] == ["transport=rclpy", "domain_id=7"]
    topics = argv["record"][3].removeprefix("topics=").split(",")
    assert topics == ["/odom:nav_msgs/msg/Odometry@sensor_data", "/imu:sensor_msgs/msg/Imu@sensor_data",
                      "/cmd:geometry_msgs/msg/Twist@default", "/teleop/ackermann_cmd:geometry_msgs/msg/Twist@default",
                      f"{ESTOP_TOPIC}:std_msgs/msg/Bool@default",
                      f"{STATS_TOPIC}:std_msgs/msg/Float32MultiArray@default"]
    assert module.commands({"record_topics": "/a,/b", "robot": "arm"})["record"][3] == "topics=/a,/b"
    with pytest.raises(ValueError, match="unknown launch arguments"):
        module.commands({"chekpoint": "x"})


def test_the_estop_and_loop_stats_topics_are_the_documented_ones() -> None:
    """Every robot preset puts its e-stop and loop statistics on the topics docs/real-robots.md lists."""
    docs = DOCS.read_text()
    assert f"`{ESTOP_TOPIC}`" in docs and f"`{STATS_TOPIC}`" in docs
    for robot in robots():
        cfg = compose_deploy(robot)
        assert (cfg["estop"]["topic"], cfg["stats"]["topic"]) == (ESTOP_TOPIC, STATS_TOPIC), robot


def stop_all(procs: dict[str, subprocess.Popen], grace: float = 30.0) -> dict[str, int]:
    """SIGINT to each process at once (what ``ros2 launch`` sends on Ctrl-C); the exit codes. One still running after
    `grace` s gets SIGABRT, on which Python's faulthandler (PYTHONFAULTHANDLER, set by the test) writes every thread's
    stack to the launch log, and then SIGKILL."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    for proc in procs.values():
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    return {name: proc.returncode for name, proc in procs.items()}


def test_launch_commands_run_a_deployer_node_with_parameters_and_a_recorder(
        ros_env: dict[str, str], dds_domain: int, tmp_path: Path) -> None:  # noqa: F811 (the imported fixture)
    """The launch file's two commands as processes; the ROS 2 node (tests/real/ros2_peer.py) publishes a resting
    car's /odom and /imu and:

    (a) reads the deployer node's parameters (the effective rate, robot, policy, topics, safety limits), all
        read-only, and its set is refused; (b) hears the policy's commands and the loop statistics on
        /robolearn/loop_stats; (c) stops the deployer with a Bool on /estop (zero commands, e-stop ticks counted).
    The bag holds the sensors, the commands, the e-stop and the statistics; on SIGINT (what ``ros2 launch`` sends)
    both exit 0, the deployer's last command being a stop.
    """
    require_ros2()
    bag, log_path = tmp_path / "bag", tmp_path / "launch.log"
    argv = load_launch_file().commands({
        "policy": DEMO_POLICY, "robot": "rc_car", "bag": str(bag), "domain_id": str(dds_domain),
        "deploy_args": "adapter.output=twist command.topic=/cmd stats.interval_s=0.5",
        "robolearn": shlex.join([sys.executable, "-m", "robolearn"]),
    })  # fmt: skip
    sample = samples()
    want = {"/odom": 10, "/imu": 10, "/cmd": 5, ESTOP_TOPIC: 3, STATS_TOPIC: 2}  # messages in the bag, at least
    with Ros2Peer(ros_env) as peer, open(log_path, "w") as log:
        peer.subscribe("/cmd", msgs.TWIST, "default", keep=50)
        peer.subscribe(STATS_TOPIC, msgs.FLOAT32_MULTI_ARRAY, "default", keep=5)
        peer.publish("/odom", msgs.ODOMETRY, plain(sample[msgs.ODOMETRY]), "sensor_data", rate_hz=50)
        peer.publish("/imu", msgs.IMU, plain(sample[msgs.IMU]), "sensor_data", rate_hz=50)
        # each started with Ctrl-C ignored, as a background job of a non-interactive shell is: SIGINT must stop them
        procs = {name: subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$@"', "sh", *cmd], stdout=log,
                                        stderr=subprocess.STDOUT, text=True,
                                        env={**ros_env, "PYTHONFAULTHANDLER": "1"})
                 for name, cmd in argv.items()}
        try:
            # (a) the node's parameters, through ROS 2's standard parameter services
            params = node_parameters(peer, "/robolearn_deploy", {"rate_hz": 50.0, "safety.max_rate": [1.0, 1.0]})
            values = params["values"]
            assert {k: values[k] for k in ("rate_hz", "robot", "policy", "checkpoint", "transport", "node_name")} == {
                "rate_hz": 20.0, "robot": "rc_car", "policy": DEMO_POLICY, "checkpoint": None, "transport": "rclpy",
                "node_name": "robolearn_deploy"}  # fmt: skip
            assert values["command.topic"] == "/cmd" and values["command.type"] == msgs.TWIST
            assert values["inputs.odom.topic"] == "/odom" and values["inputs.odom.type"] == msgs.ODOMETRY
            assert values["safety.max_rate"] == [4.0, 4.0] and values["safety.low"] == [-1.0, -1.0]
            assert values["estop.topic"] == ESTOP_TOPIC and values["stats.topic"] == STATS_TOPIC
            assert values["stats.interval_s"] == 0.5 and values["adapter.output"] == "twist"
            ours = [name for name in values if name not in ("use_sim_time", "start_type_description_service")]
            assert len(ours) > 40 and all(params["read_only"][name] for name in ours)
            assert "read-only" in params["description"]["rate_hz"]
            assert not any(result["successful"] for result in params["changed"].values()), params["changed"]

            # (b) the policy drives; the loop statistics arrive on the documented topic
            def moving() -> int:
                return sum(not is_zero_twist(m) for m in peer.received("/cmd")["/cmd"]["messages"])

            assert wait_until(lambda: moving() >= 5, 20, interval=0.1), peer.received("/cmd")
            assert wait_until(lambda: peer.count(STATS_TOPIC) >= 1, 10, interval=0.1)
            stats = peer.received(STATS_TOPIC)[STATS_TOPIC]["messages"][-1]
            assert stats["layout"]["dim"][0]["label"] == ",".join(STAT_NAMES)
            summary = dict(zip(STAT_NAMES, stats["data"], strict=True))
            assert summary["ticks"] >= 1 and 0 < summary["rate_hz"] <= 25, summary  # the achieved rate (a busy CI)

            # (c) the e-stop on the documented topic stops the deployer
            assert peer.publish(ESTOP_TOPIC, msgs.BOOL, {"data": True}, "default", rate_hz=10, wait_matched=10), \
                "the deployer's e-stop subscription did not match"

            def estopped() -> bool:
                latest = peer.received(STATS_TOPIC)[STATS_TOPIC]["messages"][-1]
                return dict(zip(STAT_NAMES, latest["data"], strict=True))["estop_ticks"] >= 3

            assert wait_until(estopped, 10, interval=0.1), peer.received(STATS_TOPIC)
            peer.received("/cmd", reset=True)
            assert wait_until(lambda: peer.count("/cmd") >= 6, 10, interval=0.05)
            assert all(is_zero_twist(m) for m in peer.received("/cmd")["/cmd"]["messages"])

            # the recorder (started with the deployer; its discovery can take seconds) has all of them in the bag
            assert wait_until(lambda: all(flushed(bag, *want)[t] >= n for t, n in want.items()), 20, interval=0.5), \
                f"in the bag: {flushed(bag, *want)}, wanted {want}"
        except AssertionError as e:
            log.flush()
            raise AssertionError(f"{e}\n--- launch output ---\n{log_path.read_text()[-4000:]}") from None
        finally:
            codes = stop_all(procs)
    assert codes == {"deploy": 0, "record": 0}, (codes, log_path.read_text()[-4000:])
    counts = bag_counts(bag)
    assert all(counts.get(topic, 0) >= n for topic, n in want.items()), counts
    assert is_zero_twist(plain(msgs.deserialize(last_message(bag, "/cmd"), msgs.TWIST)))


def node_parameters(peer: Ros2Peer, node: str, change: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """The peer's ``params`` of ``node`` once the deployer has declared its settings (its node, and so the parameter
    services, exist a little earlier: while the policy loads)."""
    reply: dict[str, Any] = {}

    def declared() -> bool:
        reply.update(peer.call("params", timeout=timeout + 10, node=node, wait=timeout))
        return "rate_hz" in reply["values"]

    assert wait_until(declared, timeout, interval=0.2), f"no settings among {sorted(reply.get('values', {}))}"
    return peer.call("params", node=node, change=change)


def flushed(bag: Path, *topics: str) -> dict[str, int]:
    """How many messages on each of ``topics`` a recorder has flushed to the bag's MCAP files so far (read while it
    records, up to a cut-off last record)."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message
    from mcap.stream_reader import StreamReader

    channels: dict[int, str] = {}
    counts = dict.fromkeys(topics, 0)
    for path in bag.glob("*.mcap"):
        with open(path, "rb") as f:
            try:
                for record in StreamReader(f, skip_magic=False).records:
                    if isinstance(record, Channel):
                        channels[record.id] = record.topic
                    elif isinstance(record, Message) and channels.get(record.channel_id) in counts:
                        counts[channels[record.channel_id]] += 1
            except (McapError, EOFError, ValueError, OSError):  # the record being written
                pass
    return counts


def bag_counts(bag: Path) -> dict[str, int]:
    """Messages per topic in a (finished) rosbag2 folder, read with rosbags."""
    from rosbags.highlevel import AnyReader

    counts: dict[str, int] = {}
    with AnyReader([bag]) as reader:
        for connection, _, _ in reader.messages():
            counts[connection.topic] = counts.get(connection.topic, 0) + 1
    return counts


def last_message(bag: Path, topic: str) -> bytes:
    """The CDR bytes of the last message on ``topic`` in a (finished) rosbag2 folder."""
    from rosbags.highlevel import AnyReader

    with AnyReader([bag]) as reader:
        return [raw for _, _, raw in reader.messages([c for c in reader.connections if c.topic == topic])][-1]
