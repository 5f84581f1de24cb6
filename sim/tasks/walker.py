"""Planar walker walking, as DM Control's walker-walk.

Model: DM Control's planar walker, a capsule torso on a planar root (slide joints `rootz`, `rootx`
and hinge `rooty`, torso centre 1.3 m up at qpos 0) with two legs of thigh, leg and foot (hinges
`hip` -20..100 deg, `knee` -150..0 deg, `ankle` -45..45 deg per side); six motors (gears 100 / 50 /
20 for hip / knee / ankle); capsules of density 1000 kg/m^3 (28.5 kg in all), friction 0.7; only the
seven body capsules collide, with the floor.
Physics step 0.0025 s, 10 physics steps per control step (control period 0.025 s), 1000-step episodes
(25 s).

Observation `"policy"` (24): the orientation of each of the 7 bodies (torso, right thigh, leg, foot,
left thigh, leg, foot) as the xx and xz entries of its rotation matrix, i.e. (cos, sin) of its pitch,
interleaved per body (14); the torso height (1); all joint velocities in the order rootz, rootx,
rooty, right hip, knee, ankle, left hip, knee, ankle (9).
Action (6): joint torques in [-1, 1] (times the gears), right hip, knee, ankle, then left.
Reward terms, multiplied (each in [0, 1], so the per-step reward is in [0, 1] and the return <= 1000;
`reward_scales` act as exponents, a scale of 0 on `move` gives DM Control's walker-stand reward):
`stand` = (3 * standing + upright) / 4, with standing = tolerance(torso height, bounds (1.2, inf),
margin 0.6, gaussian) and upright = (1 + cos(torso pitch)) / 2;
`move` = (5 * tolerance(vx, bounds (1, inf), margin 0.5, linear, value_at_margin 0.5) + 1) / 6, where
vx is the forward velocity of the torso subtree's centre of mass (target 1 m/s: config `move_speed`).
No early termination.
Initial state: the six leg hinges uniform within their ranges, the torso pitch uniform in [-pi, pi],
the root at rest at its reference height (1.3 m), all velocities zero, as DM Control; the walker then
falls to the floor during the first steps. Deviation from DM Control: the centre-of-mass velocity is
the `subtreelinvel` sensor, which here (as on every task) lags one physics sub-step (2.5 ms).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from sim.core import Physics, Task, TaskConfig, tolerance
from sim.errors import ConfigError
from sim.tasks._scene import scene_assets

XML = """
<mujoco model="walker">
  <compiler angle="degree"/>
  <option timestep="0.0025"/>
  __SCENE__
    <material name="self" rgba=".7 .5 .3 1"/>
  </asset>
  <default>
    <joint limited="true" damping=".1" armature=".01" solimplimit="0 .99 .01"/>
    <geom contype="1" conaffinity="0" condim="3" friction=".7 .1 .1"/>
    <motor ctrllimited="true" ctrlrange="-1 1"/>
    <default class="limb">
      <joint type="hinge" axis="0 -1 0"/>
      <geom type="capsule" material="self"/>
    </default>
    <default class="root">
      <joint limited="false" damping="0" armature="0"/>
    </default>
  </default>
  <worldbody>
    <geom name="floor" type="plane" conaffinity="1" pos="248 0 0" size="250 .8 .2" material="grid"/>
    <body name="torso" pos="0 0 1.3" childclass="limb">
      <camera name="side" pos="0 -2 .7" euler="60 0 0" mode="trackcom"/>
      <light name="light" pos="0 0 2" mode="trackcom"/>
      <joint name="rootz" class="root" type="slide" axis="0 0 1"/>
      <joint name="rootx" class="root" type="slide" axis="1 0 0"/>
      <joint name="rooty" class="root" type="hinge" axis="0 1 0"/>
      <geom name="torso" size=".07 .3"/>
      <body name="right_thigh" pos="0 -.05 -.3">
        <joint name="right_hip" range="-20 100"/>
        <geom name="right_thigh" pos="0 0 -.225" size=".05 .225"/>
        <body name="right_leg" pos="0 0 -.7">
          <joint name="right_knee" pos="0 0 .25" range="-150 0"/>
          <geom name="right_leg" size=".04 .25"/>
          <body name="right_foot" pos=".06 0 -.25">
            <joint name="right_ankle" pos="-.06 0 0" range="-45 45"/>
            <geom name="right_foot" zaxis="1 0 0" size=".05 .1"/>
          </body>
        </body>
      </body>
      <body name="left_thigh" pos="0 .05 -.3">
        <joint name="left_hip" range="-20 100"/>
        <geom name="left_thigh" pos="0 0 -.225" size=".05 .225"/>
        <body name="left_leg" pos="0 0 -.7">
          <joint name="left_knee" pos="0 0 .25" range="-150 0"/>
          <geom name="left_leg" size=".04 .25"/>
          <body name="left_foot" pos=".06 0 -.25">
            <joint name="left_ankle" pos="-.06 0 0" range="-45 45"/>
            <geom name="left_foot" zaxis="1 0 0" size=".05 .1"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <sensor>
    <subtreelinvel name="torso_subtreelinvel" body="torso"/>
  </sensor>
  <actuator>
    <motor name="right_hip" joint="right_hip" gear="100"/>
    <motor name="right_knee" joint="right_knee" gear="50"/>
    <motor name="right_ankle" joint="right_ankle" gear="20"/>
    <motor name="left_hip" joint="left_hip" gear="100"/>
    <motor name="left_knee" joint="left_knee" gear="50"/>
    <motor name="left_ankle" joint="left_ankle" gear="20"/>
  </actuator>
</mujoco>
"""

#: Torso height above which `standing` is 1 (DM Control's `_STAND_HEIGHT`).
STAND_HEIGHT = 1.2
#: Forward speed above which the move tolerance is 1 (DM Control's `_WALK_SPEED`).
WALK_SPEED = 1.0
#: Height of the torso centre at qpos 0 (the torso body's `pos`).
TORSO_Z0 = 1.3
# qpos layout of the model above: rootz, rootx, rooty, then right hip/knee/ankle, left hip/knee/ankle.
_ROOTZ, _ROOTY = 0, 2
_LEGS = slice(3, 9)


@dataclasses.dataclass(frozen=True)
class WalkerConfig(TaskConfig):
    episode_length: int = 1000
    ctrl_dt: float = 0.025
    sim_dt: float = 0.0025
    #: Target forward speed (m/s) of the `move` term.
    move_speed: float = WALK_SPEED

    def validate(self) -> None:
        super().validate()
        if self.move_speed <= 0:
            raise ConfigError(f"move_speed must be > 0 (use reward_scales={{'move': 0}} to stand), "
                              f"got {self.move_speed}")


class WalkerWalk(Task):
    __doc__ = __doc__
    config_class = WalkerConfig

    def xml(self) -> str:
        return XML.replace("__SCENE__", scene_assets())

    def init(self, key):
        k_legs, k_pitch = jax.random.split(key)
        lo, hi = np.asarray(self.mj_model.jnt_range[_LEGS]).T  # the six limited hinges
        legs = jax.random.uniform(k_legs, (6,), minval=lo, maxval=hi)
        pitch = jax.random.uniform(k_pitch, (1,), minval=-jnp.pi, maxval=jnp.pi)
        qpos = jnp.concatenate([jnp.zeros(2), pitch, legs])
        return qpos, jnp.zeros(self.mj_model.nv), {}

    def _pitches(self, phys: Physics) -> jax.Array:
        """World pitch of the 7 bodies (torso, right thigh/leg/foot, left thigh/leg/foot).

        Every hinge turns about the world y axis (the leg hinges about -y), so a body's pitch is the
        torso's minus the sum of the leg joint angles above it.
        """
        torso = phys.qpos[_ROOTY]
        legs = phys.qpos[_LEGS]
        right = torso - jnp.cumsum(legs[:3])
        left = torso - jnp.cumsum(legs[3:])
        return jnp.concatenate([torso[None], right, left])

    def torso_height(self, phys: Physics) -> jax.Array:
        """Height of the torso's centre (DM Control's `xpos['torso', 'z']`)."""
        return TORSO_Z0 + phys.qpos[_ROOTZ]

    def observe(self, phys: Physics, info):
        pitch = self._pitches(phys)
        # A rotation by `pitch` about +y has xx = cos(pitch) and xz = sin(pitch).
        orientations = jnp.stack([jnp.cos(pitch), jnp.sin(pitch)], axis=-1).ravel()
        obs = jnp.concatenate([orientations, self.torso_height(phys)[None], phys.qvel])
        return {"policy": obs.astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action, info):
        standing = tolerance(self.torso_height(phys), bounds=(STAND_HEIGHT, float("inf")), margin=STAND_HEIGHT / 2)
        upright = (1.0 + jnp.cos(phys.qpos[_ROOTY])) / 2.0
        speed = self.index.sensor(phys, "torso_subtreelinvel")[0]
        v = self.cfg.move_speed
        move = tolerance(speed, bounds=(v, float("inf")), margin=v / 2, value_at_margin=0.5, sigmoid="linear")
        return {"stand": (3.0 * standing + upright) / 4.0, "move": (5.0 * move + 1.0) / 6.0}

    def reward(self, terms):
        return self.product_reward(terms)
