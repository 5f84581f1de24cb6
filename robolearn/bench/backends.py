"""Where a bench suite's cells run: `run_local` (a spawn process pool on this machine, one torch thread per
worker, workers that exit with their parent) or `run_ray` (Ray tasks on a local instance or a cluster at an
address, a cell whose node dies run again); both report each finished cell to `done` as it comes.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from robolearn.bench.cells import Cell, Pack, failed, run_unit
from robolearn.errors import ConfigError

BACKENDS = ("local", "ray")


def exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """In a pool worker: a daemon thread that ends the process once `parent` is gone (the worker re-parented), so
    a bench killed from outside (SIGKILL, `pkill` of the bench alone) leaves no worker training on; a cell stopped
    that way resumes from its last checkpoint at the next bench."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def run_local(cells: Sequence[Cell | Pack], done: Callable[[dict[str, Any]], None], workers: int) -> None:
    """The cells (or packs of cells, `robolearn.bench.cells.Pack`) in a pool of spawned worker processes;
    `done(result)` as each cell finishes. A cell whose worker process dies (a crash, the OOM killer) breaks the pool:
    the cells it took with it run again in a fresh pool, twice at most."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    attempts = dict.fromkeys((c.id for c in cells), 0)
    todo = list(cells)
    while todo:
        retry = []
        pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=context,
                                   initializer=exit_with_parent, initargs=(os.getpid(),))
        try:
            futures = {pool.submit(run_unit, cell): cell for cell in todo}
            for future in as_completed(futures):
                cell = futures[future]
                try:
                    results = future.result()
                except BrokenProcessPool as e:
                    attempts[cell.id] += 1
                    if attempts[cell.id] < 2:
                        retry.append(cell)
                        continue
                    results = failed(cell, f"the worker process died: {e}")
                except Exception:
                    results = failed(cell, traceback.format_exc())
                for result in results:
                    done(result)
        except BaseException:  # interrupted (Ctrl-C): stop the running cells now rather than wait for them
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        todo = retry


#: `backend=ray`: how many times a cell is run again after the node or worker process running it died (Ray's
#: `max_retries`, counted by Ray per task); a cell's own error is recorded, never retried
RAY_RETRIES = 3


def run_ray(cells: Sequence[Cell | Pack], done: Callable[[dict[str, Any]], None], address: str | None = None,
            num_cpus: int | None = None, retries: int = RAY_RETRIES) -> None:
    """The cells as Ray tasks (one CPU each, spread over the nodes) on the Ray instance this process is connected to,
    else the cluster at `address` (or `RAY_ADDRESS`), else a local instance started (and stopped) here;
    `done(result)` as each finishes, its `node` the Ray node and host that ran it. A cell whose node or worker
    process dies runs again elsewhere, `retries` times at most (from its checkpoint, else from scratch: `run_unit`)."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError("backend=ray needs Ray: pip install 'robolearn[bench]' (or pip install ray)") from e
    address = address or os.environ.get("RAY_ADDRESS") or None
    started = False
    if not ray.is_initialized():
        if address:
            try:
                ray.init(address=address)
            except (ConnectionError, RuntimeError) as e:
                raise ConfigError(
                    f"ray_address={address}: cannot connect to the Ray cluster ({str(e).splitlines()[0]}); is it up "
                    "(`ray status`)? A cluster with token authentication needs RAY_AUTH_MODE=token and its token "
                    "(RAY_AUTH_TOKEN, or ~/.ray/auth_token) here too") from e
        else:
            ray.init(num_cpus=num_cpus or cores(), include_dashboard=False)
        started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=False,
                          scheduling_strategy="SPREAD")(ray_unit)
        refs = {task.remote(cell): cell for cell in cells}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                cell = refs.pop(ref)
                try:
                    results = ray.get(ref)
                except Exception:  # its retries spent (the node died each time), or Ray's own failure
                    results = failed(cell, traceback.format_exc())
                for result in results:
                    done(result)
    finally:
        if started:
            ray.shutdown()


def ray_unit(unit: Cell | Pack) -> list[dict[str, Any]]:
    """`run_unit` in a Ray task, each result marked with the node that ran it (which node ran what, on a cluster)."""
    import socket

    import ray

    node = {"id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname()}
    return [{**result, "node": node} for result in run_unit(unit)]


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
