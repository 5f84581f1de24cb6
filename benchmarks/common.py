"""What the benchmark scripts share: their `key=value` settings, the machine info and result files, timing, the
evaluation loop of the side-by-side scripts, and the JSON-lines client of a peer library's worker process.

Only the standard library is imported at the top: the d3rlpy scripts import this module in a separate venv that has
no robolearn (their worker side), so everything else is imported where it is used.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

T = TypeVar("T")


def settings(schema: type[T], doc: str | None) -> T:
    """The script's settings from its command line (`key=value` overrides of the dataclass `schema`), through
    `robolearn.config.parse_overrides`: `--help` prints every field with its default and `doc`; a bad option exits
    with the message that names it."""
    from robolearn.config import parse_overrides
    from robolearn.errors import ConfigError

    try:
        return parse_overrides(schema, sys.argv[1:], doc or "")
    except ConfigError as e:
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")


def machine_info() -> dict:
    """The CPU, core count, platform and the versions that set a benchmark's speed (JAX's backend and GPU too)."""
    import jax
    import mujoco
    import torch

    from robolearn.core.cpu import cpu_model

    info = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(),
        "mujoco": mujoco.__version__, "jax": jax.__version__, "jax_backend": jax.default_backend(),
        "torch": torch.__version__,
    }
    if jax.default_backend() == "gpu":
        info["gpu"] = str(jax.devices()[0].device_kind)
    return info


def write_result(out: str | Path, name: str, fields: dict) -> None:
    """Write a benchmark's JSON result with the date and machine info."""
    out = Path(out)
    result = {"benchmark": name, "date": time.strftime("%Y-%m-%d"), "machine": machine_info(), **fields}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Seconds of one call of `fn(*args)` (after a garbage collection, so it does not land inside) and its value."""
    gc.collect()
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def timed_loop(fn: Callable[[], Any], n: int) -> float:
    """Seconds of `n` calls of `fn()`, after a garbage collection."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - start


def episode_returns(act: Callable[[Any], Any], task: str, episodes: int, seed: int, **make: Any) -> Any:
    """Undiscounted returns (float64, on the CPU) of one episode per env of `episodes` envs of `task` made with
    `seed` (and `make`'s `sim.make` arguments: backend, nthread, task overrides), `act` mapping the "policy"
    observations to actions: the library's evaluation loop (`robolearn.eval.episodes.run_episodes`) on a fresh env.

    The side-by-side scripts score a peer library's policy with it too, so it takes a function, not a learner."""
    import sim
    from robolearn.eval.episodes import run_episodes

    env = sim.make(task, num_envs=episodes, seed=seed, **make)
    try:
        return run_episodes(env, lambda obs: act(obs["policy"])).returns.cpu()
    finally:
        env.close()


def task_overrides(action_repeat: int, episode_length: int) -> dict[str, Any]:
    """The task settings the off-policy scripts change (DM Control's action repeat, a shorter episode; 0: the
    task's own length), as `sim.make` keyword arguments."""
    out: dict[str, Any] = {"action_repeat": action_repeat}
    if episode_length:
        out["episode_length"] = episode_length
    return out


class WorkerProcess:
    """A peer library's worker: `script worker_flag` run by another interpreter (the peer's own venv), one JSON
    command per line on its stdin, one JSON reply per line on its stdout, its stderr into `log`. `send` a command
    and `recv` its reply (or `__call__` for both); a reply with an "error" raises."""

    def __init__(self, python: str, script: str | Path, worker_flag: str, log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.log = log
        self._log_file = open(log, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([python, str(Path(script).resolve()), worker_flag], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_file, text=True)

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def recv(self) -> dict:
        assert self.proc.stdout
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker died: {self.log.read_text()[-3000:]}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"worker: {reply['error']} (log: {self.log})")
        return reply

    def __call__(self, **cmd: Any) -> dict:
        self.send(**cmd)
        return self.recv()

    def close(self, timeout: float = 60) -> None:
        """Ask the worker to quit and wait for it; close the log."""
        if self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout)
        self._log_file.close()


def serve(make_handler: Callable[[], Callable[[dict], dict]]) -> None:
    """The worker side of `WorkerProcess`: answer each JSON command on stdin with `handle(cmd)` until "quit", where
    `handle = make_handler()`. The replies keep the real stdout; everything else printed to stdout (a library's logs,
    from the imports `make_handler` does on) goes to stderr. A command that raises is answered with its error, and
    the worker goes on serving."""
    reply_to = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    handle = make_handler()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            reply = handle(cmd)
        except Exception as e:  # noqa: BLE001  report to the parent (it raises), keep serving
            import traceback

            traceback.print_exc()
            reply = {"error": f"{cmd['op']}: {type(e).__name__}: {e}"}
        reply_to.write(json.dumps(reply) + "\n")
