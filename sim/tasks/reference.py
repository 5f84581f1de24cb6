"""Scripted reference controllers for every task, and the returns used to normalise scores.

A learning curve means little without two anchors: what a policy that knows nothing scores, and what
a competent one scores. This module supplies both, measured the same way for every task:

    normalized score = 100 * (R - random) / (reference - random)

where `random` is the return of uniform random actions and `reference` the return of the scripted
controller below, both from `measure_returns` (one 1000-step episode, mean over envs). A score of
100 means "as good as a hand-written controller", not "optimal": a trained agent may exceed it.

The controllers are classical, need no training and read only the `"policy"` observation, so they
are deterministic, cheap and easy to audit:

- `cartpole-balance`: linear state feedback u = k . (x, theta, x_dot, theta_dot), with gains from a
  discrete LQR design on the model linearised about upright.
- `cartpole-swingup`: energy-shaping swing-up (push the cart so the pole's mechanical energy moves
  towards that of the upright pole at rest, with a spring-damper keeping the cart near the centre),
  handing over to linear stabilisation once the pole is near upright.
- `pendulum-swingup`: the motor (1 N m against a 4.9 N m gravity torque) cannot lift the ball
  directly, so it pumps energy, torque along the angular velocity until the pendulum carries the
  energy of the upright position, then a saturated PD controller holds it upright.
- `point-mass`: a saturated PD controller driving the ball to the target at the origin.

Gains were tuned empirically (grid and random search on many envs, seeds other than 0).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

Policy = Callable[[torch.Tensor], torch.Tensor]

# --- cartpole ------------------------------------------------------------------------------------
# Observation: [x, cos(theta), sin(theta), x_dot, theta_dot]; theta = 0 upright.
# Balance gains on (x, theta, x_dot, theta_dot); the action is u = k . state. They are the discrete LQR
# gains for Q = diag(1, 10, 1, 1), R = 1 on the model linearised about upright (dt 0.01 s); gains tuned on
# the reward score the same to within 0.05.
CARTPOLE_BALANCE_GAINS = (0.886, 9.77, 1.53, 2.57)
# Swing-up: energy pumping gain, cart centring (position, velocity), hand-over threshold on cos(theta),
# and the stabilising gains used once near the top.
CARTPOLE_SWINGUP_PUMP = 5.0
CARTPOLE_SWINGUP_ENERGY_OFFSET = 0.012
CARTPOLE_SWINGUP_CENTER = (5.5, 1.8)
CARTPOLE_SWINGUP_SWITCH_COS = 0.87
CARTPOLE_SWINGUP_GAINS = (1.15, 10.3, 1.5, 2.7)

# Pole parameters (a 0.1 kg, 1 m capsule hinged at one end): centre of mass and inertia about the hinge.
_POLE_MASS = 0.1
_POLE_COM = 0.5
_POLE_INERTIA = _POLE_MASS * 1.0**2 / 3.0
_GRAVITY = 9.81


def _cartpole_linear(obs: torch.Tensor, gains: tuple[float, float, float, float]) -> torch.Tensor:
    theta = torch.atan2(obs[:, 2], obs[:, 1])
    kx, kth, kv, kw = gains
    return kx * obs[:, 0] + kth * theta + kv * obs[:, 3] + kw * obs[:, 4]


def cartpole_balance_policy(obs: torch.Tensor) -> torch.Tensor:
    """LQR-style linear state feedback about the upright equilibrium."""
    return _cartpole_linear(obs, CARTPOLE_BALANCE_GAINS).clamp(-1.0, 1.0).unsqueeze(-1)


def cartpole_swingup_policy(obs: torch.Tensor) -> torch.Tensor:
    """Energy-shaping swing-up with cart centring, switching to linear stabilisation near upright."""
    x, cos, _, v, w = obs.unbind(-1)
    # Energy relative to the upright pole at rest (0 there, negative below).
    energy = 0.5 * _POLE_INERTIA * w**2 + _POLE_MASS * _GRAVITY * _POLE_COM * (cos - 1.0)
    # Cart acceleration a changes the pole's energy at a rate proportional to -a * w * cos(theta); with the
    # energy error negative below the target, this term pushes the energy up (and down on overshoot).
    pump = CARTPOLE_SWINGUP_PUMP * (energy - CARTPOLE_SWINGUP_ENERGY_OFFSET) * w * cos
    kp, kd = CARTPOLE_SWINGUP_CENTER
    swing = pump - kp * x - kd * v
    stabilise = _cartpole_linear(obs, CARTPOLE_SWINGUP_GAINS)
    u = torch.where(cos > CARTPOLE_SWINGUP_SWITCH_COS, stabilise, swing)
    return u.clamp(-1.0, 1.0).unsqueeze(-1)


# --- pendulum ------------------------------------------------------------------------------------
# Observation: [cos(theta), sin(theta), theta_dot]; theta = 0 upright. Ball of 1 kg at 0.5 m.
_PEND_MGL = 1.0 * _GRAVITY * 0.5
_PEND_INERTIA = 1.0 * 0.5**2
PENDULUM_PUMP = 10.0
PENDULUM_ENERGY_OFFSET = 0.1
PENDULUM_PD = (6.0, 1.0)
PENDULUM_SWITCH_COS = 0.95


def pendulum_swingup_policy(obs: torch.Tensor) -> torch.Tensor:
    """Energy pumping (torque along the velocity) then a saturated PD hold near upright."""
    cos, sin, w = obs.unbind(-1)
    # Energy error relative to slightly more than the upright pendulum at rest (overcomes the hinge damping).
    error = 0.5 * _PEND_INERTIA * w**2 + _PEND_MGL * (cos - 1.0) - PENDULUM_ENERGY_OFFSET
    # Torque along the velocity while short of energy (saturates to bang-bang); the small bias starts a
    # pendulum resting exactly at the bottom, where the velocity is zero.
    pump = -PENDULUM_PUMP * error * (w + 1e-3)
    theta = torch.atan2(sin, cos)
    kp, kd = PENDULUM_PD
    hold = -kp * theta - kd * w
    u = torch.where(cos > PENDULUM_SWITCH_COS, hold, pump)
    return u.clamp(-1.0, 1.0).unsqueeze(-1)


# --- point mass ----------------------------------------------------------------------------------
# Observation: [x, y, x_dot, y_dot]; the target is the origin.
POINT_MASS_PD = (100.0, 12.0)


def point_mass_policy(obs: torch.Tensor) -> torch.Tensor:
    """Saturated PD control of each axis towards the origin."""
    kp, kd = POINT_MASS_PD
    return (-kp * obs[:, :2] - kd * obs[:, 2:4]).clamp(-1.0, 1.0)


REFERENCE_POLICIES: dict[str, Policy] = {
    "cartpole-balance": cartpole_balance_policy,
    "cartpole-swingup": cartpole_swingup_policy,
    "pendulum-swingup": pendulum_swingup_policy,
    "point-mass": point_mass_policy,
}


def scripted_policy(task: str) -> Policy | None:
    """The scripted reference controller of `task`: from `REFERENCE_POLICIES`, or the registry's
    `reference_policy` ("module:function"); None if the task's reference is a trained checkpoint."""
    if task in REFERENCE_POLICIES:
        return REFERENCE_POLICIES[task]
    from sim.tasks import spec

    path = spec(task).reference_policy
    if not path:
        return None
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def measure_returns(task: str, policy: Policy | None = None, num_envs: int = 64, seed: int = 0,
                    env: Any = None) -> float:
    """Mean undiscounted return of each env's first episode of `task` (`num_envs` envs).

    `policy` maps the batched `"policy"` observation to actions in [-1, 1]; None means uniform random
    actions from a `torch.Generator` seeded with `seed` (the envs are seeded with `seed` too).
    An existing VecEnv of `task` may be passed as `env` (it is re-seeded, not closed): measuring
    several policies on one env pays its compile once.
    """
    import sim

    own = env is None
    if own:
        env = sim.make(task, num_envs=num_envs, seed=seed)
    else:
        env.reset(seed=seed)
        num_envs = env.num_envs
    try:
        gen = torch.Generator(device=env.device).manual_seed(seed)
        obs = env.get_observations()["policy"]
        total = torch.zeros(num_envs, dtype=torch.float64, device=env.device)
        running = torch.ones(num_envs, dtype=torch.bool, device=env.device)  # first episode only
        for _ in range(env.max_episode_length):
            if policy is None:
                actions = torch.rand(num_envs, env.num_actions, generator=gen, device=env.device) * 2.0 - 1.0
            else:
                with torch.no_grad():
                    actions = policy(obs).to(torch.float32)
            obs_td, rewards, dones, _ = env.step(actions)
            obs = obs_td["policy"]
            total += rewards.to(torch.float64) * running
            running &= ~dones.bool()
            if not running.any():  # every first episode has ended (early terminations)
                break
        return float(total.mean())
    finally:
        if own:
            env.close()


# --- quadrotor -----------------------------------------------------------------------------------
# Observation: [target - pos (3), R row-major (9), vel - target vel (3), gyro (3), previous action (4)].
# A cascaded geometric controller: desired acceleration from position/velocity errors, collective
# thrust along the body z axis, attitude from the desired thrust direction, then motor mixing.
QUAD_POS_GAINS = (15.0, 7.0)       # kp, kd on position and velocity errors (1/s^2, 1/s)
QUAD_ATT_GAINS = (3000.0, 90.0)    # attitude error and body-rate gains, as angular accelerations
QUAD_YAW_RATE_GAIN = 10.0


def _quad_constants() -> tuple[torch.Tensor, torch.Tensor, float]:
    """Nominal inertia, the mixing matrix inverse and the mass, read from the task's model."""
    import sim

    task = sim.make_task("quadrotor-hover", domain_randomization=False)
    m = task.mj_model
    inertia = torch.tensor(m.body_inertia[1], dtype=torch.float32)
    pos = m.site_pos[[m.site(f"m{i}").id for i in range(1, 5)]]
    yaw = m.actuator_gear[:, 5]
    mix = torch.tensor([[1.0] * 4, list(pos[:, 1]), list(-pos[:, 0]), list(yaw)], dtype=torch.float32)
    return inertia, torch.linalg.inv(mix), float(m.body_mass[1])


_QUAD: tuple[torch.Tensor, torch.Tensor, float] | None = None


def quadrotor_policy(obs: torch.Tensor) -> torch.Tensor:
    """Position PD -> thrust direction -> attitude PD -> motor mixing (nominal mass and inertia)."""
    global _QUAD
    if _QUAD is None:
        _QUAD = _quad_constants()
    inertia, unmix, mass = _QUAD
    from sim.tasks.quadrotor import MAX_THRUST

    err, rot, vel_err, gyro = obs[:, 0:3], obs[:, 3:12].reshape(-1, 3, 3), obs[:, 12:15], obs[:, 15:18]
    kp, kd = QUAD_POS_GAINS
    acc = kp * err - kd * vel_err + torch.tensor([0.0, 0.0, 9.81])
    body_z = rot[:, :, 2]
    thrust = mass * (acc * body_z).sum(-1).clamp_min(0.0)
    z_des = acc / acc.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    att_err = torch.einsum("nji,nj->ni", rot, torch.linalg.cross(body_z, z_des))  # world -> body
    ka, kw = QUAD_ATT_GAINS
    ang_acc = ka * att_err - kw * gyro
    ang_acc[:, 2] = -QUAD_YAW_RATE_GAIN * gyro[:, 2]
    torque = inertia * ang_acc
    forces = torch.cat([thrust[:, None], torque], -1) @ unmix.T
    return (2.0 * forces / MAX_THRUST - 1.0).clamp(-1.0, 1.0)


REFERENCE_POLICIES["quadrotor-hover"] = quadrotor_policy
REFERENCE_POLICIES["quadrotor-track"] = quadrotor_policy


# --- point mazes ---------------------------------------------------------------------------------
# Observation: [x, y, vx, vy, goal_x, goal_y]. Shortest-path routing between every pair of open cells
# (`sim.tasks.maze.next_hops`): the ball is PD-steered to the centre of the next cell towards the goal's
# cell, and to the goal itself once in that cell. The goal is read from the observation, so the same
# controller reaches any goal it is given (the goal datasets of `robolearn collect` command their own).
MAZE_PD = (4.0, 1.0)
#: D4RL's maze2d waypoint controller gains (p_gain 10, d_gain -1), which Minari's pointmaze datasets kept.
D4RL_MAZE_PD = (10.0, 1.0)


def waypoint_policy(layout: list[str] | tuple[str, ...], pos: slice, vel: slice, goal: slice,
                    gains: tuple[float, float] = MAZE_PD) -> Policy:
    """A PD controller to waypoints on shortest cell paths through `layout` (rows of '#' walls, other characters
    open; cells of 1 m centred at 0), reading the ball's position, velocity and goal from the observation's
    `pos`, `vel` and `goal` slices: the next cell's centre, then the goal itself in the goal's cell."""
    from sim.tasks.maze import cell_center, next_hops

    layout = ["".join("#" if ch == "#" else "." for ch in row) for row in layout]
    rows, cols = len(layout), len(layout[0])
    index, hop = next_hops(layout)
    index_t = torch.from_numpy(index)
    centers = torch.tensor([[cell_center(r, c, layout) for c in range(cols)] for r in range(rows)])  # [R, C, 2]
    waypoint = centers[torch.from_numpy(hop[..., 0]), torch.from_numpy(hop[..., 1])]  # [G, R, C, 2]
    kp, kd = gains

    def cell_of(xy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        col = (xy[:, 0] + (cols - 1) / 2).round().long().clamp(0, cols - 1)
        row = ((rows - 1) / 2 - xy[:, 1]).round().long().clamp(0, rows - 1)
        return row, col

    def policy(obs: torch.Tensor) -> torch.Tensor:
        xy, v, goal_xy = obs[:, pos], obs[:, vel], obs[:, goal]
        row, col = cell_of(xy)
        goal_row, goal_col = cell_of(goal_xy)
        g = index_t[goal_row, goal_col].clamp_min(0)
        target = waypoint[g, row, col]
        at_goal = (row == goal_row) & (col == goal_col)
        target = torch.where(at_goal[:, None], goal_xy, target)
        return (kp * (target - xy) - kd * v).clamp(-1.0, 1.0)

    return policy


def maze_policy(layout_name: str) -> Policy:
    """The point-maze-* reference controller: `waypoint_policy` on its layout."""
    from sim.tasks.maze import LAYOUTS

    return waypoint_policy(LAYOUTS[layout_name], slice(0, 2), slice(2, 4), slice(4, 6))


def d4rl_pointmaze_policy(layout_name: str) -> Policy:
    """D4RL's maze2d waypoint controller for pointmaze-* (observation: achieved goal, desired goal, x, y, vx, vy),
    with D4RL's gains; Minari collected its pointmaze datasets with it plus N(0, 0.5^2) action noise."""
    from sim.tasks.d4rl_maze import POINTMAZE_MAPS

    return waypoint_policy(POINTMAZE_MAPS[layout_name], slice(0, 2), slice(6, 8), slice(2, 4), D4RL_MAZE_PD)


for _layout in ("umaze", "medium", "large"):
    REFERENCE_POLICIES[f"point-maze-{_layout}"] = maze_policy(_layout)
