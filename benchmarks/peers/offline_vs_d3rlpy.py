"""robolearn's offline algorithms (IQL, CQL, TD3+BC) against d3rlpy's, side by side on one dataset and machine.

One robolearn dataset (default: 100 episodes of cheetah-run collected by the reference PPO policy, 100K
transitions; `robolearn collect env=cheetah-run kind=expert policy=reference episodes=100 ...`) feeds both: robolearn
samples it through `to_replay_buffer`, d3rlpy gets the same arrays (observations, actions, rewards, terminals,
timeouts) through a temporary ``.npz`` (no pickle) built into a `d3rlpy.dataset.MDPDataset` (each timed-out episode
carries its final observation as one extra row, so d3rlpy holds exactly the same transitions; see
`benchmarks/speed/dataset_io.py`). Same networks (2 hidden layers, 256 by default), batch 256, Adam, gamma 0.99,
tau 0.005, no observation normalisation in either, and the same key hyperparameters:

- IQL: expectile 0.7, beta (d3rlpy ``weight_temp``) 3, weights clipped at 100, lr 3e-4 everywhere, the actor's
  cosine decay over 1M steps in both (robolearn ``actor_lr_decay_steps``, d3rlpy ``CosineAnnealingLRFactory``);
- CQL: conservative weight 5 (robolearn ``cql_alpha`` 5 without Lagrange; d3rlpy ``conservative_weight`` 5 with
  ``alpha_learning_rate`` 0, i.e. its Lagrange multiplier fixed at ``initial_alpha`` 1), 10 sampled actions of each
  kind (random, pi(s), pi(s')) with importance sampling, learned SAC temperature; lr actor 1e-4, critic 3e-4,
  temperature 1e-4 (d3rlpy's defaults; robolearn's preset has CORL's 3e-5);
- TD3+BC: alpha 2.5, target smoothing 0.2 clipped at 0.5, actor every 2nd step, lr 3e-4.

Both processes run ``torch.set_num_threads(1)`` (and one inter-op thread): single-thread CPU numbers.

1. Gradient steps/s: a fixed number of updates after a warm-up, in interleaved rounds (median counts), each one
   sampling its batch from its own library's buffer and taking one gradient step: robolearn
   ``algo.update(buffer.sample(256, gen), gen)``; d3rlpy ``algo.update(dataset.sample_transition_batch(256))``.
   That is exactly the inner loop of d3rlpy's ``fit`` without its per-step metric logging and progress bar, so
   the direct loop is the fairer (if anything d3rlpy-favouring) choice; ``time_fit=true`` also times ``fit`` itself.
   Batch sampling alone is timed too (both libraries), to split sampling from the update.
2. Final normalised score after ``score_steps`` gradient steps per algorithm (default network 64x64 for the
   scores, to fit a modest run on a CPU; ``score_hidden=[256,256]`` for the paper networks): both policies are
   evaluated by the same code in OUR simulator, ``sim.make(task, num_envs=episodes, backend="mujoco",
   seed=...)``, deterministically (robolearn ``algo.act(..., deterministic=True)``, d3rlpy ``algo.predict(obs)``,
   answered by the d3rlpy process over its pipe), normalised with the dataset's ``ref_min_score`` /
   ``ref_max_score``. The two trainings of one algorithm run at the same time (one core each).
3. Share of the CPU's matmul throughput: single-thread sgemm FLOP/s measured with torch (256x256 @ 256x256, and
   batched [2, 256, 256] as the ensembles use), the FLOPs of one gradient step counted by
   `torch.utils.flop_counter.FlopCounterMode` on a real update of each library (forward and backward matmuls as
   executed, mean of two steps for TD3+BC's alternation), achieved FLOP/s = steps/s x FLOPs/step, reported as a
   percentage of the measured peak. A `torch.profiler` summary of a few updates of each (top ops by self time, the
   matmul share, op time against wall time) says where the rest goes.

d3rlpy 2.8.1 pins gymnasium 1.0.0 (robolearn uses 1.4), so it lives in its own venv and this file runs its side
in a subprocess of that interpreter (``--d3rlpy-worker``, one JSON command per line on stdin/stdout; it imports
nothing of robolearn)::

    python3.11 -m venv /tmp/d3venv && /tmp/d3venv/bin/pip install torch==2.13.0 d3rlpy==2.8.1
    .venv/bin/robolearn collect env=cheetah-run kind=expert policy=reference episodes=100 env.num_envs=100 \\
        out=/work/bench_data/cheetah-run-expert-v0 progress=false
    .venv/bin/python benchmarks/peers/offline_vs_d3rlpy.py d3rlpy_python=/tmp/d3venv/bin/python \\
        dataset=/work/bench_data/cheetah-run-expert-v0 time_fit=true

(``results/offline_vs_d3rlpy_cpu.json``: that command, 32 minutes on a shared 2-core machine at load 4-6, 11 of
them the speed table, the rest the six trainings; ``skip_scores=true`` for the speed table alone.)

Known differences that stay (each library's own design): d3rlpy's IQL actor has a state-independent log-std and
fits its critics and value with one optimizer (robolearn: a state-dependent log-std head, separate optimizers);
d3rlpy's IQL re-evaluates Q'(s, a) and V(s) for the actor's weights (robolearn reuses the value step's
advantages); d3rlpy's CQL backs up Q' at the policy's mean action at s' (robolearn samples it, as CORL); d3rlpy
keeps its ensembles as lists of networks (robolearn: one batched ensemble per critic set). The FLOP counts are
each library's own, so these differences show up there.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import (  # noqa: E402
    RESULTS,
    WorkerProcess,
    episode_returns,
    serve,
    settings,
    timed_loop,
    write_result,
)

BATCH = 256
ALGOS = ("iql", "cql", "td3_bc")
NAMES = {"iql": "IQL", "cql": "CQL", "td3_bc": "TD3+BC"}
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm"}
D3RLPY_ARRAYS = ("observations", "actions", "rewards", "terminals", "timeouts")
WORKER_FLAG = "--d3rlpy-worker"  # this file as the d3rlpy side (internal: the parent starts it)


@dataclasses.dataclass
class Settings:
    """The dataset, the measurements and the two processes (`key=value` on the command line). Both libraries'
    hyperparameters are fixed to the same recipe per algorithm (the module docstring; `robolearn_algo`,
    `d3rlpy_config`): what varies here is the network width, the budgets and the evaluation."""

    dataset: str = "/work/bench_data/cheetah-run-expert-v0"  # a robolearn dataset (any format it reads)
    algos: list[str] = dataclasses.field(default_factory=lambda: list(ALGOS))  # of ALGOS
    speed_widths: list[int] = dataclasses.field(default_factory=lambda: [256, 64])  # hidden width(s) of the
    #                                 2-layer networks for the speed table (the first for % of peak)
    updates: int = 1000             # timed IQL / TD3+BC updates per round
    cql_updates: int = 100          # timed CQL updates per round (a CQL step is ~14x an IQL step's FLOPs)
    rounds: int = 3                 # interleaved rounds; the median counts
    sample_batches: int = 500
    time_fit: bool = False          # also time d3rlpy's fit() over the same updates (first width, once)
    profile_updates: int = 20       # updates under torch.profiler (CQL: a tenth)
    score_steps: int = 20_000       # IQL / TD3+BC gradient steps for the scores
    cql_score_steps: int = 5_000    # CQL gradient steps for the scores (0: none)
    score_hidden: list[int] = dataclasses.field(default_factory=lambda: [64, 64])
    eval_every: int = 5_000
    eval_episodes: int = 10
    eval_seed: int = 1000
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    d3rlpy_malloc_tuned: bool = False  # give d3rlpy's process the glibc malloc thresholds robolearn sets for
    #                                    itself (robolearn.core.cpu)
    robolearn_malloc_default: bool = False  # leave robolearn's process on glibc's default malloc thresholds
    skip_speed: bool = False
    skip_scores: bool = False
    d3rlpy_python: str | None = dataclasses.field(default_factory=lambda: os.environ.get("D3RLPY_PYTHON"))
    #                                 python of a venv with d3rlpy (see the module docstring); required
    out: str = str(RESULTS / "offline_vs_d3rlpy_cpu.json")


# --- shared by both processes (numpy and torch only) ------------------------------------------------------------

def single_thread() -> None:
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (only possible before any parallel work)
        pass


def sgemm_gflops(seconds: float = 1.0) -> dict[str, float]:
    """Single-thread fp32 matmul throughput, GFLOP/s: the best of 3 timings of each shape (~`seconds` each)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, shape in (("mm 256x256 @ 256x256", (256, 256)), ("bmm [2,256,256] @ [2,256,256]", (2, 256, 256))):
        a, b = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
        flops = 2 * 256**3 * (shape[0] if len(shape) == 3 else 1)
        fn = torch.bmm if len(shape) == 3 else torch.mm
        for _ in range(20):
            fn(a, b)
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds / 10:
            fn(a, b)
            n += 1
        reps = max(n * 3, 10)
        best = 0.0
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(reps):
                fn(a, b)
            best = max(best, reps * flops / (time.perf_counter() - start) / 1e9)
        out[name] = best
    return out


def count_flops(update: Any, steps: int = 2) -> dict[str, float]:
    """Matmul FLOPs of `steps` calls of `update()` (forward and backward as executed), per step, and by op."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        for _ in range(steps):
            update()
    by_op = {str(k): v / steps for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return {"flops_per_step": counter.get_total_flops() / steps, "by_op": by_op}


def profile_summary(step: Any, n: int, top: int = 10) -> dict[str, Any]:
    """torch.profiler over `n` calls of `step()`: top ops by self CPU time per step, the matmul share of op time,
    op time against wall time (the rest: Python and framework code between ops)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(n):
            step()
        wall = time.perf_counter() - start
    events = list(prof.key_averages())
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    rows = [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / 1e3 / n, "share_of_op_time":
             e.self_cpu_time_total / total, "calls_per_step": e.count / n}
            for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]]
    return {"steps": n, "wall_ms_per_step_profiled": wall * 1e3 / n, "op_ms_per_step": total / 1e3 / n,
            "op_time_share_of_wall": total / 1e6 / wall, "matmul_share_of_op_time": matmul / total,
            "ops_per_step": sum(e.count for e in events) / n, "top_ops": rows}


# --- the d3rlpy side: runs under the d3rlpy venv's interpreter, imports nothing of robolearn -------------------

def d3rlpy_config(algo: str, hidden: list[int]) -> Any:
    import d3rlpy
    from d3rlpy.models.encoders import VectorEncoderFactory
    from d3rlpy.optimizers import AdamFactory, CosineAnnealingLRFactory

    enc = VectorEncoderFactory(hidden_units=list(hidden))
    if algo == "iql":
        return d3rlpy.algos.IQLConfig(
            actor_encoder_factory=enc, critic_encoder_factory=enc, value_encoder_factory=enc, batch_size=BATCH,
            gamma=0.99, tau=0.005, n_critics=2, expectile=0.7, weight_temp=3.0, max_weight=100.0,
            actor_learning_rate=3e-4, critic_learning_rate=3e-4,
            actor_optim_factory=AdamFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=1_000_000)))
    if algo == "cql":
        return d3rlpy.algos.CQLConfig(
            actor_encoder_factory=enc, critic_encoder_factory=enc, batch_size=BATCH, gamma=0.99, tau=0.005,
            n_critics=2, actor_learning_rate=1e-4, critic_learning_rate=3e-4, temp_learning_rate=1e-4,
            alpha_learning_rate=0.0, initial_alpha=1.0, initial_temperature=1.0, conservative_weight=5.0,
            n_action_samples=10, soft_q_backup=False, max_q_backup=False)
    if algo == "td3_bc":
        return d3rlpy.algos.TD3PlusBCConfig(
            actor_encoder_factory=enc, critic_encoder_factory=enc, batch_size=BATCH, gamma=0.99, tau=0.005,
            n_critics=2, actor_learning_rate=3e-4, critic_learning_rate=3e-4, target_smoothing_sigma=0.2,
            target_smoothing_clip=0.5, alpha=2.5, update_actor_interval=2)
    raise ValueError(algo)


def d3rlpy_worker() -> None:
    """Serve JSON commands, one per line; d3rlpy's logs go to stderr."""
    serve(d3rlpy_handler)


def d3rlpy_handler() -> Any:
    """The d3rlpy side's command handler: load the dataset, build, time, train and query algorithms by key."""
    single_thread()
    import gc
    import importlib.metadata

    import d3rlpy
    import torch
    from d3rlpy.dataset import MDPDataset

    state: dict[str, Any] = {"dataset": None}
    algos: dict[str, Any] = {}

    def update(key: str) -> Any:
        """One gradient step of algorithm `key` on a batch it samples (what `fit` does per step)."""
        algo, dataset = algos[key], state["dataset"]
        return lambda: algo.update(dataset.sample_transition_batch(BATCH))

    def handle(cmd: dict) -> dict:
        op, dataset = cmd["op"], state["dataset"]
        if op == "load":
            with np.load(cmd["path"], allow_pickle=False) as f:
                a = {k: f[k] for k in D3RLPY_ARRAYS}
            dataset = state["dataset"] = MDPDataset(a["observations"], a["actions"], a["rewards"], a["terminals"],
                                                    a["timeouts"])
            return {"transitions": dataset.transition_count, "episodes": len(dataset.episodes),
                    "versions": {p: importlib.metadata.version(p) for p in ("d3rlpy", "torch", "numpy", "gymnasium")},
                    "python": sys.version.split()[0], "torch_threads": torch.get_num_threads(),
                    "torch_interop_threads": torch.get_num_interop_threads()}
        if op == "build":
            assert dataset is not None, "load first"
            d3rlpy.seed(cmd["seed"])
            np.random.seed(cmd["seed"])  # d3rlpy samples with the global numpy generator
            algo = d3rlpy_config(cmd["algo"], cmd["hidden"]).create(device="cpu:0")
            algo.build_with_dataset(dataset)
            algos[cmd["key"]] = algo
            return {}
        if op == "sgemm":
            return sgemm_gflops(cmd.get("seconds", 1.0))
        if op in ("time", "train"):
            return {"s": timed_loop(update(cmd["key"]), cmd["n"])}
        if op == "time_sample":
            return {"s": timed_loop(lambda: dataset.sample_transition_batch(BATCH), cmd["n"])}
        if op == "time_fit":
            from d3rlpy.logging import NoopAdapterFactory

            algo, n = algos[cmd["key"]], cmd["n"]
            gc.collect()
            start = time.perf_counter()
            algo.fit(dataset, n_steps=n, n_steps_per_epoch=n, show_progress=False,
                     logger_adapter=NoopAdapterFactory(), save_interval=10**9)
            return {"s": time.perf_counter() - start}
        if op == "flops":
            return count_flops(update(cmd["key"]))
        if op == "profile":
            return profile_summary(update(cmd["key"]), cmd["n"])
        if op == "predict":
            obs = np.asarray(cmd["obs"], dtype=np.float32)
            return {"actions": algos[cmd["key"]].predict(obs).astype(np.float32).tolist()}
        if op == "drop":
            algos.pop(cmd["key"], None)
            return {}
        return {"error": f"unknown op {op!r}"}

    return handle


def start_d3rlpy(python: str, log: Path, malloc_tuned: bool = False) -> WorkerProcess:
    """The d3rlpy process (this file under `python`), one thread; `malloc_tuned`: with robolearn's glibc malloc
    thresholds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if malloc_tuned:  # glibc reads the same thresholds robolearn.core.cpu sets from these variables
        from robolearn.core.cpu import MMAP_BYTES, TRIM_BYTES

        env.update(MALLOC_MMAP_THRESHOLD_=str(MMAP_BYTES), MALLOC_TRIM_THRESHOLD_=str(TRIM_BYTES))
    return WorkerProcess(python, __file__, WORKER_FLAG, log, env)


# --- the robolearn side ------------------------------------------------------------------------------------------

def robolearn_algo(algo: str, hidden: list[int], obs_dim: int, num_actions: int) -> Any:
    from robolearn.algos.offline.cql import CQL, CQLConfig
    from robolearn.algos.offline.iql import IQL, IQLConfig
    from robolearn.algos.offline.td3_bc import TD3BC, TD3BCConfig

    h = tuple(hidden)
    if algo == "iql":
        return IQL(obs_dim, num_actions, IQLConfig(
            actor_hidden=h, critic_hidden=h, value_hidden=h, batch_size=BATCH, gamma=0.99, tau=0.005, num_critics=2,
            expectile=0.7, beta=3.0, max_weight=100.0, actor_lr=3e-4, critic_lr=3e-4, value_lr=3e-4,
            actor_lr_decay_steps=1_000_000))
    if algo == "cql":
        return CQL(obs_dim, num_actions, CQLConfig(
            actor_hidden=h, critic_hidden=h, batch_size=BATCH, gamma=0.99, tau=0.005, num_critics=2, actor_lr=1e-4,
            critic_lr=3e-4, temperature_lr=1e-4, init_temperature=1.0, cql_alpha=5.0, cql_n_actions=10,
            cql_importance_sample=True, cql_lagrange=False, backup_entropy=False, cql_max_target_backup=False))
    if algo == "td3_bc":
        return TD3BC(obs_dim, num_actions, TD3BCConfig(
            actor_hidden=h, critic_hidden=h, batch_size=BATCH, gamma=0.99, tau=0.005, num_critics=2, actor_lr=3e-4,
            critic_lr=3e-4, policy_noise=0.2, noise_clip=0.5, actor_every=2, alpha=2.5))
    raise ValueError(algo)


def d3rlpy_arrays(data: Any) -> dict[str, np.ndarray]:
    """The dataset in d3rlpy's MDPDataset layout (one row per step; a timed-out episode keeps its o_T as one extra
    row, a terminated one does not): `benchmarks.speed.dataset_io.d3rlpy_arrays` on the dataset's arrays."""
    from benchmarks.speed.dataset_io import d3rlpy_arrays as convert

    return convert({"observations": np.asarray(data.observations["policy"], dtype=np.float32),
                    "actions": np.asarray(data.actions, dtype=np.float32),
                    "rewards": np.asarray(data.rewards, dtype=np.float32),
                    "terminations": np.asarray(data.terminations), "truncations": np.asarray(data.truncations),
                    "lengths": np.asarray(data.lengths)})


def evaluate(act: Any, task: str, episodes: int, seed: int) -> list[float]:
    """Returns of one episode per env of `episodes` batched envs (the C backend, one thread), deterministic `act`."""
    return episode_returns(act, task, episodes, seed, backend="mujoco", nthread=1).tolist()


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def speed(args: Settings, worker: WorkerProcess, buffer: Any, dims: tuple[int, int],
          peaks: list[dict]) -> dict:
    """Steps/s of both libraries per network width and algorithm, FLOPs per step, profiles."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out: dict[str, Any] = {}
    for width in args.speed_widths:
        hidden = [width, width]
        cells: dict[str, Any] = {}
        for algo in args.algos:
            n = args.cql_updates if algo == "cql" else args.updates
            warm = max(n // 10, 5)
            torch.manual_seed(0)
            ours = robolearn_algo(algo, hidden, *dims)
            key = f"speed-{algo}-{width}"
            worker(op="build", key=key, algo=algo, hidden=hidden, seed=0)

            def step(ours: Any = ours) -> None:
                ours.update(buffer.sample(BATCH, gen), gen)

            timed_loop(step, warm)
            worker(op="time", key=key, n=warm)
            rl_s, d3_s = [], []
            for r in range(args.rounds):
                if width == args.speed_widths[0]:  # the width whose % of peak is reported
                    peaks.append({"when": f"{algo} {width} round {r}", "loadavg_1min": os.getloadavg()[0],
                                  **sgemm_gflops()})
                if r % 2 == 0:  # alternate who goes first, against drift in the machine's load
                    rl_s.append(timed_loop(step, n))
                    d3_s.append(worker(op="time", key=key, n=n)["s"])
                else:
                    d3_s.append(worker(op="time", key=key, n=n)["s"])
                    rl_s.append(timed_loop(step, n))
                print(f"{NAMES[algo]} {width}x{width} round {r + 1}/{args.rounds}: robolearn {n / rl_s[-1]:.1f} "
                      f"steps/s, d3rlpy {n / d3_s[-1]:.1f} steps/s", flush=True)
            rl_rate, d3_rate = median([n / s for s in rl_s]), median([n / s for s in d3_s])
            cell: dict[str, Any] = {
                "updates_per_round": n, "warmup_updates": warm,
                "robolearn_steps_per_s": rl_rate, "robolearn_rounds_steps_per_s": [n / s for s in rl_s],
                "d3rlpy_steps_per_s": d3_rate, "d3rlpy_rounds_steps_per_s": [n / s for s in d3_s],
                "ratio": rl_rate / d3_rate, "loadavg_1min_after": os.getloadavg()[0]}
            if args.time_fit and width == args.speed_widths[0]:
                cell["d3rlpy_fit_steps_per_s"] = n / worker(op="time_fit", key=key, n=n)["s"]
            cell["robolearn_flops"] = count_flops(step)
            cell["d3rlpy_flops"] = worker(op="flops", key=key)
            if args.profile_updates:
                pn = max(args.profile_updates // (10 if algo == "cql" else 1), 2)
                cell["robolearn_profile"] = profile_summary(step, pn)
                cell["d3rlpy_profile"] = worker(op="profile", key=key, n=pn)
            worker(op="drop", key=key)
            gflop = {who: cell[f"{who}_flops"]["flops_per_step"] / 1e9 for who in ("robolearn", "d3rlpy")}
            print(f"{NAMES[algo]} {width}x{width}: robolearn {rl_rate:.1f} steps/s, d3rlpy {d3_rate:.1f} steps/s, "
                  f"{rl_rate / d3_rate:.2f}x; GFLOP/step robolearn {gflop['robolearn']:.3f}, d3rlpy "
                  f"{gflop['d3rlpy']:.3f}", flush=True)
            cells[algo] = cell
        out[f"{width}x{width}"] = cells
    # batch sampling alone (no update), both libraries
    n = args.sample_batches
    rl = [n / timed_loop(lambda: buffer.sample(BATCH, gen), n) for _ in range(3)]
    d3 = [n / worker(op="time_sample", n=n)["s"] for _ in range(3)]
    out["sampling_batches_per_s"] = {"robolearn buffer.sample(256)": median(rl),
                                     "d3rlpy sample_transition_batch(256)": median(d3),
                                     "robolearn_all": rl, "d3rlpy_all": d3}
    return out


def scores(args: Settings, worker: WorkerProcess, buffer: Any, dims: tuple[int, int], task: str,
           ref: tuple[float, float] | None) -> dict:
    """Both libraries train each algorithm for `score_steps` (at the same time, one core each), evaluated every
    `eval_every` steps by the same code in our simulator."""
    import torch

    from robolearn.eval.scores import normalized_score

    def normalise(ret: float) -> float | None:
        return None if ref is None else normalized_score(ret, *ref)

    out: dict[str, Any] = {}
    for algo in args.algos:
        steps = args.cql_score_steps if algo == "cql" else args.score_steps
        if steps <= 0:
            continue
        every = min(args.eval_every, steps)
        for seed in args.seeds:
            torch.manual_seed(seed)
            ours = robolearn_algo(algo, args.score_hidden, *dims)
            gen = torch.Generator().manual_seed(seed)
            key = f"score-{algo}-{seed}"
            worker(op="build", key=key, algo=algo, hidden=args.score_hidden, seed=seed)

            def d3_act(obs: torch.Tensor, key: str = key) -> torch.Tensor:
                return torch.as_tensor(np.asarray(worker(op="predict", key=key, obs=obs.numpy().tolist())["actions"],
                                                  dtype=np.float32))

            def rl_act(obs: torch.Tensor, ours: Any = ours) -> torch.Tensor:
                return ours.act({"policy": obs}, deterministic=True)

            curves: dict[str, list[dict]] = {"robolearn": [], "d3rlpy": []}
            wall = {"robolearn": 0.0, "d3rlpy": 0.0}
            done = 0
            while done < steps:
                chunk = min(every, steps - done)
                worker.send(op="train", key=key, n=chunk)  # d3rlpy trains on its core while robolearn trains here
                wall["robolearn"] += timed_loop(lambda ours=ours, gen=gen: ours.update(buffer.sample(BATCH, gen), gen),
                                                chunk)
                wall["d3rlpy"] += worker.recv()["s"]
                done += chunk
                for who, act in (("robolearn", rl_act), ("d3rlpy", d3_act)):
                    start = time.perf_counter()
                    rets = evaluate(act, task, args.eval_episodes, args.eval_seed)
                    mean = float(np.mean(rets))
                    curves[who].append({"gradient_steps": done, "return": mean, "return_std": float(np.std(rets)),
                                        "normalized_score": normalise(mean), "returns": rets,
                                        "eval_s": time.perf_counter() - start})
                print(f"{NAMES[algo]} seed {seed} step {done}: " + ", ".join(
                    f"{who} {c[-1]['return']:.1f} (norm {c[-1]['normalized_score'] or float('nan'):.1f})"
                    for who, c in curves.items()), flush=True)
            worker(op="drop", key=key)
            out.setdefault(algo, {"gradient_steps": steps, "hidden": args.score_hidden, "seeds": {}})
            out[algo]["seeds"][seed] = {"curves": curves, "train_wall_s": wall}
        if algo in out:
            for who in ("robolearn", "d3rlpy"):
                finals = [s["curves"][who][-1]["normalized_score"] for s in out[algo]["seeds"].values()]
                out[algo][f"{who}_final_normalized_score_mean"] = float(np.mean(finals)) if ref else None
                out[algo][f"{who}_final_return_mean"] = float(np.mean(
                    [s["curves"][who][-1]["return"] for s in out[algo]["seeds"].values()]))
    return out


def main() -> None:
    if sys.argv[1:] == [WORKER_FLAG]:
        d3rlpy_worker()
        return
    args = settings(Settings, __doc__)
    if not args.d3rlpy_python:
        sys.exit("d3rlpy_python= (or $D3RLPY_PYTHON) is required: see the module docstring")
    if set(args.algos) - set(ALGOS):
        sys.exit(f"algos= takes names of {ALGOS}, not {args.algos}")

    single_thread()
    import importlib.metadata

    from robolearn.core.cpu import tune_allocator

    malloc_tuned = False if args.robolearn_malloc_default else tune_allocator()

    import torch

    from robolearn.data.dataset import to_replay_buffer
    from robolearn.data.formats import load_dataset
    from robolearn.eval.scores import reference_returns

    started = time.perf_counter()
    loadavg = {"start": os.getloadavg()}
    data = load_dataset(args.dataset)
    task = data.metadata.get("task")
    ref = reference_returns(data.metadata, task) if task else None
    buffer = to_replay_buffer(data, ["policy"], gamma=0.99)
    dims = (int(data.observations["policy"].shape[1]), int(data.actions.shape[1]))
    n = len(data.rewards)
    print(f"{args.dataset}: {task}, {data.num_episodes} episodes, {n} transitions, reference returns {ref}; "
          f"load average {loadavg['start'][0]:.2f}", flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="offline_vs_d3rlpy."))
    worker = start_d3rlpy(args.d3rlpy_python, workdir / "d3rlpy_worker.log", args.d3rlpy_malloc_tuned)
    fields: dict[str, Any] = {}
    peaks: list[dict] = []
    try:
        npz = workdir / "dataset.npz"
        np.savez(npz, **d3rlpy_arrays(data))
        d3_info = worker(op="load", path=str(npz))
        npz.unlink()
        if d3_info["transitions"] != n:
            raise RuntimeError(f"d3rlpy holds {d3_info['transitions']} transitions, not {n}")
        peaks.append({"when": "start (d3rlpy process)", **worker(op="sgemm")})
        if not args.skip_speed:
            fields["speed"] = speed(args, worker, buffer, dims, peaks)
            loadavg["after_speed"] = os.getloadavg()
        if not args.skip_scores:
            fields["scores"] = scores(args, worker, buffer, dims, task, ref)
        peaks.append({"when": "end", **sgemm_gflops()})
        loadavg["end"] = os.getloadavg()
    finally:
        worker.close()

    # --- % of peak at the first speed width ---
    peak_key = "mm 256x256 @ 256x256"
    ours_peaks = [p[peak_key] for p in peaks if "d3rlpy" not in p["when"]]
    peak = median(ours_peaks)
    if "speed" in fields:
        first = f"{args.speed_widths[0]}x{args.speed_widths[0]}"
        for cell in fields["speed"][first].values():
            for who in ("robolearn", "d3rlpy"):
                achieved = cell[f"{who}_steps_per_s"] * cell[f"{who}_flops"]["flops_per_step"]
                cell[f"{who}_gflops_achieved"] = achieved / 1e9
                cell[f"{who}_pct_of_peak"] = 100.0 * achieved / (peak * 1e9)
    targets: dict[str, Any] = {}
    if "speed" in fields:
        first = fields["speed"][f"{args.speed_widths[0]}x{args.speed_widths[0]}"]
        targets["steps_per_s_3x_d3rlpy"] = {a: {"ratio": c["ratio"], "met": c["ratio"] >= 3} for a, c in first.items()}
    fields = {
        "settings": {k: v for k, v in dataclasses.asdict(args).items() if k != "out"},
        "malloc": {"robolearn_tuned": malloc_tuned, "d3rlpy_tuned": args.d3rlpy_malloc_tuned},
        "dataset": {"path": args.dataset, "task": task, "episodes": int(data.num_episodes), "transitions": n,
                    "obs_dim": dims[0], "act_dim": dims[1], "kind": data.metadata.get("kind"),
                    "return_mean": data.metadata.get("return_mean"), "ref_min_score": ref[0] if ref else None,
                    "ref_max_score": ref[1] if ref else None},
        "threads": {"robolearn": {"torch_threads": torch.get_num_threads(),
                                  "torch_interop_threads": torch.get_num_interop_threads()},
                    "d3rlpy": {"torch_threads": d3_info["torch_threads"],
                               "torch_interop_threads": d3_info["torch_interop_threads"]}},
        "versions": {**{p: importlib.metadata.version(p) for p in ("robolearn", "torch", "numpy", "gymnasium")},
                     "d3rlpy_venv": {**d3_info["versions"], "python": d3_info["python"]}},
        "sgemm_gflops_single_thread": {"peak_used": peak, "peak_shape": peak_key, "measurements": peaks},
        "loadavg_1_5_15min": loadavg, "total_s": time.perf_counter() - started,
        **fields, "targets": targets,
        "notes": [
            "speed: each library samples its own batch and takes one gradient step per timed call (d3rlpy: "
            "algo.update(dataset.sample_transition_batch(256)), fit()'s inner loop without its logging)",
            "torch.set_num_threads(1) and set_num_interop_threads(1) in both processes",
            "FLOPs per step: FlopCounterMode on each library's own update (matmuls, forward and backward)",
            "% of peak: steps/s x FLOPs/step over the median single-thread sgemm GFLOP/s (256x256 @ 256x256)",
            "scores: the two libraries of one algorithm train at the same time (one core each); evaluation by "
            "the same code in the sim (C backend), deterministic policies, normalised by the dataset's "
            "ref_min_score / ref_max_score",
            "no observation normalisation in either library",
        ]}
    write_result(args.out, "offline_vs_d3rlpy", fields)
    if "speed" in fields:
        for width, cells in fields["speed"].items():
            if width == "sampling_batches_per_s":
                continue
            for algo, c in cells.items():
                extra = (f", % of peak robolearn {c['robolearn_pct_of_peak']:.1f} d3rlpy {c['d3rlpy_pct_of_peak']:.1f}"
                         if "robolearn_pct_of_peak" in c else "")
                print(f"{width} {NAMES[algo]:7s} robolearn {c['robolearn_steps_per_s']:8.1f} steps/s  d3rlpy "
                      f"{c['d3rlpy_steps_per_s']:8.1f} steps/s  {c['ratio']:.2f}x{extra}")
    if "scores" in fields:
        for algo, s in fields["scores"].items():
            print(f"{NAMES[algo]} after {s['gradient_steps']} steps: normalised score robolearn "
                  f"{s['robolearn_final_normalized_score_mean']}, d3rlpy {s['d3rlpy_final_normalized_score_mean']}")


if __name__ == "__main__":
    main()
