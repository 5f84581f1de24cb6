"""Shared test settings: small thread counts so the suite behaves on a 2-core CI machine."""

import itertools
import os
import time

import pytest

os.environ.setdefault("ROBOLEARN_JAX_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "jax"))
os.environ.setdefault("MUJOCO_GL", "egl")
if "PYTEST_XDIST_WORKER" in os.environ:
    # `make test` runs two workers on two cores: one compute thread each, or OpenMP threads spin
    # against each other (an update ran 18x slower with two threads per process on busy cores).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

import torch  # noqa: E402  (after the thread settings above: torch reads them at import)

import sim.vecenv  # noqa: E402

# The C engine's VecEnvs compile with LLVM's passes off here: the suite builds about 280 of them, and with XLA's
# defaults their compiles took 570 s of its two workers' time (a fresh clone, 2026-11-29), about twice the fast
# options'. Users run the defaults, which decide every dataset's bits; test_mujoco_v5 checks those bit for bit
# against plain jit.
sim.vecenv.C_ENGINE_COMPILE = sim.vecenv.FAST_C_ENGINE_COMPILE

# --- shared helpers for the real/ tests ----------------------------------------------------------------

_dds_domains = itertools.count()


def next_dds_domain() -> int:
    """A DDS domain id that no other test (or xdist worker) of this run uses at the same time.

    Ids stay in 1..101: ROS notes that ids above 101 can collide with Linux's ephemeral port range
    (32768-60999). The range is split among the xdist workers (two workers: gw0 1-50, gw1 51-101); each
    worker cycles through its share, starting at a pid-dependent offset so that separate runs rarely meet.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    index = int(worker[2:]) % workers if worker[2:].isdigit() else 0
    share = 101 // workers
    first = 1 + index * share
    size = share if index < workers - 1 else 101 - index * share  # the last worker takes the remainder
    return first + (os.getpid() + next(_dds_domains)) % size


@pytest.fixture
def dds_domain(monkeypatch) -> int:
    """This test's own DDS domain id (`next_dds_domain`), set as ROS_DOMAIN_ID, with Cyclone kept on loopback."""
    from real.transport.dds import LOOPBACK_CONFIG

    domain = next_dds_domain()
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_CONFIG)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    return domain


def wait_until(condition, timeout: float = 10.0, interval: float = 0.005) -> bool:
    """Poll ``condition()`` until it is true (returns True) or ``timeout`` seconds passed (returns False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


# --- shared helpers for the chunk-policy tests (policies/test_flow_policy.py, robolearn/algos/test_diffusion_dsrl.py)

def chunk_target(obs: torch.Tensor) -> torch.Tensor:
    """Chunks a = [sin(2 obs_0), 0.5 obs_1] (two steps of one action) for observations in [-1, 1]^2."""
    return torch.stack([torch.sin(2 * obs[:, 0]), 0.5 * obs[:, 1]], 1).unsqueeze(-1)


def bc_fit_error(policy: torch.nn.Module, draw_time, steps: int) -> float:
    """Fit `policy.bc_loss` to `chunk_target` (times or steps from `draw_time(n, generator)`); the mean error of
    its deterministic chunks after."""
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        obs = torch.rand(128, 2, generator=gen) * 2 - 1
        a = chunk_target(obs)
        loss = policy.bc_loss(obs, a, torch.randn(a.shape, generator=gen), draw_time(128, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
    obs = torch.rand(256, 2, generator=gen) * 2 - 1
    with torch.no_grad():
        return float((policy(obs) - chunk_target(obs)).abs().mean())


# --- shared helpers for the sim/ tests ------------------------------------------------------------------


def mjx_from_c_reset(phys):
    """A jitted function that moves a batched state of the C backend's reset onto MJX backend `phys`: its qpos and
    qvel in fresh `mjx.Data`, the rest (info, metrics) as the task's JAX code computed it from the same keys.

    Starting MJX there skips compiling MJX's reset (the task's init again) and its `mjx.forward` (as costly to
    compile as the step, whose first call runs the same forward pass): MJX-vs-C comparisons start at step 1."""
    import jax

    def to_mjx(state):
        blank = phys.mjx.make_data(phys.model)
        data = jax.vmap(lambda q, v: blank.replace(qpos=q.astype(blank.qpos.dtype), qvel=v.astype(blank.qvel.dtype)))
        return state.replace(data=data(state.data.qpos, state.data.qvel))

    return jax.jit(to_mjx)
