"""Constraint weights of randomized masses, computed once for every task as MuJoCo's `mj_setConst` does.

MuJoCo derives "inverse weights" from the mass matrix at the reference pose `qpos0`:
`body_invweight0`, `dof_invweight0` and `tendon_invweight0` scale the softness of contacts, joint limits
and equality constraints. After the C backend writes an episode's randomized masses into an env's model
it runs `mj_setConst`, which recomputes them; MJX reads them from the model as given. So whenever a
task's `randomize` returns `body_mass`, `body_inertia` or `dof_armature`, the environment adds the
weights computed here (`InverseWeights.complete`, in JAX inside the jitted reset), and both backends
simulate the same randomized robot. Tasks return only the physical parameters.

At qpos0 the kinematics are fixed, so the mass matrix is linear in the masses, principal inertias and
armature (kinetic energy: each body's mass times its centre-of-mass speed squared, plus its principal
inertias times the squared angular velocity about its principal axes):

    M = sum_b m_b Jp_b' Jp_b + sum_b sum_k I_bk (r_bk' Jr_b)' (r_bk' Jr_b) + diag(armature)

where Jp_b is the Jacobian of body b's centre of mass, Jr_b its rotational Jacobian and r_bk its k-th
principal axis. These Jacobians are computed once with the C engine (float64). The weights then follow
`mj_setConst`:
- body b: the mean diagonal of the translational and of the rotational block of J_b M^-1 J_b'; zero for
  bodies welded to the world; (1/m_b, 0) for bodies that only slide (`body_simple == 2`);
- dof: the diagonal of M^-1 for hinge and slide joints, its mean over a ball joint's 3 dofs, and over a
  free joint's 3 translations and its 3 rotations; 1/m for the joints of a body that only slides;
- tendon t: J_t M^-1 J_t', J_t its Jacobian at qpos0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

#: Randomized model fields the mass matrix depends on.
MASS_FIELDS = ("body_mass", "body_inertia", "dof_armature")
#: The derived constraint weights MJX takes from the model as given.
SOLVER_WEIGHTS = ("body_invweight0", "dof_invweight0", "tendon_invweight0")

_MIN_MASS = 1e-15  # MuJoCo's mjMINVAL, the floor of a mass inverted by mj_setConst


def _dof_averaging(model: mujoco.MjModel) -> np.ndarray:
    """[nv, nv]: row d averages the diagonal of M^-1 over the dofs whose mean `mj_setConst` gives dof d."""
    avg = np.eye(model.nv)
    for j in range(model.njnt):
        start = int(model.jnt_dofadr[j])
        kind = int(model.jnt_type[j])
        groups = {mujoco.mjtJoint.mjJNT_FREE: ((0, 3), (3, 6)), mujoco.mjtJoint.mjJNT_BALL: ((0, 3),)}.get(kind, ())
        for lo, hi in groups:
            dofs = slice(start + lo, start + hi)
            avg[dofs, dofs] = 1.0 / (hi - lo)
    return avg


class InverseWeights:
    """The inverse weights of one model with randomized masses, inertias and armature (pure JAX, jittable)."""

    def __init__(self, model: mujoco.MjModel):
        m = model
        d = mujoco.MjData(m)
        d.qpos[:] = m.qpos0
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        mujoco.mj_tendon(m, d)
        jacp = np.zeros((m.nbody, 3, m.nv))
        jacr = np.zeros((m.nbody, 3, m.nv))
        for b in range(1, m.nbody):
            mujoco.mj_jacBodyCom(m, d, jacp[b], jacr[b], b)
        axes = d.ximat.reshape(m.nbody, 3, 3)  # columns: each body's principal axes in the world frame
        jac_axes = np.einsum("bik,biv->bkv", axes, jacr)  # angular velocity about each principal axis
        tendon = np.zeros((m.ntendon, m.nv))
        if m.ntendon:
            mujoco.mju_sparse2dense(tendon, d.ten_J, m.ten_J_rownnz, m.ten_J_rowadr, m.ten_J_colind)
        f32 = np.float32
        self._jacp, self._jacr, self._jac_axes = jacp.astype(f32), jacr.astype(f32), jac_axes.astype(f32)
        self._tendon = tendon.astype(f32)
        self._dof_avg = _dof_averaging(m).astype(f32)
        self._static = m.body_weldid == 0
        self._sliding = m.body_simple == 2
        self._dof_body = m.dof_bodyid.copy()
        self._nominal = {k: getattr(m, k).astype(f32) for k in MASS_FIELDS}

    def __call__(self, body_mass: jax.Array, body_inertia: jax.Array, dof_armature: jax.Array) -> dict[str, jax.Array]:
        """`body_invweight0`, `dof_invweight0` (and `tendon_invweight0` if the model has tendons)."""
        mass_matrix = (jnp.einsum("b,bkv,bkw->vw", body_mass, self._jacp, self._jacp)
                       + jnp.einsum("bk,bkv,bkw->vw", body_inertia, self._jac_axes, self._jac_axes)
                       + jnp.diag(dof_armature))
        minv = _spd_inverse(mass_matrix)
        jac = jnp.concatenate([self._jacp, self._jacr], axis=1)  # [nbody, 6, nv]
        diag = jnp.einsum("bkv,vw,bkw->bk", jac, minv, jac)
        inv_mass = 1.0 / jnp.maximum(body_mass, _MIN_MASS)
        body = jnp.stack([diag[:, :3].mean(1), diag[:, 3:].mean(1)], axis=1)
        body = jnp.where(self._sliding[:, None], jnp.stack([inv_mass, jnp.zeros_like(inv_mass)], axis=1), body)
        body = jnp.where(self._static[:, None], 0.0, body)
        dof = jnp.where(self._sliding[self._dof_body], inv_mass[self._dof_body], self._dof_avg @ jnp.diag(minv))
        out = {"body_invweight0": body, "dof_invweight0": dof}
        if self._tendon.shape[0]:
            out["tendon_invweight0"] = jnp.einsum("tv,vw,tw->t", self._tendon, minv, self._tendon)
        return out

    def complete(self, params: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """`params` plus the inverse weights of its masses, when it randomizes any of `MASS_FIELDS`.

        Weights the task returns itself are kept (a task may randomize constraint softness directly).
        """
        if not any(k in params for k in MASS_FIELDS):
            return params
        fields = {k: params.get(k, self._nominal[k]) for k in MASS_FIELDS}
        return {**self(**fields), **params}


def _spd_inverse(a: jax.Array) -> jax.Array:
    """The inverse of a symmetric positive-definite matrix by Cholesky, Jacobi-scaled first: masses and
    inertias of very different sizes (a 2 kg chassis, 1e-5 kg m^2 wheels) keep float32 accuracy."""
    scale = jax.lax.rsqrt(jnp.diag(a))
    scaled = a * scale[:, None] * scale[None, :]
    factor = jax.scipy.linalg.cho_factor(scaled, lower=True)
    inv = jax.scipy.linalg.cho_solve(factor, jnp.eye(a.shape[0], dtype=a.dtype))
    return inv * scale[:, None] * scale[None, :]
