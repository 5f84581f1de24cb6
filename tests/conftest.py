"""Shared test settings: small thread counts so the suite behaves on a 2-core CI machine."""

import os

os.environ.setdefault("ROBOLEARN_JAX_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "jax"))
os.environ.setdefault("MUJOCO_GL", "egl")
if "PYTEST_XDIST_WORKER" in os.environ:
    # `make test` runs two workers on two cores: one compute thread each, or OpenMP threads spin
    # against each other (an update ran 18x slower with two threads per process on busy cores).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
