"""rc-car-track: the demo controller laps every preset, crashes and stalls end episodes, custom tracks,
and the observation layout the ROS 2 bridge relies on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim
from sim.tasks.rc_car_control import demo_lap_policy
from sim.tasks.rc_car_geometry import CRITIC_NAMES, OBS_NAMES, TRACKS

NAME = "rc-car-track"


def _passed(env) -> np.ndarray:
    return np.asarray(env.state.info["passed"])


def _drive(env, policy, steps: int, until_passed: int | None = None):
    """Run `policy`; stop at the first episode end (returned) or once every env passed `until_passed`."""
    obs = env.get_observations()["policy"]
    for t in range(steps):
        out = env.step(policy(obs))
        obs = out[0]["policy"]
        if out[2].any():
            return t + 1, out
        if until_passed is not None and (_passed(env) >= until_passed).all():
            return t + 1, None
    return steps, None


@pytest.mark.parametrize("track", sorted(TRACKS))
def test_demo_controller_completes_a_lap(track):
    env = sim.make(NAME, num_envs=4, seed=1, track=track, random_start=False, episode_length=1000)
    laps = env.task.num_checkpoints
    steps, done = _drive(env, demo_lap_policy, 1000, until_passed=laps + 1)
    assert done is None, f"an episode ended after {steps} steps: {done[3]['log']}"
    assert (_passed(env) >= laps + 1).all()  # the start line crossed again: a full lap


def test_crash_and_stuck_end_episodes():
    """Env 0 drives off the track (full lock, full throttle): a crash. Env 1 stands still: stuck after
    more than 1.5 s (30 control steps) slower than 0.2 m/s. Both cost 10."""
    env = sim.make(NAME, num_envs=2, random_start=False, domain_randomization=False)
    action = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    ended = {}
    for t in range(1, 61):
        obs, reward, dones, extras = env.step(action)
        for i in torch.nonzero(dones).flatten().tolist():
            if i not in ended:
                offset = extras["final_obs"]["critic"][i, CRITIC_NAMES.index("lateral_offset")].item()
                ended[i] = (t, reward[i].item(), bool(extras["terminated"][i]), offset, dict(extras["log"]))
    assert set(ended) == {0, 1}
    steps, reward, terminated, offset, log = ended[0]
    assert terminated and reward < -9.0 and abs(offset) > 0.5 and steps < 60  # off the 1 m wide track
    assert steps == 31 or (log["episode/crashed"] == 1.0 and log["reward/crash"] == 0.5)  # 1 of 2 envs
    steps, reward, terminated, offset, log = ended[1]
    assert steps == 31 and terminated and reward < -9.0 and abs(offset) < 0.5
    assert ended[0][0] == 31 or (log["episode/stuck"] == 1.0 and log["episode/crashed"] == 0.0)


def test_custom_track_from_parameters():
    circle = [(3.0 * np.cos(a), 3.0 * np.sin(a)) for a in np.linspace(0, 2 * np.pi, 8, endpoint=False)]
    env = sim.make(NAME, num_envs=2, track_points=circle, track_width=1.5, random_start=False)
    assert env.task.track.width == 1.5
    assert env.task.num_checkpoints == round(2 * np.pi * 3.0)
    steps, done = _drive(env, demo_lap_policy, 300, until_passed=8)
    assert done is None and (_passed(env) >= 8).all()
    with pytest.raises(sim.ConfigError, match="tighter"):
        sim.make_task(NAME, track_points=[(0.0, 0.0), (1.0, 0.0), (0.5, 0.5)])
    with pytest.raises(sim.ConfigError, match="track must be one of"):
        sim.make_task(NAME, track="monza")


def test_observation_layout():
    env = sim.make(NAME, num_envs=3, seed=2)
    obs = env.get_observations()
    policy, critic = obs["policy"], obs["critic"]
    assert policy.shape == (3, len(OBS_NAMES)) == (3, 10) and policy.dtype == torch.float32
    assert critic.shape == (3, len(CRITIC_NAMES)) == (3, 19)
    col = {name: i for i, name in enumerate(CRITIC_NAMES)}
    torch.testing.assert_close(critic[:, :len(OBS_NAMES)], policy)
    # At rest at a checkpoint, facing along the track: the next one about 1 m ahead, the one after 2 m.
    assert (policy[:, [col["forward_speed"], col["accel_x"], col["prev_throttle"]]] == 0).all()
    assert ((policy[:, col["next_cp_x"]] > 0.6) & (policy[:, col["next_cp_x"]] < 1.4)).all()
    next1, next2 = policy[:, 4:6].norm(dim=1), policy[:, 6:8].norm(dim=1)
    assert ((next2 > next1 + 0.5) & (next2 < 2.5)).all()
    assert (critic[:, col["lateral_offset"]].abs() <= 0.16).all()
    assert (critic[:, col["friction_scale"]:] != 1.0).all()  # domain randomization is on by default
    action = torch.tensor([[0.5, 0.8], [-0.3, 0.4], [0.0, 1.0]])
    for _ in range(5):
        obs, *_ = env.step(action)
    policy = obs["policy"]
    torch.testing.assert_close(policy[:, [col["prev_steering"], col["prev_throttle"]]], action)
    assert (policy[:, col["forward_speed"]] > 0.1).all() and (policy[:, col["accel_x"]] > 0.5).all()
    # Steering left turns left: positive yaw rate.
    assert policy[0, col["yaw_rate"]] > 0.1 and policy[1, col["yaw_rate"]] < -0.1
