"""MuJoCo C backend: physics on the CPU through `mujoco.rollout`, multi-threaded, batched.

On a CPU the C engine is ~50x faster than MJX's JAX implementation (references/sim.md), so this is
the default where JAX sees no GPU. The environment stays one jitted JAX function: the physics
calls leave JAX through `jax.pure_callback` (batched by `vmap_method="broadcast_all"`, so one call
steps every env in the thread pool), and the task math stays in JAX, written once for both backends.

The physics state is MuJoCo's full-physics state vector in float64. JAX keeps float32 by default,
so the state travels as its raw bits (uint32 pairs) and is never rounded between steps.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import rollout

from sim.core import Physics, data_field_shape
from sim.errors import BackendError
from sim.randomization import SOLVER_WEIGHTS

_SPEC = mujoco.mjtState.mjSTATE_FULLPHYSICS


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CData:
    """Physics state of one env on the C backend: the exact state plus float32 copies for tasks."""

    bits: jax.Array  # uint32[2 * nstate]: the float64 full-physics state, bit for bit
    qpos: jax.Array
    qvel: jax.Array
    sensordata: jax.Array
    ctrl: jax.Array
    fields: dict[str, jax.Array] = dataclasses.field(default_factory=dict)  # `Task.data_fields`, float32


def _batched(x: np.ndarray, width: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x).reshape(-1, width))


class MujocoBackend:
    """Steps a MuJoCo model with the C engine in a persistent thread pool."""

    name = "mujoco"

    def __init__(self, model: mujoco.MjModel, nthread: int | None = None, fields: tuple[str, ...] = (),
                 qvel_limit: float | None = None):
        self.model = model
        #: Extra mjData fields the task reads (`Task.data_fields`), recomputed after each step.
        self.fields = tuple(fields)
        self._field_shapes = [data_field_shape(model, k) for k in self.fields]
        #: Joint velocities are clipped to +-qvel_limit before each step's physics (`Task.qvel_limit`).
        self.qvel_limit = qvel_limit
        # Default: every core (at most 16), or ROBOLEARN_SIM_THREADS where several processes share the cores.
        default = int(os.environ.get("ROBOLEARN_SIM_THREADS", 0)) or max(1, min(os.cpu_count() or 1, 16))
        self.nthread = nthread or default
        self._pool = rollout.Rollout(nthread=self.nthread)
        self._datas = [mujoco.MjData(model) for _ in range(self.nthread)]
        self._scratch = mujoco.MjData(model)
        self._models: list[mujoco.MjModel] = []
        self._env_models: list[mujoco.MjModel] = []  # per-env copies, only with domain randomization
        self._param_names: list[str] = []
        self._warmstart = np.zeros((0, model.nv))
        self.nstate = mujoco.mj_stateSize(model, _SPEC)
        m = model
        self._fields_width = sum(int(np.prod(shape)) for shape in self._field_shapes)  # flattened, concatenated
        width = m.nq + m.nv + m.nsensordata + self._fields_width
        self._shapes = (
            jax.ShapeDtypeStruct((2 * self.nstate,), jnp.uint32),
            jax.ShapeDtypeStruct((width,), jnp.float32),
        )
        self._field_pool: ThreadPoolExecutor | None = None
        self._field_datas: list[mujoco.MjData] = []
        # The full-physics state vector starts with the time, then qpos, then qvel.
        self._qpos_at = 1

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._field_pool is not None:
            self._field_pool.shutdown(wait=False)
            self._field_pool = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the pool may already be gone
            pass

    # --- host side ---------------------------------------------------------------------------------
    def _split(self, state: np.ndarray, sensordata: np.ndarray, lead: tuple[int, ...],
               fields: np.ndarray | None = None):
        """Host arrays -> (exact state bits, float32 [qpos, qvel, sensordata, fields]) with leading dims `lead`."""
        m = self.model
        bits = np.ascontiguousarray(state).view(np.uint32).reshape(*lead, 2 * self.nstate)
        # qpos and qvel are adjacent in the state vector (after the time): one slice, one cast.
        parts = [state[:, 1:1 + m.nq + m.nv], sensordata] + ([] if fields is None else [fields])
        phys = np.concatenate(parts, axis=1, dtype=np.float32)
        return bits, phys.reshape(*lead, phys.shape[-1])

    def _read_fields(self, d: mujoco.MjData) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(d, k)).reshape(-1) for k in self.fields]) if self.fields \
            else np.zeros(0)

    def _post_step_fields(self, models: list[mujoco.MjModel], before: np.ndarray, ctrl: np.ndarray) -> np.ndarray:
        """`fields` as Gymnasium reads them after `mj_step` + `mj_rnePostConstraint`: the last sub-step
        (from `before`, the state at its start) is stepped again in the C engine's threads and read. It is
        stepped, not just forwarded: under RK4 `mj_step` leaves the kinematics and contacts of its last
        integration stage, not of the sub-step's start, and Gymnasium reads what `mj_step` left."""
        n = before.shape[0]
        if self._field_pool is None:
            self._field_pool = ThreadPoolExecutor(self.nthread)
            self._field_datas = [mujoco.MjData(self.model) for _ in range(self.nthread)]
        out = np.empty((n, self._fields_width))

        def work(t: int) -> None:
            d = self._field_datas[t]
            for i in range(t, n, self.nthread):
                mujoco.mj_setState(models[i], d, before[i], _SPEC)
                d.ctrl[:] = ctrl[i]
                mujoco.mj_step(models[i], d)
                mujoco.mj_rnePostConstraint(models[i], d)
                out[i] = self._read_fields(d)

        list(self._field_pool.map(work, range(min(self.nthread, n))))
        return out

    def _host_init(self, qpos, qvel, active, env_ids, *params):
        d = self._scratch
        lead = np.shape(active)
        qpos, qvel = _batched(qpos, self.model.nq), _batched(qvel, self.model.nv)
        active = np.asarray(active).reshape(-1)
        env_ids = np.asarray(env_ids).reshape(-1)
        params = [np.asarray(p).reshape(active.size, -1) for p in params]
        state = np.zeros((active.size, self.nstate))
        sens = np.zeros((active.size, self.model.nsensordata))
        fields = np.zeros((active.size, self._fields_width))
        for i in np.flatnonzero(active):
            m = self.model
            if params:  # this env's randomized physics, kept in its own model until its next reset
                m = self._env_model(int(env_ids[i]))
                for name, value in zip(self._param_names, params, strict=True):
                    getattr(m, name).reshape(-1)[:] = value[i]
                self._set_const(m, {n: v[i] for n, v in zip(self._param_names, params, strict=True)})
            mujoco.mj_resetData(m, d)
            d.qpos[:] = qpos[i]
            d.qvel[:] = qvel[i]
            mujoco.mj_forward(m, d)
            mujoco.mj_getState(m, d, state[i], _SPEC)
            sens[i] = d.sensordata
            if self.fields:  # after mj_forward alone, as Gymnasium's reset leaves them (cfrc_ext: zero)
                fields[i] = self._read_fields(d)
        return self._split(state, sens, lead, fields if self.fields else None)

    def _env_model(self, env_id: int) -> mujoco.MjModel:
        while len(self._env_models) <= env_id:
            self._env_models.append(copy.copy(self.model))
        return self._env_models[env_id]

    def _host_step(self, bits, ctrl, n_substeps: int):
        m = self.model
        lead = np.shape(bits)[:-1]
        state0 = _batched(bits, 2 * self.nstate).view(np.float64)
        n = state0.shape[0]
        if self.qvel_limit is not None:  # before the physics, as gymnasium-robotics' PointMaze clips its ball
            state0 = state0.copy()
            qvel = state0[:, 1 + m.nq:1 + m.nq + m.nv]
            np.clip(qvel, -self.qvel_limit, self.qvel_limit, out=qvel)
        control = _batched(ctrl, m.nu).astype(np.float64)[:, None, :]
        if n_substeps > 1:
            control = np.ascontiguousarray(np.broadcast_to(control, (n, n_substeps, m.nu)))
        if self._env_models:
            if len(self._env_models) < n:
                raise BackendError(f"{n} envs stepped but only {len(self._env_models)} have randomized models: "
                                   "with domain randomization, reset through Env.batched_reset (env ids 0..N-1)")
            models = self._env_models[:n]
        else:
            if len(self._models) != n:
                self._models = [m] * n
            models = self._models
        if self._warmstart.shape[0] != n:
            self._warmstart = np.zeros((n, m.nv))
        state = np.empty((n, n_substeps, self.nstate))
        sens = np.empty((n, n_substeps, m.nsensordata))
        # Warm-start from zero every call: results then never depend on which thread ran an env.
        self._pool.rollout(models, self._datas, state0, control, nstep=n_substeps,
                           initial_warmstart=self._warmstart, state=state, sensordata=sens, skip_checks=True)
        fields = None
        if self.fields:
            before = state[:, -2] if n_substeps > 1 else state0
            fields = self._post_step_fields(models, before, control[:, -1])
        return self._split(state[:, -1], sens[:, -1], lead, fields)

    # --- JAX side (traced into the environment's jitted step) --------------------------------------
    def init_data(self, qpos: jax.Array, qvel: jax.Array, active: jax.Array | None = None,
                  params: dict[str, jax.Array] | None = None, env_id: jax.Array | None = None) -> CData:
        """A new physics state at (qpos, qvel), sensors computed; envs with `active=False` are skipped.

        With randomized `params` (MjModel field overrides) the env's own model copy takes them and
        keeps them until its next reset; `env_id` says which env this is.
        """
        if active is None:
            active = jnp.ones((), dtype=bool)
        params = params or {}
        self._param_names = sorted(params)
        env_id = jnp.zeros((), jnp.int32) if env_id is None else env_id
        bits, phys = jax.pure_callback(
            self._host_init, self._shapes, qpos.astype(jnp.float32), qvel.astype(jnp.float32), active, env_id,
            *(params[k] for k in self._param_names), vmap_method="broadcast_all")
        return self._unpack(bits, phys, jnp.zeros((self.model.nu,), jnp.float32))

    def set_params(self, params: dict[str, np.ndarray]) -> None:
        """Write every env's randomized parameters (batched [N, ...]) into its model: used on restore."""
        for name, value in params.items():
            value = np.asarray(value)
            for i in range(value.shape[0]):
                getattr(self._env_model(i), name).reshape(-1)[:] = value[i].reshape(-1)
        for i, m in enumerate(self._env_models):
            self._set_const(m, {name: np.asarray(value)[i] for name, value in params.items()})

    def _set_const(self, m: mujoco.MjModel, params: dict[str, np.ndarray]) -> None:
        """Recompute the derived constants (subtree masses, actuator lengths...) of randomized physics,
        but keep the constraint solver's weights as MJX does: MJX never recomputes `*_invweight0`
        (nor `stat.meaninertia`), so they stay nominal unless `params` carries them (the environment adds
        them whenever masses are randomized: `sim.randomization`)."""
        mujoco.mj_setConst(m, self._scratch)
        for name in SOLVER_WEIGHTS:
            source = params[name] if name in params else getattr(self.model, name)
            getattr(m, name).reshape(-1)[:] = np.reshape(source, -1)
        m.stat.meaninertia = self.model.stat.meaninertia

    def step(self, data: CData, ctrl: jax.Array, n_substeps: int, params: dict[str, jax.Array] | None = None) -> CData:
        """Advance `n_substeps` physics steps holding `ctrl` (randomized parameters live in the env models)."""
        ctrl = ctrl.astype(jnp.float32)
        bits, phys = jax.pure_callback(
            lambda b, c: self._host_step(b, c, n_substeps), self._shapes, data.bits, ctrl,
            vmap_method="broadcast_all")
        return self._unpack(bits, phys, ctrl)

    def _unpack(self, bits: jax.Array, phys: jax.Array, ctrl: jax.Array) -> CData:
        nq, nv, ns = self.model.nq, self.model.nv, self.model.nsensordata
        fields, at = {}, nq + nv + ns
        for name, shape in zip(self.fields, self._field_shapes, strict=True):
            size = int(np.prod(shape))
            fields[name] = phys[..., at:at + size].reshape(*phys.shape[:-1], *shape)
            at += size
        return CData(bits=bits, qpos=phys[..., :nq], qvel=phys[..., nq:nq + nv],
                     sensordata=phys[..., nq + nv:nq + nv + ns], ctrl=ctrl, fields=fields)

    @staticmethod
    def view(data: CData) -> Physics:
        return Physics(qpos=data.qpos, qvel=data.qvel, sensordata=data.sensordata, ctrl=data.ctrl, fields=data.fields)

    def qpos64(self, data: CData) -> np.ndarray:
        """Exact float64 joint positions of a (batched) state, for rendering."""
        state = _batched(np.asarray(data.bits), 2 * self.nstate).view(np.float64)
        return state[:, self._qpos_at:self._qpos_at + self.model.nq]
