"""The deploy loop's timing on Cyclone DDS loopback: runner at 100 Hz against the fake RC car, two processes.

The fake car (`robolearn fake-robot`, its own process) steps the ``rc-car-track`` simulation at 100 Hz and
publishes /odom and /imu; this process runs `PolicyRunner` at 100 Hz with a robolearn checkpoint (an untrained
PPO ActorCritic of the default size, 3 x 256) and publishes /ackermann_cmd. Commands carry the header stamp of
the odometry they answer (``command.stamp=odom``), so the fake car times each command from that odometry's
publish to its own receipt: the end-to-end latency. One CLOCK_MONOTONIC serves both processes, so this process
splits it: wait (odometry received -> next tick starts; a fixed-rate loop waits up to one period),
compute (tick start -> command published: inputs, policy, safety filter, serialization) and transport (both DDS
legs: the rest). Both loops run on absolute deadlines at the same rate, so the wait is nearly constant within a
run (the phase between them) and differs between runs; ``end_to_end_minus_wait`` is the part the code controls.

    python benchmarks/real_loop_latency.py                 # 100 Hz, 20 s, writes results/real_loop_latency_cpu.json
    python benchmarks/real_loop_latency.py --rate 50 --duration 10 --out /tmp/x.json

Reference (docs/references real-ros2.md, plain Cyclone DDS Python on 2 cores): Twist round trip p50 about
0.3 ms, p99 about 0.7 ms.
"""

from __future__ import annotations

import argparse
import collections
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

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.sim_throughput import RESULTS, write_result  # noqa: E402


def percentiles(values: list[float] | np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "max": float(v.max()),
            "mean": float(v.mean()), "n": int(v.size)}


def start_fake_car(domain: int, rate: float, stats_out: Path, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "robolearn.cli", "fake-robot", "transport=dds",
           f"domain_id={domain}", f"rate_hz={rate:g}", "seed=0", f"stats_out={stats_out}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if proc.poll() is not None:
                raise RuntimeError("the fake robot exited before it was ready") from None
            continue
        if line.startswith("fake rc car ready"):
            return proc
    proc.kill()
    raise RuntimeError("the fake robot did not start within 120 s")


def save_checkpoint(folder: Path) -> Path:
    from policies.actor_critic import ActorCritic
    from robolearn import checkpoint

    torch.manual_seed(0)
    model = ActorCritic(10, 2)  # rc-car-track's observation and actions, default hidden sizes
    run = {"env": {"name": "rc-car-track", "num_envs": 1, "backend": "mujoco", "overrides": {}}}
    return checkpoint.save(folder / "ckpt", {"policy": model.config, "run": run}, model.state_dict())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds (after a 2 s warm-up)")
    parser.add_argument("--domain", type=int, default=200 + os.getpid() % 30)
    parser.add_argument("--out", type=Path, default=RESULTS / "real_loop_latency_cpu.json")
    args = parser.parse_args()



    from real import msgs
    from real.deploy import build_runner, compose_deploy
    from real.transport.dds import LOOPBACK_CONFIG, DdsTransport

    torch.set_num_threads(1)
    os.environ["CYCLONEDDS_URI"] = LOOPBACK_CONFIG
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}
    warmup = 2.0
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        stats_out = Path(tmp) / "fake_car.json"
        proc = start_fake_car(args.domain, args.rate, stats_out, env)
        transport = DdsTransport(args.domain)
        cfg = compose_deploy("rc_car", [f"rate_hz={args.rate:g}", "command.stamp=odom"])
        cfg["checkpoint"] = str(save_checkpoint(Path(tmp)))
        cfg["force_rate"] = True  # timing at --rate, whatever the checkpoint's control rate
        runner = build_runner(cfg, transport)
        ticks: list[tuple[int, int, int, int, int, int, str]] = []

        def record(tick) -> None:  # the command's stamp is the odometry's it answers
            stamp = msgs.stamp_ns(tick.msg.header.stamp) if tick.msg is not None else 0
            ticks.append((tick.time_ns, tick.period_ns or 0, tick.lateness_ns, tick.compute_ns, stamp,
                          tick.obs_times["odom"] or 0, tick.mode))

        runner.add_hook(record)
        started = time.monotonic_ns()
        try:
            runner.run(duration=warmup + args.duration)
        finally:
            runner.close()
            transport.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        fake = json.loads(stats_out.read_text())

    cutoff = started + int(warmup * 1e9)
    window = [t for t in ticks if t[0] >= cutoff]
    period = [t[1] / 1e6 for t in window if t[1]]
    nominal = 1e3 / args.rate
    by_stamp: dict[int, collections.deque] = collections.defaultdict(collections.deque)
    for t in ticks:  # a late odometry answered by two ticks: both commands carry its stamp, in tick order
        if t[4]:
            by_stamp[t[4]].append(t)
    e2e, wait, compute, transport_ms = [], [], [], []
    for stamp, latency in zip(fake["latency_stamps"], fake["latency_ms"], strict=True):
        if not by_stamp[stamp]:
            continue
        tick = by_stamp[stamp].popleft()
        if tick[0] < cutoff or tick[6] == "stale":
            continue
        e2e.append(latency)
        wait.append((tick[0] - tick[5]) / 1e6)
        compute.append(tick[3] / 1e6)
        transport_ms.append(latency - wait[-1] - compute[-1])
    fields = {
        "setup": {"rate_hz": args.rate, "duration_s": args.duration, "warmup_s": warmup,
                  "transport": "Cyclone DDS loopback (LOOPBACK_CONFIG), two processes",
                  "policy": "untrained PPO ActorCritic 10 -> 3 x 256 -> 2 (robolearn checkpoint), torch 1 thread",
                  "robot": f"robolearn fake-robot rc_car (rc-car-track, C backend, {args.rate:g} Hz)",
                  "qos": "odom/imu sensor_data (best effort KL5), commands default (reliable KL10)",
                  "cyclonedds": importlib.metadata.version("cyclonedds"),
                  "load_average_1_5_15_before_after": [list(load_before), list(os.getloadavg())]},
        "loop": {
            "ticks": len(window),
            "missed_ticks_incl_warmup": int(runner.stats.totals["missed_ticks"]),  # the other stats exclude it
            "period_ms": percentiles(period),
            "period_jitter_ms": percentiles(np.abs(np.asarray(period) - nominal)),
            "wakeup_lateness_ms": percentiles([t[2] / 1e6 for t in window]),
            "compute_ms": percentiles([t[3] / 1e6 for t in window]),
            "modes": {m: sum(t[6] == m for t in window) for m in sorted({t[6] for t in window})},
        },
        "latency": {
            "end_to_end_ms": percentiles(e2e),
            "end_to_end_minus_wait_ms": percentiles(np.asarray(e2e) - np.asarray(wait)),
            "wait_for_tick_ms": percentiles(wait),
            "compute_ms": percentiles(compute),
            "transport_both_legs_ms": percentiles(transport_ms),
        },
        "fake_robot": {k: fake[k] for k in ("steps", "commands", "resets", "missed")},
    }
    write_result(args.out, "real_loop_latency", fields)
    loop, lat = fields["loop"], fields["latency"]
    print(f"period p50/p99 {loop['period_ms']['p50']:.3f}/{loop['period_ms']['p99']:.3f} ms, jitter p50/p99 "
          f"{loop['period_jitter_ms']['p50']:.3f}/{loop['period_jitter_ms']['p99']:.3f} ms, compute p50/p99 "
          f"{loop['compute_ms']['p50']:.3f}/{loop['compute_ms']['p99']:.3f} ms, "
          f"missed {loop['missed_ticks_incl_warmup']} (incl. warm-up)")
    print(f"end-to-end p50/p99 {lat['end_to_end_ms']['p50']:.3f}/{lat['end_to_end_ms']['p99']:.3f} ms "
          f"(wait {lat['wait_for_tick_ms']['p50']:.3f}, compute {lat['compute_ms']['p50']:.3f}, transport "
          f"{lat['transport_both_legs_ms']['p50']:.3f}/{lat['transport_both_legs_ms']['p99']:.3f} ms)")


if __name__ == "__main__":
    main()
