"""The GPU benchmark suite: what robolearn does on one NVIDIA H100/H200, measured in one short device run.

GPU machines are lent to this project rarely and for minutes at a time: this driver turns one loan into the numbers
the GPU paths need, each part time-boxed so that a slow compile or a crash in one part still leaves the others'
results. `benchmarks/gpu_suite.sh` runs the parts one process each, in this order, and gives each a budget:

- `mjx`: MJX env-steps/s of the jitted batched step (physics, task math, auto-reset: `sim.env.Env.batched_step`)
  for cartpole-swingup, cheetah-run and ant-velocity at 4096, 16384 and 65536 envs, impl="jax" ("warp" only where
  `warp` is installed); compile time apart from stepping; and, at one size, the torch VecEnv (`sim.make`) on the
  same task, to show what the DLPack bridge and the log costs. Sizes go up across all tasks together and a size is
  skipped (and recorded so) when its predicted compile + run would overrun the part's budget.
- `smoke`: MJX on the default JAX device against the MuJoCo C engine on the CPU for one task: same initial states,
  same random actions, 100 steps; max abs observation and reward differences, next to the tolerances of the sim's
  own backend test (tests/sim/test_sim_env.py::test_backends_agree).
- `ppo`: `robolearn train` (PPO, cartpole-swingup, MJX, 4096 envs, the learner on the GPU) in a child process,
  stopped when the mean episode return reaches 800 or at a wall-clock cap; the curve and the time to 800.
- `offpolicy`: SAC and IQL gradient updates/s at batch 256 with 256x256 networks on synthetic replay data, one
  seed (S=1), eager and `compile=True`; then IQL and SAC seed-batched (`robolearn.algos.seeds.SeedBatch`, S = 1,
  8, 64 seeds in one vmapped update), eager and compiled, as seed-updates/s.
- `summary`: the headline numbers of every part's JSON, and each part's exit status.

Every part writes `$OUT/<name>.json` (machine info included) as soon as it has something, and rewrites it as it goes.

    bash benchmarks/gpu_suite.sh            # on the GPU machine (< 8 minutes)
    bash benchmarks/gpu_suite.sh --quick    # tiny sizes on a CPU: checks the whole suite end to end
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
T0 = time.perf_counter()  # this process's start: part budgets count from here

# --- robolearn names this driver uses: the ONLY place it imports robolearn -------------------------------------
# "module:attribute", imported on first use (`sim` is imported directly: its layout is fixed).
ROBOLEARN_NAMES: dict[str, str] = {
    "cli_main": "robolearn.commands.cli:main",          # the `robolearn` command (PPO runs through `robolearn train`)
    "SAC": "robolearn.algos.online.sac:SAC",
    "SACConfig": "robolearn.algos.online.sac:SACConfig",
    "IQL": "robolearn.algos.offline.iql:IQL",
    "IQLConfig": "robolearn.algos.offline.iql:IQLConfig",
    "SeedBatch": "robolearn.algos.seeds:SeedBatch",
}


def robolearn_name(key: str) -> Any:
    """The robolearn object `key` of `ROBOLEARN_NAMES`."""
    module, attr = ROBOLEARN_NAMES[key].split(":")
    return getattr(importlib.import_module(module), attr)
# --- end of the robolearn names ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one suite run: the GPU's, or tiny ones that check the suite on a CPU (`--quick`)."""

    tasks: tuple[str, ...]
    sizes: tuple[int, ...]          # num_envs, ascending; the first is also where resets are compiled
    bridge_task: str                # the torch VecEnv runs this task at sizes[0] (PPO's task and num_envs)
    smoke_task: str
    smoke_steps: int
    ppo_envs: int
    ppo_target: float
    ppo_cap_s: float                # wall-clock cap of the training process, start and compile included
    timed_s: float                  # seconds of timed stepping / updates per measurement
    replay_size: int
    hidden: tuple[int, int]
    batch_size: int
    seeds: tuple[int, ...]          # seed-batched IQL and SAC: the numbers of seeds S in one update
    compiled: bool = True           # offpolicy: also the compiled rows (a test's dry run leaves them out)


FULL = Settings(tasks=("cartpole-swingup", "cheetah-run", "ant-velocity"), sizes=(4096, 16384, 65536),
                bridge_task="cartpole-swingup", smoke_task="cheetah-run", smoke_steps=100, ppo_envs=4096,
                ppo_target=800.0, ppo_cap_s=120.0, timed_s=1.0, replay_size=1_000_000, hidden=(256, 256),
                batch_size=256, seeds=(1, 8, 64))
# The cartpole everywhere on a CPU: MJX compiles take ~1 minute each there, and the parts reuse one another's
# compiled programs through the persistent cache (same task, same num_envs).
QUICK = Settings(tasks=("cartpole-swingup",), sizes=(16,), bridge_task="cartpole-swingup",
                 smoke_task="cartpole-swingup", smoke_steps=100, ppo_envs=16, ppo_target=800.0, ppo_cap_s=40.0,
                 timed_s=0.3, replay_size=10_000, hidden=(256, 256), batch_size=256, seeds=(2,))

FILES = {"mjx": "mjx_throughput.json", "smoke": "mjx_vs_c_smoke.json", "ppo": "ppo_cartpole_swingup.json",
         "offpolicy": "offpolicy_updates.json", "summary": "summary.json"}


def elapsed() -> float:
    return time.perf_counter() - T0


# --- machine info and results -------------------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def nvidia_smi() -> str:
    """The GPU's name, driver and memory as nvidia-smi reports them (once per process)."""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {e}"


def machine_info() -> dict[str, Any]:
    """GPU, CPU and library versions (and what the loaded JAX / torch see), for every result file."""
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info: dict[str, Any] = {
        "cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "versions": {d: _version(d) for d in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "torch",
                                              "mujoco", "mujoco-core", "mujoco-mjx", "warp-lang", "numpy",
                                              "tensordict", "hydra-core")},
        "env": {k: os.environ.get(k) for k in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                                               "XLA_FLAGS", "ROBOLEARN_JAX_CACHE", "PYTHONPATH")},
    }
    info["nvidia_smi"] = nvidia_smi()
    if "jax" in sys.modules:
        import jax

        info["jax_backend"] = jax.default_backend()
        info["jax_devices"] = [d.device_kind for d in jax.devices()]
    if "torch" in sys.modules:
        import torch

        info["torch_cuda"] = torch.version.cuda
        info["torch_gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


class Result:
    """One part's JSON file, rewritten atomically at every `update` so a killed part leaves what it had."""

    def __init__(self, out_dir: Path, part: str, settings: Settings, budget_s: float):
        self.path = out_dir / FILES[part]
        self.data: dict[str, Any] = {"benchmark": f"gpu_suite/{part}", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                                     "status": "running", "budget_s": budget_s,
                                     "settings": dataclasses.asdict(settings)}

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.data["elapsed_s"] = round(elapsed(), 2)
        self.data["machine"] = machine_info()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        os.replace(tmp, self.path)


def log(msg: str) -> None:
    print(f"[{elapsed():7.1f}s] {msg}", flush=True)


# --- MJX throughput ---------------------------------------------------------------------------------------------

class MjxBench:
    """Builds each task's MJX `Env`, compiles its reset once (at sizes[0]) and its step per size, and times it."""

    def __init__(self, settings: Settings):
        import jax

        self.jax = jax
        self.s = settings
        self.envs: dict[tuple[str, str], Any] = {}
        self.resets: dict[tuple[str, str], Any] = {}   # (task, impl) -> reset state at sizes[0]
        self.step_compile_s: dict[tuple[str, str], float] = {}
        self.reset_compile_s: dict[tuple[str, str], float] = {}
        self.step_s: dict[tuple[str, str, int], float] = {}

    def env(self, task: str, impl: str) -> Any:
        if (task, impl) not in self.envs:
            import sim
            from sim.env import Env

            t = sim.make_task(task)
            self.envs[(task, impl)] = Env(t, sim.make_backend(t, "mjx", impl=impl))
        return self.envs[(task, impl)]

    def reset_state(self, task: str, impl: str) -> Any:
        """The reset state of sizes[0] envs (compiled once per task; larger sizes tile it)."""
        if (task, impl) not in self.resets:
            jax = self.jax
            env = self.env(task, impl)
            keys = jax.random.split(jax.random.PRNGKey(0), self.s.sizes[0])
            start = time.perf_counter()
            reset = jit_reset(env).lower(keys).compile()
            self.reset_compile_s[(task, impl)] = time.perf_counter() - start
            self.resets[(task, impl)] = jax.block_until_ready(reset(keys))
        return self.resets[(task, impl)]

    def estimate_s(self, task: str, impl: str, n: int) -> float:
        """Predicted seconds to compile and time (task, n): what was seen, scaled; 0 when nothing was seen yet."""
        seen = list(self.step_compile_s.values())
        if not seen:
            return 0.0
        compile_s = self.step_compile_s.get((task, impl), 1.5 * max(seen)) * 1.2
        if (task, impl) not in self.reset_compile_s:
            compile_s += 1.5 * max(self.reset_compile_s.values(), default=0.0)
        smaller = [(m, s) for (t, i, m), s in self.step_s.items() if t == task and i == impl and m < n]
        step = max(smaller)[1] * n / max(smaller)[0] if smaller else 0.05
        return compile_s + self.s.timed_s + 10 * step + 2.0

    def measure(self, task: str, impl: str, n: int) -> dict[str, Any]:
        """Env-steps/s of the jitted `Env.batched_step` at n envs, desynchronised episodes (resets every step)."""
        import jax.numpy as jnp
        import numpy as np

        jax = self.jax
        env = self.env(task, impl)
        state = self.reset_state(task, impl)
        reps = -(-n // self.s.sizes[0])
        # A copy (tiled to n envs): the step donates its state, and the reset state is kept for the other sizes.
        state = jax.jit(lambda s: jax.tree.map(lambda x: jnp.copy(jnp.tile(x, (reps,) + (1,) * (x.ndim - 1))[:n]),
                                               s))(state)
        rng = np.random.default_rng(0)
        steps0 = rng.integers(0, env.cfg.episode_length, n).astype(np.int32)
        state = state.replace(info={**state.info, "steps": jnp.asarray(steps0)})
        actions = [jnp.asarray(rng.uniform(-1, 1, (n, env.task.num_actions)).astype(np.float32)) for _ in range(4)]
        start = time.perf_counter()
        lowered = jit_step(env).lower(state, actions[0])
        lower_s = time.perf_counter() - start
        step = lowered.compile()
        compile_s = time.perf_counter() - start - lower_s
        self.step_compile_s[(task, impl)] = lower_s + compile_s
        state, _ = step(state, actions[0])  # first call: buffers, launch set-up
        jax.block_until_ready(state)
        start = time.perf_counter()
        for i in range(3):
            state, _ = step(state, actions[i % 4])
        jax.block_until_ready(state)
        per_step = (time.perf_counter() - start) / 3
        steps = int(min(max(self.s.timed_s / max(per_step, 1e-6), 10), 5000))
        start = time.perf_counter()
        for i in range(steps):
            state, _ = step(state, actions[i % 4])
        jax.block_until_ready(state)
        seconds = time.perf_counter() - start
        self.step_s[(task, impl, n)] = seconds / steps
        cfg = env.cfg
        row = {"kind": "raw_jax_step", "task": task, "impl": impl, "num_envs": n,
               "env_steps_per_s": n * steps / seconds,
               "physics_steps_per_s": n * steps * cfg.n_substeps * cfg.action_repeat / seconds,
               "step_ms": 1e3 * seconds / steps, "steps_timed": steps,
               "reset_compile_s": self.reset_compile_s.get((task, impl)), "step_lower_s": lower_s,
               "step_compile_s": compile_s, "peak_device_bytes": peak_bytes(jax)}
        return row

    def measure_vecenv(self, task: str, impl: str, n: int) -> dict[str, Any]:
        """Env-steps/s of the torch VecEnv (`sim.make`): the same step plus log, DLPack hand-off and torch actions."""
        import torch

        import sim

        jax = self.jax
        device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
        start = time.perf_counter()
        env = sim.make(task, num_envs=n, backend="mjx", impl=impl, device=device, check_actions=False)
        make_s = time.perf_counter() - start
        gen = torch.Generator().manual_seed(0)
        actions = [(torch.rand(n, env.num_actions, generator=gen) * 2 - 1).to(device) for _ in range(4)]
        env.episode_length_buf = torch.randint(0, env.max_episode_length, (n,), generator=gen)

        def sync(rew: torch.Tensor) -> None:
            float(rew.sum())

        for i in range(4):
            _, rew, _, _ = env.step(actions[i % 4])
        sync(rew)
        start = time.perf_counter()
        for i in range(3):
            _, rew, _, _ = env.step(actions[i % 4])
        sync(rew)
        per_step = (time.perf_counter() - start) / 3
        steps = int(min(max(self.s.timed_s / max(per_step, 1e-6), 10), 5000))
        start = time.perf_counter()
        for i in range(steps):
            _, rew, _, _ = env.step(actions[i % 4])
        sync(rew)
        seconds = time.perf_counter() - start
        env.close()
        row = {"kind": "torch_vecenv", "task": task, "impl": impl, "num_envs": n, "device": device,
               "env_steps_per_s": n * steps / seconds, "step_ms": 1e3 * seconds / steps, "steps_timed": steps,
               "make_and_compile_s": make_s}
        raw = self.step_s.get((task, impl, n))
        if raw:
            row["raw_step_ms"] = 1e3 * raw
            row["bridge_overhead_ms"] = 1e3 * (seconds / steps - raw)
            row["ratio_to_raw"] = raw / (seconds / steps)
        return row


def jit_reset(env: Any) -> Any:
    """The jitted batched reset; one definition so every part (and the VecEnv) shares its cached compilation."""
    import jax

    return jax.jit(env.batched_reset)


def jit_step(env: Any) -> Any:
    """The jitted batched step (state donated); one definition so `mjx` and `smoke` share its cached compilation."""
    import jax

    return jax.jit(env.batched_step, donate_argnums=0)


def peak_bytes(jax: Any) -> int | None:
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # not every backend has memory stats
        return None
    return stats.get("peak_bytes_in_use")


def module_available(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:  # an installed module that fails to import is as good as absent here
        return False


def jax_setup() -> Any:
    """JAX, after sim's set-up (persistent compilation cache, no GPU pre-allocation, full-precision matmuls)."""
    import sim.core  # noqa: F401  (imports sim._jax, which configures JAX before its first use)

    # isort: split
    import jax

    return jax


def part_mjx(s: Settings, res: Result, budget_s: float) -> None:
    jax = jax_setup()

    gpu = jax.default_backend() == "gpu"
    warp = module_available("warp")
    impls = ["jax"] + (["warp"] if warp and gpu else [])
    res.update(gpu=gpu, jax_cache_dir=str(jax.config.jax_compilation_cache_dir),
               jax_cache_entries_at_start=count_files(os.environ.get("ROBOLEARN_JAX_CACHE")),
               impl_warp="measured" if "warp" in impls else
               ("not installed: `import warp` fails (mujoco_warp needs warp-lang)" if not warp else "no GPU"),
               note="raw_jax_step: jit(Env.batched_step) with the state donated, called in a Python loop (async "
                    "dispatch), episodes desynchronised so some env resets every step; compile excluded from the "
                    "rate. torch_vecenv: sim.make(...).step with torch actions on the same device, as training "
                    "calls it. Resets are compiled once per task at sizes[0]; larger sizes tile that state.")
    bench = MjxBench(s)
    # Sizes go up across all tasks together, so the budget cuts the largest sizes. The VecEnv runs right after its
    # task's raw step at the smallest size: its compiled reset and step are then in the cache for the PPO part.
    plan: list[tuple[str, str, str, int]] = []
    for i, n in enumerate(s.sizes):
        for task in s.tasks:
            plan += [("raw", task, impl, n) for impl in impls if impl == "jax" or i == 0]
            if i == 0 and task == s.bridge_task:
                plan.append(("vecenv", task, "jax", n))
    rows: list[dict[str, Any]] = []
    for kind, task, impl, n in plan:
        predicted = bench.estimate_s(task, impl, n)
        if elapsed() + predicted > budget_s:
            why = f"budget: {elapsed():.0f} s spent + {predicted:.0f} s predicted > {budget_s:.0f} s"
            rows.append({"kind": kind, "task": task, "impl": impl, "num_envs": n, "skipped": why})
            log(f"skip {kind} {task} {impl} {n}: {rows[-1]['skipped']}")
            res.update(rows=rows)
            continue
        log(f"{kind} {task} impl={impl} num_envs={n} (predicted {predicted:.0f} s)")
        started = elapsed()
        try:
            row = bench.measure(task, impl, n) if kind == "raw" else bench.measure_vecenv(task, impl, n)
        except Exception as e:  # one size failing (out of memory, a compile error) leaves the others
            row = {"kind": kind, "task": task, "impl": impl, "num_envs": n, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc(limit=6)}
        row["item_wall_s"] = elapsed() - started  # compile and timing together: what the budget paid
        rows.append(row)
        log(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items() if k != "traceback"}))
        res.update(rows=rows)
    res.update(rows=rows, step_compile_s=_keyed(bench.step_compile_s), reset_compile_s=_keyed(bench.reset_compile_s))


def _keyed(d: dict[tuple[str, ...], float]) -> dict[str, float]:
    return {"/".join(map(str, k)): v for k, v in d.items()}


def count_files(path: str | None) -> int | None:
    if not path:
        return None
    if not Path(path).is_dir():
        return 0
    return sum(len(files) for _, _, files in os.walk(path))


# --- MJX (default device) vs the C engine (CPU) -----------------------------------------------------------------

def part_smoke(s: Settings, res: Result, budget_s: float) -> None:
    """Same reset keys and actions through both backends' jitted batched step; max abs differences per step."""
    del budget_s  # one task, one size: nothing to skip
    import numpy as np

    jax = jax_setup()

    import sim
    from sim.env import Env

    task, n, steps = s.smoke_task, s.sizes[0], s.smoke_steps
    spec = sim.task_spec(task)
    res.update(task=task, num_envs=n, steps=steps, mjx_device=str(jax.devices()[0]), c_device="cpu",
               reference={"test": "tests/sim/test_sim_env.py::test_backends_agree", "atol": 1e-4, "rtol": 1e-3,
                          "equivalence_steps": spec.equivalence_steps,
                          "note": "the test compares 4 envs over equivalence_steps from the first step's observation; "
                                  "MJX runs float32, the C engine float64"})
    rng = np.random.default_rng(0)
    mj_env = Env(sim.make_task(task), sim.make_backend(sim.make_task(task), "mjx"))
    actions = rng.uniform(-1, 1, (steps, n, mj_env.task.num_actions)).astype(np.float32)

    def rollout(env: Any, device: Any) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        with jax.default_device(device):
            keys = jax.random.split(jax.random.PRNGKey(0), n)
            start = time.perf_counter()
            state = jit_reset(env)(keys)
            first_obs = np.asarray(state.obs["policy"])
            reset_s = time.perf_counter() - start
            step = jit_step(env)
            start = time.perf_counter()
            state, _ = step(state, jax.numpy.asarray(actions[0]))
            first_step_s = time.perf_counter() - start
            obs, rew = [first_obs, np.asarray(state.obs["policy"])], [np.asarray(state.reward)]
            start = time.perf_counter()
            for t in range(1, steps):
                state, _ = step(state, jax.numpy.asarray(actions[t]))
                obs.append(np.asarray(state.obs["policy"]))
                rew.append(np.asarray(state.reward))
            timing = {"reset_compile_and_run_s": reset_s, "first_step_compile_and_run_s": first_step_s,
                      "steps_s": time.perf_counter() - start}
        return np.stack(obs), np.stack(rew), timing

    log(f"smoke: {task} MJX on {jax.devices()[0]}, {n} envs, {steps} steps")
    obs_m, rew_m, t_m = rollout(mj_env, jax.devices()[0])
    log("smoke: the C engine on the CPU")
    c_env = Env(sim.make_task(task), sim.make_backend(sim.make_task(task), "mujoco"))
    obs_c, rew_c, t_c = rollout(c_env, jax.devices("cpu")[0])
    close = getattr(c_env.backend, "close", None)
    if close is not None:
        close()
    dobs = np.abs(obs_m.astype(np.float64) - obs_c).reshape(steps + 1, -1).max(axis=1)
    drew = np.abs(rew_m.astype(np.float64) - rew_c).reshape(steps, -1).max(axis=1)
    tol_obs = (np.abs(obs_m.astype(np.float64) - obs_c) <= 1e-4 + 1e-3 * np.abs(obs_c)).reshape(steps + 1, -1).all(1)
    tol_rew = (np.abs(rew_m.astype(np.float64) - rew_c) <= 1e-4 + 1e-3 * np.abs(rew_c)).reshape(steps, -1).all(1)
    within = np.concatenate([[tol_obs[0]], tol_obs[1:] & tol_rew])
    eq = spec.equivalence_steps
    res.update(
        max_abs_obs_diff=float(dobs.max()), max_abs_reward_diff=float(drew.max()),
        max_abs_obs_diff_within_equivalence_steps=float(dobs[:eq + 1].max()),
        max_abs_reward_diff_within_equivalence_steps=float(drew[:eq].max()),
        within_test_tolerance_equivalence_steps=bool(within[:eq + 1].all()),
        within_test_tolerance_all_steps=bool(within.all()),
        first_step_outside_tolerance=int(np.argmin(within)) if not within.all() else None,
        obs_diff_per_step=[float(x) for x in dobs], reward_diff_per_step=[float(x) for x in drew],
        obs_scale=float(np.abs(obs_c).max()), reward_mean_c=float(rew_c.mean()), timing_mjx=t_m, timing_c=t_c)
    log(f"smoke: max |obs diff| {dobs.max():.3g} (first {eq} steps {dobs[:eq + 1].max():.3g}), "
        f"max |reward diff| {drew.max():.3g}")


# --- PPO to a return of 800 -----------------------------------------------------------------------------------

def part_ppo(s: Settings, res: Result, budget_s: float) -> None:
    """`robolearn train` in a child process; its metrics.jsonl is followed until the return target or the cap."""
    import torch

    gpu = torch.cuda.is_available()
    run_dir = Path(tempfile.mkdtemp(prefix="gpu_suite_ppo_"))
    overrides = ["env=cartpole-swingup", "algo=ppo", f"device={'cuda' if gpu else 'cpu'}", "env.backend=mjx",
                 f"env.num_envs={s.ppo_envs}", "iterations=100000", "seed=0", "video=false", "progress=false",
                 "checkpoint_interval=1000000", f"run_dir={run_dir}"]
    cap = min(s.ppo_cap_s, budget_s - elapsed() - 5)
    res.update(command="robolearn train " + " ".join(overrides), target_return=s.ppo_target, cap_s=cap,
               note="mean_return: mean over the last 100 finished training episodes (stochastic policy), as the "
                    "runner logs it; t_s: seconds since the training process started (imports, env compile "
                    "included); wall_s: the runner's own training time (iterations only)")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", "train-cli", "--", *overrides]
    log("ppo: " + " ".join(cmd))
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    metrics, pos = run_dir / "metrics.jsonl", 0
    curve: list[dict[str, Any]] = []
    reached: dict[str, Any] | None = None
    stop = "cap"
    last_write = 0.0
    while True:
        t = time.perf_counter() - start
        if metrics.exists():
            with open(metrics, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            done = chunk.rfind(b"\n") + 1
            pos += done
            for line in chunk[:done].decode().splitlines():
                row = json.loads(line)
                point = {"t_s": round(t, 2), **{k: row.get(k) for k in ("iteration", "env_steps", "wall_s",
                                                                        "mean_return", "env_steps_per_s",
                                                                        "collection_steps_per_s")}}
                curve.append(point)
                if reached is None and (row.get("mean_return") or -math.inf) >= s.ppo_target:
                    reached = point
        if reached is not None:
            stop = "target"
            break
        if proc.poll() is not None:
            stop = f"process exited with {proc.returncode}"
            break
        if t > cap:
            break
        if t - last_write > 5:
            last_write = t
            res.update(curve=curve, running_s=round(t, 1))
        time.sleep(0.25)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    first = curve[0] if curve else None
    res.update(curve=curve, stopped_by=stop, reached=reached, process_s=round(time.perf_counter() - start, 2),
               time_to_target_s=reached["t_s"] if reached else None,
               train_wall_to_target_s=reached["wall_s"] if reached else None,
               env_steps_to_target=reached["env_steps"] if reached else None,
               first_iteration_t_s=first["t_s"] if first else None,
               best_mean_return=max((p["mean_return"] for p in curve if p["mean_return"] is not None), default=None),
               median_env_steps_per_s=statistics.median(p["env_steps_per_s"] for p in curve) if curve else None)
    log(f"ppo: stopped by {stop}; reached {reached}")
    if reached is None and proc.returncode not in (0, None) and stop.startswith("process exited"):
        raise RuntimeError(f"robolearn train exited with {proc.returncode} (its traceback is in the log)")


def part_train_cli(overrides: list[str]) -> int:
    """The child of `ppo`: the robolearn command line, as `robolearn train ...` runs it."""
    return int(robolearn_name("cli_main")(["train", *overrides]) or 0)


# --- SAC / IQL updates per second -----------------------------------------------------------------------------

def part_offpolicy(s: Settings, res: Result, budget_s: float) -> None:
    """Updates/s of SAC and IQL (eager, compile=True) on synthetic cheetah-run-sized replay data."""
    import torch
    import torch._dynamo

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    obs_dim, num_actions, b, h = 17, 6, s.batch_size, tuple(s.hidden)  # cheetah-run: 17 observations, 6 actions
    gen = torch.Generator(device=dev).manual_seed(0)
    data = {"obs": torch.randn(s.replay_size, obs_dim, device=dev, generator=gen),
            "next_obs": torch.randn(s.replay_size, obs_dim, device=dev, generator=gen),
            "actions": torch.rand(s.replay_size, num_actions, device=dev, generator=gen) * 2 - 1,
            "rewards": torch.rand(s.replay_size, device=dev, generator=gen),
            "discount": torch.full((s.replay_size,), 0.99, device=dev)}

    def sample() -> dict[str, Any]:
        idx = torch.randint(0, s.replay_size, (b,), device=dev, generator=gen)
        return {"obs": {"policy": data["obs"][idx]}, "next_obs": {"policy": data["next_obs"][idx]},
                "actions": data["actions"][idx], "rewards": data["rewards"][idx], "discount": data["discount"][idx]}

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def make(algo: str, compiled: bool, seeds: int = 0, cuda_graphs: bool = False) -> Callable[[], Any]:
        if seeds:  # seed-batched: S learners in one vmapped update, one [S, B] draw of indices per update
            if algo == "sac":
                cfg = robolearn_name("SACConfig")(batch_size=b, actor_hidden=h, critic_hidden=h, compile=compiled)
                learners = [robolearn_name("SAC")(obs_dim, obs_dim, num_actions, cfg, dev) for _ in range(seeds)]
            else:
                cfg = robolearn_name("IQLConfig")(batch_size=b, actor_hidden=h, critic_hidden=h, value_hidden=h,
                                                  compile=compiled)
                learners = [robolearn_name("IQL")(obs_dim, num_actions, cfg, dev) for _ in range(seeds)]
            batch = robolearn_name("SeedBatch")(learners, cuda_graphs=cuda_graphs)
            gens = [torch.Generator(device=dev).manual_seed(k) for k in range(seeds)]

            def update() -> Any:
                idx = torch.randint(0, s.replay_size, (seeds, b), device=dev, generator=gen)
                return batch.update({"obs": {"policy": data["obs"][idx]}, "next_obs": {"policy": data["next_obs"][idx]},
                                     "actions": data["actions"][idx], "rewards": data["rewards"][idx],
                                     "discount": data["discount"][idx]}, gens)
            return update
        if algo == "sac":
            sac = robolearn_name("SAC")(obs_dim, obs_dim, num_actions, robolearn_name("SACConfig")(
                batch_size=b, actor_hidden=h, critic_hidden=h, compile=compiled), dev)
            return lambda: sac.update(sample(), gen)
        iql = robolearn_name("IQL")(obs_dim, num_actions, robolearn_name("IQLConfig")(
            batch_size=b, actor_hidden=h, critic_hidden=h, value_hidden=h, compile=compiled), dev)
        return lambda: iql.update(sample(), gen)

    res.update(device=str(dev), torch_threads=torch.get_num_threads(), obs_dim=obs_dim, num_actions=num_actions,
               batch_size=b, hidden=list(h),
               note="one update: SAC = critic step + actor step + temperature step (update with actor_every=1, "
                    "2 critics); IQL = value + critic + actor steps. Batches are drawn on the device from a synthetic "
                    "replay of replay_size random transitions (indexing included in the timing). Rate: median of "
                    "3 rounds after warm-up; the first update's time includes compilation. Seed-batched rows (S >= 1, "
                    "name <algo>_seeds<S>_*): updates_per_s counts updates of all S seeds together, "
                    "seed_updates_per_s = S x that.")
    rows: list[dict[str, Any]] = []
    plan = [("sac", False, 0, False), ("iql", False, 0, False)]
    plan += [("sac", True, 0, False), ("iql", True, 0, False)] if s.compiled else []
    # seed-batched: every eager row first, then the compiled ones largest S first (each compile costs ~30 s), then
    # CUDA-graph replay of the compiled update (a GPU only) at the largest and smallest S
    plan += [(algo, False, n, False) for algo in ("iql", "sac") for n in s.seeds]
    if s.compiled:
        plan += [(algo, True, n, False) for n in sorted(s.seeds, reverse=True) for algo in ("iql", "sac")]
    if s.compiled and dev.type == "cuda":
        plan += [(algo, True, n, True) for n in (max(s.seeds), min(s.seeds)) for algo in ("iql", "sac")]
    seen_rate: dict[str, float] = {}
    for algo, compiled, seeds, graphs in plan:
        mode = "cudagraphs" if graphs else "compiled" if compiled else "eager"
        label = f"{algo}{f'_seeds{seeds}' if seeds else ''}_{mode}"
        predicted = 4 * s.timed_s + (30.0 if compiled else 5.0)
        if elapsed() + predicted > budget_s:
            rows.append({"name": label, "skipped": f"budget: {elapsed():.0f} s spent + ~{predicted:.0f} s > "
                                                  f"{budget_s:.0f} s"})
            log(f"skip {label}: {rows[-1]['skipped']}")
            res.update(rows=rows)
            continue
        log(f"offpolicy: {label}")
        try:
            if compiled:  # each row's graphs from scratch: Dynamo's cache is per code object, and a row's new
                torch._dynamo.reset()  # learners would otherwise add recompiles until it falls back to eager
            start = time.perf_counter()
            update = make(algo, compiled, seeds, graphs)
            update()
            sync()
            first_s = time.perf_counter() - start
            for _ in range(2 if compiled else 0):  # a compiled update may recompile once (optimizer state, guards)
                update()
            sync()
            start = time.perf_counter()
            for _ in range(10):
                update()
            sync()
            per = (time.perf_counter() - start) / 10
            n = int(min(max(s.timed_s / per, 20), 20000))
            rates = []
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(n):
                    update()
                sync()
                rates.append(n / (time.perf_counter() - start))
            rate = statistics.median(rates)
            row = {"name": label, "algo": algo, "compile": compiled, "cuda_graphs": graphs, "S": max(seeds, 1),
                   "seed_batched": bool(seeds),
                   "updates_per_s": rate, "seed_updates_per_s": max(seeds, 1) * rate, "rounds": rates,
                   "updates_per_round": n, "first_update_s": first_s}
            seen_rate[label] = row["updates_per_s"]
        except Exception as e:  # compile=True on a new torch can fail; the eager numbers stay
            row = {"name": label, "algo": algo, "compile": compiled, "S": max(seeds, 1),
                   "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-8000:]}
        rows.append(row)
        log(json.dumps({k: v for k, v in row.items() if k not in ("traceback", "rounds")}))
        res.update(rows=rows)
    if "sac_eager" in seen_rate and "sac_compiled" in seen_rate:
        res.update(sac_compile_speedup=seen_rate["sac_compiled"] / seen_rate["sac_eager"])


# --- summary ------------------------------------------------------------------------------------------------------

def part_summary(out_dir: Path, rcs: str) -> None:
    """One small JSON with each part's status and headline numbers."""
    codes = dict(item.split("=", 1) for item in rcs.split() if "=" in item)
    summary: dict[str, Any] = {"benchmark": "gpu_suite/summary", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "exit_codes": codes, "parts": {}}
    for part, name in FILES.items():
        if part == "summary":
            continue
        path = out_dir / name
        if not path.exists():
            summary["parts"][part] = {"status": "no result file"}
            continue
        d = json.loads(path.read_text())
        entry: dict[str, Any] = {"status": d.get("status"), "elapsed_s": d.get("elapsed_s")}
        if part == "mjx":
            entry["env_steps_per_s"] = {f"{r['kind']}/{r['task']}/{r['impl']}/{r['num_envs']}":
                                        round(r["env_steps_per_s"]) if "env_steps_per_s" in r else
                                        (r.get("skipped") or r.get("error")) for r in d.get("rows", [])}
            entry["step_compile_s"] = d.get("step_compile_s")
        elif part == "smoke":
            entry.update({k: d.get(k) for k in ("task", "max_abs_obs_diff", "max_abs_reward_diff",
                                                "within_test_tolerance_equivalence_steps",
                                                "first_step_outside_tolerance")})
        elif part == "ppo":
            entry.update({k: d.get(k) for k in ("stopped_by", "time_to_target_s", "train_wall_to_target_s",
                                                "env_steps_to_target", "best_mean_return", "first_iteration_t_s")})
        elif part == "offpolicy":
            entry["updates_per_s"] = {r["name"]: round(r["updates_per_s"], 1) if "updates_per_s" in r else
                                      (r.get("skipped") or r.get("error")) for r in d.get("rows", [])}
        if d.get("error"):
            entry["error"] = d["error"]
        summary["parts"][part] = entry
        if "machine" in d:
            summary["machine"] = d["machine"]
    (out_dir / FILES["summary"]).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "machine"}, indent=1))


PARTS: dict[str, Callable[[Settings, Result, float], None]] = {
    "mjx": part_mjx, "smoke": part_smoke, "ppo": part_ppo, "offpolicy": part_offpolicy}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", required=True, choices=[*PARTS, "summary", "train-cli"])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU: checks the suite end to end")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds this part may take (from its start)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "gpu_out"))
    ap.add_argument("--sizes", default=os.environ.get("GPU_SUITE_SIZES", ""),
                    help="mjx: comma-separated num_envs instead of the settings' (env GPU_SUITE_SIZES)")
    ap.add_argument("--rcs", default="", help="summary: 'part=exit_code ...' from the shell")
    ap.add_argument("overrides", nargs="*", help="train-cli: robolearn train overrides")
    args = ap.parse_args()
    if args.part == "train-cli":
        return part_train_cli(args.overrides)
    if args.part == "summary":
        part_summary(args.out, args.rcs)
        return 0
    settings = QUICK if args.quick else FULL
    if args.sizes:  # a rerun that measures only the sizes a first run's budget cut
        settings = dataclasses.replace(settings, sizes=tuple(sorted(int(n) for n in args.sizes.split(","))))
    res = Result(args.out, args.part, settings, args.budget)
    res.update()
    try:
        PARTS[args.part](settings, res, args.budget)
    except Exception as e:
        traceback.print_exc()
        res.update(status="error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=10))
        return 1
    res.update(status="done")
    log(f"{args.part}: done, wrote {res.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
