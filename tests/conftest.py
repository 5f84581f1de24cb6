"""Shared test settings: small thread counts so the suite behaves on a 2-core CI machine."""

import os

os.environ.setdefault("ROBOLEARN_JAX_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "jax"))
os.environ.setdefault("MUJOCO_GL", "egl")
