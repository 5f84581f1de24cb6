"""robolearn's simulator: MuJoCo tasks batched on MJX (GPU) or the MuJoCo C engine (CPU).

    import sim
    env = sim.make("cartpole-swingup", num_envs=1024)     # torch VecEnv, rsl_rl-compatible
    obs = env.get_observations()                          # TensorDict {"policy": [N, 5]}
    obs, rew, dones, extras = env.step(actions)           # extras: time_outs, final_obs, log

`backend="auto"` picks MJX when JAX sees a GPU and the C engine otherwise (about 50x faster than
MJX on a CPU). The same task definition runs on both.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; see sim/rendering.py

from sim.errors import ActionError, BackendError, ConfigError, UnknownTaskError
from sim.tasks import TASKS, TaskSpec
from sim.tasks import spec as task_spec

if TYPE_CHECKING:
    from sim.core import Physics, State, Task, TaskConfig

__all__ = [
    "make", "make_task", "make_gym", "make_sb3", "list_tasks", "task_spec", "render", "Task", "TaskConfig",
    "TaskSpec", "State", "Physics", "ActionError", "BackendError", "ConfigError", "UnknownTaskError",
    "resolve_backend", "make_backend", "BACKENDS",
]

BACKENDS = ("auto", "mjx", "mujoco")

# `import sim` loads neither JAX nor MuJoCo (a robot's deploy process may want only the error types or the
# task list): the JAX-side names resolve on first use, the functions below import inside.
_LAZY = {"Physics": "sim.core", "State": "sim.core", "Task": "sim.core", "TaskConfig": "sim.core",
         "apply_overrides": "sim.core"}
_SUBMODULES = ("adapters", "backends", "core", "env", "randomization", "rendering", "vecenv")


def __getattr__(name: str) -> Any:
    """The JAX-side classes and submodules, imported on first access (`sim.Task`, `sim.core`, ...)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"sim.{name}")
    raise AttributeError(f"module 'sim' has no attribute {name!r}")


def list_tasks() -> list[str]:
    """Names of every registered task (no JAX needed)."""
    return sorted(TASKS)


def make_task(name: str, **overrides: Any) -> Task:
    """Build task `name`: its variant's config overrides, then `overrides` (unknown fields raise `ConfigError`)."""
    return task_spec(name).make(**overrides)


def resolve_backend(backend: str) -> str:
    """"mjx" or "mujoco": `backend` itself, or for "auto" MJX when JAX sees a GPU."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        from sim import _jax

        return "mjx" if _jax.gpu_available() else "mujoco"
    return backend


def make_backend(task: Task, backend: str = "auto", impl: str = "jax", nthread: int | None = None):
    """The physics backend object for `task` ("mjx" or "mujoco"; "auto" picks by hardware)."""
    backend = resolve_backend(backend)
    if backend == "mjx":
        from sim.backends.mjx_backend import MjxBackend

        return MjxBackend(task.mj_model, impl=impl, fields=task.data_fields, qvel_limit=task.qvel_limit)
    from sim.backends.mujoco_backend import MujocoBackend

    return MujocoBackend(task.mj_model, nthread=nthread, fields=task.data_fields, qvel_limit=task.qvel_limit)


def make(name: str, num_envs: int = 1, backend: str = "auto", device: str = "auto", seed: int = 0,
         impl: str = "jax", nthread: int | None = None, check_actions: bool = True,
         pixels: dict[str, Any] | None = None, **overrides: Any):
    """A torch VecEnv of `num_envs` copies of task `name` (see `sim.vecenv.VecEnv`).

    Args:
        name: a task from `list_tasks()`.
        num_envs: environments stepped together.
        backend: "mjx" (JAX, GPU), "mujoco" (C engine, CPU threads) or "auto" (mjx if a GPU is visible).
        device: torch device of the returned tensors; "auto" = where the physics runs.
        seed: every env's randomness derives from (seed, env index).
        impl: MJX implementation, "jax" or "warp" (NVIDIA, when installed).
        nthread: threads of the C backend (default: all cores).
        check_actions: raise `ActionError` on NaN/inf actions (one device sync per step).
        pixels: add a `"pixels"` observation group of camera frames, e.g.
            `{"camera": "side", "width": 64, "height": 64}` (rendered on the host by MuJoCo; `"effects": True`
            adds shadows, reflections and the skybox); `"camera": "front,top"` tiles several views side by side.
        **overrides: task config fields, e.g. `episode_length=500`, `reward_scales={...}`.
    """
    import torch

    from sim import _jax
    from sim.vecenv import VecEnv

    task = make_task(name, **overrides)
    phys = make_backend(task, backend, impl=impl, nthread=nthread)
    if device == "auto":
        device = "cuda" if phys.name == "mjx" and _jax.gpu_available() and torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ConfigError(f"device must be 'auto', 'cpu' or a torch device like 'cuda:0', got {device!r}") from e
    return VecEnv(task, phys, num_envs=num_envs, device=dev, seed=seed, check_actions=check_actions, pixels=pixels)


def make_gym(name: str, num_envs: int | None = None, **kwargs: Any):
    """A gymnasium env: a single `gymnasium.Env` when `num_envs` is None, else a `VectorEnv`."""
    from sim.adapters import GymEnv, GymVectorEnv

    if num_envs is None:
        return GymEnv(make(name, num_envs=1, **kwargs))
    return GymVectorEnv(make(name, num_envs=num_envs, **kwargs))


def make_sb3(name: str, num_envs: int = 8, **kwargs: Any):
    """A stable-baselines3 `VecEnv`, so SB3's algorithms run on our tasks unchanged."""
    from sim.adapters import SB3VecEnv

    return SB3VecEnv(make(name, num_envs=num_envs, **kwargs))


def render(task: str, policy: Any = None, path: Any = "rollout.mp4", num_steps: int | None = None, seed: int = 0,
           width: int = 320, height: int = 240, camera: str | int | None = None, fps: int | None = None,
           **overrides: Any):
    """Roll out `policy` (observation TensorDict -> actions [1, A]; random if None) in one env of `task` on the C
    engine and write a video of every control step of one episode (or `num_steps`); returns its path.
    See `sim.rendering.render_rollout`."""
    from sim.rendering import render_rollout

    env = make(task, num_envs=1, backend="mujoco", seed=seed, **overrides)
    try:
        return render_rollout(env, policy, path, num_steps, seed, width, height, camera, fps)
    finally:
        env.close()
