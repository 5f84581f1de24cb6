"""The deploy loop's timing on loopback: runner at 100 Hz against the fake RC car, two processes, per transport.

The fake car (`robolearn fake-robot`, its own process) steps the ``rc-car-track`` simulation at 100 Hz and
publishes /odom and /imu; this process runs `PolicyRunner` at 100 Hz with a robolearn checkpoint (an untrained
PPO ActorCritic of the default size, 3 x 256) and publishes the commands. Commands carry the header stamp of the
odometry they answer (``command.stamp=odom``), so the fake car times each command from that odometry's publish
to its own receipt: the end-to-end latency. One CLOCK_MONOTONIC serves both processes, so this process splits
it: wait (odometry received -> next tick starts; a fixed-rate loop waits up to one period), compute (tick start
-> command published: inputs, policy, safety filter, serialization) and transport (both legs, odometry out and
command back: the rest). Both loops run on absolute deadlines at the same rate, so the wait is nearly constant
within a row (the phase between them). The runner's first tick is placed ``phase`` (default 0.5) of a period
after the odometry's typical receipt, so the wait is about half a period in every row and the end-to-end
latencies compare across rows (``phase=null``: wherever the runner happens to start, a different wait per
row). ``end_to_end_minus_wait`` is the part the code controls, ``transport_both_legs`` the middleware's.

One run measures several rows, one after the other, with the same rate, duration and checkpoint, each on its own
DDS domain (``domain`` + the row's index) with a fresh fake car:

- ``dds``: runner on robolearn's Cyclone DDS transport <-> fake car on it too; AckermannDriveStamped commands on
  /ackermann_cmd (the rc_car default).
- ``dds_to_rclpy_peer``: runner on Cyclone DDS <-> fake car as a real ROS 2 node (``transport=rclpy``: rclpy on
  rmw_fastrtps_cpp, Fast DDS), so every message crosses Cyclone <-> Fast DDS. TwistStamped commands on /cmd
  (``adapter.output=twist_stamped``): ackermann_msgs has no Python package for rclpy.
- ``rclpy``: runner and fake car both rclpy nodes on Fast DDS; TwistStamped commands on /cmd.
- ``dds_to_cyclone_app``: runner on Cyclone DDS <-> a car on a plain Cyclone DDS application with its own types and
  default settings (`benchmarks/peers/cyclone_car.py`: constant odometry at the same rate, commands timed the same
  way); TwistStamped commands on /cmd.
- ``dds_twist_stamped`` (not run by default): the ``dds`` row with TwistStamped commands on /cmd, to separate the
  command type's share from the middleware's in the rows above.

The command type differs between rows (each row's ``setup.command`` says which); both are stamped messages of
similar size (AckermannDriveStamped 5 floats, TwistStamped 6 doubles). Cyclone DDS runs with `LOOPBACK_CONFIG`
and Fast DDS with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, set for every process here. The JSON has each
row in full (loop period/jitter/compute, latency breakdown, fake car counters) under ``rows`` and a compact
``summary`` table (also printed): period jitter p99, end-to-end latency (also minus the wait) and transport
p50/p99, missed ticks, latency samples.

    python benchmarks/speed/real_loop_latency.py     # 100 Hz, 20 s per row, writes results/real_loop_latency_cpu.json
    python benchmarks/speed/real_loop_latency.py rows=[dds,rclpy] duration=4 out=/tmp/x.json

Reference (docs/references real-ros2.md, plain Cyclone DDS Python on 2 cores): Twist round trip p50 about
0.3 ms, p99 about 0.7 ms.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.metadata
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, settings, write_result  # noqa: E402

WARMUP_S = 2.0
LINK_TIMEOUT_S = 60.0  # discovery: both ends matched before the warm-up starts


@dataclasses.dataclass(frozen=True)
class Row:
    deploy: str  # the runner's transport (this process)
    robot: str  # the fake car's transport (its own process)
    command: str  # ackermann | twist_stamped
    about: str


ROWS = {
    "dds": Row("dds", "dds", "ackermann", "Cyclone DDS <-> Cyclone DDS"),
    "dds_to_rclpy_peer": Row("dds", "rclpy", "twist_stamped", "Cyclone DDS <-> rclpy node (Fast DDS)"),
    "rclpy": Row("rclpy", "rclpy", "twist_stamped", "rclpy node (Fast DDS) <-> rclpy node (Fast DDS)"),
    "dds_to_cyclone_app": Row("dds", "cyclone", "twist_stamped",
                              "Cyclone DDS <-> plain Cyclone DDS application (own types, default settings)"),
    "dds_twist_stamped": Row("dds", "dds", "twist_stamped", "Cyclone DDS <-> Cyclone DDS, TwistStamped commands"),
}
DEFAULT_ROWS = ("dds", "dds_to_rclpy_peer", "rclpy", "dds_to_cyclone_app")
CYCLONE_CAR = Path(__file__).resolve().parents[1] / "peers" / "cyclone_car.py"
# command type -> (runner overrides, fake robot arguments)
COMMANDS = {
    "ackermann": ([], []),
    "twist_stamped": (["adapter.output=twist_stamped", "command.topic=/cmd"],
                      ["cmd_type=twist_stamped", "cmd_topic=/cmd"]),
}


class Record(NamedTuple):
    """What this process keeps of one tick (times in ns on CLOCK_MONOTONIC)."""

    start: int
    period: int
    lateness: int
    compute: int
    stamp: int  # the command's header stamp: the odometry's it answers (0: none sent)
    odom_received: int
    mode: str
    missed: int


def percentiles(values: list[float] | np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "mean": float("nan"), "n": 0}
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "max": float(v.max()),
            "mean": float(v.mean()), "n": int(v.size)}


def middleware(kind: str) -> str:
    if kind == "cyclone":
        return (f"plain cyclonedds {importlib.metadata.version('cyclonedds')} application, its own types, default "
                "settings, LOOPBACK_CONFIG")
    if kind == "dds":
        return f"robolearn DDS transport: Cyclone DDS {importlib.metadata.version('cyclonedds')}, LOOPBACK_CONFIG"
    from rclpy.utilities import get_rmw_implementation_identifier

    rmw = get_rmw_implementation_identifier()
    if rmw.startswith("rmw_fastrtps"):
        rmw += f" (Fast DDS {importlib.metadata.version('ros-fastdds')})"
    return f"rclpy {importlib.metadata.version('rclpy')} node on {rmw}, ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST"


def start_fake_car(row: Row, domain: int, rate: float, stats_out: Path, env: dict) -> subprocess.Popen:
    if row.robot == "cyclone":
        cmd = [sys.executable, str(CYCLONE_CAR), f"domain_id={domain}", f"rate_hz={rate:g}", f"stats_out={stats_out}"]
    else:
        cmd = [sys.executable, "-m", "robolearn", "fake-robot", f"transport={row.robot}", f"domain_id={domain}",
               f"rate_hz={rate:g}", "seed=0", f"stats_out={stats_out}", *COMMANDS[row.command][1]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    output: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if proc.poll() is not None:
                raise RuntimeError("the fake robot exited before it was ready:\n" + "".join(output)) from None
            continue
        output.append(line)
        if line.startswith("fake rc car ready"):
            return proc
    proc.kill()
    raise RuntimeError("the fake robot did not start within 120 s")


def save_checkpoint(folder: Path) -> Path:
    from policies.actor_critic import ActorCritic
    from robolearn.checkpoints import checkpoint

    torch.manual_seed(0)
    model = ActorCritic(10, 2)  # rc-car-track's observation and actions, default hidden sizes
    run = {"env": {"name": "rc-car-track", "num_envs": 1, "backend": "mujoco", "overrides": {}}}
    return checkpoint.save(folder / "ckpt", {"policy": model.config, "run": run}, model.state_dict())


def wait_for_links(runner: Any, timeout: float) -> float:
    """Wait until the fake car reads the commands and publishes every input; returns the seconds it took."""
    inputs = runner.subscriptions[:len(runner.config.inputs)]  # the runner subscribes its inputs first
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if runner.publisher.subscriber_count() > 0 and all(sub.publisher_count() > 0 for sub in inputs):
            return time.monotonic() - start
        time.sleep(0.05)
    raise RuntimeError(f"the runner and the fake car did not discover each other within {timeout:g} s")


def phase_aligned_start(transport: Any, spec: Any, period_ns: int, phase: float,
                        settle_s: float = 0.5, samples: int = 100) -> tuple[int, float]:
    """A time ``phase`` periods after the fake car's odometry typically arrives (the median receipt phase over
    ``samples`` messages after ``settle_s``), at least 0.2 s ahead; and the receipt phases' spread (IQR, ms).

    Both loops keep their phase (absolute deadlines at one rate, overruns skip whole periods), so starting the
    runner there fixes the wait between an odometry's receipt and the tick that answers it for the whole row.
    """
    receipts: list[int] = []
    time.sleep(settle_s)
    sub = transport.subscribe(spec.topic, spec.msg_type, lambda msg, t: receipts.append(t), spec.qos)
    try:
        end = time.monotonic() + 10
        while len(receipts) < samples and time.monotonic() < end:
            time.sleep(0.02)
    finally:
        sub.close()
    if len(receipts) < samples:
        raise RuntimeError(f"only {len(receipts)} odometry messages in 10 s")
    times = np.asarray(receipts, dtype=np.int64)
    reference = int(times[0])
    for _ in range(2):  # offsets wrapped into [-period/2, period/2) around the reference, then around their median
        offsets = (times - reference + period_ns // 2) % period_ns - period_ns // 2
        reference += int(np.median(offsets))
    offsets = (times - reference + period_ns // 2) % period_ns - period_ns // 2
    spread_ms = float(np.subtract(*np.percentile(offsets, [75, 25]))) / 1e6
    earliest = time.monotonic_ns() + 200_000_000
    return reference + -(-(earliest - reference) // period_ns) * period_ns + round(phase * period_ns), spread_ms


def split_latencies(ticks: list[Record], fake: dict[str, Any], cutoff: int) -> tuple[np.ndarray, ...]:
    """The fake car's end-to-end latencies of commands sent after ``cutoff`` (stale ticks left out), each
    paired with the tick that sent it, and their wait, compute and transport parts (ms)."""
    by_stamp: dict[int, collections.deque[Record]] = collections.defaultdict(collections.deque)
    for t in ticks:  # a late odometry answered by two ticks: both commands carry its stamp, in tick order
        if t.stamp:
            by_stamp[t.stamp].append(t)
    e2e, wait, compute = [], [], []
    for stamp, latency in zip(fake["latency_stamps"], fake["latency_ms"], strict=True):
        if not by_stamp[stamp]:
            continue
        tick = by_stamp[stamp].popleft()
        if tick.start < cutoff or tick.mode == "stale":
            continue
        e2e.append(latency)
        wait.append((tick.start - tick.odom_received) / 1e6)
        compute.append(tick.compute / 1e6)
    e2e_ms, wait_ms, compute_ms = (np.asarray(v, dtype=np.float64) for v in (e2e, wait, compute))
    return e2e_ms, wait_ms, compute_ms, e2e_ms - wait_ms - compute_ms


def measure(name: str, row: Row, domain: int, args: Settings, checkpoint: Path, tmp: Path,
            env: dict) -> dict[str, Any]:
    """Run one row: a fresh fake car and runner on ``domain``; returns the row's JSON fields."""
    from real import msgs
    from real.deploy import build_runner, compose_deploy
    from real.timing import sleep_until
    from real.transport import make_transport

    load_before = os.getloadavg()
    stats_out = tmp / f"fake_car_{name}.json"
    proc = start_fake_car(row, domain, args.rate, stats_out, env)
    try:
        transport = make_transport(row.deploy, domain)
        try:
            overrides = [f"rate_hz={args.rate:g}", "command.stamp=odom", *COMMANDS[row.command][0]]
            cfg = compose_deploy("rc_car", overrides)
            cfg["checkpoint"] = str(checkpoint)
            cfg["force_rate"] = True  # timing at `rate`, whatever the checkpoint's control rate
            runner = build_runner(cfg, transport)
            ticks: list[Record] = []

            def record(tick) -> None:  # the command's stamp is the odometry's it answers
                stamp = msgs.stamp_ns(tick.msg.header.stamp) if tick.msg is not None else 0
                ticks.append(Record(tick.time_ns, tick.period_ns or 0, tick.lateness_ns, tick.compute_ns, stamp,
                                    tick.obs_times["odom"] or 0, tick.mode, tick.missed))

            runner.add_hook(record)
            try:
                link_wait_s = wait_for_links(runner, LINK_TIMEOUT_S)
                phase_spread_ms = None
                if args.phase is not None:
                    odom = runner.config.inputs["odom"]
                    start_at, phase_spread_ms = phase_aligned_start(transport, odom, runner.period_ns, args.phase)
                    sleep_until(start_at)
                started = time.monotonic_ns()
                runner.run(duration=WARMUP_S + args.duration)
            finally:
                runner.close()
        finally:
            transport.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    fake = json.loads(stats_out.read_text())

    cutoff = started + int(WARMUP_S * 1e9)
    window = [t for t in ticks if t.start >= cutoff]
    period = [t.period / 1e6 for t in window if t.period]
    nominal = 1e3 / args.rate
    e2e, wait, compute, transport_ms = split_latencies(ticks, fake, cutoff)
    command_type = msgs.type_name(runner.adapter.command_type)
    return {
        "setup": {"about": row.about, "deploy_transport": middleware(row.deploy),
                  "robot_transport": middleware(row.robot),
                  "command": f"{command_type} on {runner.publisher.topic}",
                  "command_differs_from_dds_row": row.command != ROWS["dds"].command,
                  "domain_id": domain, "link_wait_s": round(link_wait_s, 3),
                  "odom_receipt_phase_iqr_ms": phase_spread_ms,
                  "load_average_1_5_15_before_after": [list(load_before), list(os.getloadavg())]},
        "loop": {
            "ticks": len(window),
            "missed_ticks": sum(t.missed for t in window),
            "missed_ticks_incl_warmup": int(runner.stats.totals["missed_ticks"]),
            "period_ms": percentiles(period),
            "period_jitter_ms": percentiles(np.abs(np.asarray(period) - nominal)),
            "wakeup_lateness_ms": percentiles([t.lateness / 1e6 for t in window]),
            "compute_ms": percentiles([t.compute / 1e6 for t in window]),
            "modes": {m: sum(t.mode == m for t in window) for m in sorted({t.mode for t in window})},
        },
        "latency": {
            "end_to_end_ms": percentiles(e2e),
            "end_to_end_minus_wait_ms": percentiles(e2e - wait),
            "wait_for_tick_ms": percentiles(wait),
            "compute_ms": percentiles(compute),
            "transport_both_legs_ms": percentiles(transport_ms),
        },
        "fake_robot": {k: fake[k] for k in ("steps", "commands", "resets", "missed")},
    }


def summary_row(fields: dict[str, Any]) -> dict[str, Any]:
    loop, lat = fields["loop"], fields["latency"]
    e2e, code, transport = lat["end_to_end_ms"], lat["end_to_end_minus_wait_ms"], lat["transport_both_legs_ms"]
    return {"command": fields["setup"]["command"].split(" on ")[0].split("/")[-1],
            "jitter_p99_ms": round(loop["period_jitter_ms"]["p99"], 3),
            "end_to_end_p50_ms": round(e2e["p50"], 3), "end_to_end_p99_ms": round(e2e["p99"], 3),
            "end_to_end_minus_wait_p50_ms": round(code["p50"], 3),
            "end_to_end_minus_wait_p99_ms": round(code["p99"], 3),
            "transport_both_legs_p50_ms": round(transport["p50"], 3),
            "transport_both_legs_p99_ms": round(transport["p99"], 3),
            "missed_ticks": loop["missed_ticks"], "latency_samples": e2e["n"]}


COLUMNS = (  # summary key, printed header, width
    ("command", "command", 21), ("jitter_p99_ms", "jitter p99", 10), ("end_to_end_p50_ms", "e2e p50", 7),
    ("end_to_end_p99_ms", "e2e p99", 7), ("end_to_end_minus_wait_p50_ms", "-wait p50", 9),
    ("end_to_end_minus_wait_p99_ms", "-wait p99", 9), ("transport_both_legs_p50_ms", "trans p50", 9),
    ("transport_both_legs_p99_ms", "trans p99", 9), ("missed_ticks", "missed", 6), ("latency_samples", "n", 5),
)


def print_summary(summary: dict[str, dict[str, Any]]) -> None:
    def cell(value: Any, width: int) -> str:
        if isinstance(value, str):
            return f"{value:<{width}}"
        return f"{value:>{width}.3f}" if isinstance(value, float) else f"{value:>{width}}"

    header = f"{'row':<17} {'command':<21}" + "".join(f" {title:>{w}}" for _, title, w in COLUMNS[1:])
    print(header + "\n" + "-" * len(header))
    for name, row in summary.items():
        print(f"{name:<17}" + "".join(f" {cell(row[key], w)}" for key, _, w in COLUMNS))
    print("ms. jitter = |period - nominal|; e2e = odometry published -> command received; -wait = e2e minus the "
          "odometry's wait for the next tick; trans = both transport legs; missed = ticks skipped (measured window)")


@dataclasses.dataclass
class Settings:
    """The rows and the loop (`key=value` on the command line)."""

    rate: float = 100.0             # Hz of both loops
    duration: float = 20.0          # measured seconds per row (after a WARMUP_S warm-up)
    rows: list[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_ROWS))  # of ROWS, run in this order
    phase: float | None = 0.5       # start ticks this fraction of a period after the odometry typically arrives
    #                                 (the same wait in every row); null: wherever the runner happens to start
    domain: int = dataclasses.field(default_factory=lambda: 150 + os.getpid() % 50)  # DDS domain of the first
    #                                 row; row i uses domain + i
    out: str = str(RESULTS / "real_loop_latency_cpu.json")


def main() -> None:
    args = settings(Settings, __doc__)
    names = list(args.rows)
    unknown = [n for n in names if n not in ROWS]
    if unknown or not names or len(set(names)) != len(names):
        sys.exit(f"rows= takes distinct names of {', '.join(ROWS)}; got {names}")
    if args.phase is not None and not 0 <= args.phase < 1:
        sys.exit("phase= is a fraction of a period in [0, 1), or null")

    from real.transport.dds import LOOPBACK_CONFIG

    torch.set_num_threads(1)
    os.environ["CYCLONEDDS_URI"] = LOOPBACK_CONFIG
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = save_checkpoint(Path(tmp))
        for i, name in enumerate(names):
            print(f"row {name}: {ROWS[name].about}, {args.duration:g} s ...", flush=True)
            rows[name] = measure(name, ROWS[name], args.domain + i, args, checkpoint, Path(tmp), env)
    summary = {name: summary_row(fields) for name, fields in rows.items()}
    fields = {
        "setup": {"rate_hz": args.rate, "duration_s": args.duration, "warmup_s": WARMUP_S, "rows": names,
                  "tick_phase_after_odom": "free" if args.phase is None else args.phase,
                  "processes": "runner (this process) and robolearn fake-robot, one machine, loopback",
                  "policy": "untrained PPO ActorCritic 10 -> 3 x 256 -> 2 (robolearn checkpoint), torch 1 thread",
                  "robot": f"robolearn fake-robot rc_car (rc-car-track, C backend, {args.rate:g} Hz)",
                  "qos": "odom/imu sensor_data (best effort KL5), commands default (reliable KL10)",
                  "commands": "stamped with the odometry they answer (command.stamp=odom); the type per row in "
                              "rows.<row>.setup.command (ackermann_msgs has no rclpy package: TwistStamped there)"},
        "summary": summary,
        "rows": rows,
    }
    write_result(args.out, "real_loop_latency", fields)
    print_summary(summary)


if __name__ == "__main__":
    main()
