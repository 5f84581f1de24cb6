"""Gymnasium's MuJoCo v5 locomotion tasks: HalfCheetah, Hopper, Walker2d and Ant, as ordinary tasks.

These are the standard offline-RL benchmarks (D4RL's locomotion datasets were recorded in them), ported so that
their datasets score in our batched sim with their reference returns. Everything follows Gymnasium 1.x's
`*_v5.py` files and is checked against them step by step (tests/sim/test_mujoco_v5.py):

- the model is Gymnasium's own XML asset, read from the installed `gymnasium` package;
- one control step is `frame_skip` physics steps (`ctrl_dt = frame_skip * timestep`, `sim_dt = timestep`),
  1000 control steps per episode (Gymnasium's `TimeLimit`);
- every v5 keyword option is a config field of the same name (`sim.make("hopper-v5", reset_noise_scale=0.01)`);
- the reward terms are Gymnasium's `info["reward_<name>"]`, weights included, so their sum is Gymnasium's
  reward; `reward_scales` (default 1) would scale them further.

How close to Gymnasium, as measured by the tests (jax 0.10.2, mujoco 4.0.0):

- C backend (`backend="mujoco"`): the same physics. Observations are float32 (Gymnasium's float64) and the forward
  speed is a difference of float32 positions, so rewards carry up to 2 ulp(x) / ctrl_dt of rounding (2e-5 at
  x = 5 m for the cheetah; it telescopes away over an episode). One more difference: each control step's
  constraint solver starts from zero accelerations (`mujoco.rollout`), Gymnasium's from the previous step's; both
  converge to 1e-8, but the cheetah's and the ant's chaotic contacts amplify it past 1e-5 after ~70-220 steps of
  random actions. With Gymnasium's warm start zeroed, trajectories agree to float32 precision (300-400 steps tested).
- MJX (float32): one step from the same state agrees to ~1e-4 (cheetah, hopper, walker; relative to 1 + |x|), and
  random-action trajectories stay within 1e-4 for 6-22 steps (cheetah), 100-180 (hopper), 50-120 (walker). The
  ant's contacts lie inside its geoms' margins, where MJX's contact forces differ from MuJoCo C's, so it parts
  from Gymnasium at its first ground contact (see `Ant`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import jax
import jax.numpy as jnp

from sim.core import Physics, Task, TaskConfig
from sim.errors import ConfigError

Array = jax.Array


def gymnasium_asset(name: str) -> Path:
    """The path of one of Gymnasium's MuJoCo model files (gymnasium is a core dependency)."""
    import gymnasium

    return Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / name


@dataclasses.dataclass(frozen=True)
class MujocoV5Config(TaskConfig):
    """Options every v5 locomotion task has (Gymnasium's keyword arguments of the same names).

    A `(low, high)` range may be given as any pair (a Hydra list too); it is stored as a tuple of floats.
    """

    episode_length: int = 1000
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    #: Half-width of the uniform noise on the initial joint positions; scale of the velocity noise.
    reset_noise_scale: float = 0.1
    #: Leave the root's horizontal position out of the observation (the policy cannot see where it is).
    exclude_current_positions_from_observation: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_range") and not isinstance(value, tuple):
                try:
                    object.__setattr__(self, f.name, tuple(float(v) for v in value))
                except (TypeError, ValueError):
                    raise ConfigError(f"{f.name} must be a (low, high) pair of numbers, got {value!r}") from None

    def validate(self) -> None:
        super().validate()
        if self.reset_noise_scale < 0:
            raise ConfigError(f"reset_noise_scale must be >= 0, got {self.reset_noise_scale}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_range") and (len(value) != 2 or not value[0] <= value[1]):
                raise ConfigError(f"{f.name} must be a (low, high) pair with low <= high, got {value!r}")


@dataclasses.dataclass(frozen=True)
class HealthyConfig(MujocoV5Config):
    """Options of the tasks that can fall (Hopper, Walker2d, Ant)."""

    #: Reward of every step that ends healthy (Gymnasium's `reward_survive`).
    healthy_reward: float = 1.0
    #: End the episode (terminated, not truncated) when the robot is no longer healthy.
    terminate_when_unhealthy: bool = True
    #: Healthy torso heights (qpos[1] of the planar walkers, qpos[2] of the Ant).
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))


class MujocoV5Task(Task):
    """Base of the v5 locomotion tasks: the model, reset noise, observation, forward and control terms.

    Subclasses name the XML file and say how the initial velocity is perturbed; tasks that can fall
    override `healthy`.
    """

    config_class: ClassVar[type[TaskConfig]] = MujocoV5Config
    cfg: MujocoV5Config
    #: Gymnasium's model file (in its assets folder).
    xml_file: ClassVar[str]
    #: Initial velocity noise: "normal" (`scale * N(0, 1)`) or "uniform" (`U(-scale, scale)`), as each v5 file has it.
    qvel_noise: ClassVar[str] = "uniform"
    #: Leading qpos entries that `exclude_current_positions_from_observation` leaves out (the root's x, or x and y).
    skipped_qpos: ClassVar[int] = 1
    #: Joint velocities are clipped to +-qvel_clip in the observation (Hopper, Walker2d); None: not clipped.
    qvel_clip: ClassVar[float | None] = None

    def xml(self) -> str:
        return gymnasium_asset(self.xml_file).read_text()

    @property
    def dt(self) -> float:
        """Gymnasium's `env.dt`: the control period, `timestep * frame_skip`."""
        return float(self.mj_model.opt.timestep) * self.cfg.n_substeps

    def init(self, key: Array) -> tuple[Array, Array, dict[str, Array]]:
        """Gymnasium's `reset_model`: the model's reference pose plus uniform position noise (the Ant's quaternion
        included, unnormalised, as there), zero velocity plus normal or uniform noise."""
        m, scale = self.mj_model, self.cfg.reset_noise_scale
        pos_key, vel_key = jax.random.split(key)
        qpos = jnp.asarray(m.qpos0, jnp.float32) + jax.random.uniform(pos_key, (m.nq,), minval=-scale, maxval=scale)
        if self.qvel_noise == "normal":
            qvel = scale * jax.random.normal(vel_key, (m.nv,))
        else:
            qvel = jax.random.uniform(vel_key, (m.nv,), minval=-scale, maxval=scale)
        # The root's x before the first step: qpos[0] (for the Ant's free-jointed torso, its xpos is qpos[:3]).
        return qpos, qvel, {"x_before": qpos[0]}

    def action_to_ctrl(self, action: Array) -> Array:
        """Gymnasium hands the action to MuJoCo, which clamps it to the control range; every v5 model's range is
        [-1, 1], so this is the [-1, 1] mapping of other tasks, minus the float32 rounding of its arithmetic."""
        lo, hi = self._ctrl_range
        return jnp.clip(action, lo, hi)

    def x_position(self, phys: Physics) -> Array:
        """The x coordinate whose change per control period is the forward speed (the root slide joint)."""
        return phys.qpos[0]

    def observe(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        """Gymnasium's `_get_obs`: positions (without the skipped root coordinates), velocities, extras."""
        position = phys.qpos[self.skipped_qpos:] if self.cfg.exclude_current_positions_from_observation else phys.qpos
        velocity = phys.qvel if self.qvel_clip is None else jnp.clip(phys.qvel, -self.qvel_clip, self.qvel_clip)
        return {"policy": jnp.concatenate([position, velocity, *self.extra_obs(phys)]).astype(jnp.float32)}

    def extra_obs(self, phys: Physics) -> list[Array]:
        """Observation parts after the velocities; default none."""
        return []

    def healthy(self, phys: Physics) -> Array:
        """Whether the robot is in a healthy state; the cheetah always is."""
        return jnp.ones((), bool)

    def reward_terms(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        """Forward speed (x after - x before) / dt, and the control cost of the raw (unclipped) action."""
        cfg = self.cfg
        x_velocity = (self.x_position(phys) - info["x_before"]) / self.dt
        return {"forward": cfg.forward_reward_weight * x_velocity,
                "ctrl": -cfg.ctrl_cost_weight * jnp.sum(jnp.square(action))}

    def update_info(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        return {**info, "x_before": self.x_position(phys)}

    def terminated(self, phys: Physics, info: dict[str, Array]) -> Array:
        terminate = getattr(self.cfg, "terminate_when_unhealthy", False)
        return jnp.logical_and(terminate, ~self.healthy(phys))


class HealthyTask(MujocoV5Task):
    """A v5 task that can fall: adds the `survive` term (healthy_reward while healthy)."""

    cfg: HealthyConfig

    def reward_terms(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        terms = super().reward_terms(phys, action, info)
        return {**terms, "survive": self.cfg.healthy_reward * self.healthy(phys).astype(jnp.float32)}


def _inside(x: Array, bounds: tuple[float, float]) -> Array:
    """low < x < high, strictly, as Gymnasium's planar walkers test their ranges."""
    return (bounds[0] < x) & (x < bounds[1])


# --- HalfCheetah -------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HalfCheetahConfig(MujocoV5Config):
    ctrl_dt: float = 0.05  # frame_skip 5
    sim_dt: float = 0.01
    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1


class HalfCheetah(MujocoV5Task):
    """Gymnasium's HalfCheetah-v5: a planar cheetah runs forward.

    Model: Gymnasium's half_cheetah.xml (torso, back and front legs of thigh, shin and foot; six hinges with springs;
    14 kg). Physics step 0.01 s (Euler), 5 per control step (0.05 s); 1000-step episodes, no early termination.

    Observation `"policy"` (17): qpos without the root x (8; 9 with
    `exclude_current_positions_from_observation=False`), qvel (9).
    Action (6): joint torques in [-1, 1] (times the gears 120/90/60/120/60/30).
    Reward terms: `forward` = forward_reward_weight * (x after - x before) / 0.05 (root x), `ctrl` =
    -ctrl_cost_weight * |action|^2 (the raw action); the reward is their sum, as Gymnasium's.
    Initial state: reference pose + U(-0.1, 0.1) on qpos, 0.1 * N(0, 1) on qvel (`reset_noise_scale`).
    """

    config_class = HalfCheetahConfig
    xml_file = "half_cheetah.xml"
    qvel_noise = "normal"


# --- Hopper ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HopperConfig(HealthyConfig):
    ctrl_dt: float = 0.008  # frame_skip 4
    sim_dt: float = 0.002
    ctrl_cost_weight: float = 1e-3
    reset_noise_scale: float = 5e-3
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    #: Healthy torso pitch (qpos[2]).
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    #: Every entry of qpos[2:] and qvel (unclipped) must stay strictly inside this range.
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)


class Hopper(HealthyTask):
    """Gymnasium's Hopper-v5: a one-legged planar robot hops forward without falling.

    Model: Gymnasium's hopper.xml (torso, thigh, leg, foot; three actuated hinges, gear 200). Physics step 0.002 s
    (RK4), 4 per control step (0.008 s); 1000-step episodes.

    Observation `"policy"` (11): qpos without the root x (5; 6 with `exclude_current_positions_from_observation=False`),
    qvel clipped to [-10, 10] (6).
    Action (3): joint torques in [-1, 1] (times 200).
    Reward terms: `forward` = forward_reward_weight * (x after - x before) / 0.008, `ctrl` = -ctrl_cost_weight *
    |action|^2 (raw action), `survive` = healthy_reward while healthy; the reward is their sum, as Gymnasium's.
    Healthy: height qpos[1] in healthy_z_range, pitch qpos[2] in healthy_angle_range, and qpos[2:] and qvel in
    healthy_state_range (all strict); unhealthy ends the episode when terminate_when_unhealthy.
    Initial state: reference pose + U(-0.005, 0.005) on qpos and on qvel (`reset_noise_scale`).
    """

    config_class = HopperConfig
    cfg: HopperConfig
    xml_file = "hopper.xml"
    qvel_clip = 10.0

    def healthy(self, phys: Physics) -> Array:
        cfg = self.cfg
        state = jnp.concatenate([phys.qpos[2:], phys.qvel])
        return (jnp.all(_inside(state, cfg.healthy_state_range)) & _inside(phys.qpos[1], cfg.healthy_z_range)
                & _inside(phys.qpos[2], cfg.healthy_angle_range))


# --- Walker2d ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Walker2dConfig(HealthyConfig):
    ctrl_dt: float = 0.008  # frame_skip 4
    sim_dt: float = 0.002
    ctrl_cost_weight: float = 1e-3
    reset_noise_scale: float = 5e-3
    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    #: Healthy torso pitch (qpos[2]).
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)


class Walker2d(HealthyTask):
    """Gymnasium's Walker2d-v5: a two-legged planar robot walks forward without falling.

    Model: Gymnasium's walker2d_v5.xml (torso, two legs of thigh, leg and foot; six actuated hinges, gear 100; both
    feet with friction 1.9). Physics step 0.002 s (RK4), 4 per control step (0.008 s); 1000-step episodes.

    Observation `"policy"` (17): qpos without the root x (8; 9 with
    `exclude_current_positions_from_observation=False`), qvel clipped to [-10, 10] (9).
    Action (6): joint torques in [-1, 1] (times 100).
    Reward terms: `forward` = forward_reward_weight * (x after - x before) / 0.008, `ctrl` = -ctrl_cost_weight *
    |action|^2 (raw action), `survive` = healthy_reward while healthy; the reward is their sum, as Gymnasium's.
    Healthy: height qpos[1] in healthy_z_range and pitch qpos[2] in healthy_angle_range (strict); unhealthy ends the
    episode when terminate_when_unhealthy.
    Initial state: reference pose + U(-0.005, 0.005) on qpos and on qvel (`reset_noise_scale`).
    """

    config_class = Walker2dConfig
    cfg: Walker2dConfig
    xml_file = "walker2d_v5.xml"
    qvel_clip = 10.0

    def healthy(self, phys: Physics) -> Array:
        cfg = self.cfg
        return _inside(phys.qpos[1], cfg.healthy_z_range) & _inside(phys.qpos[2], cfg.healthy_angle_range)


# --- Ant ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AntConfig(HealthyConfig):
    ctrl_dt: float = 0.05  # frame_skip 5
    sim_dt: float = 0.01
    ctrl_cost_weight: float = 0.5
    reset_noise_scale: float = 0.1
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_cost_weight: float = 5e-4
    #: External contact forces (cfrc_ext) are clipped to this range, in the cost and the observation.
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    #: Append the clipped cfrc_ext of every body but the world (13 x 6) to the observation.
    include_cfrc_ext_in_observation: bool = True


class Ant(HealthyTask):
    """Gymnasium's Ant-v5: a quadruped walks forward (+x) without flipping or jumping.

    Model: Gymnasium's ant.xml (a free-jointed torso sphere, four legs of hip and ankle hinges, gear 150; every geom
    with contact margin 0.01). Physics step 0.01 s (RK4), 5 per control step (0.05 s); 1000-step episodes.

    Observation `"policy"` (105): qpos without the root x, y (13; 15 with
    `exclude_current_positions_from_observation=False`), qvel (14), and with `include_cfrc_ext_in_observation` the
    external contact forces cfrc_ext of bodies 1..13 clipped to contact_force_range, flattened (78; zero after a
    reset, as Gymnasium's).
    Action (8): hip and ankle torques in [-1, 1] (times 150).
    Reward terms: `forward` = forward_reward_weight * (torso x after - torso x before) / 0.05, `ctrl` =
    -ctrl_cost_weight * |action|^2 (raw action), `contact` = -contact_cost_weight * |clipped cfrc_ext|^2 (all
    bodies), `survive` = healthy_reward while healthy; the reward is their sum, as Gymnasium's.
    The torso's x is its `xpos` as `mj_step` leaves it, which under RK4 is the last integration stage's, not qpos[0]
    (Gymnasium's `main_body` option, which picks another body, is not offered: the torso is body 1, its default).
    Healthy: qpos and qvel finite and torso height qpos[2] in healthy_z_range (inclusive); unhealthy ends the episode
    when terminate_when_unhealthy.
    Initial state: reference pose (torso 0.75 m up) + U(-0.1, 0.1) on qpos (the quaternion too), 0.1 * N(0, 1) on
    qvel (`reset_noise_scale`).

    On MJX the ant is not Gymnasium's: its contacts (all within the geoms' 0.01 margins) get forces that differ from
    MuJoCo C's (0.2% of qacc at the median, up to 38%, in float64 MJX too), so trajectories part within 2-3 steps
    and one step from Gymnasium's state is off by 1e-4 to 1e-3 at the median, up to 0.8 (tests/sim/test_mujoco_v5.py).
    Use the C backend where equality with Gymnasium matters (datasets, D4RL scores).
    """

    config_class = AntConfig
    cfg: AntConfig
    xml_file = "ant.xml"
    qvel_noise = "normal"
    skipped_qpos = 2
    data_fields = ("cfrc_ext", "xpos")

    def x_position(self, phys: Physics) -> Array:
        return phys.fields["xpos"][1, 0]  # the torso (Gymnasium's main_body=1)

    def contact_forces(self, phys: Physics) -> Array:
        low, high = self.cfg.contact_force_range
        return jnp.clip(phys.fields["cfrc_ext"], low, high)

    def extra_obs(self, phys: Physics) -> list[Array]:
        if not self.cfg.include_cfrc_ext_in_observation:
            return []
        return [self.contact_forces(phys)[1:].reshape(-1)]

    def healthy(self, phys: Physics) -> Array:
        low, high = self.cfg.healthy_z_range
        finite = jnp.all(jnp.isfinite(phys.qpos)) & jnp.all(jnp.isfinite(phys.qvel))
        return finite & (low <= phys.qpos[2]) & (phys.qpos[2] <= high)

    def reward_terms(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        terms = super().reward_terms(phys, action, info)
        contact = -self.cfg.contact_cost_weight * jnp.sum(jnp.square(self.contact_forces(phys)))
        return {"forward": terms["forward"], "ctrl": terms["ctrl"], "contact": contact, "survive": terms["survive"]}
