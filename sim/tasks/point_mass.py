"""Point mass reaching a target, as DM Control's point_mass-easy.

Model: a 0.3 kg ball sliding in a 0.6 m square arena (two slide joints, range +-0.29, damping 1),
driven by two motors (gear 0.1) through fixed tendons. Physics step 0.02 s, one physics step per
control step, 1000-step episodes. Contact with the floor is disabled (DM Control's ball touches a
frictional floor), so returns are not directly comparable to DM Control's numbers.

Observation `"policy"` (4): position (x, y), velocity (x, y). The target sits at the origin.
Action (2): forces in [-1, 1].
Reward terms, multiplied (`reward_scales` act as exponents):
`near_target` = tolerance(distance, bounds=(0, 0.015), margin=0.015);
`small_control` = (4 + mean quadratic tolerance(u, margin=1, 0)) / 5. Initial position uniform in
the joint ranges, velocity 0. No early termination.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from sim.core import Physics, Task, TaskConfig, tolerance
from sim.tasks._scene import scene_assets

XML = """
<mujoco model="point_mass">
  <option timestep="0.02">
    <flag contact="disable"/>
  </option>
  __SCENE__
    <material name="self" rgba=".7 .5 .3 1"/>
    <material name="target" rgba=".6 .3 .3 1"/>
  </asset>
  <default>
    <joint type="slide" limited="true" range="-.29 .29" damping="1"/>
    <motor gear=".1" ctrlrange="-1 1" ctrllimited="true"/>
  </default>
  <worldbody>
    <light name="light" pos="0 0 1"/>
    <camera name="fixed" pos="0 0 .75" quat="1 0 0 0"/>
    <geom name="ground" type="plane" pos="0 0 0" size=".3 .3 .1" material="grid"/>
    <body name="pointmass" pos="0 0 .01">
      <joint name="root_x" axis="1 0 0"/>
      <joint name="root_y" axis="0 1 0"/>
      <geom name="pointmass" type="sphere" size=".01" material="self" mass=".3"/>
    </body>
    <geom name="target" pos="0 0 .01" material="target" type="sphere" size=".015" contype="0" conaffinity="0"/>
  </worldbody>
  <tendon>
    <fixed name="t1"><joint joint="root_x" coef="1"/><joint joint="root_y" coef="0"/></fixed>
    <fixed name="t2"><joint joint="root_x" coef="0"/><joint joint="root_y" coef="1"/></fixed>
  </tendon>
  <actuator>
    <motor name="t1" tendon="t1"/>
    <motor name="t2" tendon="t2"/>
  </actuator>
  <sensor>
    <framepos name="mass_pos" objtype="body" objname="pointmass"/>
  </sensor>
</mujoco>
"""

_TARGET_SIZE = 0.015


@dataclasses.dataclass(frozen=True)
class PointMassConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.02
    sim_dt: float = 0.02


class PointMass(Task):
    __doc__ = __doc__
    config_class = PointMassConfig

    def xml(self) -> str:
        return XML.replace("__SCENE__", scene_assets())

    def init(self, key):
        qpos = jax.random.uniform(key, (2,), minval=-0.29, maxval=0.29)
        return qpos, jnp.zeros(2), {}

    def observe(self, phys: Physics, info):
        return {"policy": jnp.concatenate([phys.qpos, phys.qvel]).astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        dist = jnp.linalg.norm(phys.qpos)
        control = tolerance(phys.ctrl, margin=1.0, value_at_margin=0.0, sigmoid="quadratic").mean()
        return {
            "near_target": tolerance(dist, bounds=(0.0, _TARGET_SIZE), margin=_TARGET_SIZE),
            "small_control": (4.0 + control) / 5.0,
        }

    def reward(self, terms):
        return self.product_reward(terms)
