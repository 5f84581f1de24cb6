"""`sim` imports lazily: the registry, the error types and the RC car's geometry load neither JAX nor MuJoCo
(a robot's deploy process uses them without the simulator), and JAX is set up before sim uses it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(code: str) -> dict:
    """Run `code` in a fresh interpreter; it prints a JSON object as its last line."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["sim", "sim.errors", "sim.tasks", "robolearn.errors", "sim.tasks.rc_car_geometry"])
def test_light_modules_load_neither_jax_nor_mujoco(module):
    loaded = _run(f"import json, sys, {module}; print(json.dumps([m for m in ('jax', 'mujoco') if m in sys.modules]))")
    assert loaded == [], f"import {module} loaded {loaded}"


def test_registry_and_public_api_without_jax():
    """Listing tasks and reading their numbers needs no JAX; `sim`'s public names are all there."""
    result = _run("""
import json, os, sys
import sim
names = sim.list_tasks()
spec = sim.task_spec("point-maze-medium")
public = [n for n in sim.__all__ if n not in ("Task", "TaskConfig", "State", "Physics") and not hasattr(sim, n)]
print(json.dumps({"n": len(names), "ret": spec.reference_return, "missing": public, "gl": os.environ.get("MUJOCO_GL"),
                  "jax": "jax" in sys.modules, "display": bool(os.environ.get("DISPLAY"))}))
""")
    assert result["n"] >= 20 and result["ret"] > 0 and result["missing"] == []
    assert not result["jax"]
    assert result["display"] or result["gl"]  # MUJOCO_GL defaults to egl on a headless machine


def test_jax_side_is_set_up_on_first_use():
    """The lazy names resolve, and importing any JAX-side module runs `sim._jax` (full-precision matmuls)."""
    result = _run("""
import json, os, sys
import sim.env
import jax
import sim
print(json.dumps({"task": sim.Task.__module__, "precision": str(jax.config.jax_default_matmul_precision),
                  "prealloc": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"), "jax_setup": "sim._jax" in sys.modules}))
""")
    assert result["task"] == "sim.core" and result["jax_setup"]
    assert result["precision"] == "highest" and result["prealloc"] is not None
