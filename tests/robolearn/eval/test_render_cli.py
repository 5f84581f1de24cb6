"""Rendering to video files and the `robolearn` command line."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest

import sim
from robolearn.commands.cli import main


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_render_writes_video(tmp_path, suffix):
    path = sim.render("cartpole-swingup", path=tmp_path / f"roll{suffix}", num_steps=8, width=64, height=48)
    assert path.exists() and path.stat().st_size > 0
    if suffix == ".gif":
        frames = imageio.mimread(path)
        assert len(frames) == 9 and frames[0].shape[:2] == (48, 64)
        assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).sum() > 0  # the scene moved


def test_render_rejects_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="mp4 or .gif"):
        sim.render("point-mass", path=tmp_path / "x.avi", num_steps=1)


def test_cli_tasks_and_render(tmp_path, capsys):
    assert main(["tasks"]) == 0
    assert "cartpole-swingup" in capsys.readouterr().out
    out = tmp_path / "p.gif"
    assert main(["render", "env=pendulum-swingup", f"out={out}", "steps=3"]) == 0
    assert out.exists()
    assert main(["render", "env=nope"]) == 2
    assert "env/nope" in capsys.readouterr().err
    assert main(["render", "colour=red"]) == 2


def test_pixel_observations():
    """A "pixels" group of camera frames; final_obs frames show the pre-reset state."""
    import torch

    env = sim.make("cartpole-swingup", num_envs=3, episode_length=4, pixels={"camera": "fixed", "width": 32,
                                                                             "height": 24})
    obs = env.get_observations()
    assert obs["pixels"].shape == (3, 24, 32, 3) and obs["pixels"].dtype == torch.uint8
    assert env.observation_shapes["pixels"] == (24, 32, 3)
    first = obs["pixels"].clone()
    for _ in range(3):
        obs, _, dones, extras = env.step(torch.ones(3, 1))
        torch.testing.assert_close(extras["final_obs"]["pixels"], obs["pixels"])
    pushed = obs["pixels"].clone()
    assert (pushed.float() - first.float()).abs().sum() > 0  # the cart moved
    obs, _, dones, extras = env.step(torch.ones(3, 1))
    assert dones.all()
    assert (extras["final_obs"]["pixels"].float() - obs["pixels"].float()).abs().sum() > 0
    env.close()
    with pytest.raises(sim.ConfigError, match="pixels settings"):
        sim.make("cartpole-swingup", pixels={"colour": "red"})
