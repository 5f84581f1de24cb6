"""Scripted reference controllers of the ant tasks: a steerable trot from a central pattern generator.

The ant's actuators are position servos, so the controller outputs joint angle targets. A clock
phase phi (from the observation's gait clock) drives a trot: the diagonal leg pairs (front-left +
back-right, back-left + front-right) alternate half a cycle apart. In its stance half a leg's hip
sweeps backwards while the ankle holds the foot down; in its swing half the ankle lifts the foot
and the hip swings it forwards again.

Steering: a hip rotation moves its foot along the tangent t_i = (-sin psi_i, cos psi_i) of the
leg's direction psi_i, at radius R from the torso centre; an ankle rotation moves it along the
radial r_i (changing its reach). For the body to move at velocity v (torso frame) while turning
at rate w, a stance foot must move at -(v + w x p_i) relative to the body: tangential part -(v .
t_i + w R), radial part -(v . r_i). The hip and ankle sweep amplitudes of leg i are these speeds
times the stance duration, converted to angles (the radial one through the ankle's lever SHIN sin
a, which also tilts the torso a little). The servos lag and the feet slip, so the sweeps are
scaled up (`SWEEP_SLIP`), and a proportional term on the measured velocity error corrects the rest.

- `ant_velocity_policy`: tracks the command in the `ant-velocity` observation.
- `AntMazePolicy` (`ant_maze_umaze_policy`, ...): pure pursuit along the breadth-first path of cell
  centres to the goal in the observation (the planning of `maze_policy` for the point mazes) gives a
  desired world velocity, turned into the heading frame; a yaw-rate term holds the heading at a
  multiple of 90 degrees, where the corridors run between the legs; the same trot walks it.

Gains were tuned by hand on a few envs (seeds other than 0).
"""

from __future__ import annotations

import math

import torch

from sim.tasks.ant import ANKLE_RANGE, GAIT_HZ, HIP_RANGE, LEG_YAWS, MAZE_CELL, SHIN, STAND_ANKLE, STUB, THIGH
from sim.tasks.maze import LAYOUTS, cell_center, next_hops, open_cells

# --- the trot -----------------------------------------------------------------------------------------
#: Horizontal distance of a standing foot from the torso centre (m).
FOOT_RADIUS = STUB + THIGH + SHIN * math.cos(STAND_ANKLE)
#: Phase offset of each leg: diagonal pairs (1, 3) and (2, 4) half a cycle apart.
LEG_PHASES = (0.0, math.pi, 0.0, math.pi)
#: Ankle angle in stance and how far the swing lifts it (rad).
STANCE_ANKLE = STAND_ANKLE
SWING_LIFT = 0.4
#: Hip sweep per unit of tangential foot speed (rad per m/s) = stance time / (2 R), and the factor for
#: servo lag and slip (at 1.5 Hz the joints reach about half their target amplitude).
SWEEP_GAIN = 1.0 / (4.0 * GAIT_HZ * FOOT_RADIUS)
SWEEP_SLIP = 2.0
#: Ankle sweep for the radial part of the foot motion, as a fraction of the kinematic one.
RADIAL_GAIN = 1.0
#: Proportional correction on the velocity and yaw-rate errors (added to the command).
VEL_FEEDBACK = 0.5
YAW_FEEDBACK = 0.5

_TANGENTS = torch.tensor([[-math.sin(p), math.cos(p)] for p in LEG_YAWS])  # [4, 2]
_RADIALS = torch.tensor([[math.cos(p), math.sin(p)] for p in LEG_YAWS])  # [4, 2]
_OFFSETS = torch.tensor(LEG_PHASES)
_LO = torch.tensor([HIP_RANGE[0], ANKLE_RANGE[0]] * 4)
_HI = torch.tensor([HIP_RANGE[1], ANKLE_RANGE[1]] * 4)


def trot_targets(phase: torch.Tensor, velocity: torch.Tensor, yaw_rate: torch.Tensor) -> torch.Tensor:
    """Joint angle targets [N, 8] of the trot at clock `phase` [N] for a body velocity [N, 2] (torso
    frame, m/s) and yaw rate [N] (rad/s)."""
    # Amplitude (m) of a stance foot's travel relative to the torso, per unit of foot speed (m/s).
    travel = SWEEP_SLIP * SWEEP_GAIN * FOOT_RADIUS
    tangential = velocity @ _TANGENTS.T + yaw_rate[:, None] * FOOT_RADIUS  # [N, 4]
    radial = velocity @ _RADIALS.T
    sweep = travel * tangential / FOOT_RADIUS  # hip angle amplitude
    # Radial travel -> ankle angle amplitude: the foot's reach from the ankle is SHIN cos(ankle).
    reach = RADIAL_GAIN * travel * radial / (SHIN * math.sin(STANCE_ANKLE))
    leg_phase = phase[:, None] + _OFFSETS  # [N, 4]; stance while sin > 0
    hip = sweep * torch.cos(leg_phase)
    ankle = STANCE_ANKLE - reach * torch.cos(leg_phase) - SWING_LIFT * torch.clamp(-torch.sin(leg_phase), min=0.0)
    return torch.stack([hip, ankle], dim=-1).reshape(-1, 8)


def to_action(targets: torch.Tensor) -> torch.Tensor:
    """Joint angle targets -> actions in [-1, 1] (the servos' control ranges are the joint ranges)."""
    return (2.0 * (targets - _LO) / (_HI - _LO) - 1.0).clamp(-1.0, 1.0)


# --- ant-velocity --------------------------------------------------------------------------------------
# Observation: [joint pos (8), joint vel (8), gravity (3), lin vel (3), ang vel (3), height (1),
#               command (3), clock (2)] (sim/tasks/ant.py).
def ant_velocity_policy(obs: torch.Tensor) -> torch.Tensor:
    """Trot steered by the commanded heading-frame velocity and yaw rate, with velocity feedback."""
    lin_vel, yaw_vel = obs[:, 19:21], obs[:, 24]
    cmd = obs[:, 26:29]
    phase = torch.atan2(obs[:, 30], obs[:, 29])
    velocity = cmd[:, :2] + VEL_FEEDBACK * (cmd[:, :2] - lin_vel)
    yaw_rate = cmd[:, 2] + YAW_FEEDBACK * (cmd[:, 2] - yaw_vel)
    return to_action(trot_targets(phase, velocity, yaw_rate))


# --- ant-maze -------------------------------------------------------------------------------------------
# Observation: [x, y, z, quaternion (4), joint pos (8), lin vel (3, world), ang vel (3), joint vel (8),
#               goal (2), clock (2)] (sim/tasks/ant.py).
#: Cruise speed (m/s), and the speed per metre of distance to the goal near it (slows to a stop there).
MAZE_SPEED = 1.0
MAZE_GOAL_GAIN = 1.0
#: How far ahead along the path of cell centres the ant aims (m): smaller hugs the centre line.
MAZE_LOOKAHEAD = 1.0
#: Yaw rate per radian of heading error: the ant keeps a heading that is a multiple of 90 degrees, where
#: its legs point diagonally and corridors run between them (its fast directions).
MAZE_HEADING_GAIN = 1.0


class AntMazePolicy:
    """Pure pursuit along the breadth-first path of cell centres to the goal, walked by the trot.

    Shortest-path routing between every pair of open cells (`sim.tasks.maze.next_hops`) gives, for the
    goal's cell (read from the observation, so any goal works), the next two cells from the ant's cell.
    The ant projects its position on the segment from its cell's centre to the next one and aims
    `MAZE_LOOKAHEAD` further along the path (continuing on the following segment), and at the goal
    itself in the last cells.
    """

    def __init__(self, layout_name: str):
        layout = LAYOUTS[layout_name]
        self.rows, self.cols = len(layout), len(layout[0])
        index, hop = next_hops(layout)
        self.index = torch.from_numpy(index)
        cells = torch.stack(torch.meshgrid(torch.arange(self.rows), torch.arange(self.cols), indexing="ij"), -1)
        hop_t = torch.from_numpy(hop)  # [G, R, C, 2]
        path = [cells.expand_as(hop_t)]
        for _ in range(2):  # this cell, the next, the one after: [3, G, R, C, 2] (row, col)
            prev = path[-1]
            path.append(hop_t[torch.arange(hop_t.shape[0])[:, None, None], prev[..., 0], prev[..., 1]])
        path_t = torch.stack(path)
        centers = MAZE_CELL * torch.tensor([[cell_center(r, c, layout) for c in range(self.cols)]
                                            for r in range(self.rows)])
        self.points = centers[path_t[..., 0], path_t[..., 1]]  # [3, G, R, C, 2] world (x, y)
        # whether each path point is the goal cell (replaced at run time by the episode's goal position)
        goal_cells = torch.tensor(open_cells(layout))[:, None, None, :]  # [G, 1, 1, 2]
        self.is_goal = (path_t == goal_cells).all(-1)  # [3, G, R, C]

    def _cell(self, xy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        col = (xy[:, 0] / MAZE_CELL + (self.cols - 1) / 2).round().long().clamp(0, self.cols - 1)
        row = ((self.rows - 1) / 2 - xy[:, 1] / MAZE_CELL).round().long().clamp(0, self.rows - 1)
        return row, col

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        pos, quat, vel = obs[:, 0:2], obs[:, 3:7], obs[:, 15:17]
        goal, clock = obs[:, 29:31], obs[:, 31:33]
        row, col = self._cell(pos)
        g = self.index[self._cell(goal)].clamp_min(0)
        a, b, c = (torch.where(self.is_goal[k, g, row, col][:, None], goal, self.points[k, g, row, col])
                   for k in range(3))
        target = _pursuit_target(pos, a, b, c)
        direction = target - pos
        direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        speed = torch.clamp(MAZE_GOAL_GAIN * (goal - pos).norm(dim=-1), max=MAZE_SPEED)
        v_world = speed[:, None] * direction
        w, x, y, z = quat.unbind(-1)
        yaw = torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]

        def to_heading(v: torch.Tensor) -> torch.Tensor:
            return torch.cat([cos * v[:, :1] + sin * v[:, 1:], -sin * v[:, :1] + cos * v[:, 1:]], dim=-1)

        desired = to_heading(v_world)
        velocity = desired + VEL_FEEDBACK * (desired - to_heading(vel))
        quarter = math.pi / 2
        heading_error = yaw - quarter * torch.round(yaw / quarter)
        yaw_rate = -MAZE_HEADING_GAIN * heading_error
        phase = torch.atan2(clock[:, 1], clock[:, 0])
        return to_action(trot_targets(phase, velocity, yaw_rate))


def _pursuit_target(pos: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The point `MAZE_LOOKAHEAD` beyond the projection of `pos` on the polyline a -> b -> c."""
    d1, d2 = b - a, c - b
    len1, len2 = d1.norm(dim=-1, keepdim=True), d2.norm(dim=-1, keepdim=True)
    u1, u2 = d1 / len1.clamp_min(1e-6), d2 / len2.clamp_min(1e-6)
    ahead = ((pos - a) * u1).sum(-1, keepdim=True).clamp(min=0.0) + MAZE_LOOKAHEAD
    on_first = a + u1 * torch.minimum(ahead, len1)
    on_second = b + u2 * torch.clamp(ahead - len1, min=0.0).minimum(len2)
    return torch.where(ahead <= len1, on_first, on_second)


ant_maze_umaze_policy = AntMazePolicy("umaze")
ant_maze_medium_policy = AntMazePolicy("medium")
ant_maze_large_policy = AntMazePolicy("large")
