"""Camera frames to and from mp4 through imageio-ffmpeg's ffmpeg, with LeRobot's encoder settings.

Only the codec work: which episode goes into which file is the writer's and reader's business. ffmpeg runs as
a subprocess fed raw RGB (or gray) frames, so no video library is imported.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.data.formats.lerobot.layout import CODECS
from robolearn.errors import DatasetError


def ffmpeg_exe() -> str:
    """The ffmpeg executable imageio-ffmpeg ships; a DatasetError saying how to get it (or avoid video)."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise DatasetError("LeRobot videos need ffmpeg: pip install imageio-ffmpeg (or write(..., video=False); "
                           "read(..., exclude=[<video keys>]))") from None
    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError as e:
        raise DatasetError(f"no ffmpeg executable ({e}); pip install imageio-ffmpeg") from None


def _encoder_options(codec: str, encoder: dict[str, Any]) -> list[str]:
    """ffmpeg's options for LeRobot's ``g`` / ``crf`` / ``preset`` / ``fast_decode`` on ``codec``."""
    options = ["-g", str(encoder["g"])] if encoder.get("g") is not None else []
    if encoder.get("crf") is not None:
        options += ["-crf", str(encoder["crf"])]
    if codec == "libsvtav1":
        if encoder.get("preset") is not None:
            options += ["-preset", str(encoder["preset"])]
        options += ["-svtav1-params", f"fast-decode={max(0, min(2, int(encoder.get('fast_decode') or 0)))}"]
    elif codec in ("libx264", "libx265"):
        if encoder.get("preset") is not None:
            options += ["-preset", str(encoder["preset"])]
        if encoder.get("fast_decode"):
            options += ["-tune", "fastdecode"]
    return options


class VideoEncoder:
    """One mp4 file: raw RGB frames piped into ffmpeg with LeRobot's encoder settings."""

    def __init__(self, path: Path, height: int, width: int, fps: int, encoder: dict[str, Any]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        codec = CODECS[encoder["vcodec"]][0]
        cmd = [ffmpeg_exe(), "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo",
               "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-framerate", str(fps), "-i", "-", "-an",
               "-c:v", codec, "-pix_fmt", str(encoder["pix_fmt"]), *_encoder_options(codec, encoder), str(path)]
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, "SVT_LOG": os.environ.get("SVT_LOG", "1")}  # SVT-AV1 prints its banner otherwise
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.log, env=env)

    def write(self, frames: np.ndarray) -> None:
        """Append ``frames`` [n, H, W, 3] uint8 to the stream."""
        try:
            self.proc.stdin.write(np.ascontiguousarray(frames, dtype=np.uint8).tobytes())
        except (BrokenPipeError, OSError):
            self.close()
            raise DatasetError(f"ffmpeg stopped encoding {self.path}") from None

    def close(self) -> None:
        """Finish the file; ffmpeg's own message in a DatasetError if it failed."""
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        rc = self.proc.wait()
        self.log.seek(0)
        message = self.log.read().decode(errors="replace").strip()
        self.log.close()
        if rc != 0:
            raise DatasetError(f"ffmpeg failed encoding {self.path} (exit {rc}): {message[-600:]}; try "
                               "video_encoder={'vcodec': 'h264'} or write(..., video=False)")


def video_feature_info(shape: tuple[int, ...], fps: int, encoder: dict[str, Any]) -> dict[str, Any]:
    """The ``info`` of a video feature in meta/info.json, as LeRobot's probe of the encoded stream records it."""
    h, w, c = shape
    info: dict[str, Any] = {"video.height": h, "video.width": w, "video.codec": CODECS[encoder["vcodec"]][1],
                            "video.pix_fmt": encoder["pix_fmt"], "video.fps": fps, "video.channels": c,
                            "has_audio": False}
    for name in ("g", "crf", "preset", "fast_decode"):
        info[f"video.{name}"] = encoder[name]
    info.update({"video.video_backend": "pyav", "video.extra_options": {}})
    return info


def decode_video(file: Path, frame_numbers: np.ndarray, hwc: tuple[int, int, int]) -> np.ndarray:
    """The frames ``frame_numbers`` (0-based, in decoding order at the stream's rate) of ``file`` [n, H, W, C]."""
    h, w, c = hwc
    if c not in (1, 3):
        raise DatasetError(f"{file}: {c}-channel video is not supported; read(..., exclude=[<its key>])")
    out = np.empty((len(frame_numbers), h, w, c), dtype=np.uint8)
    order = np.argsort(frame_numbers, kind="stable")
    wanted = frame_numbers[order]
    if len(wanted) and wanted[0] < 0:
        raise DatasetError(f"{file}: episodes metadata points before the video's start (negative timestamp)")
    size = h * w * c
    cmd = [ffmpeg_exe(), "-nostdin", "-hide_banner", "-nostats", "-loglevel", "info", "-i", str(file), "-map",
           "0:v:0", "-f", "rawvideo", "-pix_fmt", "rgb24" if c == 3 else "gray", "-"]
    pos = frame = 0
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        try:
            while pos < len(wanted):
                buf = proc.stdout.read(size)
                if len(buf) < size:
                    break
                while pos < len(wanted) and wanted[pos] == frame:
                    out[order[pos]] = np.frombuffer(buf, dtype=np.uint8).reshape(h, w, c)
                    pos += 1
                frame += 1
        finally:
            proc.stdout.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        log.seek(0)
        message = log.read().decode(errors="replace")
    _check_decoded(file, message, (w, h), frame, wanted[pos] if pos < len(wanted) else None)
    return out


def _check_decoded(file: Path, message: str, width_height: tuple[int, int], decoded: int,
                   missing: np.integer | None) -> None:
    """Errors after decoding: a stream of another size than info.json says (from ffmpeg's log ``message``), or
    fewer frames than the episodes need (``missing``: the first frame number not decoded)."""
    w, h = width_height
    sizes = {(int(a), int(b)) for a, b in re.findall(r"Video: [^\n]*?, (\d+)x(\d+)[ ,\[]", message)}
    if sizes - {(w, h)}:
        raise DatasetError(f"{file} holds {sorted(sizes)[0][0]}x{sorted(sizes)[0][1]} frames, meta/info.json says "
                           f"{w}x{h} (video.width x video.height); fix info.json")
    if missing is not None:
        tail = message.strip().splitlines()[-1:] or [""]
        raise DatasetError(f"{file}: decoded {decoded} frames but the episodes need frame {int(missing)}; the video "
                           f"is truncated or corrupt ({tail[0][:200]}); re-download or regenerate it")
