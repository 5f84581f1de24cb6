"""The task contract: what a task defines, what a backend gives it, what an environment returns.

A task is written once, in pure unbatched JAX, and runs on both physics backends:

- the task says how an episode starts (`init`: joint positions, velocities, per-episode info),
  what the agent sees (`observe`), how it is scored (`reward_terms`, combined by `reward`) and when
  an episode ends early (`terminated`);
- a backend (`sim.backends`) owns the physics state (`State.data`) and gives the task a `Physics`
  view of it: `qpos`, `qvel`, `sensordata`, read by name through the task's `ModelIndex`.

Sensor values follow MuJoCo's `mj_step` semantics on both backends: after a step they were computed
at the start of the last physics sub-step (qpos/qvel are current). Tasks that need exact current
positions read `qpos`; tasks that mirror a real robot read named sensors, as the robot would.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

from sim import _jax  # noqa: F401  (JAX's set-up runs before jax is imported)

# isort: split
import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from sim.errors import ConfigError

Array = jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Physics:
    """What a task may read of the physics state, identical on every backend."""

    qpos: Array
    qvel: Array
    sensordata: Array
    ctrl: Array
    #: The extra mjData fields the task asked for (`Task.data_fields`), by name, each a float32 array of
    #: its mjData shape: the values `mj_step` and then `mj_rnePostConstraint` leave (Gymnasium's MuJoCo envs
    #: read them so): from the start of the last physics sub-step (as sensors), or with the RK4 integrator
    #: from its last stage.
    fields: dict[str, Array] = dataclasses.field(default_factory=dict)


#: The mjData fields a task may ask for (`Task.data_fields`): name -> its shape given the model. Each is what
#: `mj_step` + `mj_rnePostConstraint` leave, as Gymnasium reads them: "xpos" (Gymnasium's Ant measures its speed
#: with it) differs from `qpos` under RK4, whose last stage's kinematics `mj_step` leaves behind.
DATA_FIELDS = {"cfrc_ext": lambda m: (m.nbody, 6), "xpos": lambda m: (m.nbody, 3)}


def data_field_shape(model: mujoco.MjModel, name: str) -> tuple[int, ...]:
    """The shape of mjData field `name` (one of `DATA_FIELDS`); another name raises `ConfigError`."""
    if name not in DATA_FIELDS:
        raise ConfigError(f"data field {name!r} is not supported; supported: {sorted(DATA_FIELDS)}")
    return DATA_FIELDS[name](model)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class State:
    """One environment's state (a pytree; batched states carry a leading env axis).

    `data` is the backend's physics state (an `mjx.Data` on MJX, packed float64 state on MuJoCo C);
    `obs` holds the observation groups (`"policy"`, optional privileged `"critic"`); `info` carries
    the per-env random key (`"rng"`), the step counter (`"steps"`) and task bookkeeping; `metrics`
    holds the named reward terms (`"reward/<name>"`) and task metrics, averaged into `extras["log"]`.
    """

    data: Any
    obs: dict[str, Array]
    reward: Array
    terminated: Array
    truncated: Array
    info: dict[str, Any]
    metrics: dict[str, Array]

    def replace(self, **changes: Any) -> State:
        return dataclasses.replace(self, **changes)


class ModelIndex:
    """Static name -> index maps of a MuJoCo model, so tasks read joints and sensors by name."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model

    def _id(self, objtype: mujoco.mjtObj, name: str, what: str) -> int:
        i = mujoco.mj_name2id(self.model, objtype, name)
        if i < 0:
            raise ConfigError(f"the model has no {what} named {name!r}")
        return i

    def qpos_slice(self, joint: str) -> slice:
        j = self._id(mujoco.mjtObj.mjOBJ_JOINT, joint, "joint")
        start = int(self.model.jnt_qposadr[j])
        width = {0: 7, 1: 4, 2: 1, 3: 1}[int(self.model.jnt_type[j])]
        return slice(start, start + width)

    def qvel_slice(self, joint: str) -> slice:
        j = self._id(mujoco.mjtObj.mjOBJ_JOINT, joint, "joint")
        start = int(self.model.jnt_dofadr[j])
        width = {0: 6, 1: 3, 2: 1, 3: 1}[int(self.model.jnt_type[j])]
        return slice(start, start + width)

    def sensor_slice(self, sensor: str) -> slice:
        s = self._id(mujoco.mjtObj.mjOBJ_SENSOR, sensor, "sensor")
        start = int(self.model.sensor_adr[s])
        return slice(start, start + int(self.model.sensor_dim[s]))

    def qpos(self, phys: Physics, joint: str) -> Array:
        return phys.qpos[self.qpos_slice(joint)]

    def qvel(self, phys: Physics, joint: str) -> Array:
        return phys.qvel[self.qvel_slice(joint)]

    def sensor(self, phys: Physics, sensor: str) -> Array:
        return phys.sensordata[self.sensor_slice(sensor)]


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """Settings every task has; tasks subclass this with their own fields.

    `ctrl_dt` is the control period and `sim_dt` the physics time step (`ctrl_dt / sim_dt` physics
    sub-steps per control step); `episode_length` counts control steps (after action repeat).
    `reward_scales` weighs the named reward terms (default 1 each; the task fills in every name).
    """

    episode_length: int = 1000
    action_repeat: int = 1
    ctrl_dt: float = 0.01
    sim_dt: float = 0.01
    reward_scales: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Re-sample the physics parameters of `Task.randomize` at every reset (per env, seeded).
    domain_randomization: bool = False
    #: Each episode delays actions by a random 0..action_latency control steps (0: none).
    action_latency: int = 0
    #: Std of Gaussian noise added to the "policy" observation group each step (never to "critic").
    obs_noise: float = 0.0

    def validate(self) -> None:
        if self.episode_length < 1:
            raise ConfigError(f"episode_length must be >= 1, got {self.episode_length}")
        if self.action_repeat < 1:
            raise ConfigError(f"action_repeat must be >= 1, got {self.action_repeat}")
        if self.action_latency < 0 or self.obs_noise < 0:
            raise ConfigError(f"action_latency and obs_noise must be >= 0, got {self.action_latency}, {self.obs_noise}")
        if self.sim_dt <= 0 or self.ctrl_dt < self.sim_dt:
            raise ConfigError(f"need 0 < sim_dt <= ctrl_dt, got sim_dt={self.sim_dt}, ctrl_dt={self.ctrl_dt}")
        ratio = self.ctrl_dt / self.sim_dt
        if abs(ratio - round(ratio)) > 1e-6:
            raise ConfigError(f"ctrl_dt ({self.ctrl_dt}) must be a multiple of sim_dt ({self.sim_dt})")

    @property
    def n_substeps(self) -> int:
        return int(round(self.ctrl_dt / self.sim_dt))

    @property
    def policy_dt(self) -> float:
        """How often the policy acts, in seconds: one `VecEnv.step` is `action_repeat` control periods of
        `ctrl_dt`. Runs record it (`env.policy_dt`), so a robot can deploy a policy at the rate it was trained
        at; time-based task logic (gait clocks, command periods) counts in it."""
        return self.ctrl_dt * self.action_repeat


def apply_overrides(cfg: TaskConfig, overrides: dict[str, Any]) -> TaskConfig:
    """Return `cfg` with `overrides` applied; unknown names or a wrong type raise `ConfigError`.

    Dict-valued fields (such as `reward_scales`) merge, and only known keys are accepted, so a typo
    in a reward-term name is an error rather than a silent no-op.
    """
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in fields:
            raise ConfigError(
                f"unknown override {key!r} for {type(cfg).__name__}; valid fields: {sorted(fields)}"
            )
        current = getattr(cfg, key)
        if isinstance(current, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"override {key!r} must be a mapping, got {type(value).__name__}")
            unknown = set(value) - set(current)
            if unknown and current:  # an empty default (reward_scales) is checked by the task itself
                raise ConfigError(f"unknown keys {sorted(unknown)} in {key!r}; valid keys: {sorted(current)}")
            value = {**current, **value}
        elif isinstance(current, bool) and not isinstance(value, bool):
            raise ConfigError(f"override {key!r} must be a bool, got {value!r}")
        elif isinstance(current, (int, float)) and not isinstance(current, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"override {key!r} must be a number, got {value!r}")
            if isinstance(current, int) and not float(value).is_integer():
                raise ConfigError(f"override {key!r} must be an integer, got {value!r}")
            value = type(current)(value)
        changes[key] = value
    new = dataclasses.replace(cfg, **changes)
    new.validate()
    return new


class Task:
    """Base class of every task: a MuJoCo model plus pure, unbatched JAX functions.

    Subclasses set `config_class` and implement `xml`, `init`, `observe` and `reward_terms`; the class
    docstring is the task's documentation. Names, variants (a class plus config overrides) and the
    documented returns live in the registry, `sim.tasks`.

    Construction only stores and validates the config, so a subclass sets up its own attributes after
    `super().__init__(config, name)` as usual. The MuJoCo model, its index and the full reward scales
    are built on first use; `build` builds them at once and checks the config against them
    (`sim.make_task` calls it, so a bad reward-term name fails there).
    """

    name: str
    config_class: ClassVar[type[TaskConfig]] = TaskConfig
    #: Scale the compiled model's masses to this total (MJCF's deprecated `settotalmass`).
    total_mass: ClassVar[float | None] = None
    #: mjData fields beyond qpos/qvel/sensordata that the task reads through `Physics.fields`, such as
    #: "cfrc_ext" (Gymnasium's Ant observes the contact forces). Only fields `mj_rnePostConstraint`
    #: computes or `mj_forward` leaves are supported: see `sim.core.DATA_FIELDS`.
    data_fields: ClassVar[tuple[str, ...]] = ()
    #: Clip every joint velocity to +-qvel_limit before each control step's physics, as
    #: gymnasium-robotics' PointMaze does to its force-driven ball (None: no clip).
    qvel_limit: ClassVar[float | None] = None

    def __init__(self, config: TaskConfig | None = None, name: str | None = None):
        self.cfg = config if config is not None else self.config_class()
        self.cfg.validate()
        #: The registry name (`sim.make_task` passes it); for a task built directly, its class's `name`
        #: attribute if it has one, else the class name.
        self.name = name or getattr(type(self), "name", "") or type(self).__name__

    def build(self) -> Task:
        """Compile the model, check the config against it and store every reward term's scale in `cfg`.

        Idempotent; returns the task. An unknown reward-term name in `reward_scales` raises `ConfigError`.
        """
        if self.cfg.reward_scales != self.reward_scales:
            self.cfg = dataclasses.replace(self.cfg, reward_scales=dict(self.reward_scales))
        return self

    @functools.cached_property
    def mj_model(self) -> mujoco.MjModel:
        """The compiled MuJoCo model of `xml()`, with the configured physics time step."""
        model = mujoco.MjModel.from_xml_string(self.xml())
        model.opt.timestep = self.cfg.sim_dt
        if self.total_mass is not None:  # scale every body's mass and inertia, as DM Control's models do
            mujoco.mj_setTotalmass(model, self.total_mass)
            mujoco.mj_setConst(model, mujoco.MjData(model))
        return model

    @functools.cached_property
    def index(self) -> ModelIndex:
        """Name -> index maps of `mj_model`."""
        return ModelIndex(self.mj_model)

    @functools.cached_property
    def _ctrl_range(self) -> tuple[np.ndarray, np.ndarray]:
        """Each actuator's control range; [-1, 1] for unlimited ones. Numpy, not JAX: first use may be
        inside a jit trace, and a cached JAX value made there would leak the tracer."""
        lo, hi = self.mj_model.actuator_ctrlrange.T
        limited = self.mj_model.actuator_ctrllimited.astype(bool)
        return np.where(limited, lo, -1.0).astype(np.float32), np.where(limited, hi, 1.0).astype(np.float32)

    @functools.cached_property
    def reward_scales(self) -> dict[str, float]:
        """Every reward term's scale (1 unless configured); unknown names in the config raise `ConfigError`."""
        m = self.mj_model
        phys = Physics(qpos=jnp.zeros(m.nq), qvel=jnp.zeros(m.nv), sensordata=jnp.zeros(m.nsensordata),
                       ctrl=jnp.zeros(m.nu), fields={k: jnp.zeros(data_field_shape(m, k)) for k in self.data_fields})
        _, _, info = jax.eval_shape(self.init, jax.random.PRNGKey(0))
        info = {**jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), info), "steps": jnp.zeros((), jnp.int32),
                "dr": {}, "rng": jax.random.PRNGKey(0)}  # what the environment adds to every info
        names = list(jax.eval_shape(self.reward_terms, phys, jnp.zeros(m.nu), info))
        unknown = set(self.cfg.reward_scales) - set(names)
        if unknown:
            raise ConfigError(f"unknown reward terms {sorted(unknown)} in reward_scales; "
                              f"{self.name} has {names}")
        return {k: float(self.cfg.reward_scales.get(k, 1.0)) for k in names}

    # --- what a task defines -------------------------------------------------------------------
    def xml(self) -> str:
        """The MJCF model."""
        raise NotImplementedError

    def init(self, key: Array) -> tuple[Array, Array, dict[str, Array]]:
        """Initial (qpos, qvel, info) of a new episode; `info` entries must keep fixed shapes."""
        raise NotImplementedError

    def observe(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        """Observation groups: `"policy"` (and optionally `"critic"`), each a flat float32 vector."""
        raise NotImplementedError

    def reward_terms(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        """Named reward terms of one control step (unscaled); logged as `reward/<name>`."""
        raise NotImplementedError

    def reward(self, terms: dict[str, Array]) -> Array:
        """Combine the terms; the default is the scaled sum."""
        scales = self.reward_scales
        return sum(scales[k] * v for k, v in terms.items())

    def product_reward(self, terms: dict[str, Array]) -> Array:
        """DM-Control-style multiplicative reward: prod(term ** scale); a scale of 0 drops a term."""
        scales = self.reward_scales
        out = jnp.ones(())
        for k, v in terms.items():
            out = out * (v if scales[k] == 1.0 else v ** scales[k])
        return out

    def terminated(self, phys: Physics, info: dict[str, Array]) -> Array:
        """Whether the episode ended in a terminal state (not a time-out); default never."""
        return jnp.zeros((), dtype=bool)

    def randomize(self, key: Array) -> dict[str, Array]:
        """Physics parameters of a new episode as MjModel field overrides (full field shapes).

        Called at every reset when `cfg.domain_randomization` is on; the values hold for the whole
        episode, on both backends. Example: `{"body_mass": self.mj_model.body_mass * scale}`.
        Return physical parameters only: with masses, inertias or armature the environment adds the
        constraint weights MuJoCo derives from them (`sim.randomization`). The default randomizes nothing.
        """
        return {}

    def metrics(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        """Named scalar metrics after each control step, logged in `extras["log"]`; default none.

        A name starting with `"episode/"` is logged as its mean over the episodes that end at that
        step (their final value): `"episode/success"` set to 1.0 in successful episodes is a success
        rate. Other names are means over all envs, like the reward terms.
        """
        return {}

    def update_info(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        """Task bookkeeping after each control step (e.g. the previous action); default unchanged."""
        return info

    # --- derived ---------------------------------------------------------------------------------
    @property
    def num_actions(self) -> int:
        return int(self.mj_model.nu)

    def action_to_ctrl(self, action: Array) -> Array:
        """Map an action in [-1, 1] (clipped) to the actuators' control range."""
        a = jnp.clip(action, -1.0, 1.0)
        lo, hi = self._ctrl_range
        return lo + (a + 1.0) * 0.5 * (hi - lo)

    @classmethod
    def describe(cls) -> str:
        """The task's documentation (its docstring), for `robolearn tasks` and the docs."""
        doc = next((c.__doc__ for c in cls.__mro__ if c.__doc__ and c is not Task), cls.__name__)
        return doc.strip()


def tolerance(x: Array, bounds: tuple[float, float] = (0.0, 0.0), margin: float = 0.0,
              sigmoid: str = "gaussian", value_at_margin: float = 0.1) -> Array:
    """DM-Control-style shaped reward: 1 inside `bounds`, decaying with distance outside.

    At a distance of `margin` from the bounds the value is `value_at_margin`; `sigmoid` picks the
    decay shape ("gaussian", "linear" or "quadratic", the ones the DM Control tasks here use).
    """
    lo, hi = bounds
    in_bounds = (lo <= x) & (x <= hi)
    if margin == 0:
        return jnp.where(in_bounds, 1.0, 0.0)
    d = jnp.where(x < lo, lo - x, x - hi) / margin
    if sigmoid == "gaussian":
        scale = jnp.sqrt(-2.0 * jnp.log(value_at_margin))
        value = jnp.exp(-0.5 * (d * scale) ** 2)
    elif sigmoid == "linear":
        scaled = d * (1.0 - value_at_margin)
        value = jnp.where(jnp.abs(scaled) < 1.0, 1.0 - jnp.abs(scaled), 0.0)
    elif sigmoid == "quadratic":
        scaled = d * jnp.sqrt(1.0 - value_at_margin)
        value = jnp.where(jnp.abs(scaled) < 1.0, 1.0 - scaled**2, 0.0)
    else:
        raise ConfigError(f"unknown sigmoid {sigmoid!r}; use 'gaussian', 'linear' or 'quadratic'")
    return jnp.where(in_bounds, 1.0, value)
