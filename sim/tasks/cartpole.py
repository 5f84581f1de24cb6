"""Cart-pole balance and swing-up, as in the DeepMind Control Suite.

Model: a cart on a rail (slider joint, range +-1.8 m, motor gear 10) carrying an unactuated pole
(hinge). Physics step 0.01 s with RK4, one physics step per control step, 1000-step episodes (10 s).

Observation `"policy"` (5): cart position, cos and sin of the pole angle (angle 0 = upright), cart
velocity, pole angular velocity.
Action (1): cart force in [-1, 1] (times gear 10 N).
Reward terms, multiplied (each in [0, 1], so the per-step reward is in [0, 1] and the return <= 1000;
`reward_scales` act as exponents, 0 drops a term):
`upright` = (cos + 1) / 2; `centered` = (1 + tolerance(cart_pos, margin=2)) / 2;
`small_control` = (4 + tolerance(u, margin=1, quadratic, 0)) / 5;
`small_velocity` = (1 + tolerance(pole_angvel, margin=5)) / 2.
No early termination. Initial state: balance starts near upright (slider U(-0.1, 0.1), hinge
U(-0.034, 0.034)); swing-up starts hanging down (slider 0.01 N(0,1), hinge pi + 0.01 N(0,1));
velocities 0.01 N(0,1).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from sim.core import Physics, Task, TaskConfig, tolerance
from sim.tasks._scene import scene_assets

XML = """
<mujoco model="cartpole">
  <option timestep="0.01" integrator="RK4">
    <flag contact="disable"/>
  </option>
  __SCENE__
    <material name="self" rgba=".7 .5 .3 1"/>
    <material name="decoration" rgba=".3 .5 .7 1"/>
  </asset>
  <worldbody>
    <light name="light" pos="0 0 6"/>
    <camera name="fixed" pos="0 -4 1" zaxis="0 -1 0"/>
    <geom name="floor" pos="0 0 -.05" size="4 4 .2" type="plane" material="grid"/>
    <geom name="rail1" type="capsule" pos="0  .07 1" zaxis="1 0 0" size="0.02 2" material="decoration"/>
    <geom name="rail2" type="capsule" pos="0 -.07 1" zaxis="1 0 0" size="0.02 2" material="decoration"/>
    <body name="cart" pos="0 0 1">
      <joint name="slider" type="slide" limited="true" axis="1 0 0" range="-1.8 1.8"
             solreflimit=".08 1" damping="5e-4"/>
      <geom name="cart" type="box" size="0.2 0.15 0.1" material="self" mass="1"/>
      <body name="pole_1">
        <joint name="hinge_1" type="hinge" axis="0 1 0" damping="2e-6"/>
        <geom name="pole_1" type="capsule" fromto="0 0 0 0 0 1" size="0.045" material="self" mass=".1"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="slide" joint="slider" gear="10" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
  <sensor>
    <jointpos name="cart_pos" joint="slider"/>
    <jointvel name="cart_vel" joint="slider"/>
    <jointpos name="pole_angle" joint="hinge_1"/>
    <jointvel name="pole_angvel" joint="hinge_1"/>
  </sensor>
</mujoco>
"""


@dataclasses.dataclass(frozen=True)
class CartpoleConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.01
    sim_dt: float = 0.01
    #: Start hanging down (`cartpole-swingup`) instead of near upright (`cartpole-balance`).
    swing_up: bool = False


class Cartpole(Task):
    __doc__ = __doc__
    config_class = CartpoleConfig

    def xml(self) -> str:
        return XML.replace("__SCENE__", scene_assets())

    def init(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        if self.cfg.swing_up:
            slider = 0.01 * jax.random.normal(k1)
            hinge = jnp.pi + 0.01 * jax.random.normal(k2)
        else:
            slider = jax.random.uniform(k1, minval=-0.1, maxval=0.1)
            hinge = jax.random.uniform(k2, minval=-0.034, maxval=0.034)
        qpos = jnp.stack([slider, hinge])
        qvel = 0.01 * jax.random.normal(k3, (2,))
        return qpos, qvel, {}

    def observe(self, phys: Physics, info):
        angle = phys.qpos[1]
        obs = jnp.stack([phys.qpos[0], jnp.cos(angle), jnp.sin(angle), phys.qvel[0], phys.qvel[1]])
        return {"policy": obs.astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        return {
            "upright": (jnp.cos(phys.qpos[1]) + 1.0) / 2.0,
            "centered": (1.0 + tolerance(phys.qpos[0], margin=2.0)) / 2.0,
            "small_control": (4.0 + tolerance(phys.ctrl[0], margin=1.0, value_at_margin=0.0,
                                              sigmoid="quadratic")) / 5.0,
            "small_velocity": (1.0 + tolerance(phys.qvel[1], margin=5.0)) / 2.0,
        }

    def reward(self, terms):
        return self.product_reward(terms)

