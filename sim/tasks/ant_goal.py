"""`ant-goal`: Gymnasium's Ant-v5 sent to goal after goal on open ground, the policy under D4RL's antmaze waypoints.

D4RL collected its antmaze datasets with a goal-reaching ant policy (trained with SAC) driven from waypoint to
waypoint through the maze; Farama's minari-dataset-generation-scripts rebuilt it for gymnasium-robotics' AntMaze
with a `GoalReachAnt` env (Gymnasium's Ant on open ground, a goal drawn in a 10 m disk, the reward's forward term
replaced by the speed towards the goal, scaled 10x) and SB3's SAC. This task is that recipe as an ordinary task, so
`robolearn train env=ant-goal algo=sac` trains the goal reacher that `robolearn collect` drives through the mazes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from sim.core import Physics
from sim.errors import ConfigError
from sim.tasks.mujoco_v5 import Ant, AntConfig

Array = jax.Array


GOAL_FRAMES = ("torso", "world")


def goal_offset(quaternion: Array, offset: Array, frame: str) -> Array:
    """The observed goal offset: `offset` (goal minus torso x, y; [..., 2]) as is ("world"), or turned by minus the
    torso's heading, the yaw of its orientation `quaternion` (w, x, y, z; [..., 4]) ("torso"). Plain jnp on the last
    axis, so collectors feed a reacher the same numbers from antmaze's observation."""
    if frame == "world":
        return offset
    w, x, y, z = (quaternion[..., i] for i in range(4))
    # the heading of the rotated x axis; exact for quaternions of any norm (a reset's noisy one is not normalised)
    yaw = jnp.arctan2(2 * (w * z + x * y), w * w + x * x - y * y - z * z)
    c, s = jnp.cos(yaw), jnp.sin(yaw)
    return jnp.stack([c * offset[..., 0] + s * offset[..., 1], -s * offset[..., 0] + c * offset[..., 1]], axis=-1)


@dataclasses.dataclass(frozen=True)
class AntGoalConfig(AntConfig):
    #: Weight of the speed towards the goal (m/s); Minari's GoalReachAnt scales it 10x, as turning makes it slow.
    forward_reward_weight: float = 10.0
    #: No contact cost (Minari's reward has none; > 0 adds Ant-v5's `contact` term) and no contact forces in the
    #: observation: the antmaze observation has none.
    contact_cost_weight: float = 0.0
    include_cfrc_ext_in_observation: bool = False
    #: Goals are drawn at angle U(0, 2 pi) and distance goal_region_radius * U(0, 1) from the origin.
    goal_region_radius: float = 10.0
    #: A goal counts as reached within this distance (m) of the torso's x, y; a new one is drawn then.
    goal_threshold: float = 0.3
    #: The frame of the observed goal offset: "torso" (turned by the torso's heading: the policy learns one
    #: "walk towards what is ahead" for every direction) or "world" (Minari's; it trained its reacher for tens of
    #: millions of steps).
    goal_frame: str = "torso"

    def validate(self) -> None:
        super().validate()
        if not self.exclude_current_positions_from_observation or self.include_cfrc_ext_in_observation:
            raise ConfigError("ant-goal observes what antmaze's ant does (no x, y, no contact forces) plus the goal: "
                              "exclude_current_positions_from_observation and include_cfrc_ext_in_observation are "
                              "fixed")
        if self.goal_frame not in GOAL_FRAMES:
            raise ConfigError(f"goal_frame must be one of {GOAL_FRAMES}, got {self.goal_frame!r}")
        if self.goal_region_radius <= 0 or self.goal_threshold <= 0:
            raise ConfigError(f"goal_region_radius and goal_threshold must be > 0, got {self.goal_region_radius} and "
                              f"{self.goal_threshold}")


class AntGoal(Ant):
    """Gymnasium's ant (Ant-v5's model, physics, control cost, health and reset noise) walking to goals on open
    ground, as Minari's GoalReachAnt trains the antmaze data's goal reacher.

    Observation `"policy"` (29): the antmaze ant's observation (27: torso z, quaternion, 8 joint angles, torso linear
    velocity, angular velocity, 8 joint velocities; Ant-v5's without x, y and contact forces), then the goal minus
    the torso's x, y (2), turned into the torso's heading (`goal_frame="torso"`, default; "world": as is): what a
    waypoint controller feeds with the next waypoint (`goal_offset`).
    Action (8): hip and ankle torques in [-1, 1] (times 150), Gymnasium's order.
    Reward terms: `forward` = forward_reward_weight * the torso's x, y velocity over the step projected on the unit
    vector from its start to the goal, `ctrl` = -0.5 * |action|^2, `survive` = 1 while healthy (no contact cost).
    Goals: drawn at angle U(0, 2 pi) and distance 10 * U(0, 1) m from the origin; on arrival within 0.3 m a new one is
    drawn (the episode goes on). Healthy: torso height in [0.2, 1]; an unhealthy ant ends the episode. 1000 steps.
    Initial state: Ant-v5's (reference pose + U(-0.1, 0.1) on qpos, 0.1 * N(0, 1) on qvel).
    Differences from Minari's GoalReachAnt: the goal is observed in the torso's heading frame (Minari's in the world
    frame; `goal_frame="world"` restores it), a fall ends the episode here (Ant-v5's termination; Minari's continuing
    env only stops at its 1000-step limit, the ant lying where it fell), and the goal's direction is taken from the
    torso's position before the step (Minari's: after it).
    Metric `episode/goals`: goals reached in the episode.
    """

    config_class = AntGoalConfig
    cfg: AntGoalConfig

    def _draw_goal(self, key: Array) -> Array:
        k_angle, k_radius = jax.random.split(key)
        angle = jax.random.uniform(k_angle, (), minval=0.0, maxval=2 * jnp.pi)
        radius = self.cfg.goal_region_radius * jax.random.uniform(k_radius, ())
        return radius * jnp.stack([jnp.cos(angle), jnp.sin(angle)])

    def init(self, key: Array) -> tuple[Array, Array, dict[str, Array]]:
        key, k_goal, k_next = jax.random.split(key, 3)
        qpos, qvel, _ = super().init(key)
        info = {"xy_before": qpos[:2], "goal": self._draw_goal(k_goal), "goals": jnp.zeros((), jnp.float32),
                "key": k_next}
        return qpos, qvel, info

    def xy(self, phys: Physics) -> Array:
        return phys.fields["xpos"][1, :2]  # the torso, as Ant-v5's main body

    def observe(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        ant = jnp.concatenate([phys.qpos[2:], phys.qvel])
        offset = goal_offset(phys.qpos[3:7], info["goal"] - self.xy(phys), self.cfg.goal_frame)
        return {"policy": jnp.concatenate([ant, offset]).astype(jnp.float32)}

    def reward_terms(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        to_goal = info["goal"] - info["xy_before"]
        direction = to_goal / jnp.maximum(jnp.linalg.norm(to_goal), 1e-6)
        velocity = (self.xy(phys) - info["xy_before"]) / self.dt
        terms = {"forward": self.cfg.forward_reward_weight * jnp.dot(velocity, direction),
                 "ctrl": -self.cfg.ctrl_cost_weight * jnp.sum(jnp.square(action)),
                 "survive": self.cfg.healthy_reward * self.healthy(phys).astype(jnp.float32)}
        if self.cfg.contact_cost_weight > 0:
            terms["contact"] = -self.cfg.contact_cost_weight * jnp.sum(jnp.square(self.contact_forces(phys)))
        return terms

    def update_info(self, phys: Physics, action: Array, info: dict[str, Array]) -> dict[str, Array]:
        xy = self.xy(phys)
        arrived = jnp.linalg.norm(info["goal"] - xy) <= self.cfg.goal_threshold
        key, draw = jax.random.split(info["key"])
        return {**info, "xy_before": xy, "goal": jnp.where(arrived, self._draw_goal(draw), info["goal"]),
                "goals": info["goals"] + arrived.astype(jnp.float32), "key": key}

    def metrics(self, phys: Physics, info: dict[str, Array]) -> dict[str, Array]:
        return {"episode/goals": info["goals"]}
