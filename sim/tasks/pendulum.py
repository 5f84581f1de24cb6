"""Pendulum swing-up, as in the DeepMind Control Suite.

Model: a 0.5 m massless pole with a 1 kg ball, hinge damping 0.1, torque-limited motor (gear 1,
ctrl in [-1, 1]): too weak to lift the ball directly, so it must pump energy. Physics step 0.02 s
(Euler), one physics step per control step, 1000-step episodes (20 s).

Observation `"policy"` (3): cos and sin of the pole angle (0 = upright), angular velocity.
Action (1): torque in [-1, 1].
Reward term `upright`: 1 while the pole is within 30 degrees of vertical, else 0 (sparse, as DM
Control's swingup). No early termination. Initial angle U(-pi, pi), velocity 0.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from sim.core import Physics, Task, TaskConfig
from sim.tasks._scene import scene_assets

XML = """
<mujoco model="pendulum">
  <option timestep="0.02">
    <flag contact="disable"/>
  </option>
  __SCENE__
    <material name="self" rgba=".7 .5 .3 1"/>
    <material name="effector" rgba=".7 .4 .2 1"/>
  </asset>
  <worldbody>
    <light name="light" pos="0 0 6"/>
    <geom name="floor" size="2 2 .2" type="plane" material="grid"/>
    <camera name="fixed" pos="0 -1.5 2" xyaxes="1 0 0 0 1 1"/>
    <body name="pole" pos="0 0 .6">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom name="base" type="cylinder" fromto="0 -.03 0 0 .03 0" size="0.021" mass="0" material="self"/>
      <geom name="pole" type="capsule" fromto="0 0 0 0 0 0.5" size="0.02" mass="0" material="self"/>
      <body name="mass" pos="0 0 0.5">
        <geom name="mass" type="sphere" size="0.05" mass="1" material="effector"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <general name="torque" joint="hinge" gear="1" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
  <sensor>
    <jointpos name="angle" joint="hinge"/>
    <jointvel name="angvel" joint="hinge"/>
  </sensor>
</mujoco>
"""

_COS_30 = float(jnp.cos(jnp.deg2rad(30.0)))


@dataclasses.dataclass(frozen=True)
class PendulumConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.02
    sim_dt: float = 0.02


class PendulumSwingup(Task):
    __doc__ = __doc__
    config_class = PendulumConfig

    def xml(self) -> str:
        return XML.replace("__SCENE__", scene_assets())

    def init(self, key):
        angle = jax.random.uniform(key, (1,), minval=-jnp.pi, maxval=jnp.pi)
        return angle, jnp.zeros(1), {}

    def observe(self, phys: Physics, info):
        a = phys.qpos[0]
        return {"policy": jnp.stack([jnp.cos(a), jnp.sin(a), phys.qvel[0]]).astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        return {"upright": (jnp.cos(phys.qpos[0]) >= _COS_30).astype(jnp.float32)}
