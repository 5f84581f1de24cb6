"""`robolearn bench backend=ray` across hosts: a real two-node Ray cluster on this machine (each `ray start` its own
raylet, so its own node, as Ray's own multi-node tests do), started and stopped by these tests. The cells spread over
both nodes, their results make the usual report, a second bench resumes (runs nothing), and the cells of a worker
node killed mid-cell run again on the node left, from a clean run folder."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# PPO on pendulum-swingup, 4 envs x 16 steps per iteration (as test_bench.py's TINY); no checkpoint before the end
TINY = ["env.num_envs=4", "algo.num_steps=16", "+env.overrides.episode_length=16", "checkpoint_interval=1000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session(sid: int) -> list[int]:
    """The processes of session `sid` (a `ray start` run with `start_new_session`: its raylet, agents, workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
                pids.append(int(entry))
    return pids


class Cluster:
    """Ray nodes started by this test, each `ray start --block` in a session and a temp dir of its own, so the test
    stops exactly its nodes (every process of their sessions, task workers included) and no other Ray instance on
    the machine. Token authentication with a token of its own; a dead node is declared after 3 missed 0.5 s health
    checks (Ray's defaults: 5 x 3 s)."""

    def __init__(self) -> None:
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "RAY_USAGE_STATS_ENABLED": "0", "RAY_health_check_period_ms": "500",
                    "RAY_health_check_failure_threshold": "3"}
        self.env.pop("RAY_ADDRESS", None)
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, tuple[subprocess.Popen, Path]] = {}
        self.ids: dict[str, str] = {}

    def start(self, name: str, resources: dict[str, float]) -> str:
        """Start node `name` (the first one is the head) with one CPU; returns its Ray node id."""
        ray = shutil.which("ray", path=str(Path(sys.executable).parent))
        assert ray, f"no `ray` next to {sys.executable}: pip install 'robolearn[dev]'"
        tmp = Path(tempfile.mkdtemp(prefix=f"rl-{name}-"))  # short: Ray's socket paths live in it
        args = [ray, "start", "--block", "--num-cpus=1", "--num-gpus=0", f"--resources={json.dumps(resources)}",
                f"--temp-dir={tmp}", "--object-store-memory=78643200", "--disable-usage-stats",
                f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
                f"--metrics-export-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}"]
        if not self.nodes:
            args += ["--head", f"--port={self.port}", "--include-dashboard=false", f"--dashboard-port={_free_port()}",
                     f"--ray-client-server-port={_free_port()}"]
        else:
            args += [f"--address={self.address}"]
        log = tmp / "start.log"
        with open(log, "w") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                       start_new_session=True)
        self.nodes[name] = (process, tmp)
        deadline = time.time() + 60
        while time.time() < deadline:  # up, and known to the cluster as alive (its raylet heard so from the GCS)
            raylet = "".join(p.read_text() for p in tmp.glob("session_*/logs/raylet.out"))
            node = re.search(r"Setting node ID node_id=([0-9a-f]+)", raylet)
            if node and f"IsAlive = 1 node_id={node[1]}" in raylet and "Ray runtime started" in log.read_text():
                self.ids[name] = node[1]
                return node[1]
            assert process.poll() is None, f"ray start of {name} exited: {log.read_text()[-3000:]}"
            time.sleep(0.3)
        raise AssertionError(f"node {name} did not start in 60 s: {log.read_text()[-3000:]}")

    def running_cells(self, name: str, logs: Path) -> list[str]:
        """The cells running on node `name` now: its task processes whose stdout is a cell's log under `logs`."""
        cells = []
        for pid in _session(self.nodes[name][0].pid):
            try:
                target = os.readlink(f"/proc/{pid}/fd/1")
            except OSError:
                continue
            if Path(target).parent == logs:
                cells.append(Path(target).stem)
        return cells

    def kill(self, name: str) -> None:
        """SIGKILL every process of node `name` (raylet, agents, task workers): the node is lost, as in a crash."""
        process, tmp = self.nodes.pop(name)
        for pid in _session(process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)

    def stop(self) -> None:
        for name in reversed(list(self.nodes)):
            self.kill(name)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    nodes = Cluster()
    try:
        nodes.start("head", {"head": 1})
        nodes.start("worker", {"worker": 1})
        yield nodes
    finally:
        nodes.stop()


def _suite(path: Path, iterations: int) -> Path:
    path.write_text(json.dumps({"algos": [{"name": "ppo", "overrides": ["algo=ppo"]}],
                                "datasets": [{"name": "pendulum", "overrides": ["env=pendulum-swingup"]}],
                                "seeds": [0, 1], "overrides": [f"iterations={iterations}", *TINY]}))
    return path


def _bench(cluster: Cluster, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`robolearn bench ... backend=ray` in a process of its own (a driver connected to the cluster, as on a head)."""
    out = open(cwd / "bench.out", "a")
    return subprocess.Popen([sys.executable, "-m", "robolearn", "bench", "backend=ray", "reps=100", *args],
                            cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**cluster.env, **(env or {})})


def _finish(process: subprocess.Popen, cwd: Path, timeout: float = 150) -> str:
    try:
        rc = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    text = (cwd / "bench.out").read_text()
    assert rc == 0, text[-4000:]
    return text


def _cells(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}


def test_cells_spread_over_both_nodes_report_and_resume(cluster, tmp_path):
    suite, out = _suite(tmp_path / "tiny.yaml", iterations=2), tmp_path / "out"
    args = (f"suite={suite}", f"out={out}", f"ray_address={cluster.address}")
    _finish(_bench(cluster, tmp_path, *args), tmp_path)
    cells = _cells(out)
    assert sorted(cells) == ["ppo__pendulum__seed0", "ppo__pendulum__seed1"]
    assert all(c["error"] is None and c["curve"][-1][0] == 2 * 4 * 16 for c in cells.values())
    # one cell on each node: the cluster's two raylets, not a local instance of the bench's own
    assert {c["node"]["id"] for c in cells.values()} == {cluster.ids["head"], cluster.ids["worker"]}
    results = json.loads((out / "results.json").read_text())
    assert results["scores"]["ppo"]["pendulum"]["n"] == 2 and "| ppo |" in (out / "report.md").read_text()

    before = {name: (out / "cells" / f"{name}.json").stat().st_mtime_ns for name in cells}
    text = _finish(_bench(cluster, tmp_path, *args), tmp_path)
    assert "2 done, 0 to run" in text  # resume: nothing runs again
    assert {name: (out / "cells" / f"{name}.json").stat().st_mtime_ns for name in cells} == before


def test_cells_of_a_killed_node_run_again(cluster, tmp_path):
    """The worker node is killed (every process of it, SIGKILL) while it trains a cell that has logged rows; the bench
    (connected through RAY_ADDRESS) runs that cell again on the head node, from a clean folder, and finishes."""
    iterations = 80
    suite, out = _suite(tmp_path / "tiny.yaml", iterations=iterations), tmp_path / "out"
    bench = _bench(cluster, tmp_path, f"suite={suite}", f"out={out}", env={"RAY_ADDRESS": cluster.address})
    try:
        deadline, victim = time.time() + 90, None
        while victim is None or not (out / "runs" / victim / "metrics.jsonl").is_file():
            assert time.time() < deadline and bench.poll() is None, (tmp_path / "bench.out").read_text()[-4000:]
            victim = next(iter(cluster.running_cells("worker", out.resolve() / "logs")), victim)
            time.sleep(0.1)
        cluster.kill("worker")
        assert not (out / "cells" / f"{victim}.json").exists()  # it had not finished: the test killed it mid-cell
        _finish(bench, tmp_path)
    finally:
        if bench.poll() is None:
            bench.kill()
    cells = _cells(out)
    assert sorted(cells) == ["ppo__pendulum__seed0", "ppo__pendulum__seed1"]
    assert all(c["error"] is None for c in cells.values())
    assert cells[victim]["node"]["id"] == cluster.ids["head"]
    rows = [json.loads(line) for line in (out / "runs" / victim / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, iterations + 1))  # none of the killed attempt's rows
    assert json.loads((out / "results.json").read_text())["scores"]["ppo"]["pendulum"]["n"] == 2
