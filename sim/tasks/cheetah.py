"""Half-cheetah running, as DM Control's cheetah-run.

Model: the planar half-cheetah (torso with head, back and front legs of thigh, shin and foot; six
hinge joints with springs, motors of gear 120/90/60/120/60/30; total mass 14 kg; foot-ground
friction 0.4). Physics step 0.01 s, one physics step per control step, 1000-step episodes.

Observation `"policy"` (17): joint positions without the horizontal root position (8) and all
joint velocities (9).
Action (6): joint torques in [-1, 1] (times the gears).
Reward term `run`: forward speed of the torso's subtree centre of mass / 10, clipped to [0, 1]
(DM Control's linear tolerance with a 10 m/s target). No early termination.
Initial state: hinge joints uniform within their ranges, the root at rest 0.7 m up; unlike DM
Control there are no 200 settling steps before the episode, so the first steps include the fall.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig, tolerance
from sim.tasks._scene import scene_assets

XML = """
<mujoco model="cheetah">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.01"/>
  __SCENE__
    <material name="self" rgba=".7 .5 .3 1"/>
  </asset>
  <default>
    <default class="cheetah">
      <joint limited="true" damping=".01" armature=".1" stiffness="8" type="hinge" axis="0 1 0"
             solimplimit="0 .8 .03" solreflimit=".02 1"/>
      <geom contype="1" conaffinity="0" condim="3" friction=".4 .1 .1" material="self"/>
    </default>
    <default class="free">
      <joint limited="false" damping="0" armature="0" stiffness="0"/>
    </default>
    <motor ctrllimited="true" ctrlrange="-1 1"/>
  </default>
  <worldbody>
    <light name="light" pos="0 0 4" dir="0 0 -1" directional="true"/>
    <geom name="ground" type="plane" conaffinity="1" pos="98 0 0" size="100 .8 .5" material="grid"/>
    <body name="torso" pos="0 0 .7" childclass="cheetah">
      <camera name="side" pos="0 -3 0" quat="0.707 0.707 0 0" mode="trackcom"/>
      <joint name="rootx" type="slide" axis="1 0 0" class="free"/>
      <joint name="rootz" type="slide" axis="0 0 1" class="free"/>
      <joint name="rooty" type="hinge" axis="0 1 0" class="free"/>
      <geom name="torso" type="capsule" fromto="-.5 0 0 .5 0 0" size="0.046"/>
      <geom name="head" type="capsule" pos=".6 0 .1" axisangle="0 1 0 .87" size="0.046 .15"/>
      <body name="bthigh" pos="-.5 0 0">
        <joint name="bthigh" range="-.52 1.05" stiffness="240" damping="6"/>
        <geom name="bthigh" type="capsule" pos=".1 0 -.13" axisangle="0 1 0 -3.8" size="0.046 .145"/>
        <body name="bshin" pos=".16 0 -.25">
          <joint name="bshin" range="-.785 .785" stiffness="180" damping="4.5"/>
          <geom name="bshin" type="capsule" pos="-.14 0 -.07" axisangle="0 1 0 -2.03" size="0.046 .15"/>
          <body name="bfoot" pos="-.28 0 -.14">
            <joint name="bfoot" range="-.4 .785" stiffness="120" damping="3"/>
            <geom name="bfoot" type="capsule" pos=".03 0 -.097" axisangle="0 1 0 -.27" size="0.046 .094"/>
          </body>
        </body>
      </body>
      <body name="fthigh" pos=".5 0 0">
        <joint name="fthigh" range="-1 .7" stiffness="180" damping="4.5"/>
        <geom name="fthigh" type="capsule" pos="-.07 0 -.12" axisangle="0 1 0 .52" size="0.046 .133"/>
        <body name="fshin" pos="-.14 0 -.24">
          <joint name="fshin" range="-1.2 .87" stiffness="120" damping="3"/>
          <geom name="fshin" type="capsule" pos=".065 0 -.09" axisangle="0 1 0 -.6" size="0.046 .106"/>
          <body name="ffoot" pos=".13 0 -.18">
            <joint name="ffoot" range="-.5 .5" stiffness="60" damping="1.5"/>
            <geom name="ffoot" type="capsule" pos=".045 0 -.07" axisangle="0 1 0 -.6" size="0.046 .07"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <sensor>
    <subtreelinvel name="torso_subtreelinvel" body="torso"/>
  </sensor>
  <actuator>
    <motor name="bthigh" joint="bthigh" gear="120"/>
    <motor name="bshin" joint="bshin" gear="90"/>
    <motor name="bfoot" joint="bfoot" gear="60"/>
    <motor name="fthigh" joint="fthigh" gear="120"/>
    <motor name="fshin" joint="fshin" gear="60"/>
    <motor name="ffoot" joint="ffoot" gear="30"/>
  </actuator>
</mujoco>
"""

RUN_SPEED = 10.0


@dataclasses.dataclass(frozen=True)
class CheetahConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.01
    sim_dt: float = 0.01


class CheetahRun(Task):
    __doc__ = __doc__
    config_class = CheetahConfig
    total_mass = 14.0

    def xml(self) -> str:
        return XML.replace("__SCENE__", scene_assets())

    def init(self, key):
        m = self.mj_model
        lo, hi = np.asarray(m.jnt_range[3:]).T  # the six limited hinges
        hinges = jax.random.uniform(key, (6,), minval=lo, maxval=hi)
        qpos = jnp.concatenate([jnp.zeros(3), hinges])
        return qpos, jnp.zeros(m.nv), {}

    def observe(self, phys: Physics, info):
        return {"policy": jnp.concatenate([phys.qpos[1:], phys.qvel]).astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        speed = self.index.sensor(phys, "torso_subtreelinvel")[0]
        return {"run": tolerance(speed, bounds=(RUN_SPEED, float("inf")), margin=RUN_SPEED, value_at_margin=0.0,
                                 sigmoid="linear")}
