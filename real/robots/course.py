"""A course of checkpoints in the odometry frame and FastRLAP-style progress along it.

FastRLAP drives one slow demo lap, keeps checkpoints along it, and steers the policy by the vector to the next
one (`goal_graph.py`). Here a `Course` comes from a YAML or CSV list of (x, y) points, an inline list, a
recorded path (`Course.from_path`, resampled every ``spacing`` metres) or a simulator track (the sim's own
checkpoints, so a policy trained on ``rc-car-track`` sees the same geometry on the fake robot).

`CourseProgress` follows the simulator's rule so that a sim-trained policy sees familiar numbers: checkpoint
i is passed once the car is level with it (ahead along the course direction there) and within
``pass_radius`` of it; then the next one becomes the goal. Laps are counted at checkpoint 0.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robolearn.errors import ConfigError


class Course:
    """Closed loop of checkpoints (x, y) in driving order, their directions, and the passing radius (m)."""

    def __init__(self, points: Any, pass_radius: float = 1.0, tangents: Any = None) -> None:
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) < 3:
            raise ConfigError(f"a course needs at least 3 (x, y) checkpoints, got shape {pts.shape}")
        if not np.all(np.isfinite(pts)):
            raise ConfigError("course checkpoints must be finite numbers")
        if not pass_radius > 0:
            raise ConfigError(f"course pass_radius must be > 0 m, got {pass_radius}")
        self.points = pts
        self.pass_radius = float(pass_radius)
        if tangents is None:  # direction through each checkpoint: from its predecessor to its successor
            tangents = np.roll(pts, -1, 0) - np.roll(pts, 1, 0)
        tangents = np.asarray(tangents, dtype=np.float64)
        norm = np.linalg.norm(tangents, axis=1, keepdims=True)
        if np.any(norm < 1e-9):
            raise ConfigError("course checkpoints repeat: consecutive points must differ")
        self.tangents = tangents / norm

    def __len__(self) -> int:
        return len(self.points)

    # --- sources ---------------------------------------------------------------------------------------

    @classmethod
    def from_track(cls, track: str = "circuit", points: Any = None, width: float = 0.0,
                   spacing: float = 1.0) -> Course:
        """The checkpoints of a simulator track: a preset of ``sim.tasks.rc_car.TRACKS`` or custom control points.

        Same geometry and passing radius (half the width plus the sim's gate margin) as ``rc-car-track``.
        """
        from sim.tasks.rc_car_geometry import GATE_MARGIN, TRACKS, TrackGeometry

        if points is not None and len(points):
            width = width or 1.0
        elif track in TRACKS:
            points, width = TRACKS[track].points, width or TRACKS[track].width
        else:
            raise ConfigError(f"course track must be one of {sorted(TRACKS)} (or give points), got {track!r}")
        geometry = TrackGeometry(points, width, spacing)
        return cls(geometry.checkpoints, geometry.width / 2 + GATE_MARGIN, geometry.cp_tangent)

    @classmethod
    def from_path(cls, xy: Any, spacing: float = 1.0, pass_radius: float = 1.0) -> Course:
        """Checkpoints every ``spacing`` metres along a driven closed path (e.g. odometry of a demo lap)."""
        from sim.tasks.rc_car_geometry import resample

        path = np.asarray(xy, dtype=np.float64)
        if path.ndim != 2 or path.shape[1] != 2 or len(path) < 3:
            raise ConfigError(f"a recorded path needs at least 3 (x, y) points, got shape {path.shape}")
        _, length = resample(path, 2)
        points, _ = resample(path, max(3, int(round(length / spacing))))
        return cls(points, pass_radius)

    @classmethod
    def load(cls, path: str | Path, pass_radius: float = 1.0) -> Course:
        """Read checkpoints from YAML (a list of [x, y], or ``{checkpoints: [...], pass_radius: r}``) or CSV
        (two columns x, y; a header line is skipped)."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"course file {path} does not exist")
        if path.suffix.lower() == ".csv":
            rows = [r for r in csv.reader(path.read_text().splitlines()) if r and not r[0].startswith("#")]
            try:
                float(rows[0][0])
            except (ValueError, IndexError):
                rows = rows[1:]  # a header
            try:
                points = [(float(r[0]), float(r[1])) for r in rows]
            except (ValueError, IndexError) as e:
                raise ConfigError(f"course CSV {path}: every row needs two numbers x, y ({e})") from None
            return cls(points, pass_radius)
        data = yaml.safe_load(path.read_text())
        if isinstance(data, Mapping):
            pass_radius = float(data.get("pass_radius", pass_radius))
            data = data.get("checkpoints")
        if not isinstance(data, list):
            raise ConfigError(f"course YAML {path} must hold a list of [x, y] checkpoints (or checkpoints: [...])")
        return cls(data, pass_radius)

    def save(self, path: str | Path) -> Path:
        """Write the course as YAML (``checkpoints`` and ``pass_radius``) or CSV, by the file's suffix."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            lines = ["x,y"] + [f"{x:.4f},{y:.4f}" for x, y in self.points]
            path.write_text("\n".join(lines) + "\n")
        else:
            data = {"pass_radius": self.pass_radius, "checkpoints": [[round(float(x), 4), round(float(y), 4)]
                                                                     for x, y in self.points]}
            path.write_text(yaml.safe_dump(data, default_flow_style=None))
        return path

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], run_config: Mapping[str, Any] | None = None) -> Course:
        """From a deploy config's ``course`` section: ``file`` > ``points`` > ``track`` > the checkpoint's track.

        With none given, a checkpoint trained on ``rc-car-track`` supplies its track (preset or custom points,
        width, checkpoint spacing); otherwise the "circuit" preset.
        """
        from real.robots.base import check_keys

        check_keys(cfg, ("file", "points", "track", "checkpoint_spacing", "pass_radius", "width"), "adapter.course")
        radius = cfg.get("pass_radius")
        if cfg.get("file"):
            return cls.load(cfg["file"], float(radius or 1.0))
        if cfg.get("points"):
            return cls(cfg["points"], float(radius or 1.0))
        env = (run_config or {}).get("env") or {}
        overrides = (env.get("overrides") or {}) if env.get("name") == "rc-car-track" else {}
        spacing = float(cfg.get("checkpoint_spacing") or overrides.get("checkpoint_spacing") or 1.0)
        width = float(cfg.get("width") or overrides.get("track_width") or 0.0)
        if cfg.get("track"):
            course = cls.from_track(str(cfg["track"]), None, width, spacing)
        else:
            course = cls.from_track(str(overrides.get("track") or "circuit"), overrides.get("track_points"), width,
                                    spacing)
        if radius:
            course.pass_radius = float(radius)
        return course


class CourseProgress:
    """Which checkpoint is next, how many were passed, lap times; and the goal vectors in the car's frame."""

    def __init__(self, course: Course) -> None:
        self.course = course
        self.reset()

    def reset(self) -> None:
        self.next_index: int | None = None
        self.passed_total = 0
        self.passed_now = 0
        self.lap_times: list[float] = []
        self._lap_start_ns: int | None = None

    @property
    def laps(self) -> float:
        """Checkpoints passed divided by checkpoints per lap (the sim's ``episode/laps``)."""
        return self.passed_total / len(self.course)

    def update(self, xy: np.ndarray, now_ns: int) -> int:
        """Advance past every checkpoint the car at ``xy`` has reached; returns how many were passed now."""
        c = self.course
        if self.next_index is None:  # start: the nearest checkpoint, or the one after it if already level with it
            i = int(np.argmin(np.linalg.norm(c.points - xy, axis=1)))
            self.next_index = (i + 1) % len(c) if np.dot(xy - c.points[i], c.tangents[i]) >= 0 else i
        self.passed_now = 0
        for _ in range(len(c)):
            i = self.next_index
            rel = xy - c.points[i]
            if not (np.dot(rel, c.tangents[i]) >= 0 and np.linalg.norm(rel) < c.pass_radius):
                break
            self.next_index = (i + 1) % len(c)
            self.passed_now += 1
            self.passed_total += 1
            if i == 0:  # a lap ends at checkpoint 0
                if self._lap_start_ns is not None:
                    self.lap_times.append((now_ns - self._lap_start_ns) / 1e9)
                self._lap_start_ns = now_ns
        return self.passed_now

    def goal_vectors(self, xy: np.ndarray, yaw: float) -> np.ndarray:
        """``[next_x, next_y, after_x, after_y]``: the next two checkpoints in the car's heading frame (m)."""
        if self.next_index is None:
            return np.full(4, np.nan)
        c, i = self.course, self.next_index
        cos, sin = math.cos(yaw), math.sin(yaw)
        out = []
        for j in (i, (i + 1) % len(c)):
            dx, dy = c.points[j] - xy
            out += [cos * dx + sin * dy, -sin * dx + cos * dy]
        return np.asarray(out)
