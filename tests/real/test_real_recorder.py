"""real.recorder, real.bagfile, real.bag2dataset and robolearn.data.episodes: MCAP recording, episodes from bags.

Bags are read back with rosbags AND with the independent ``mcap`` library. DDS tests stay on 127.0.0.1 with a
domain id of their own (conftest's `dds_domain`); every wait is bounded.
"""

import contextlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import wait_until
from mcap.reader import make_reader
from rosbags.rosbag2 import Reader

import real.recorder
from real import msgs
from real.bag2dataset import ObsSpec, bag_to_episodes
from real.bagfile import LOCK_FILE, BagError, BagWriter, mcap_complete, recording_pid, repair_bag
from real.recorder import SAFETY_BITS, Recorder, parse_topics, safety_flags
from real.safety import SafetyInfo
from real.transport import SENSOR_DATA
from real.transport.memory import FakeClock, MemoryBus, MemoryTransport
from robolearn.commands.cli import run
from robolearn.data.episodes import Episode, load_episodes, save_episodes, to_transitions
from robolearn.errors import ConfigError, DatasetError

ROOT = Path(__file__).resolve().parents[2]


def cmd_record(opts: dict[str, str]) -> int:
    """`robolearn record key=value ...` as the CLI runs it."""
    return run("record", [f"{k}={v}" for k, v in opts.items()])


def cmd_bag2dataset(opts: dict[str, str]) -> int:
    """`robolearn bag2dataset key=value ...` as the CLI runs it."""
    return run("bag2dataset", [f"{k}={v}" for k, v in opts.items()])


def mcap_messages(bag: Path) -> tuple[dict, dict[str, list[tuple[int, bytes]]]]:
    """(per-topic (message encoding, schema encoding, schema name), per-topic [(log_time, data)]) via `mcap`."""
    channels, out = {}, {}
    for file in sorted(bag.glob("*.mcap")):
        with open(file, "rb") as f:
            reader = make_reader(f)
            assert reader.get_header().profile == "ros2"
            for schema, channel, message in reader.iter_messages(log_time_order=True):
                channels[channel.topic] = (channel.message_encoding, schema.encoding, schema.name)
                out.setdefault(channel.topic, []).append((message.log_time, message.data))
    return channels, out


def rosbags_messages(bag: Path) -> dict[str, list[tuple[int, bytes]]]:
    out = {}
    with Reader(bag) as reader:
        for conn, t, data in reader.messages():
            out.setdefault(conn.topic, []).append((t, bytes(data)))
    return out


# --- recording ----------------------------------------------------------------------------------------------


def test_memory_topics_and_ticks_read_by_rosbags_and_mcap(tmp_path):
    clock = FakeClock(5_000_000_000)
    bus = MemoryBus()
    robot, mine = MemoryTransport(bus, clock), MemoryTransport(bus, clock)
    odom, imu = robot.publisher("/odom", msgs.ODOMETRY), robot.publisher("/imu", msgs.IMU, SENSOR_DATA)
    sent = {"/odom": [], "/imu": []}
    bag = tmp_path / "run"
    with Recorder(mine, bag, [("/odom", msgs.ODOMETRY, None), ("/imu", msgs.IMU, SENSOR_DATA)],
                  clock_offset_ns=1000) as rec:  # fmt: skip
        for k in range(20):
            for topic, pub, msg in (("/odom", odom, msgs.odometry_from_array(np.arange(13.0) + k)),
                                    ("/imu", imu, msgs.imu_from_array(np.arange(10.0) * k))):  # fmt: skip
                pub.publish(msg)
                sent[topic].append((clock() + 1000, msgs.serialize(msg)))
            clock.advance(0.01)
            info = SafetyInfo(clamped=True, intervention=k == 3)
            rec.record_tick(clock(), [k, -k], [0.5, -0.5], k == 3, 7, reward=0.25 * k, safety=info)
            clock.advance(0.09)
    assert rec.closed and rec.dropped == 0 and rec.error is None

    # rosbags: metadata.yaml, connections with QoS, raw bytes as published, ticks at the tick times
    with Reader(bag) as reader:
        conns = {c.topic: c for c in reader.connections}
        assert reader.message_count == 2 * 20 + 7 * 20
        assert conns["/odom"].msgtype == msgs.ODOMETRY and conns["/odom"].msgcount == 20
        assert conns["/imu"].ext.offered_qos_profiles[0].reliability.name == "BEST_EFFORT"
        assert conns["/odom"].ext.offered_qos_profiles[0].reliability.name == "RELIABLE"
        assert conns["/rl/action_raw"].msgtype == "std_msgs/msg/Float32MultiArray"
        assert "/rl/episode" not in conns  # never given: not recorded
    by_rosbags = rosbags_messages(bag)
    assert by_rosbags["/odom"] == sent["/odom"] and by_rosbags["/imu"] == sent["/imu"]
    ticks = [t for t, _ in by_rosbags["/rl/command"]]
    assert ticks == [5_000_000_000 + 1000 + round(1e7) + k * round(1e8) for k in range(20)]
    for topic in ("/rl/action_raw", "/rl/intervention", "/rl/policy_version", "/rl/reward", "/rl/safety", "/rl/done"):
        assert [t for t, _ in by_rosbags[topic]] == ticks, topic
    raw = [msgs.float32_multiarray_to_array(msgs.deserialize(d, "std_msgs/msg/Float32MultiArray"))
           for _, d in by_rosbags["/rl/action_raw"]]  # fmt: skip
    assert np.array_equal(raw[5], [5, -5])
    flags = [msgs.deserialize(d, "std_msgs/msg/UInt32").data for _, d in by_rosbags["/rl/safety"]]
    assert flags[3] == SAFETY_BITS["clamped"] | SAFETY_BITS["intervention"] and flags[4] == SAFETY_BITS["clamped"]

    # the independent mcap reader: profile ros2, cdr messages, ros2msg schemas, same bytes and counts
    channels, by_mcap = mcap_messages(bag)
    assert channels["/odom"] == ("cdr", "ros2msg", msgs.ODOMETRY)
    assert channels["/rl/intervention"] == ("cdr", "ros2msg", "std_msgs/msg/Bool")
    assert by_mcap == by_rosbags
    with open(next(bag.glob("*.mcap")), "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary.statistics.message_count == 180
    odom_channel = next(c for c in summary.channels.values() if c.topic == "/odom")
    assert odom_channel.metadata["topic_type_hash"] == msgs.typestore().hash_rihs01(msgs.ODOMETRY)
    assert "reliability: reliable" in odom_channel.metadata["offered_qos_profiles"]


def test_dds_loopback_topics_recorded_raw(tmp_path, dds_domain):
    from real.transport.dds import DdsTransport

    robot, mine = DdsTransport(dds_domain), DdsTransport(dds_domain)
    try:
        twist, flag = robot.publisher("/cmd_vel", msgs.TWIST), robot.publisher("/flag", msgs.BOOL, SENSOR_DATA)
        rec = Recorder(mine, tmp_path / "dds", [("/cmd_vel", msgs.TWIST, None), ("/flag", msgs.BOOL, SENSOR_DATA)])
        assert wait_until(lambda: twist.subscriber_count() and flag.subscriber_count())
        sent = [msgs.twist_from_array(np.arange(6.0) * k) for k in range(30)]
        for k, msg in enumerate(sent):
            twist.publish(msg)
            flag.publish(msgs.bool_msg(k % 2 == 1))
        assert wait_until(lambda: rec._queue.empty() and rec.message_count >= 30 and rec.bag.topics[-1].count >= 25)
        rec.close()
    finally:
        robot.close()
        mine.close()
    by_rosbags = rosbags_messages(tmp_path / "dds")
    assert [d for _, d in by_rosbags["/cmd_vel"]] == [msgs.serialize(m) for m in sent]  # reliable: all, unchanged
    flags = [msgs.deserialize(d, msgs.BOOL).data for _, d in by_rosbags["/flag"]]
    assert all(len(d) == 8 for _, d in by_rosbags["/flag"])  # 5 CDR bytes + DDS padding, stored as received
    assert flags == [k % 2 == 1 for k in range(30)][-len(flags):]
    channels, by_mcap = mcap_messages(tmp_path / "dds")
    assert channels["/cmd_vel"] == ("cdr", "ros2msg", msgs.TWIST) and by_mcap == by_rosbags
    times = [t for t, _ in by_rosbags["/cmd_vel"]]
    assert times == sorted(times) and abs(times[0] - time.time_ns()) < 60e9  # wall-clock stamps


def test_split_files_and_never_blocking(tmp_path):
    clock = FakeClock(1_000_000_000)
    transport = MemoryTransport(clock=clock)
    with Recorder(transport, tmp_path / "split", max_duration=1.0, clock_offset_ns=0) as rec:
        for k in range(50):
            rec.record_tick(clock(), [k], [k], False, 0, observation=[k])
            clock.advance(0.1)
    files = sorted(p.name for p in (tmp_path / "split").glob("*.mcap"))
    assert files == [f"split_{i}.mcap" for i in range(5)]
    with Reader(tmp_path / "split") as reader:
        assert reader.message_count == 50 * 6
    meta = yaml.safe_load((tmp_path / "split" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["relative_file_paths"] == files and [f["message_count"] for f in meta["files"]] == [60] * 5
    assert [len(e) for e in bag_to_episodes(tmp_path / "split")] == [49]


def stalled(rec: Recorder) -> threading.Event:
    """Make ``rec``'s writer thread hang in its next write until the returned event is set (a stalled disk)."""
    gate, write = threading.Event(), rec._write
    rec._write = lambda *item: (gate.wait(20), write(*item))
    return gate


def test_a_stalled_disk_never_blocks_the_caller(tmp_path):
    clock = FakeClock(1_000_000_000)
    transport = MemoryTransport(clock=clock)
    # by message count: the queue fills, ticks are dropped and counted, record_tick still returns at once
    rec = Recorder(transport, tmp_path / "tiny", queue_size=2)
    gate = stalled(rec)
    start = time.perf_counter()
    for k in range(1000):
        rec.record_tick(clock(), [k], [k], False, 0)
    per_call = (time.perf_counter() - start) / 1000
    assert rec.dropped >= 997 and per_call < 1e-3  # at most one in the hung write and two queued
    gate.set()
    rec.close()
    assert rec.message_count == 5 * (1000 - rec.dropped)  # 5 /rl/* messages per tick

    # by bytes: 400 kB observations (an image would be more) against a 1 MiB bound
    rec = Recorder(transport, tmp_path / "bytes", max_queue_bytes=1 << 20)
    gate = stalled(rec)
    for k in range(20):
        rec.record_tick(clock(), [k], [k], False, 0, observation=np.zeros(100_000))
        assert rec.queued_bytes <= 1 << 20
    assert rec.dropped >= 17  # at most one in the hung write and two queued
    gate.set()
    rec.close()
    assert rec.queued_bytes == 0 and rec.error is None


def test_close_never_races_a_hung_writer(tmp_path):
    rec = Recorder(MemoryTransport(), tmp_path / "hung")
    gate = stalled(rec)
    rec.record_tick(1, [0.5], [0.5], False, 0)
    assert wait_until(lambda: rec._queue.empty())  # the writer thread took the tick and hangs in write
    rec.close(timeout=0.1)  # gives up waiting and leaves the bag to the writer thread
    assert rec.closed and rec._thread.is_alive() and not rec.bag.closed
    assert recording_pid(tmp_path / "hung") is not None
    gate.set()
    rec._thread.join(10)
    assert rec.bag.closed and rec.error is None and not (tmp_path / "hung" / LOCK_FILE).exists()
    assert len(rosbags_messages(tmp_path / "hung")["/rl/command"]) == 1


def test_writer_errors(tmp_path):
    BagWriter(tmp_path / "a").close()
    with pytest.raises(BagError, match="exists already"):
        BagWriter(tmp_path / "a")
    with pytest.raises(BagError, match="compression"):
        BagWriter(tmp_path / "b", compression="gzip")
    with BagWriter(tmp_path / "c", compression="lz4") as writer:
        i = writer.add_topic("/x", msgs.BOOL)
        assert writer.add_topic("/x", msgs.BOOL) == i
        with pytest.raises(BagError, match="recorded as std_msgs/msg/Bool"):
            writer.add_topic("/x", msgs.TWIST)
        writer.write(i, 10, msgs.serialize(msgs.bool_msg(True)))
    assert rosbags_messages(tmp_path / "c")["/x"] == [(10, msgs.serialize(msgs.bool_msg(True)))]
    for name in ("/rl/command", "rl/mode"):  # "rl/mode" is /rl/mode too
        with pytest.raises(ValueError, match="written by record_tick"):
            with Recorder(MemoryTransport(), tmp_path / name.replace("/", "_")) as rec:
                rec.add_topic(name, msgs.BOOL)
    assert safety_flags(SafetyInfo(estop=True, stale=("odom",))) == 3 and safety_flags(None) == 0


CHILD = textwrap.dedent("""
    import sys, time
    from real.transport.memory import MemoryTransport
    from real.recorder import Recorder
    transport = MemoryTransport()
    rec = Recorder(transport, sys.argv[1], flush_interval=0.05, max_duration=1.0)
    k = 0
    while True:
        rec.record_tick(transport.now(), [k], [k], False, 0, reward=1.0, observation=[k])
        k += 1
        if k == 50:
            print("ready", flush=True)
        time.sleep(0.004)
""")


def test_kill_9_loses_at_most_the_last_flush(tmp_path):
    bag = tmp_path / "killed"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(bag)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "ready"
        # one split happened; the kill below lands while the second file is written (splits are 1 s apart, so a
        # loaded machine's slow checks do not reach the next split, where the last file would be complete)
        assert wait_until(lambda: (bag / "killed_1.mcap").exists(), timeout=20)
        time.sleep(0.2)
        # the recorder is alive: repairing would replace the file it writes to
        assert recording_pid(bag) == str(child.pid)
        with pytest.raises(BagError, match=f"still being recorded \\(process {child.pid}\\)"):
            repair_bag(bag)
        with pytest.raises(BagError, match="still being recorded"):
            cmd_bag2dataset({"bag": str(bag), "out": str(tmp_path / "early")})
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    files = sorted(bag.glob("*.mcap"), key=lambda p: (len(p.name), p.name))
    assert len(files) >= 2 and all(mcap_complete(f) for f in files[:-1]) and not mcap_complete(files[-1])
    with pytest.raises(DatasetError, match="repair"):
        bag_to_episodes(bag)
    out = tmp_path / "episodes"
    assert cmd_bag2dataset({"bag": str(bag), "out": str(out)}) == 0  # repairs, then converts
    episodes, index = load_episodes(out)
    (episode,) = episodes
    steps = episode.observations[:, 0]
    assert np.array_equal(steps, np.arange(len(steps))) and len(steps) >= 50  # every tick up to the last flush
    assert index["steps"] == len(episode) and episode.truncations[-1]
    assert recording_pid(bag) is None and not (bag / LOCK_FILE).exists()  # the dead recorder's lock file is gone
    assert repair_bag(bag) == {}  # now complete
    _, by_mcap = mcap_messages(bag)
    assert len(by_mcap["/rl/command"]) == len(steps) or len(by_mcap["/rl/command"]) == len(steps) + 1


# --- bags -> episodes -----------------------------------------------------------------------------------


def synthetic_bag(path: Path) -> None:
    """Odometry at 50 Hz (x = receive step), ticks at 10 Hz in 3 episodes: terminated, truncated, cut by a gap."""
    clock = FakeClock(1_000_000_000)
    bus = MemoryBus()
    robot, mine = MemoryTransport(bus, clock), MemoryTransport(bus, clock)
    odom = robot.publisher("/odom", msgs.ODOMETRY)
    with Recorder(mine, path, [("/odom", msgs.ODOMETRY, None)], clock_offset_ns=0) as rec:
        for step in range(200):
            if not 150 <= step < 165:  # the odometry drops out for 0.3 s
                odom.publish(msgs.odometry_from_array(np.r_[step, np.zeros(12)]))
            if step % 5 == 4:
                k = step // 5  # tick index 0..39
                episode = 0 if k < 10 else 1 if k < 20 else 2
                done = "terminated" if k == 9 else "truncated" if k == 19 else None
                rec.record_tick(clock(), [k, 0.5], [k / 10, 0.4], intervention=k % 4 == 0, policy_version=k // 7,
                                reward=float(k), episode=episode, done=done)  # fmt: skip
            clock.advance(0.02)


def test_bag_to_episodes_at_the_control_ticks(tmp_path):
    synthetic_bag(tmp_path / "bag")
    episodes = bag_to_episodes(tmp_path / "bag", obs=["/odom:pose.pose.position.x"], max_age=0.09)
    assert [len(e) for e in episodes] == [9, 9, 9, 6]  # ticks 0..9, 10..19, then 20..29 | stale 30..32 | 33..39
    first, second, third, fourth = episodes
    # the observation at tick k is the odometry of step 5k+4 (published at the same instant, before the tick)
    assert np.array_equal(first.observations[:, 0], [5 * k + 4 for k in range(10)])
    assert np.allclose(first.actions[:, 0], np.arange(9) / 10) and np.allclose(first.extras["raw_actions"][:, 1], 0.5)
    assert np.array_equal(first.rewards, np.arange(1, 10))  # reward recorded at the tick the step ended
    assert first.terminations[-1] and not first.truncations.any()
    assert second.truncations[-1] and not second.terminations.any()
    assert np.array_equal(first.interventions, [k % 4 == 0 for k in range(9)])
    assert np.array_equal(first.extras["policy_versions"], [k // 7 for k in range(9)])
    assert np.array_equal(np.diff(first.extras["tick_times_ns"]), [100_000_000] * 9)
    # the gap: ticks 30, 31, 32 see odometry older than 0.09 s (steps 150..164 missing) and cut episode 2
    assert third.observations[-1, 0] == 5 * 29 + 4 and third.truncations[-1]
    assert fourth.observations[0, 0] == 5 * 33 + 4 and fourth.metadata["episode_id"] == 2
    # without max_age the stale value is used and episode 2 stays whole
    assert [len(e) for e in bag_to_episodes(tmp_path / "bag", obs=["/odom:pose.pose.position.x"])] == [9, 9, 19]
    whole = bag_to_episodes(tmp_path / "bag", obs=[ObsSpec("/odom")])[0]
    assert whole.observations.shape == (10, 13) and whole.metadata["observation_inputs"] == ["/odom[13]"]
    with pytest.raises(DatasetError, match="no /rl/observation"):
        bag_to_episodes(tmp_path / "bag")
    with pytest.raises(DatasetError, match="not in the bag"):
        bag_to_episodes(tmp_path / "bag", obs=["/imu"])
    with pytest.raises(DatasetError, match="no field"):
        bag_to_episodes(tmp_path / "bag", obs=["/odom:pose.nope"])
    with pytest.raises(ConfigError, match="field path"):
        ObsSpec.parse("/odom:pose..x")

    # on disk and into a replay buffer
    out = tmp_path / "episodes"
    assert cmd_bag2dataset({"bag": str(tmp_path / "bag"), "out": str(out), "obs": "/odom:pose.pose.position.x",
                            "max_age": "0.09"}) == 0  # fmt: skip
    loaded, index = load_episodes(out)
    assert index["lengths"] == [9, 9, 9, 6] and index["observation_inputs"] == ["/odom:pose.pose.position.x[1]"]
    for a, b in zip(loaded, episodes, strict=True):
        assert np.array_equal(a.observations, b.observations) and np.array_equal(a.actions, b.actions)
        assert np.array_equal(a.extras["tick_times_ns"], b.extras["tick_times_ns"]) and a.metadata == b.metadata
    flat = to_transitions(loaded)
    assert flat["obs"].shape == (33, 1) and np.array_equal(flat["next_obs"][:9, 0], first.observations[1:, 0])
    assert flat["terminated"].sum() == 1 and flat["truncated"].sum() == 3
    import torch

    from robolearn.core.buffers import ReplayBuffer

    raw = {k: torch.from_numpy(v) for k, v in to_transitions(loaded, action_key="raw_actions").items()}
    buffer = ReplayBuffer.from_transitions({"policy": raw["obs"]}, raw["actions"], raw["rewards"],
                                           {"policy": raw["next_obs"]}, raw["terminated"], raw["truncated"])
    assert len(buffer) == 33 and buffer.num_actions == 2
    batch = buffer.sample(64)
    assert set(batch) == {"obs", "actions", "rewards", "next_obs", "discount", "steps"}
    assert np.allclose(batch["actions"][:, 1].numpy(), 0.5)


def test_stops_and_manoeuvres_are_never_training_steps(tmp_path):
    """E-stopped, stale, non-finite and recovery ticks end the episode in progress (as its last observation)."""
    estop, stale = SafetyInfo(estop=True), SafetyInfo(stale=("odom",))
    ticks = ([("policy", None)] * 4 + [("estop", estop)] * 2 + [("policy", None)] * 3 + [("recovery", None)]
             + [(None, None)] * 3 + [(None, stale)]  # an older bag: no mode, only the safety bits
             + [("teleop", "nan")] + [("policy", None)] * 3)  # fmt: skip
    with Recorder(MemoryTransport(), tmp_path / "bag", clock_offset_ns=0) as rec:
        for k, (mode, info) in enumerate(ticks):
            obs = [np.nan if info == "nan" else k]
            rec.record_tick(k * 10**8, [k], [k / 100], False, 0, safety=None if info == "nan" else info,
                            observation=obs, mode=mode)  # fmt: skip
    modes = [msgs.deserialize(d, "std_msgs/msg/String").data for _, d in rosbags_messages(tmp_path / "bag")["/rl/mode"]]
    assert modes == [m for m, _ in ticks if m is not None]
    episodes = bag_to_episodes(tmp_path / "bag")
    assert [e.observations[:, 0].tolist() for e in episodes] == [[0, 1, 2, 3, 4], [6, 7, 8, 9], [10, 11, 12, 13],
                                                                 [15, 16, 17]]  # fmt: skip
    assert all(e.truncations[-1] and not e.terminations.any() for e in episodes)
    assert not any(set(e.extras["safety"]) - {0} for e in episodes)  # no stopped tick's action is a step
    # a recorded mode outside the learning modes: recovery counts when asked to
    assert len(bag_to_episodes(tmp_path / "bag", learn_modes=("policy", "recovery"))[1]) == 7  # ticks 6..13


def test_episode_format_checks(tmp_path):
    ok = dict(observations=np.zeros((3, 2)), actions=np.zeros((2, 1)), rewards=np.zeros(2),
              terminations=[False, True], truncations=[False, False])  # fmt: skip
    Episode(**ok)
    for change, match in (({"observations": np.zeros((2, 2))}, "observations must be"),
                          ({"terminations": [True, False]}, "ends before its last step"),
                          ({"truncations": [False, True]}, "both terminated and truncated"),
                          ({"rewards": np.zeros(3)}, "rewards must be")):  # fmt: skip
        with pytest.raises(DatasetError, match=match):
            Episode(**{**ok, **change})
    with pytest.raises(DatasetError, match="not a robolearn episode"):
        Episode.from_bytes(b"garbage!" * 4)
    with pytest.raises(DatasetError, match="no dataset.json"):
        load_episodes(tmp_path)
    save_episodes(tmp_path / "d", [Episode(**{**ok, "rewards": [np.nan, 1]})])
    with pytest.raises(DatasetError, match="without a recorded reward"):
        to_transitions(load_episodes(tmp_path / "d")[0])


@contextlib.contextmanager
def no_signal_handlers():
    """Stands in for `real.recorder._stop_on_signals` in tests: leaves the worker's handlers alone."""
    yield threading.Event()


def test_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(real.recorder, "_stop_on_signals", no_signal_handlers)
    assert parse_topics("/odom, /imu:sensor_msgs/msg/Imu@sensor_data") == [
        ("/odom", None, None), ("/imu", "sensor_msgs/msg/Imu", "sensor_data")]  # fmt: skip
    with pytest.raises(ConfigError, match="QoS profile 'fast' for /a; use one of default, sensor_data"):
        parse_topics("/a@fast")
    assert parse_topics("/a@Latched") == [("/a", None, "Latched")]
    with pytest.raises(ConfigError, match="needs out"):
        cmd_record({"topics": "/a:std_msgs/msg/Bool"})
    with pytest.raises(ConfigError, match="over transport=dds"):
        cmd_record({"out": str(tmp_path / "x"), "topics": "/a", "transport": "memory"})
    assert cmd_record({"out": str(tmp_path / "r"), "topics": "/a:std_msgs/msg/Bool@sensor_data",
                       "transport": "memory", "duration": "0.2"}) == 0  # fmt: skip
    assert "wrote 0 messages" in capsys.readouterr().out
    with Reader(tmp_path / "r") as reader:
        assert [c.topic for c in reader.connections] == []  # nothing was published
    with pytest.raises(ConfigError, match="exists already"):
        cmd_record({"out": str(tmp_path / "r"), "topics": "/a:std_msgs/msg/Bool", "transport": "memory"})
    with pytest.raises(ConfigError, match="fps"):
        cmd_bag2dataset({"bag": str(tmp_path / "r"), "out": str(tmp_path / "o"), "fps": "10"})


def test_record_restores_the_signal_handlers():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = [signal.getsignal(s) for s in signals]
    with real.recorder._stop_on_signals() as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.is_set()
    assert [signal.getsignal(s) for s in signals] == before  # Ctrl-C interrupts the test run again


def test_cli_discovers_dds_types(tmp_path, dds_domain):
    from real.recorder import discover_topics
    from real.transport.dds import DdsTransport

    robot, mine = DdsTransport(dds_domain), DdsTransport(dds_domain)
    try:
        robot.publisher("/scan_like", msgs.IMU, SENSOR_DATA)
        robot.publisher("/cmd", msgs.TWIST)
        found = discover_topics(mine, ["/scan_like", "/cmd"], timeout=5.0)
        assert found["/scan_like"][0] == msgs.IMU and found["/scan_like"][1].reliability.name == "BEST_EFFORT"
        assert found["/cmd"][0] == msgs.TWIST and found["/cmd"][1].reliability.name == "RELIABLE"
        with pytest.raises(ConfigError, match="no publisher"):
            discover_topics(mine, ["/nobody"], timeout=0.3)
    finally:
        robot.close()
        mine.close()
