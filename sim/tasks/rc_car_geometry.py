"""The RC car's dimensions, its observation layout and its race tracks: plain numpy, no JAX or MuJoCo.

One source of truth shared by the simulated task (`sim.tasks.rc_car`, which builds its MJCF model and
JAX reward from these) and the ROS 2 bridge of the real car (`real/`), whose deploy process must not
load the simulator: the bridge sends observations in `OBS_NAMES` order, converts speeds with
`TOP_SPEED` and `MAX_STEER`, and lays out checkpoints with the same `TrackGeometry` and `GATE_MARGIN`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sim.errors import ConfigError

# --- the car -------------------------------------------------------------------------------------
CHASSIS_HALF = (0.22, 0.085, 0.025)  # box half-sizes (m)
CHASSIS_MASS = 2.0
WHEEL_MASS = 0.1
WHEEL_RADIUS = 0.05
WHEELBASE = 0.30
HALF_TRACK = 0.105
MAX_STEER = 0.45  # rad, mean front-wheel angle at full steering
ACKERMANN = 2 * HALF_TRACK / WHEELBASE  # left - right steering angle = ACKERMANN * mean^2
STALL_TORQUE = 0.35  # N m per rear wheel at full throttle, standing still
TOP_SPEED = 6.0  # m/s where the motor's torque at full throttle falls to zero
BRAKE_TORQUE = 0.5  # N m per rear wheel, the most the motor gives (braking from speed)
BACK_EMF = STALL_TORQUE * WHEEL_RADIUS / (2 * TOP_SPEED)  # N m per rad/s of the summed rear wheel speeds
TYRE_FRICTION = 0.8
STEER_KP = 8.0  # N m / rad on the mean steering angle
STEER_DAMPING = 0.15
STRUT_MASS = 0.05  # unsprung mass per corner besides the wheel
SUSPENSION_K = 600.0  # N/m per corner: about 1 cm of travel under the car's weight
SUSPENSION_C = 15.0  # N s/m per corner (about 0.4 of critical damping)
SUSPENSION_PRELOAD = CHASSIS_MASS * 9.81 / 4 / SUSPENSION_K  # spring compression at rest (m)

# --- observation layout (the ROS 2 bridge's RC-car adapter uses the same order and units) ------------
OBS_NAMES: tuple[str, ...] = (
    "forward_speed",   # m/s, velocimeter x
    "yaw_rate",        # rad/s, gyro z
    "accel_x",         # m/s^2, accelerometer x (forward), mean over the last control period
    "accel_y",         # m/s^2, accelerometer y (left), mean over the last control period
    "next_cp_x",       # m, next checkpoint in the car's heading frame
    "next_cp_y",
    "next2_cp_x",      # m, the checkpoint after it
    "next2_cp_y",
    "prev_steering",   # previous action, [-1, 1]
    "prev_throttle",
)
CRITIC_NAMES: tuple[str, ...] = OBS_NAMES + (
    "true_vel_x", "true_vel_y",            # m/s, body frame
    "heading_cos", "heading_sin",          # heading relative to the track direction
    "lateral_offset",                      # m from the centreline, left positive
    "friction_scale", "mass_scale", "motor_scale", "steering_scale",
)

# --- tracks --------------------------------------------------------------------------------------
GATE_MARGIN = 0.5  # m beyond the track half-width within which a checkpoint's line counts as crossed
MIN_TRACK_RADIUS = 0.75  # m: the car turns no tighter than about 0.65 m, so sharper tracks are refused


@dataclasses.dataclass(frozen=True)
class Track:
    """A closed centreline through `points` ((x, y) in metres, in driving order) and a width (m)."""

    points: tuple[tuple[float, float], ...]
    width: float


def _oval(straight: float = 6.0, radius: float = 2.5) -> tuple[tuple[float, float], ...]:
    h = straight / 2
    right = [(h + radius * math.cos(a), radius * math.sin(a)) for a in np.radians([-60, -30, 0, 30, 60])]
    left = [(-h + radius * math.cos(a), radius * math.sin(a)) for a in np.radians([120, 150, 180, 210, 240])]
    pts = [(-h, -radius), (0.0, -radius), (h, -radius), *right, (h, radius), (0.0, radius), (-h, radius), *left]
    return tuple((round(x, 3), round(y, 3)) for x, y in pts)


TRACKS: dict[str, Track] = {
    "oval": Track(_oval(), 1.2),
    "circuit": Track(((-4.0, -4.0), (0.0, -4.0), (4.0, -4.0), (5.8, -3.4), (6.6, -1.8), (6.0, -0.1), (4.4, 0.3),
                      (3.0, -0.4), (1.6, -1.2), (0.2, -0.9), (-0.5, 0.6), (0.4, 2.2), (2.4, 2.7), (4.2, 3.0),
                      (4.9, 4.3), (4.1, 5.5), (2.4, 5.9), (0.0, 5.6), (-2.0, 4.6), (-3.2, 2.8), (-5.2, 1.6),
                      (-6.0, -0.6), (-5.6, -3.0)), 1.0),
}


def catmull_rom(points: np.ndarray, samples: int = 64) -> np.ndarray:
    """Points along the closed centripetal Catmull-Rom spline through `points` (no cusps or loops)."""
    p = np.asarray(points, np.float64)
    k = len(p)
    out = []
    for i in range(k):
        p0, p1, p2, p3 = p[i - 1], p[i], p[(i + 1) % k], p[(i + 2) % k]
        t1 = np.linalg.norm(p1 - p0) ** 0.5
        t2 = t1 + np.linalg.norm(p2 - p1) ** 0.5
        t3 = t2 + np.linalg.norm(p3 - p2) ** 0.5
        t = np.linspace(t1, t2, samples, endpoint=False)[:, None]
        a1 = (t1 - t) / t1 * p0 + t / t1 * p1
        a2 = (t2 - t) / (t2 - t1) * p1 + (t - t1) / (t2 - t1) * p2
        a3 = (t3 - t) / (t3 - t2) * p2 + (t - t2) / (t3 - t2) * p3
        b1 = (t2 - t) / t2 * a1 + t / t2 * a2
        b2 = (t3 - t) / (t3 - t1) * a2 + (t - t1) / (t3 - t1) * a3
        out.append((t2 - t) / (t2 - t1) * b1 + (t - t1) / (t2 - t1) * b2)
    return np.concatenate(out)


def resample(curve: np.ndarray, count: int) -> tuple[np.ndarray, float]:
    """`count` points equally spaced by arc length along the closed polyline `curve`, and its length."""
    closed = np.concatenate([curve, curve[:1]])
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(closed, axis=0), axis=1))])
    q = np.linspace(0.0, s[-1], count, endpoint=False)
    return np.stack([np.interp(q, s, closed[:, 0]), np.interp(q, s, closed[:, 1])], 1), float(s[-1])


class TrackGeometry:
    """A track's centreline (a dense closed polyline), checkpoints and their directions, in numpy."""

    STEP = 0.1  # m between centreline points

    def __init__(self, points, width: float, checkpoint_spacing: float):
        pts = np.asarray(points, np.float64)
        if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) < 3:
            raise ConfigError(f"track_points must be at least 3 (x, y) pairs, got shape {pts.shape}")
        if width < 0.5:
            raise ConfigError(f"track_width must be >= 0.5 m (the car is 0.25 m wide), got {width}")
        if checkpoint_spacing <= 0:
            raise ConfigError(f"checkpoint_spacing must be > 0, got {checkpoint_spacing}")
        spline = catmull_rom(pts)
        _, length = resample(spline, 2)
        self.line, self.length = resample(spline, max(8, int(round(length / self.STEP))))
        self.width = float(width)
        radius = self.min_radius()
        if radius < MIN_TRACK_RADIUS:
            raise ConfigError(f"the track turns tighter ({radius:.2f} m) than the car can follow; "
                              f"keep the centreline's radius >= {MIN_TRACK_RADIUS} m (spread the points)")
        n = max(4, int(round(self.length / checkpoint_spacing)))
        self.checkpoints, _ = resample(self.line, n)
        ahead, _ = resample(np.roll(self.line, -1, 0), n)  # the next centreline point after each checkpoint
        tangent = ahead - self.checkpoints
        self.cp_tangent = tangent / np.linalg.norm(tangent, axis=1, keepdims=True)

    def min_radius(self, gap: int = 3) -> float:
        """Smallest radius of the circles through centreline points `gap` apart."""
        a, b, c = np.roll(self.line, gap, 0), self.line, np.roll(self.line, -gap, 0)
        ab, bc, ca = (np.linalg.norm(u, axis=1) for u in (b - a, c - b, a - c))
        cross = np.abs((b - a)[:, 0] * (c - a)[:, 1] - (b - a)[:, 1] * (c - a)[:, 0])
        return float(np.min(ab * bc * ca / np.maximum(2 * cross, 1e-12)))

    def sites(self) -> str:
        """MJCF sites drawing the track: its edges and a line across it at every checkpoint (start in white)."""
        out = []
        edge_step = max(1, int(round(0.5 / self.STEP)))
        a = self.line[::edge_step]
        b = np.roll(a, -1, 0)
        mid, seg = (a + b) / 2, b - a
        normal = np.stack([-seg[:, 1], seg[:, 0]], 1) / np.linalg.norm(seg, axis=1, keepdims=True)
        for i, (m, s, nrm) in enumerate(zip(mid, seg, normal, strict=True)):
            yaw = math.degrees(math.atan2(s[1], s[0]))
            half = np.linalg.norm(s) / 2 + 0.01
            for side, sign in (("l", 1), ("r", -1)):
                x, y = m + sign * self.width / 2 * nrm
                out.append(f'<site name="edge_{side}{i}" type="box" pos="{x:.3f} {y:.3f} 0.002" '
                           f'size="{half:.3f} 0.02 0.002" euler="0 0 {yaw:.1f}" rgba=".9 .9 .9 1"/>')
        for i, (c, t) in enumerate(zip(self.checkpoints, self.cp_tangent, strict=True)):
            yaw = math.degrees(math.atan2(t[1], t[0]))
            rgba = "1 1 1 1" if i == 0 else ".9 .6 .1 1"
            out.append(f'<site name="cp{i}" type="box" pos="{c[0]:.3f} {c[1]:.3f} 0.002" '
                       f'size="0.025 {self.width / 2:.3f} 0.002" euler="0 0 {yaw:.1f}" rgba="{rgba}"/>')
        return "\n    ".join(out)
