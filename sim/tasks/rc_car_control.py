"""Scripted "demo lap" controller of `rc-car-track`: slow pure pursuit through the checkpoints.

FastRLAP starts from one slow demonstration lap; this controller drives such laps in simulation (for
datasets, and as the task's reference). It reads only the `"policy"` observation (`OBS_NAMES`):

- Path: the polyline car -> next checkpoint -> the one after (both in the body frame). The goal
  point is where a circle of radius `LOOKAHEAD` around the car meets that polyline (the next
  checkpoint itself while it is further away than the lookahead).
- Steering (pure pursuit): the arc through the goal point has curvature k = 2 y / d^2; a bicycle
  model turns that into the mean wheel angle atan(wheelbase * k), divided by the full-lock angle.
- Speed: `CRUISE_SPEED`, lowered in bends to keep the lateral acceleration v^2 k under
  `LATERAL_ACCEL` (well inside the tyres' grip, so the car never slides); throttle is a
  feed-forward (the DC motor's steady state, v / top speed) plus a proportional term on the error.

Stateless: a function of the current observation only. Robust to the task's domain randomization
(grip, mass, motor, steering gain) by its margins: low speed, feedback on speed and direction.
"""

from __future__ import annotations

import torch

from sim.tasks.rc_car_geometry import MAX_STEER, TOP_SPEED, WHEELBASE

LOOKAHEAD = 0.8  # m
CRUISE_SPEED = 1.6  # m/s on straights
MIN_SPEED = 0.7  # m/s in the tightest bends (well above the task's stuck threshold)
LATERAL_ACCEL = 2.0  # m/s^2 allowed in bends
SPEED_GAIN = 0.5  # throttle per m/s of speed error


def _lookahead_point(p1: torch.Tensor, p2: torch.Tensor, radius: float) -> torch.Tensor:
    """Where the circle of `radius` around the origin leaves the segment p1 -> p2 (p1 if outside it)."""
    d = p2 - p1
    a = (d * d).sum(-1).clamp_min(1e-9)
    b = 2.0 * (p1 * d).sum(-1)
    c = (p1 * p1).sum(-1) - radius**2
    # The larger root of |p1 + t d| = radius, in [0, 1]: p1 is inside the circle (c < 0), so it exists
    # unless p2 is inside too, and then the segment's end is the goal.
    t = ((-b + (b * b - 4 * a * c).clamp_min(0.0).sqrt()) / (2 * a)).clamp(0.0, 1.0)
    on_segment = p1 + t[:, None] * d
    return torch.where((c >= 0.0)[:, None], p1, on_segment)


def demo_lap_policy(obs: torch.Tensor) -> torch.Tensor:
    """Pure pursuit on the observed checkpoints with a curvature-limited speed; [steering, throttle]."""
    speed, p1, p2 = obs[:, 0], obs[:, 4:6], obs[:, 6:8]
    goal = _lookahead_point(p1, p2, LOOKAHEAD)
    curvature = 2.0 * goal[:, 1] / (goal * goal).sum(-1).clamp_min(1e-6)
    steering = torch.atan(WHEELBASE * curvature) / MAX_STEER
    target = (LATERAL_ACCEL / curvature.abs().clamp_min(1e-6)).sqrt().clamp(MIN_SPEED, CRUISE_SPEED)
    throttle = target / TOP_SPEED + SPEED_GAIN * (target - speed)
    return torch.stack([steering, throttle], -1).clamp(-1.0, 1.0)
