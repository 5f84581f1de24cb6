"""Scripted reference controllers of the arm tasks (`sim.tasks.arm`): inverse kinematics plus phases.

Every controller picks a Cartesian target for the grasp point (and a wrist roll), turns it into joint
angles with the arm's analytic inverse kinematics (base yaw towards the target, then the planar
shoulder-elbow triangle with the wrist keeping the gripper vertical, elbow up), and commands joint-target
velocities proportional to the joint errors: since the action integrates into the servo targets, this
is integral control and removes the gravity sag of the servos.

They are stateless functions of the `"policy"` observation, so each phase is recognised from it:

- reach: go to the goal.
- push: with the gripper closed (a small pusher), go above a point behind the cube on the line from
  the goal through the cube, lower to just above the table, then push along that line, the push
  target moving with the cube (which corrects sideways drift); if the cube drifts off the line, lift
  and approach again.
- pick-place: above the cube with the fingers open and the roll matching the cube's yaw (modulo 90
  degrees), descend until the fingertips are just above the table, close; a cube held between the
  closed fingers (opening about the cube's width, near the grasp point) is lifted, carried at 8 cm or
  higher and brought to the goal, and held there; a missed grasp (fingers closed on nothing) opens
  the gripper and starts over.

Gains and thresholds were tuned on seeds other than 0.
"""

from __future__ import annotations

import math

import torch

from sim.tasks.arm import FOREARM, HALF_CUBE, HAND, MAX_SPEED, SHOULDER_HEIGHT, UPPER_ARM

# Observation layout (see the `sim.tasks.arm` docstring).
JOINTS, OPENING, OPENING_SPEED, GRASP, GOAL = slice(0, 5), 5, 11, slice(12, 15), slice(15, 18)
CUBE, CUBE_X_AXIS = slice(21, 24), slice(24, 27)

#: Joint-target velocity per radian of joint error (1/s).
JOINT_GAIN = 8.0
#: Gripper actions.
OPEN, CLOSE = 1.0, -1.0

# Pick-place: grasp point heights relative to the cube centre, and tolerances (m).
ABOVE_CUBE = 0.08        # hover height before descending (fingertips 2 cm above the cube's top)
GRASP_HEIGHT = 0.005     # fingertips 1.5 cm below the cube centre, 0.5 cm above the table
CARRY_HEIGHT = 0.08      # the cube travels at least this high
ALIGNED = 0.012          # horizontal error to start descending
AT_GRASP = 0.01          # distance to the grasp point to close
HELD_OPENING = (0.03, 2 * HALF_CUBE + 0.002)  # fingers closed on the cube
HELD_DISTANCE = 0.03
OPEN_ENOUGH = 0.06       # opening needed to descend over the cube
ROLL_ALIGNED = 0.1       # roll error to start descending (rad)
STALLED = 0.01           # opening speed of fingers stalled on the cube (m/s)

# Push: grasp point height while pushing, safe height to move over the cube, distances behind the cube.
PUSH_HEIGHT = 0.025
SAFE_HEIGHT = 0.10
PRE_PUSH = 0.055         # where to lower the pusher, behind the cube centre
CONTACT = 0.032          # pusher centre to cube centre when touching (face on)
PUSH_STEP = 0.03         # how far ahead of contact the push target moves (at most)
ON_LINE = 0.015          # sideways tolerance to keep pushing
PUSH_DONE = 0.015        # cube this close to the goal: stop


def inverse_kinematics(target: torch.Tensor, roll: torch.Tensor) -> torch.Tensor:
    """Joint angles [N, 5] putting the grasp point at `target` [N, 3] with the gripper pointing down."""
    x, y, z = target.unbind(-1)
    yaw = torch.atan2(y, x)
    rho = torch.hypot(x, y)
    h = z + HAND - SHOULDER_HEIGHT
    d2 = (rho**2 + h**2).clamp_min(1e-6)
    elbow = torch.acos(((d2 - UPPER_ARM**2 - FOREARM**2) / (2 * UPPER_ARM * FOREARM)).clamp(-1.0, 1.0))
    inner = torch.acos(((UPPER_ARM**2 + d2 - FOREARM**2) / (2 * UPPER_ARM * d2.sqrt())).clamp(-1.0, 1.0))
    shoulder = torch.atan2(rho, h) - inner
    return torch.stack([yaw, shoulder, elbow, math.pi - shoulder - elbow, roll], -1)


def joint_action(obs: torch.Tensor, target: torch.Tensor, roll: torch.Tensor, gripper: torch.Tensor) -> torch.Tensor:
    """Actions [N, 6]: joint-target velocities towards the IK solution of `target`, then the gripper."""
    error = inverse_kinematics(target, roll) - obs[:, JOINTS]
    speed = obs.new_tensor(MAX_SPEED)
    arm = (JOINT_GAIN * error / speed).clamp(-1.0, 1.0)
    return torch.cat([arm, gripper.unsqueeze(-1)], -1)


def _wrap_quarter(angle: torch.Tensor) -> torch.Tensor:
    """The angle modulo 90 degrees, in [-45, 45) degrees."""
    return torch.remainder(angle + math.pi / 4, math.pi / 2) - math.pi / 4


def reach_policy(obs: torch.Tensor) -> torch.Tensor:
    """Inverse kinematics to the goal, gripper open."""
    n = obs.shape[0]
    return joint_action(obs, obs[:, GOAL], obs.new_zeros(n), obs.new_full((n,), OPEN))


def push_policy(obs: torch.Tensor) -> torch.Tensor:
    """Approach behind the cube, lower, push it along the line to the goal (gripper closed)."""
    n = obs.shape[0]
    grasp, cube, goal = obs[:, GRASP], obs[:, CUBE], obs[:, GOAL]
    to_goal = goal[:, :2] - cube[:, :2]
    dist = to_goal.norm(dim=-1, keepdim=True)
    direction = to_goal / dist.clamp_min(1e-6)
    normal = torch.stack([-direction[:, 1], direction[:, 0]], -1)
    rel = grasp[:, :2] - cube[:, :2]
    along, side = (rel * direction).sum(-1), (rel * normal).sum(-1)

    def at(xy: torch.Tensor, z: float) -> torch.Tensor:
        return torch.cat([xy, obs.new_full((n, 1), z)], -1)

    pre = cube[:, :2] - PRE_PUSH * direction
    push_xy = cube[:, :2] + (dist.clamp(max=PUSH_STEP) - CONTACT) * direction
    behind = (along < -HALF_CUBE) & (side.abs() < ON_LINE) & (grasp[:, 2] < PUSH_HEIGHT + 0.015)
    at_pre = (grasp[:, :2] - pre).norm(dim=-1) < ON_LINE
    near_cube = (rel.norm(dim=-1) < PRE_PUSH + 0.02) & (grasp[:, 2] < SAFE_HEIGHT - 0.03)
    target = torch.where(near_cube[:, None], at(grasp[:, :2], SAFE_HEIGHT), at(pre, SAFE_HEIGHT))
    target = torch.where(at_pre[:, None], at(pre, PUSH_HEIGHT), target)
    target = torch.where(behind[:, None], at(push_xy, PUSH_HEIGHT), target)
    target = torch.where((dist.squeeze(-1) < PUSH_DONE)[:, None], grasp, target)
    return joint_action(obs, target, obs.new_zeros(n), obs.new_full((n,), CLOSE))


def pick_place_policy(obs: torch.Tensor) -> torch.Tensor:
    """Above the cube, align, descend, close, lift, carry to the goal and hold."""
    grasp, cube, goal, opening = obs[:, GRASP], obs[:, CUBE], obs[:, GOAL], obs[:, OPENING]
    rel = cube - grasp
    flat = rel[:, :2].norm(dim=-1)
    held = (opening > HELD_OPENING[0]) & (opening < HELD_OPENING[1]) & (rel.norm(dim=-1) < HELD_DISTANCE)

    # Roll: the closing axis (the hand's y axis, at yaw + 90 degrees - roll) along a face normal of the cube,
    # for the yaw the arm will have over the cube.
    yaw = torch.atan2(cube[:, 1], cube[:, 0])
    cube_yaw = torch.atan2(obs[:, CUBE_X_AXIS][:, 1], obs[:, CUBE_X_AXIS][:, 0])
    roll = _wrap_quarter(yaw + math.pi / 2 - cube_yaw)
    roll_aligned = (roll - obs[:, JOINTS][:, 4]).abs() < ROLL_ALIGNED

    # Not holding: hover above the cube, descend once aligned and open, close at the grasp point (the cube
    # rests on the table then). Fingers closed on nothing, or stalled on a cube caught across its diagonal,
    # open again.
    above = cube + obs.new_tensor([0.0, 0.0, ABOVE_CUBE])
    grasp_point = torch.cat([cube[:, :2], cube[:, 2:].clamp(max=HALF_CUBE) + GRASP_HEIGHT], -1)
    low = grasp[:, 2] < cube[:, 2] + ABOVE_CUBE - 0.03
    descend = ((flat < ALIGNED) & roll_aligned | (low & (flat < 2 * ALIGNED))) & (opening > OPEN_ENOUGH)
    at_grasp = (grasp - grasp_point).norm(dim=-1) < AT_GRASP
    closing = at_grasp | ((opening < OPEN_ENOUGH + 0.01) & (flat < 2 * ALIGNED) & (rel[:, 2] > -GRASP_HEIGHT - 0.01))
    stalled = (opening > HELD_OPENING[1]) & (opening < OPEN_ENOUGH) & (obs[:, OPENING_SPEED].abs() < STALLED)
    missed = (opening < HELD_OPENING[0]) | stalled
    approach = torch.where((descend | closing)[:, None] & ~missed[:, None], grasp_point, above)
    approach_grip = torch.where(closing & ~missed, CLOSE, OPEN)

    # Holding: lift first, then carry at CARRY_HEIGHT (or the goal's height) and lower onto the goal.
    far = (goal[:, :2] - cube[:, :2]).norm(dim=-1) > 0.03
    carry = torch.where(far[:, None], torch.cat([goal[:, :2], goal[:, 2:].clamp_min(CARRY_HEIGHT)], -1), goal)
    lift = torch.cat([cube[:, :2], torch.full_like(cube[:, 2:], CARRY_HEIGHT)], -1)
    cube_target = torch.where((far & (cube[:, 2] < CARRY_HEIGHT - 0.03))[:, None], lift, carry)
    carry_target = grasp + (cube_target - cube)

    target = torch.where(held[:, None], carry_target, approach)
    gripper = torch.where(held, CLOSE, approach_grip)
    return joint_action(obs, target, roll, gripper.to(obs.dtype))
