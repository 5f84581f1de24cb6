"""Offscreen rendering of rollouts to mp4 or gif through MuJoCo's renderer.

Headless machines: MuJoCo needs an OpenGL platform. `sim` sets `MUJOCO_GL=egl` when no display is
set and the user chose none; on Debian/Ubuntu that needs `libegl1 libegl-mesa0 libgl1-mesa-dri`
(`apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri`). `MUJOCO_GL=osmesa` works too with
`libosmesa6`. On an NVIDIA machine EGL uses the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import torch

from sim.core import Task
from sim.errors import ConfigError

#: MuJoCo's costly render passes: a software OpenGL (Mesa llvmpipe, headless CPUs) spends most of a frame on them.
EFFECTS = ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX")


class Renderer:
    """Renders frames of one task's model from joint positions.

    `camera`: a camera of the model (name or id; None: its first, else the free view), or several names joined by
    commas ("front,top"): their views, each `width` wide, tiled left to right into one [H, n * width, 3] frame, as
    a multi-camera robot's observation (one view of a floating target leaves its depth unknown).
    `effects=False` turns off shadows, reflections and the skybox: on a CPU (llvmpipe) a 32x32 frame of the arm
    then takes 2 ms instead of 34 ms, and differs from the full render by 1.2/255 on average (measured). Camera
    observations use it; videos keep the effects.
    """

    def __init__(self, task: Task, width: int = 320, height: int = 240, camera: str | int | None = None,
                 effects: bool = True):
        model = task.mj_model
        self.model = model
        self.data = mujoco.MjData(model)
        width = min(width, model.vis.global_.offwidth)
        height = min(height, model.vis.global_.offheight)
        self._renderer = mujoco.Renderer(model, height=height, width=width)
        for flag in () if effects else EFFECTS:
            self._renderer.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = False
        if camera is None:
            camera = 0 if model.ncam > 0 else -1
        self.views = [c.strip() for c in camera.split(",")] if isinstance(camera, str) else [camera]
        for view in self.views:
            if isinstance(view, str) and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, view) < 0:
                names = [model.camera(i).name for i in range(model.ncam)]
                raise ConfigError(f"the model has no camera {view!r}; its cameras: {names}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, W, 3) of a frame: W is the views' widths together."""
        return self._renderer.height, self._renderer.width * len(self.views), 3

    def frame(self, qpos: np.ndarray) -> np.ndarray:
        """An RGB frame (uint8 [H, W, 3]) of the model at `qpos` (several views: side by side)."""
        self.data.qpos[:] = qpos
        mujoco.mj_forward(self.model, self.data)
        views = []
        for view in self.views:
            self._renderer.update_scene(self.data, camera=view)
            views.append(self._renderer.render().copy())
        return views[0] if len(views) == 1 else np.concatenate(views, 1)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def project(model: mujoco.MjModel, data: mujoco.MjData, camera: str | int, points: np.ndarray, width: int,
            height: int) -> np.ndarray:
    """World points [..., 3] -> [..., 2] pixel coordinates in `camera`'s width x height image (x right, y down,
    from the top-left corner; a pixel's centre at +0.5), by the pinhole model MuJoCo renders with: the camera
    looks along its -z axis, y up, vertical field of view `cam_fovy`. The camera's pose is `data`'s (call
    `mj_forward` first). Points behind the camera come out mirrored; callers keep to the visible workspace."""
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) if isinstance(camera, str) else camera
    if cam < 0 or cam >= model.ncam:
        raise ConfigError(f"the model has no camera {camera!r}")
    local = (np.asarray(points, dtype=np.float64) - data.cam_xpos[cam]) @ data.cam_xmat[cam].reshape(3, 3)
    focal = 0.5 * height / np.tan(np.radians(model.cam_fovy[cam]) / 2)
    depth = -local[..., 2]
    return np.stack([0.5 * width + focal * local[..., 0] / depth, 0.5 * height - focal * local[..., 1] / depth], -1)


def project_views(task: Task, camera: str, points: np.ndarray, width: int, height: int) -> np.ndarray:
    """Where world points [..., 3] appear in the views of `camera` (names joined by commas, as `Renderer` tiles
    them): [..., V, 2] pixel coordinates in each view's own width x height image (`project`), the model at its
    initial pose (cameras fixed in the world, as the arm's; no OpenGL context is made)."""
    model = task.mj_model
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return np.stack([project(model, data, view.strip(), points, width, height) for view in camera.split(",")], -2)


def write_video(frames: list[np.ndarray], path: str | Path, fps: int) -> Path:
    """Write frames to `path`: .mp4 (ffmpeg from imageio-ffmpeg) or .gif."""
    import warnings

    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gif":
        imageio.mimsave(path, frames, duration=1.0 / fps, loop=0)
    elif path.suffix == ".mp4":
        with warnings.catch_warnings():  # ffmpeg runs as a subprocess (fork+exec); JAX warns about fork
            warnings.filterwarnings("ignore", message=".*os.fork.*")
            imageio.mimsave(path, frames, fps=fps, macro_block_size=1)
    else:
        raise ValueError(f"video path must end in .mp4 or .gif, got {path.name!r}")
    return path


def render_rollout(env: Any, policy: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   path: str | Path = "rollout.mp4", num_steps: int | None = None, seed: int = 0,
                   width: int = 320, height: int = 240, camera: str | int | None = None,
                   fps: int | None = None) -> Path:
    """Roll out `policy` (observation TensorDict -> actions [1, A]; random if None) in a one-env C-engine VecEnv
    (`sim.render` makes it) and write a video of every control step of one episode (or `num_steps`)."""
    renderer = Renderer(env.task, width=width, height=height, camera=camera)
    gen = torch.Generator().manual_seed(seed)
    try:
        steps = num_steps or env.max_episode_length
        obs = env.get_observations()
        frames = [renderer.frame(env.qpos(0))]
        for _ in range(steps):
            with torch.no_grad():
                act = policy(obs) if policy is not None else torch.rand(1, env.num_actions, generator=gen) * 2 - 1
            obs, _, dones, _ = env.step(act)
            if bool(dones[0]) and num_steps is None:
                break  # the env has auto-reset: the next frame would show the new episode
            frames.append(renderer.frame(env.qpos(0)))
    finally:
        renderer.close()
    return write_video(frames, path, fps or max(1, round(1.0 / env.task.cfg.policy_dt)))
