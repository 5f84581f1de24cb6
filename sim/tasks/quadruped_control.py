"""Scripted reference controller of `quadruped-joystick`: a trot timed by the gait clock.

The controller is a stateless function of the `"policy"` observation, so the task puts the gait
clock in it. Each control step:

1. Gait: the diagonal pairs (FR, RL) and (FL, RR) alternate, half a cycle apart. In the first half
   of its cycle a leg swings (foot lifted on a half-sine, moved forward on a cosine ramp), in the
   second half it is in stance (foot moved backward at constant speed, on the ground).
2. Strides from the command: a foot under hip position p = (px, py) must move over the ground at
   the trunk velocity there, v = (vx - w * py, vy + w * px) (the yaw rate w adds the differential,
   tangential part), so its stance stroke is v times the stance time, centred under the hip.
3. Attitude feedback: feet reach lower on the side the trunk leans towards (gravity direction in the
   trunk frame) and where the trunk sinks (roll and pitch rates), which keeps the trunk level.
4. Analytic inverse kinematics of each leg (abduction, then the planar thigh-calf chain with the
   knee bent backwards) turns the foot positions into joint angles.
5. Servo compensation: the kp-40 position servos are soft (the trunk sags 4 cm standing) and lag,
   so (a) the torques that hold a stance leg's share of the weight (J^T f) are added to its targets
   as tau / kp, and (b) an outer loop overshoots each target by a multiple of its tracking error
   (from the observed joint positions and velocities), which stiffens the servos.

The action is the targets' offset from the default pose over the action scale, clipped to [-1, 1];
a zero command gives the zero action (stand). Open loop in the trunk velocity (the policy group has
none), so tracking is approximate, yet clearly better than standing. The constants come from a
random search in a NumPy replica of the task (randomized physics, random commands, seeds other than
the tests'), maximising the tracking reward and penalising falls.
"""

from __future__ import annotations

import math

import torch

from sim.tasks.quadruped import (
    CALF_LENGTH,
    DEFAULT_POSE,
    HIP_X,
    HIP_Y,
    KP,
    LEG_SIGNS,
    THIGH_LENGTH,
    THIGH_OFFSET,
    TOTAL_MASS,
    QuadrupedConfig,
)

# Observation layout of the "policy" group (see the task's docstring).
GRAVITY = slice(3, 6)
GYRO = slice(0, 3)
COMMAND = slice(6, 9)
JOINT_POS = slice(9, 21)
JOINT_VEL = slice(21, 33)
CLOCK = slice(45, 47)

GAIT_FREQUENCY = QuadrupedConfig.gait_frequency      # Hz, as the task's clock
ACTION_SCALE = QuadrupedConfig.action_scale
STANCE_DEPTH = 0.30       # foot depth below the abduction joint asked of the IK (m)
STEP_HEIGHT = 0.026       # swing foot lift (m)
PHASE_LEAD = 0.168        # fraction of a cycle the foot targets run ahead of the clock (servo lag)
ATTITUDE_GAIN = 0.215     # foot depth change (m) per unit of horizontal gravity, times hip distance / m
RATE_GAIN = 0.08          # foot depth change per rad/s of roll or pitch rate, times hip distance / m
LOAD_GAIN = 0.420         # fraction of the weight-bearing torques added to the targets
LOAD_SHIFT = 0.842        # 1: stance legs carry half the weight each, swing legs none; 0: a quarter each
JOINT_GAIN = 1.063        # outer-loop gain on the joint tracking error
JOINT_DAMPING = 0.008     # outer-loop damping on the joint velocities (s)
STRIDE_GAIN = 0.961       # stance stroke per (commanded velocity x stance time)
MAX_BACKWARD = 0.072      # largest backward stance stroke (m): walking backwards is less stable
MAX_LATERAL = 0.148       # largest sideways stance stroke (m)
MAX_STRIDE = 0.184        # largest stance stroke (m)


def _leg_ik(foot: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
    """Joint angles (hip, thigh, calf) putting each foot at `foot` [N, 4, 3] in its abduction-joint frame."""
    x, y, z = foot.unbind(-1)
    lateral = side * THIGH_OFFSET
    # Abduction: rotate the leg plane so that the foot sits at the thigh's lateral offset.
    reach = torch.sqrt((y**2 + z**2 - lateral**2).clamp_min(1e-4))
    hip = torch.atan2(z, y) - torch.atan2(-reach, lateral)
    # Planar two-link chain in the leg plane: the foot at (x, -reach) below the thigh joint.
    cos_knee = (x**2 + reach**2 - THIGH_LENGTH**2 - CALF_LENGTH**2) / (2 * THIGH_LENGTH * CALF_LENGTH)
    knee = -torch.acos(cos_knee.clamp(-1.0, 1.0))
    gamma = torch.atan2(CALF_LENGTH * torch.sin(knee), THIGH_LENGTH + CALF_LENGTH * torch.cos(knee))
    thigh = torch.atan2(-x, reach) - gamma
    return torch.stack([hip, thigh, knee], dim=-1)


def trot_policy(obs: torch.Tensor) -> torch.Tensor:
    """Trot at the commanded velocity and yaw rate; stand still under a zero command."""
    dev, dtype = obs.device, obs.dtype
    signs = torch.tensor(LEG_SIGNS, dtype=dtype, device=dev)              # [4, 2]: front, left
    hip_pos = signs * torch.tensor([HIP_X, HIP_Y + THIGH_OFFSET], dtype=dtype, device=dev)
    cmd = obs[:, COMMAND]
    # Leg phases in [0, 1): the (FR, RL) pair leads, (FL, RR) half a cycle later.
    phase = torch.atan2(obs[:, CLOCK][:, 1], obs[:, CLOCK][:, 0]) / (2 * math.pi) + PHASE_LEAD
    offsets = torch.tensor([0.0, 0.5, 0.5, 0.0], dtype=dtype, device=dev)
    s = torch.remainder(phase[:, None] + offsets, 1.0)                    # [N, 4]
    swing = s < 0.5
    u = torch.where(swing, s * 2.0, s * 2.0 - 1.0)
    # Stance stroke per foot (m), from the trunk velocity at its hip.
    stance_time = 0.5 / GAIT_FREQUENCY
    vel = torch.stack([cmd[:, None, 0] - cmd[:, None, 2] * hip_pos[:, 1],
                       cmd[:, None, 1] + cmd[:, None, 2] * hip_pos[:, 0]], dim=-1)   # [N, 4, 2]
    stroke = STRIDE_GAIN * vel * stance_time
    stroke = torch.stack([stroke[..., 0].clamp(-MAX_BACKWARD, None), stroke[..., 1].clamp(-MAX_LATERAL, MAX_LATERAL)],
                         dim=-1)
    norm = stroke.norm(dim=-1, keepdim=True)
    stroke = stroke * (MAX_STRIDE / norm.clamp_min(MAX_STRIDE))
    ramp = torch.where(swing, 0.5 * (1.0 - torch.cos(math.pi * u)) - 0.5, 0.5 - u)   # forward in swing, back in stance
    lift = torch.where(swing, STEP_HEIGHT * torch.sin(math.pi * u), torch.zeros_like(u))
    # Attitude: reach lower where the trunk leans (gravity's horizontal part in the trunk frame) and
    # against the roll and pitch rates.
    gravity, gyro = obs[:, GRAVITY], obs[:, GYRO]
    lean = gravity[:, None, 0] * hip_pos[:, 0] + gravity[:, None, 1] * hip_pos[:, 1]
    turn = gyro[:, None, 1] * hip_pos[:, 0] - gyro[:, None, 0] * hip_pos[:, 1]   # hip sinking speed
    depth = STANCE_DEPTH + ATTITUDE_GAIN * lean + RATE_GAIN * turn - lift
    foot = torch.stack([stroke[..., 0] * ramp, signs[:, 1] * THIGH_OFFSET + stroke[..., 1] * ramp, -depth], dim=-1)
    joints = _leg_ik(foot, signs[:, 1])                                     # [N, 4, 3]
    # Load feed-forward: the joint torques that hold a foot's expected share of the weight (tau = -J^T f
    # for the ground force f = (0, 0, F); stance feet carry more than swing feet) are added to the
    # targets as tau / kp, so that the soft position servos sag less.
    stance = torch.where(swing, -1.0, 1.0)
    load = LOAD_GAIN * TOTAL_MASS * 9.81 / 4.0 * (1.0 + LOAD_SHIFT * stance)
    knee_lever = -CALF_LENGTH * torch.sin(joints[..., 1] + joints[..., 2])
    torque = load[..., None] * torch.stack([-foot[..., 1], foot[..., 0], knee_lever], dim=-1)
    joints = joints + torque / KP
    default = torch.tensor(DEFAULT_POSE, dtype=dtype, device=dev)
    desired = joints.reshape(-1, 12) - default
    # Outer joint loop: overshoot the target by the tracking error, which stiffens the soft servos.
    desired = desired + JOINT_GAIN * (desired - obs[:, JOINT_POS]) - JOINT_DAMPING * obs[:, JOINT_VEL]
    action = (desired / ACTION_SCALE).clamp(-1.0, 1.0)
    standing = (cmd.abs().sum(dim=-1, keepdim=True) == 0.0)
    return torch.where(standing, torch.zeros_like(action), action)
