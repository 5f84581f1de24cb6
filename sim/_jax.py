"""JAX set-up shared by every part of `sim` that touches JAX.

Imported before JAX itself so that the environment variables take effect:
- JAX must not grab 75% of GPU memory when torch shares the GPU (IsaacLab PR #4980), so pre-allocation
  is off unless the user set it.
- The persistent compilation cache is on by default (compile time is the top complaint about MJX);
  `ROBOLEARN_JAX_CACHE` moves it, `ROBOLEARN_JAX_CACHE=off` disables it.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

# TF32 matmuls on Ampere+ hurt MuJoCo precision (Playground FAQ); physics wants full precision. Set
# through the config (the environment variable is read only when jax is first imported).
if "JAX_DEFAULT_MATMUL_PRECISION" not in os.environ:
    jax.config.update("jax_default_matmul_precision", "highest")


def _setup_cache() -> None:
    where = os.environ.get("ROBOLEARN_JAX_CACHE", str(Path.home() / ".cache" / "robolearn" / "jax"))
    if where.lower() in ("off", "0", "false", ""):
        return
    try:
        Path(where).mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # read-only home: run without a cache rather than fail
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


_setup_cache()


def import_mjx():
    """Import `mujoco.mjx` without the 'Failed to import warp' lines it prints when warp is absent."""
    with contextlib.redirect_stdout(io.StringIO()):
        from mujoco import mjx
    return mjx


def gpu_available() -> bool:
    """Whether JAX sees a GPU (the test behind `backend="auto"`)."""
    try:
        return jax.default_backend() == "gpu"
    except RuntimeError:
        return False
