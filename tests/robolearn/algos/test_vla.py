"""The small VLA (policies/vla.py, robolearn/algos/chunk/vla.py): its tokenizer and packing, behaviour cloning that
follows the instruction and the camera, and the whole path on the arm tasks: pixels demos of three tasks, BC, a
LeRobot-layout checkpoint that `load_policy` plays, and Flow-Noise PPO in the pixels env, checkpointed for
`robolearn eval`."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import sim
from policies.vla import CharTokenizer, SpatialSoftmax, VLAPolicy, keypoint_targets
from robolearn.algos.chunk.flow_rl import FlowRLConfig
from robolearn.algos.chunk.vla import (
    ARM_INSTRUCTIONS,
    VLAConfig,
    VLAEnv,
    camera,
    collect_demos,
    point_pixels,
    pretrain_vision,
    random_shift,
    train_vla_bc,
)
from robolearn.checkpoints.policy import load_policy, save_chunk_policy
from robolearn.data.dataset import Dataset
from robolearn.errors import ConfigError
from robolearn.eval.evaluate import evaluate
from robolearn.runners.flow import finetune_flow


def test_tokenizer_pads_and_refuses_long_instructions():
    tok = CharTokenizer(max_tokens=8)
    ids = tok.encode(["Push it", "a?"])
    assert ids.shape == (2, 8) and ids[0, 7] == 0 and ids[1, 2] == 0
    assert ids[0, 0] == tok.encode("p")[0, 0] and ids[1, 1] == 1  # lower-cased; "?" is the unknown id
    with pytest.raises(ValueError, match="1 to 8 characters"):
        tok.encode("far too long")


def test_spatial_softmax_finds_a_hot_pixel():
    maps = torch.zeros(1, 2, 5, 9)
    maps[0, 0, 1, 8] = 50.0  # row 1 of 5 (y = -0.5), last column (x = 1)
    softmax = SpatialSoftmax(2)
    out = softmax(maps)
    torch.testing.assert_close(out[0, [0, 2]], torch.tensor([1.0, -0.5]), atol=1e-4, rtol=0)
    torch.testing.assert_close(out[0, [1, 3]], torch.zeros(2), atol=1e-6, rtol=0)  # a flat map: the centre
    torch.testing.assert_close(out[0, 4:], torch.tensor([50.0 / 45, 0.0]))         # mean activations
    maps[0, 0, 1, 8] = 1.0  # a weak peak is blurred toward the centre, until the temperature sharpens it
    assert softmax(maps)[0, 0] < 0.2
    with torch.no_grad():
        softmax.log_temperature.fill_(-4.0)
    torch.testing.assert_close(softmax(maps)[0, [0, 2]], torch.tensor([1.0, -0.5]), atol=1e-3, rtol=0)


def test_spatial_softmax_window_and_views():
    """`window`: the expectation near the peak only, so mass spread over a big map does not pull the keypoint to the
    centre; `views`: map k looks only in view k mod views of frames tiled side by side."""
    maps = torch.zeros(1, 2, 9, 18)  # two 9x9 views side by side
    maps[0, :, 2, 15] = 6.0          # a strong peak in view 1 (both maps)
    maps[0, :, 6, 3] = 4.0           # a weaker one in view 0
    grid_x, grid_y = torch.linspace(-1, 1, 18), torch.linspace(-1, 1, 9)
    plain = SpatialSoftmax(2)(maps)[0]
    assert abs(plain[0] - grid_x[15]) > 0.1  # 162 cells of small weight pull it toward the centre
    local = SpatialSoftmax(2, window=1)(maps)[0]
    torch.testing.assert_close(local[[0, 2]], torch.stack([grid_x[15], grid_y[2]]), atol=1e-5, rtol=0)
    split = SpatialSoftmax(2, window=1, views=2)(maps)[0]
    torch.testing.assert_close(split[[0, 2]], torch.stack([grid_x[3], grid_y[6]]), atol=1e-5, rtol=0)  # view 0
    torch.testing.assert_close(split[[1, 3]], torch.stack([grid_x[15], grid_y[2]]), atol=1e-5, rtol=0)  # view 1
    torch.testing.assert_close(split[4:], torch.tensor([4.0, 6.0]) / 81)  # each map's mean over its own view


def test_pack_and_unpack_round_trip():
    policy = VLAPolicy((16, 16, 3), state_dim=4, action_dim=2, chunk=3, max_tokens=8, width=16, hidden=(32,),
                       noise_head=True, instructions=("go left",))
    frames = torch.randint(0, 256, (5, 16, 16, 3), dtype=torch.uint8)
    state = torch.randn(5, 6)  # a task's "policy" group: the VLA reads its first state_dim values
    packed = policy.pack(frames, state)
    assert packed.shape == (5, policy.obs_dim)
    f, t, s = policy.unpack(packed)
    assert torch.equal(f, frames.permute(0, 3, 1, 2).float() / 255) and torch.equal(s, state[:, :4])
    assert torch.equal(t[0], policy.tokenizer.encode("go left")[0])
    actions, chain, logp = policy.sample(packed, "noise", generator=torch.Generator().manual_seed(0))
    assert actions.shape == (5, 3, 2) and chain.shape == (5, 5, 3, 2) and torch.isfinite(logp).all()
    with pytest.raises(ValueError, match="frames must be"):
        policy.pack(frames[:, :8], state)


def _toy_dataset(color: int, sign: float, episodes: int = 4, length: int = 6) -> Dataset:
    """Frames of one colour channel lit at a random brightness; the action is sign * brightness (+ a constant)."""
    rng = np.random.default_rng(color)
    n = episodes * (length + 1)
    level = rng.uniform(0.3, 1.0, n)
    frames = np.zeros((n, 16, 16, 3), np.uint8)
    frames[..., color] = (level * 255).astype(np.uint8)[:, None, None]
    index = np.arange(episodes * length) + np.repeat(np.arange(episodes), length)
    actions = np.stack([sign * level[index], np.full(len(index), 0.25)], -1).astype(np.float32)
    ends = np.zeros(len(index), bool)
    ends[length - 1::length] = True
    return Dataset(observations={"pixels": frames, "policy": rng.normal(size=(n, 3)).astype(np.float32)},
                   actions=actions, rewards=np.zeros(len(index), np.float32),
                   terminations=np.zeros(len(index), bool), truncations=ends, lengths=np.full(episodes, length))


def test_bc_follows_the_instruction_and_the_camera():
    """Two tasks with the same frames distribution but opposite actions: only the words tell them apart; within
    a task the action's size is the frame's brightness: only the pixels tell it."""
    data = {"red": _toy_dataset(0, 1.0), "green": _toy_dataset(1, -1.0)}
    words = {"red": "follow the red light", "green": "oppose the green light"}
    cfg = VLAConfig(chunk=2, hidden=(64, 64), width=32, state_dim=3, steps=400, batch_size=64, lr=2e-3)
    policy, losses = train_vla_bc(data, cfg, instructions=words)
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    with torch.no_grad():
        for name, color, sign in (("red", 0, 1.0), ("green", 1, -1.0)):
            for level in (0.4, 0.9):
                frame = torch.zeros(1, 16, 16, 3, dtype=torch.uint8)
                frame[..., color] = int(level * 255)
                obs = policy.pack(frame, torch.zeros(1, 3), policy.tokenizer.encode(words[name]))
                act = policy(obs)[0, 0]
                assert abs(float(act[0]) - sign * level) < 0.15, (name, level, act)
                assert abs(float(act[1]) - 0.25) < 0.1


def test_arm_tasks_from_pixels_to_a_checkpoint_and_flow_noise_ppo(tmp_path):
    """Real pixels demos of the three arm tasks (one each, 16x16 frames), a few BC steps, the LeRobot-layout
    checkpoint played by `load_policy` in a pixels env, then Flow-Noise PPO in `VLAEnv` writing a checkpoint that
    `robolearn eval` scores (it renders the same camera)."""
    data = {task: collect_demos(task, episodes=1, size=16) for task in ARM_INSTRUCTIONS}
    assert data["arm-push"].observations["pixels"].shape[1:] == (16, 16, 3)
    # pre-training points keypoints at 2 points (reach) or 3 (push, pick-place) of the tasks' frames, masked apart
    policy, _ = train_vla_bc(data, VLAConfig(hidden=(64, 64), width=16, steps=20, batch_size=32, pretrain_steps=2))
    assert policy.instruction == ARM_INSTRUCTIONS["arm-reach"]
    path = save_chunk_policy(tmp_path / "bc", policy, {"env": {"name": "arm-reach", "pixels": camera(16)}})
    config = json.loads((path / "config.json").read_text())
    assert config["type"] == "robolearn_vla" and config["chunk_size"] == 5
    assert config["input_features"]["observation.images.side"]["shape"] == [3, 16, 16]
    assert config["policy"]["instructions"] == list(ARM_INSTRUCTIONS.values())

    loaded = load_policy(path)
    assert loaded.kind == "vla"
    env = sim.make("arm-reach", num_envs=2, pixels=camera(16))
    obs = env.get_observations()
    with torch.no_grad():
        first = loaded(obs)
        expected = policy(policy.pack(obs["pixels"], obs["policy"]))[:, 0].clamp(-1, 1)
    torch.testing.assert_close(first, expected)
    with pytest.raises(ConfigError, match="renders"):
        VLAEnv(sim.make("arm-reach", num_envs=2, pixels=camera(24)), policy, ARM_INSTRUCTIONS["arm-reach"])

    train_env = VLAEnv(env, policy, ARM_INSTRUCTIONS["arm-reach"])
    assert train_env.observation_shapes["policy"] == (policy.obs_dim,) and "critic" in train_env.observation_shapes
    cfg = FlowRLConfig(mode="noise", iterations=2, rollout_chunks=2, critic_warmup=1, entropy_coef=0.005,
                       eval_every=100, critic_hidden=(32,), freeze_vision=True)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    _, history = finetune_flow(policy, train_env, cfg, run_dir=tmp_path / "rl")
    assert history[-1]["iteration"] == 2 and history[-1]["env_steps"] == 2 * 2 * 5 * 2
    # freeze_vision: the CNN and keypoints as BC left them, the action expert moved; all trainable again after
    assert torch.equal(policy.vision[0].weight, before["vision.0.weight"])
    assert not torch.equal(policy.mix[1].weight, before["mix.1.weight"])
    assert all(p.requires_grad for p in policy.parameters())
    with pytest.raises(ConfigError, match="freeze_vision"):  # its optimizer holds other parameters
        finetune_flow(policy, train_env, dataclasses.replace(cfg, freeze_vision=False, iterations=3),
                      run_dir=tmp_path / "rl", resume=True)
    final = tmp_path / "rl" / "checkpoints" / "final"
    assert load_policy(final).policy_config["kind"] == "vla"
    assert np.isfinite(evaluate(final, episodes=2))


def test_several_cameras_tile_side_by_side():
    """`camera: "front,side"` renders both views into one frame, each as the single-camera frame; an unknown
    camera is refused with the model's camera names."""
    tiled = sim.make("arm-push", num_envs=2, pixels=camera(16, "front,side"))
    assert tiled.observation_shapes["pixels"] == (16, 32, 3)
    frames = tiled.reset(seed=3)["pixels"]
    for i, view in enumerate(("front", "side")):
        single = sim.make("arm-push", num_envs=2, pixels=camera(16, view))
        assert torch.equal(frames[:, :, 16 * i:16 * (i + 1)], single.reset(seed=3)["pixels"])
        single.close()
    tiled.close()
    with pytest.raises(ValueError, match="no camera 'nope'.*front"):
        sim.make("arm-reach", num_envs=1, pixels=camera(16, "side,nope"))


def test_random_shift_translates_each_frame_within_the_bound():
    """Each frame is its own translate by at most `shift` pixels per axis (edges repeated); shift 0 is the frame."""
    frames = torch.randint(0, 256, (64, 12, 10, 3), dtype=torch.uint8)
    out = random_shift(frames, 2, torch.Generator().manual_seed(0))
    seen = set()
    for f, o in zip(frames, out, strict=True):
        matches = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if torch.equal(o[2:-2, 2:-2], f[2 + dy:10 + dy, 2 + dx:8 + dx])]
        assert matches
        seen.add(matches[0])
    assert len(seen) > 10  # the offsets vary across the batch
    assert torch.equal(random_shift(frames, 0, torch.Generator()), frames)


def test_vision_pretraining_regresses_the_privileged_state_from_frames():
    """Frames with one lit pixel; the privileged value past `state_dim` is that pixel's column: pre-training the
    encoder on it cuts the standardised regression loss well below its starting ~1; too little state is refused."""
    rng = np.random.default_rng(0)
    n = 512
    cols = rng.integers(0, 16, n)
    frames = torch.zeros(n, 16, 16, 3, dtype=torch.uint8)
    frames[torch.arange(n), 8, torch.as_tensor(cols)] = 255
    policy = VLAPolicy((16, 16, 3), state_dim=2, action_dim=2, chunk=2, max_tokens=8, width=16, hidden=(32,),
                       keypoints=8)
    privileged = [torch.as_tensor(cols, dtype=torch.float32)[:, None]]
    losses = pretrain_vision(policy, frames, privileged, VLAConfig(pretrain_steps=300, batch_size=64, pretrain_lr=3e-3))
    assert np.mean(losses[:10]) > 0.5 and np.mean(losses[-20:]) < 0.15
    with pytest.raises(ConfigError, match="privileged"):
        pretrain_vision(policy, frames, [torch.zeros(n, 0)], VLAConfig(pretrain_steps=1))


def test_keypoint_targets_centre_on_their_point_between_cells():
    points = torch.tensor([[0.13, -0.4], [-0.71, 0.55]])
    target = keypoint_targets(points, (9, 12)).view(2, 9, 12)
    xs, ys = torch.linspace(-1, 1, 12), torch.linspace(-1, 1, 9)
    centre = torch.stack([(target.sum(1) * xs).sum(-1), (target.sum(2) * ys).sum(-1)], -1)
    torch.testing.assert_close(centre, points, atol=2e-3, rtol=0)
    torch.testing.assert_close(target.sum((1, 2)), torch.ones(2))


@pytest.mark.parametrize("fine", [0, 1])
def test_keypoint_pretraining_points_a_map_at_its_pixel(fine: int):
    """Frames with one lit pixel at a random place: pre-training with that pixel as a keypoint target puts map 0's
    keypoint on it (within a pixel on average), which the regression alone does not in as many steps; with
    `fine_keypoints` the supervised map is the stem's (a cell per pixel here) and lands within half a pixel."""
    rng = np.random.default_rng(0)
    n = 512
    rows_, cols = rng.integers(1, 15, n), rng.integers(1, 15, n)
    frames = torch.zeros(n, 16, 16, 3, dtype=torch.uint8)
    frames[torch.arange(n), torch.as_tensor(rows_), torch.as_tensor(cols)] = 255
    pixels = torch.as_tensor(np.stack([cols + 0.5, rows_ + 0.5], -1), dtype=torch.float32)[:, None]  # [n, 1, 2]

    def error_px(policy: VLAPolicy) -> float:
        with torch.no_grad():
            maps = policy.keypoint_maps(frames.permute(0, 3, 1, 2).float() / 255.0)
            keys = policy.pointing(maps).view(n, 3, -1)[:, :2, 0]
            target = policy.pixel_to_keypoint(pixels[:, 0], maps.shape[-2:])
        cells = maps.shape[-1]
        return float(((keys - target) * 8 * (cells - 1) / cells).norm(dim=-1).mean())  # [-1, 1] in pixels

    errors = {}
    for weight in (0.0, 1.0):
        torch.manual_seed(0)
        policy = VLAPolicy((16, 16, 3), state_dim=2, action_dim=2, chunk=2, max_tokens=8, width=16, hidden=(32,),
                           keypoints=4, fine_keypoints=fine)
        privileged = [torch.as_tensor(np.stack([cols, rows_], -1), dtype=torch.float32)]
        cfg = VLAConfig(pretrain_steps=200, batch_size=64, pretrain_lr=3e-3, keypoint_weight=weight)
        pretrain_vision(policy, frames, privileged, cfg, [pixels])
        errors[weight] = error_px(policy)
    assert errors[1.0] < (0.5 if fine else 1.0), errors
    assert fine or errors[0.0] > 1.0, errors  # (the stem's map finds a lit pixel by regression alone: 0.43)
    with pytest.raises(ConfigError, match="keypoints"):
        pretrain_vision(policy, frames, privileged, VLAConfig(pretrain_steps=1), [torch.zeros(n, 5, 2)])


def test_point_pixels_land_on_the_rendered_goal():
    """The pinhole projection of arm-reach's goal (from the policy group) against the green ball's centroid in
    rendered front and side frames, tiled: within a pixel wherever the ball shows."""
    env = sim.make("arm-reach", num_envs=8, seed=3, nthread=1, pixels=camera(48, "front,side"))
    obs = env.reset(seed=1)
    env.close()
    pixels = point_pixels("arm-reach", "front,side", 48, obs["policy"].float())  # [8, 2 points * 2 views, 2]
    assert pixels.shape == (8, 4, 2)
    f = obs["pixels"].numpy().astype(int)
    green = (f[..., 1] > 1.5 * f[..., 0] + 20) & (f[..., 1] > 1.5 * f[..., 2] + 20)
    ys, xs = np.mgrid[0:48, 0:48]
    for view in range(2):  # ARM_POINTS order: the gripper (maps 0, 1), then the goal (2, 3), view-minor
        part = green[:, :, 48 * view:48 * (view + 1)]
        n = part.sum((1, 2))
        centroid = np.stack([(part * xs).sum((1, 2)), (part * ys).sum((1, 2))], -1) / np.maximum(n, 1)[:, None]
        centroid = centroid + 0.5 + np.array([48 * view, 0])
        error = np.linalg.norm(centroid - pixels[:, 2 + view].numpy(), axis=-1)[n > 0]
        assert len(error) >= 6 and np.median(error) < 1.0, error


def test_freeze_vision_keeps_the_encoder_during_bc_only():
    """freeze_vision: BC leaves the CNN's and keypoints' weights as they were and trains the rest (the projection
    of the keypoints included); afterwards they take gradients again (RL fine-tunes them)."""
    data = {"red": _toy_dataset(0, 1.0)}
    cfg = VLAConfig(chunk=2, hidden=(32,), width=16, state_dim=3, steps=20, batch_size=16, freeze_vision=True)
    torch.manual_seed(cfg.seed)
    fresh = VLAPolicy((16, 16, 3), 3, 2, 2, cfg.max_tokens, 16, (32,), cfg.num_steps, noise_head=True,
                      instructions=("follow the red light",), camera="side")
    policy, _ = train_vla_bc(data, cfg, instructions={"red": "follow the red light"})
    assert torch.equal(policy.vision[0].weight, fresh.vision[0].weight)
    assert not torch.equal(policy.mix[1].weight, fresh.mix[1].weight)
    assert not torch.equal(policy.vision_proj.weight, fresh.vision_proj.weight)  # reading the keypoints learns
    assert all(p.requires_grad for p in policy.parameters())


def test_pretrain_views_join_vision_pretraining_only():
    """`pretrain_views`: more frames (and their privileged state) for vision pre-training, never cloned; they change
    the pre-trained encoder, and frames of another size are refused."""
    data = {"red": _toy_dataset(0, 1.0)}
    words = {"red": "follow the red light"}
    cfg = VLAConfig(chunk=2, hidden=(32,), width=16, state_dim=2, steps=5, batch_size=16, pretrain_steps=20,
                    freeze_vision=True)
    plain, _ = train_vla_bc(data, cfg, instructions=words)
    views, _ = train_vla_bc(data, cfg, instructions=words, pretrain_views={"red": _toy_dataset(1, 1.0, episodes=8)})
    assert not torch.equal(plain.vision[0].weight, views.vision[0].weight)
    small = _toy_dataset(1, 1.0)
    small.observations["pixels"] = small.observations["pixels"][:, :8, :8]
    with pytest.raises(ConfigError, match="differ in size"):
        train_vla_bc(data, cfg, instructions=words, pretrain_views={"red": small})


def test_keypoint_loss_skips_points_outside_their_view():
    """A point outside its map's view (an object out of the camera's field) adds nothing to the keypoint loss."""
    torch.manual_seed(0)
    policy = VLAPolicy((16, 32, 3), state_dim=2, action_dim=2, chunk=2, max_tokens=8, width=16, hidden=(32,),
                       camera="front,side", fine_keypoints=2)
    maps = policy.keypoint_maps(torch.rand(3, 3, 16, 32))
    inside = torch.tensor([[[4.0, 5.0], [20.0, 9.0]]]).expand(3, 2, 2)
    outside = inside.clone()
    outside[:, 0, 0] = 17.0  # map 0 looks in view 0 (columns 0-15): x = 17 is in the side view
    expected = policy.keypoint_loss(maps, inside, torch.tensor([[0.0, 1.0]]).expand(3, 2))
    torch.testing.assert_close(policy.keypoint_loss(maps, outside), expected)
    assert policy.keypoint_loss(maps, inside) != expected
