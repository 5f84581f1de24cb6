"""Offline-RL dataset load time and batch-sampling throughput: robolearn vs Minari vs d3rlpy, one 1M-step dataset.

One synthetic dataset (fixed seed; default 1000 episodes x 1000 steps = 1M transitions, cheetah-like: 17 float32
observations, 6 actions in [-1, 1], float32 rewards; every 10th episode ends in a termination, the rest in a
time-out) is written in each library's own on-disk format with that library's own API:

- robolearn: `Dataset.save` (a folder of ``.npy`` files + ``dataset.json``);
- Minari: `minari.create_dataset_from_buffers` with ``data_format="hdf5"`` (Minari's default) and ``"arrow"``;
- d3rlpy: `d3rlpy.dataset.MDPDataset(...).dump(f)` (HDF5, one group of arrays per episode), its documented way.
  d3rlpy stores no final observation for a time-out, so it would drop the last step of every timed-out episode;
  each timed-out episode gets its o_T as one extra row (zero action and reward, the time-out flag on it), which
  d3rlpy turns into exactly T transitions whose last ``next_observation`` is o_T: all three hold the same 1M
  transitions.

Then, in one run on one machine, repeats interleaved (robolearn, Minari, d3rlpy, then again), medians and every
repeat reported, it times:

1. Load, from disk (page cache warm: the files were just written) to ready to sample:
   - robolearn `Dataset.load(folder)`: memory-mapped, validated (the finite-value check reads every float once),
     ready to sample transitions; also with one extra full read of every array after it, and `mmap=False`
     (everything read into RAM);
   - Minari `minari.load_dataset(id)`: reads the metadata only; ready to `sample_episodes`, the one sampler Minari
     has (no transition sampler), each call reading its episodes from disk. Also `load_dataset` +
     `iterate_episodes()` + concatenation into flat arrays: ready to sample transitions;
   - d3rlpy `ReplayBuffer.load(f, InfiniteBuffer())`: ready to sample transitions.
2. Batch sampling, batches of 256 uniform transitions per second:
   - robolearn `dataset.sample(256, rng)` on the memory-mapped and on the in-RAM dataset, and
     `transitions().get(rng.integers(...))` with the `Transitions` view made once;
   - d3rlpy `replay_buffer.sample_transition_batch(256)` (d3rlpy 2.x; a Python loop over 256 picks);
   - Minari: `sample_episodes(256)` (256 distinct episodes, read from disk) and one random step of each, i.e. what
     256 transitions cost through Minari's API; plus `sample_episodes(1)` in episodes/s.

Targets (issue 14): load at least as fast as either peer; sampling >= 5x d3rlpy's replay buffer. Results go to
`benchmarks/results/dataset_io_cpu.json` (raw timings, medians, ratios, versions, load average) and a table.

d3rlpy lives in its own venv, because d3rlpy 2.8.1 pins ``gymnasium==1.0.0`` (robolearn uses 1.4); this script
runs its d3rlpy part in a subprocess of that interpreter (this file with ``--d3rlpy-worker``, a line-per-command
JSON protocol on stdin/stdout), so only numpy is shared::

    python3.11 -m venv /tmp/d3venv
    /tmp/d3venv/bin/pip install torch==2.13.0 d3rlpy==2.8.1   # elsewhere: torch from download.pytorch.org/whl/cpu
    .venv/bin/python benchmarks/speed/dataset_io.py d3rlpy_python=/tmp/d3venv/bin/python

(``D3RLPY_PYTHON=...`` works as well; without either the d3rlpy part is skipped and said so.) About 3 minutes on
2 cores, 80 s of it Minari writing arrow (0.5.4 re-sums the size of the whole dataset folder after every
episode); the data (~500 MB over all formats) goes to a temporary folder, removed at the end unless ``keep=true``.

Caveats: loads are timed with a warm page cache (files just written; dropping caches needs root and would slow
other jobs on a shared machine), so they measure parsing and building, not the disk. robolearn's memory-mapped
load pays its page-ins during validation, inside the timed load. Minari's bare `load_dataset` is lazy: it is
faster than any load that reads data, and pays per episode at every `sample_episodes` call instead. d3rlpy's and
Minari's batches differ in content (d3rlpy adds ``next_actions``, ``rewards_to_go``; Minari's 256 transitions
come from 256 distinct episodes), robolearn's batch is obs/actions/rewards/next_obs/terminated/truncated.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, WorkerProcess, serve, settings, timed, write_result  # noqa: E402

BATCH = 256
D3RLPY_ARRAYS = ("observations", "actions", "rewards", "terminals", "timeouts")
WORKER_FLAG = "--d3rlpy-worker"  # this file as the d3rlpy side (internal: the parent starts it)


@dataclasses.dataclass
class Settings:
    """The dataset, the repeats and the peers (`key=value` on the command line)."""

    episodes: int = 1000
    steps: int = 1000               # steps per episode
    obs_dim: int = 17
    act_dim: int = 6
    seed: int = 0
    repeats: int = 5
    robolearn_batches: int = 2000   # batches per repeat
    d3rlpy_batches: int = 200       # batches per repeat
    minari_batches: int = 1         # 256-episode batches per repeat
    minari_episodes: int = 50       # sample_episodes(1) calls per repeat
    d3rlpy_python: str | None = dataclasses.field(default_factory=lambda: os.environ.get("D3RLPY_PYTHON"))
    #                                 python of a venv with d3rlpy (see the module docstring); null: d3rlpy skipped
    workdir: str | None = None      # where the datasets go (null: a temporary folder)
    keep: bool = False              # keep the written datasets
    out: str = str(RESULTS / "dataset_io_cpu.json")


# --- the d3rlpy side: runs under the d3rlpy venv's interpreter, imports nothing of robolearn -----------------

def d3rlpy_worker() -> None:
    """Serve JSON commands (write / load / sample / quit), one per line; d3rlpy's logs go to stderr."""
    serve(d3rlpy_handler)


def d3rlpy_handler() -> Any:
    """The d3rlpy side's command handler (write a dataset, load it into a replay buffer, sample batches)."""
    import importlib.metadata

    from d3rlpy.dataset import InfiniteBuffer, MDPDataset, ReplayBuffer

    np.random.seed(0)  # d3rlpy samples with the global numpy generator
    state: dict[str, Any] = {"buffer": None}

    def handle(cmd: dict) -> dict:
        if cmd["op"] == "write":
            a = {k: np.load(Path(cmd["input"]) / f"{k}.npy") for k in D3RLPY_ARRAYS}
            start = time.perf_counter()
            dataset = MDPDataset(a["observations"], a["actions"], a["rewards"], a["terminals"], a["timeouts"])
            built = time.perf_counter()
            with open(cmd["path"], "w+b") as f:
                dataset.dump(f)
            return {"build_s": built - start, "dump_s": time.perf_counter() - built,
                    "transitions": dataset.transition_count, "episodes": len(dataset.episodes),
                    "versions": {p: importlib.metadata.version(p) for p in ("d3rlpy", "torch", "numpy", "h5py",
                                                                             "gymnasium")},
                    "python": sys.version.split()[0]}
        if cmd["op"] == "load":
            state["buffer"] = None
            gc.collect()
            start = time.perf_counter()
            with open(cmd["path"], "rb") as f:
                state["buffer"] = ReplayBuffer.load(f, InfiniteBuffer())
            return {"s": time.perf_counter() - start, "transitions": state["buffer"].transition_count}
        if cmd["op"] == "sample":
            buffer = state["buffer"]
            assert buffer is not None, "load first"
            gc.collect()
            start = time.perf_counter()
            for _ in range(cmd["batches"]):
                batch = buffer.sample_transition_batch(cmd["batch_size"])
            return {"s": time.perf_counter() - start, "obs_shape": list(batch.observations.shape)}
        return {"error": f"unknown op {cmd['op']!r}"}

    return handle


# --- the data -------------------------------------------------------------------------------------------------

def make_data(episodes: int, steps: int, obs_dim: int, act_dim: int, seed: int) -> dict[str, np.ndarray]:
    """Flat arrays, episodes back to back, T+1 observations per episode (robolearn's layout)."""
    rng = np.random.default_rng(seed)
    n = episodes * steps
    ends = np.arange(1, episodes + 1) * steps - 1
    terminated = np.arange(episodes) % 10 == 9  # every 10th episode ends in a termination, the rest time out
    terminations, truncations = np.zeros(n, bool), np.zeros(n, bool)
    terminations[ends[terminated]] = True
    truncations[ends[~terminated]] = True
    return {"observations": rng.standard_normal((episodes * (steps + 1), obs_dim), dtype=np.float32),
            "actions": rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
            "rewards": rng.standard_normal(n, dtype=np.float32),
            "terminations": terminations, "truncations": truncations,
            "lengths": np.full(episodes, steps, dtype=np.int64)}


def episode_slices(data: dict[str, np.ndarray]) -> list[tuple[slice, slice]]:
    """(observation rows, step rows) of each episode."""
    starts = np.concatenate([[0], np.cumsum(data["lengths"])])
    return [(slice(int(s) + i, int(e) + i + 1), slice(int(s), int(e))) for i, (s, e) in
            enumerate(zip(starts[:-1], starts[1:], strict=True))]


def d3rlpy_arrays(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """d3rlpy's MDPDataset layout: one row per step; a timed-out episode gets its o_T as an extra row."""
    obs, act, rew, term, tout = [], [], [], [], []
    for o, s in episode_slices(data):
        t = s.stop - s.start
        timed_out = bool(data["truncations"][s.stop - 1])
        rows = t + int(timed_out)
        obs.append(data["observations"][o][:rows])
        act.append(np.concatenate([data["actions"][s], np.zeros((rows - t, data["actions"].shape[1]), np.float32)]))
        rew.append(np.concatenate([data["rewards"][s], np.zeros(rows - t, np.float32)]))
        flags = np.zeros(rows, np.float32)
        flags[-1] = 1.0
        term.append(flags if not timed_out else np.zeros(rows, np.float32))
        tout.append(flags if timed_out else np.zeros(rows, np.float32))
    return dict(zip(D3RLPY_ARRAYS, map(np.concatenate, (obs, act, rew, term, tout)), strict=True))


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- reading helpers ------------------------------------------------------------------------------------------

def full_read(dataset: Any) -> float:
    """Read every byte of every array once (pages a memory-mapped dataset in)."""
    arrays = [*dataset.observations.values(), dataset.actions, dataset.rewards, dataset.terminations,
              dataset.truncations]
    return float(sum(np.sum(a, dtype=np.float64) for a in arrays))


def minari_to_arrays(dataset: Any) -> dict[str, np.ndarray]:
    """Every Minari episode into flat arrays (robolearn's layout): what sampling transitions needs."""
    eps = list(dataset.iterate_episodes())
    return {"observations": np.concatenate([e.observations for e in eps]),
            "actions": np.concatenate([e.actions for e in eps]),
            "rewards": np.concatenate([e.rewards for e in eps]),
            "terminations": np.concatenate([e.terminations for e in eps]),
            "truncations": np.concatenate([e.truncations for e in eps]),
            "lengths": np.array([len(e.rewards) for e in eps])}


def minari_batch(dataset: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """256 transitions through Minari's API: 256 sampled episodes, one uniform step of each."""
    eps = dataset.sample_episodes(min(BATCH, dataset.total_episodes))  # without replacement
    eps = [eps[i % len(eps)] for i in range(BATCH)]  # only for datasets of fewer than 256 episodes
    steps = [int(rng.integers(len(e.rewards))) for e in eps]
    return {"obs": np.stack([e.observations[t] for e, t in zip(eps, steps, strict=True)]),
            "actions": np.stack([e.actions[t] for e, t in zip(eps, steps, strict=True)]),
            "rewards": np.array([e.rewards[t] for e, t in zip(eps, steps, strict=True)]),
            "next_obs": np.stack([e.observations[t + 1] for e, t in zip(eps, steps, strict=True)]),
            "terminated": np.array([e.terminations[t] for e, t in zip(eps, steps, strict=True)]),
            "truncated": np.array([e.truncations[t] for e, t in zip(eps, steps, strict=True)])}


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "all": values}


# --- the benchmark --------------------------------------------------------------------------------------------

def main() -> None:
    if sys.argv[1:] == [WORKER_FLAG]:
        d3rlpy_worker()
        return
    args = settings(Settings, __doc__)

    workdir = Path(tempfile.mkdtemp(prefix="dataset_io.", dir=args.workdir))
    os.environ["MINARI_DATASETS_PATH"] = str(workdir / "minari")
    import importlib.metadata

    import gymnasium as gym
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    from robolearn.data.dataset import Dataset

    loadavg = {"start": os.getloadavg()}
    started = time.perf_counter()
    worker = None
    try:
        data = make_data(args.episodes, args.steps, args.obs_dim, args.act_dim, args.seed)
        n = len(data["rewards"])
        print(f"{args.episodes} episodes x {args.steps} steps = {n} transitions; data in {workdir}; "
              f"load average {loadavg['start'][0]:.2f}")

        # --- write each library's own format ---
        write: dict[str, dict] = {}
        rl_dir = workdir / "robolearn"
        rl_dataset = Dataset(data["observations"], data["actions"], data["rewards"], data["terminations"],
                             data["truncations"], data["lengths"])
        s, _ = timed(rl_dataset.save, rl_dir)
        write["robolearn"] = {"s": s, "bytes": folder_bytes(rl_dir)}
        buffers = [EpisodeBuffer(id=i, observations=data["observations"][o], actions=data["actions"][st],
                                 rewards=data["rewards"][st], terminations=data["terminations"][st],
                                 truncations=data["truncations"][st])
                   for i, (o, st) in enumerate(episode_slices(data))]
        obs_space = gym.spaces.Box(-np.inf, np.inf, (args.obs_dim,), np.float32)
        act_space = gym.spaces.Box(-1.0, 1.0, (args.act_dim,), np.float32)
        minari_ids = {fmt: f"robolearn-bench/synthetic-{fmt}-v0" for fmt in ("hdf5", "arrow")}
        for fmt, dataset_id in minari_ids.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "author is None" and the like
                start = time.perf_counter()
                minari.create_dataset_from_buffers(dataset_id, buffers, observation_space=obs_space,
                                                   action_space=act_space, data_format=fmt)
            write[f"minari_{fmt}"] = {"s": time.perf_counter() - start,
                                      "bytes": folder_bytes(workdir / "minari" / dataset_id)}
        del buffers, rl_dataset
        d3_path = workdir / "d3rlpy.h5"
        d3_info: dict[str, Any] = {}
        if args.d3rlpy_python:
            d3_input = workdir / "d3rlpy_input"
            d3_input.mkdir()
            for k, v in d3rlpy_arrays(data).items():
                np.save(d3_input / f"{k}.npy", v)
            worker = WorkerProcess(args.d3rlpy_python, __file__, WORKER_FLAG, workdir / "d3rlpy_worker.log")
            d3_info = worker(op="write", input=str(d3_input), path=str(d3_path))
            shutil.rmtree(d3_input)
            if d3_info["transitions"] != n:
                raise RuntimeError(f"d3rlpy holds {d3_info['transitions']} transitions, not {n}")
            write["d3rlpy"] = {"s": d3_info["build_s"] + d3_info["dump_s"], "build_s": d3_info["build_s"],
                               "dump_s": d3_info["dump_s"], "bytes": folder_bytes(d3_path)}
        else:
            print("no d3rlpy_python= / $D3RLPY_PYTHON: d3rlpy skipped (see the module docstring)")
        del data
        loadavg["after_write"] = os.getloadavg()

        # --- load, repeats interleaved across libraries ---
        loads: dict[str, list[float]] = {}

        def add(name: str, seconds: float) -> None:
            loads.setdefault(name, []).append(seconds)

        for r in range(args.repeats):
            add("robolearn Dataset.load (mmap)", timed(lambda: Dataset.load(rl_dir))[0])
            add("robolearn Dataset.load (mmap) + full read", timed(lambda: full_read(Dataset.load(rl_dir)))[0])
            add("robolearn Dataset.load(mmap=False)", timed(lambda: Dataset.load(rl_dir, mmap=False))[0])
            for fmt, dataset_id in minari_ids.items():
                add(f"minari {fmt} load_dataset", timed(lambda dataset_id=dataset_id: minari.load_dataset(
                    dataset_id))[0])
                add(f"minari {fmt} load_dataset + to arrays", timed(lambda dataset_id=dataset_id: minari_to_arrays(
                    minari.load_dataset(dataset_id)))[0])
            if worker:
                reply = worker(op="load", path=str(d3_path))
                assert reply["transitions"] == n
                add("d3rlpy ReplayBuffer.load", reply["s"])
            print(f"load repeat {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in loads.items()))
        loadavg["after_load"] = os.getloadavg()

        # --- sampling, repeats interleaved ---
        rl_mmap, rl_ram = Dataset.load(rl_dir), Dataset.load(rl_dir, mmap=False)
        minari_sets = {fmt: minari.load_dataset(dataset_id) for fmt, dataset_id in minari_ids.items()}
        for d in minari_sets.values():
            d.set_seed(args.seed)
        rng = np.random.default_rng(args.seed)
        batches: dict[str, int] = {}
        sample_s: dict[str, list[float]] = {}

        def run(name: str, count: int, fn: Any) -> None:
            batches[name] = count

            def loop() -> None:
                for _ in range(count):
                    fn()
            sample_s.setdefault(name, []).append(timed(loop)[0])

        transitions = rl_mmap.transitions()
        for r in range(args.repeats):
            run("robolearn dataset.sample (mmap)", args.robolearn_batches, lambda: rl_mmap.sample(BATCH, rng))
            run("robolearn dataset.sample (in RAM)", args.robolearn_batches, lambda: rl_ram.sample(BATCH, rng))
            run("robolearn transitions().get", args.robolearn_batches,
                lambda: transitions.get(rng.integers(0, n, BATCH)))
            if worker:
                reply = worker(op="sample", batches=args.d3rlpy_batches, batch_size=BATCH)
                assert reply["obs_shape"] == [BATCH, args.obs_dim], reply
                batches["d3rlpy sample_transition_batch"] = args.d3rlpy_batches
                sample_s.setdefault("d3rlpy sample_transition_batch", []).append(reply["s"])
            for fmt, d in minari_sets.items():
                run(f"minari {fmt} sample_episodes(256) -> 256 steps", args.minari_batches,
                    lambda d=d: minari_batch(d, rng))
            for fmt, d in minari_sets.items():
                run(f"minari {fmt} sample_episodes(1)", args.minari_episodes, lambda d=d: d.sample_episodes(1))
            print(f"sample repeat {r + 1}/{args.repeats}: "
                  + ", ".join(f"{k} {batches[k] / v[-1]:.1f}/s" for k, v in sample_s.items()))
        loadavg["end"] = os.getloadavg()
    finally:
        if worker:
            worker.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    # --- results ---
    load = {k: summary(v) for k, v in loads.items()}
    sample = {}
    for k, v in sample_s.items():
        per_s = [batches[k] / s for s in v]
        unit = "episodes_per_s" if k.endswith("sample_episodes(1)") else "batches_per_s"
        sample[k] = {"calls_per_repeat": batches[k], "seconds": v, unit: summary(per_s)}
        if unit == "batches_per_s":
            sample[k]["transitions_per_s_median"] = BATCH * statistics.median(per_s)
    rl_loads = [k for k in load if k.startswith("robolearn")]
    load_ratios = {rl: {peer: load[peer]["median"] / load[rl]["median"] for peer in load if not
                        peer.startswith("robolearn")} for rl in rl_loads}
    rl_samples = [k for k in sample if k.startswith("robolearn")]
    peer_samples = [k for k in sample if not k.startswith("robolearn") and "batches_per_s" in sample[k]]
    sample_ratios = {rl: {peer: sample[rl]["batches_per_s"]["median"] / sample[peer]["batches_per_s"]["median"]
                          for peer in peer_samples} for rl in rl_samples}
    main_load, main_sample = "robolearn Dataset.load (mmap)", "robolearn dataset.sample (mmap)"
    transition_ready = [k for k in load if k.endswith("to arrays") or k.startswith("d3rlpy")]
    targets = {
        "load_at_least_as_fast_as_either (ready to sample transitions)": {
            "met": all(load_ratios[main_load][p] >= 1 for p in transition_ready),
            "speedup": {p: load_ratios[main_load][p] for p in transition_ready}},
        "load_at_least_as_fast_as_minari_load_dataset (lazy: metadata only, ready to sample_episodes)": {
            "met": all(load_ratios[main_load][p] >= 1 for p in load if p.endswith("load_dataset")),
            "speedup": {p: load_ratios[main_load][p] for p in load if p.endswith("load_dataset")}},
    }
    if "d3rlpy sample_transition_batch" in sample:
        x = sample_ratios[main_sample]["d3rlpy sample_transition_batch"]
        targets["sampling_5x_d3rlpy"] = {"met": x >= 5, "speedup": x}
    versions = {p: importlib.metadata.version(p) for p in ("robolearn", "minari", "numpy", "h5py", "pyarrow",
                                                            "gymnasium")}
    versions["d3rlpy_venv"] = {**d3_info.get("versions", {}), "python": d3_info.get("python")} if d3_info else None
    write_result(args.out, "dataset_io", {
        "settings": {k: str(v) for k, v in dataclasses.asdict(args).items() if k != "out"},
        "dataset": {"episodes": args.episodes, "steps_per_episode": args.steps, "transitions": args.episodes *
                    args.steps, "obs_dim": args.obs_dim, "act_dim": args.act_dim, "terminated_episodes":
                    args.episodes // 10, "seed": args.seed, "batch_size": BATCH},
        "versions": versions, "loadavg_1_5_15min": loadavg, "total_s": time.perf_counter() - started,
        "write": write, "load_s": load, "sample": sample,
        "speedup": {"load (peer median s / robolearn median s)": load_ratios,
                    "sample (robolearn batches/s / peer batches/s)": sample_ratios},
        "targets": targets,
        "notes": [
            "page cache warm for every load (files just written): parse/build cost, not disk",
            "robolearn mmap load validates every float (finite check), so it pages everything in inside the load",
            "minari load_dataset reads metadata only; sample_episodes reads each episode from disk per call",
            "d3rlpy: timed-out episodes stored with o_T as an extra row so d3rlpy keeps all 1M transitions",
            "minari 256-transition batch = sample_episodes(256) (distinct episodes) + one uniform step of each",
        ]})

    print(f"\n{'load (s, median of ' + str(args.repeats) + ')':58s} {'median':>9s} {'min':>9s} {'max':>9s}")
    for k, v in load.items():
        print(f"{k:58s} {v['median']:9.4f} {v['min']:9.4f} {v['max']:9.4f}")
    print(f"\n{'sampling (median)':58s} {'calls/s':>11s} {'transitions/s':>14s}")
    for k, v in sample.items():
        per_s = v.get("batches_per_s", v.get("episodes_per_s"))["median"]
        print(f"{k:58s} {per_s:11.1f} {v.get('transitions_per_s_median', float('nan')):14.0f}")
    print(f"\nspeedup of {main_load}: " + ", ".join(f"vs {p} {x:.2f}x" for p, x in load_ratios[main_load].items()))
    print(f"speedup of {main_sample}: " + ", ".join(f"vs {p} {x:.1f}x" for p, x in
                                                    sample_ratios[main_sample].items()))
    for name, t in targets.items():
        print(f"target {name}: {'MET' if t['met'] else 'MISSED'}")


if __name__ == "__main__":
    main()
