"""MJX backend: physics as pure JAX (jit + vmap), for GPUs.

`State.data` is an `mjx.Data`. Everything here traces into the environment's one jitted step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco

from sim._jax import import_mjx
from sim.core import Physics, data_field_shape
from sim.errors import BackendError


class MjxBackend:
    """Steps a MuJoCo model with MJX; `impl` is "jax" (any device) or "warp" (NVIDIA, if installed)."""

    name = "mjx"

    def __init__(self, model: mujoco.MjModel, impl: str = "jax", fields: tuple[str, ...] = (),
                 qvel_limit: float | None = None):
        self.mjx = import_mjx()
        for name in fields:
            data_field_shape(model, name)  # an unsupported name fails here, not inside a trace
        #: Extra mjData fields the task reads (`Task.data_fields`), computed after each step.
        self.fields = tuple(fields)
        #: Joint velocities are clipped to +-qvel_limit before each step's physics (`Task.qvel_limit`).
        self.qvel_limit = qvel_limit
        if impl not in ("jax", "warp"):
            raise BackendError(f"mjx impl must be 'jax' or 'warp', got {impl!r}")
        try:
            self.model = self.mjx.put_model(model, impl=impl)
        except Exception as e:  # MJX rejects some features (solvers, geoms) per impl
            raise BackendError(f"MJX (impl={impl}) cannot load this model: {e}") from e
        self.impl = impl

    def _model(self, params: dict[str, jax.Array] | None):
        """The model with this env's randomized fields (a per-env model under vmap)."""
        if not params:
            return self.model
        return self.model.replace(**{k: v.astype(getattr(self.model, k).dtype) for k, v in params.items()})

    def init_data(self, qpos: jax.Array, qvel: jax.Array, active: jax.Array | None = None,
                  params: dict[str, jax.Array] | None = None, env_id: jax.Array | None = None):
        """A new physics state at (qpos, qvel) with derived quantities (sensors) computed.

        `active` and `env_id` are accepted for parity with the C backend and ignored.
        """
        del active, env_id
        model = self._model(params)
        data = self.mjx.make_data(model)
        data = data.replace(qpos=qpos.astype(data.qpos.dtype), qvel=qvel.astype(data.qvel.dtype))
        return self.mjx.forward(model, data)

    def step(self, data, ctrl: jax.Array, n_substeps: int, params: dict[str, jax.Array] | None = None):
        """Advance `n_substeps` physics steps holding `ctrl`."""
        data = data.replace(ctrl=ctrl.astype(data.ctrl.dtype))
        if self.qvel_limit is not None:
            data = data.replace(qvel=jnp.clip(data.qvel, -self.qvel_limit, self.qvel_limit))
        model = self._model(params)

        def body(d, _):
            return self.mjx.step(model, d), None

        data, _ = jax.lax.scan(body, data, None, length=n_substeps)
        if self.fields:  # Gymnasium's mj_rnePostConstraint after mj_step: from the last sub-step's forward pass
            data = self.mjx.rne_postconstraint(model, data)
        return data

    def view(self, data) -> Physics:
        f32 = jnp.float32
        # A field is public in mjx.Data (xpos) or part of the JAX implementation's data (cfrc_ext).
        fields = {k: getattr(data if k in data.__dataclass_fields__ else data._impl, k).astype(f32)
                  for k in self.fields}
        return Physics(qpos=data.qpos.astype(f32), qvel=data.qvel.astype(f32),
                       sensordata=data.sensordata.astype(f32), ctrl=data.ctrl.astype(f32), fields=fields)

    @staticmethod
    def qpos64(data) -> jax.Array:
        return data.qpos
