"""The small VLA (`policies.vla.VLAPolicy`) end to end: pixels datasets of several arm tasks told apart only by
their instructions, behaviour cloning on all of them at once, and the env view under which flow RL (Flow-Noise
or Flow-SDE PPO, `robolearn.algos.chunk.flow_rl`) fine-tunes it.

    data = {task: collect_demos(task, episodes=50, size=32) for task in ARM_INSTRUCTIONS}
    policy, losses = train_vla_bc(data, VLAConfig(steps=5000))
    env = VLAEnv(sim.make("arm-reach", num_envs=64, pixels=camera(32)), policy, ARM_INSTRUCTIONS["arm-reach"])
    policy, history = finetune_flow(policy, env, FlowRLConfig(mode="noise", entropy_coef=0.005))

The policy sees a camera frame, its instruction and the arm's proprioception (`ARM_STATE_DIM`: joint angles,
opening, their velocities and the grasp point), never the cube's or the goal's coordinates: those are in the
frame. PPO's critic keeps the task's privileged "critic" group (an asymmetric actor-critic, as pi_RL's value head
on privileged state). Frames come from MuJoCo's renderer on the host, which is what limits the speed on a CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from policies.vla import VLAPolicy
from robolearn.algos.chunk.chunk_bc import ChunkBCConfig, action_chunks, fit_chunk_policy
from robolearn.errors import ConfigError

#: One instruction per arm task: the same camera, arm and cube, told apart by words only.
ARM_INSTRUCTIONS = {
    "arm-reach": "move the gripper to the green ball",
    "arm-push": "push the cube to the green ball",
    "arm-pick-place": "pick up the cube and place it at the green ball",
}
#: The arm's proprioception: the first 15 values of its "policy" group (sim/tasks/arm.py).
ARM_STATE_DIM = 15
#: The world points in an arm frame that vision pre-training points at: each one's first column of its (x, y, z) in
#: the task's "policy" group (sim/tasks/arm.py: the grasp point at 12, the goal at 15, the cube at 21).
ARM_POINTS = {"arm-reach": {"gripper": 12, "goal": 15},
              "arm-push": {"gripper": 12, "goal": 15, "cube": 21},
              "arm-pick-place": {"gripper": 12, "goal": 15, "cube": 21}}
CAMERA = "side"


def camera(size: int, name: str = CAMERA) -> dict[str, Any]:
    """The `pixels=` setting of `sim.make` for square frames of `size` from the arm's camera `name` (several names
    joined by commas: their views side by side, [size, n * size, 3])."""
    return {"camera": name, "width": size, "height": size}


@dataclasses.dataclass
class VLAConfig(ChunkBCConfig):
    """The VLA's shape and its behaviour cloning (the optimiser fields are ChunkBCConfig's)."""

    chunk: int = 5                   # arm episodes (100, 150, 200 steps) are whole numbers of chunks
    num_steps: int = 4
    noise_head: bool = True          # Flow-Noise fine-tuning's learned std (trained by RL, not by BC)
    width: int = 64                  # prefix features per modality
    max_tokens: int = 48
    state_dim: int = ARM_STATE_DIM  # 21: + the goal and goal - grasp (privileged; a diagnostic of the vision)
    camera: str = CAMERA             # the demos' camera(s): "front,side" tiles two views
    shift: int = 0                   # random-shift augmentation of BC frames, in pixels (0: none)
    stem_stride: int = 1             # the CNN's first stride: 2 halves its maps (64x64 frames at 32x32's cost)
    fine_keypoints: int = 0          # keypoint maps on the stem's maps, which keypoint supervision then trains
    pretrain_steps: int = 0          # vision pre-training on the sim's privileged state before BC (0: none)
    keypoint_weight: float = 1.0     # pre-training also points keypoint maps at the task's ARM_POINTS (0: off)
    pretrain_lr: float = 1e-3        # pre-training's Adam step (BC's is `lr`)
    freeze_vision: bool = False      # keep the (pre-trained) CNN and keypoints fixed during BC; RL trains them again


class PackedRows:
    """Training rows packed on demand: `rows[i]` -> [len(i), obs_dim] (frames stay uint8 until a batch is drawn).

    `shift` > 0: each drawn frame moves by a random whole-pixel offset in [-shift, shift] on both axes, its edge
    pixels repeated into the gap (DrQ's random shift; robomimic's crop randomisation): the same scene at slightly
    different image positions, so the encoder cannot key on where a few demos happened to put things."""

    def __init__(self, policy: VLAPolicy, frames: torch.Tensor, states: torch.Tensor, tokens: torch.Tensor,
                 shift: int = 0, seed: int = 0):
        self.policy, self.frames, self.states, self.tokens = policy, frames, states, tokens
        self.shift = shift
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        frames = self.frames[idx]
        if self.shift:
            frames = random_shift(frames, self.shift, self.generator)
        return self.policy.pack(frames, self.states[idx], self.tokens[idx])


def point_pixels(task: str, camera: str, size: int, policy_obs: torch.Tensor) -> torch.Tensor:
    """Where the task's `ARM_POINTS` (read from "policy" rows [N, D]) appear in its `camera` frames of `size`
    pixels per view: [N, P * V, 2] pixel positions in the tiled frame (x right, y down, view v's x shifted by
    v * size; point-major: point p in view v at p * V + v), from the cameras' pinhole projection."""
    import sim
    from sim.rendering import project_views

    if task not in ARM_POINTS:
        raise ConfigError(f"no keypoints known for task {task!r}; known: {sorted(ARM_POINTS)}")
    columns = list(ARM_POINTS[task].values())
    xyz = torch.stack([policy_obs[:, c:c + 3] for c in columns], 1).double().numpy()  # [N, P, 3]
    pixels = torch.as_tensor(project_views(sim.make_task(task), camera, xyz, size, size), dtype=torch.float32)
    views = pixels.shape[2]
    pixels[..., 0] += torch.arange(views, dtype=torch.float32) * size  # [N, P, V, 2]: views tiled left to right
    return pixels.flatten(1, 2)


def random_shift(frames: torch.Tensor, shift: int, generator: torch.Generator) -> torch.Tensor:
    """[B, H, W, C] frames, each moved by its own offset in [-shift, shift]^2 (edges replicated)."""
    b, h, w, _ = frames.shape
    offsets = torch.randint(0, 2 * shift + 1, (2, b), generator=generator)
    rows = (torch.arange(h)[None] + offsets[0][:, None] - shift).clamp(0, h - 1)  # [B, H] source row of each row
    cols = (torch.arange(w)[None] + offsets[1][:, None] - shift).clamp(0, w - 1)
    batch = torch.arange(b)[:, None, None]
    return frames[batch, rows[:, :, None], cols[:, None, :]]


def collect_views(task: str, episodes: int, size: int, seed: int = 0, camera: str = CAMERA, length: int = 0,
                  num_envs: int = 100) -> Any:
    """`episodes` episodes of uniform random actions with camera frames (`length` > 0: that many steps each, so
    more scenes per rendered frame): the gripper away from the goal, which scripted demos seldom show; frames for
    vision pre-training (`train_vla_bc(pretrain_views=...)`), not for cloning."""
    from robolearn.collect.generate import CollectConfig, PixelsConfig, collect
    from robolearn.config import EnvConfig

    pixels = PixelsConfig(enabled=True, camera=camera, width=size, height=size)
    env = EnvConfig(name=task, num_envs=min(episodes, num_envs), overrides={"episode_length": length} if length else {})
    return collect(CollectConfig(env=env, kind="random", episodes=episodes, seed=seed, progress=False,
                                 ref_min_score=0.0, ref_max_score=1.0, pixels=pixels))


def collect_demos(task: str, episodes: int, size: int, seed: int = 0, num_envs: int = 25, noise: float = 0.0,
                  camera: str = CAMERA) -> Any:
    """`episodes` episodes of the task's scripted reference controller with camera frames of `size` pixels (per
    view: `camera` "front,side" tiles two)."""
    from robolearn.collect.generate import CollectConfig, PixelsConfig, collect
    from robolearn.config import EnvConfig

    pixels = PixelsConfig(enabled=True, camera=camera, width=size, height=size)
    return collect(CollectConfig(env=EnvConfig(name=task, num_envs=min(episodes, num_envs)), kind="expert",
                                 policy="reference", noise=noise, episodes=episodes, seed=seed, progress=False,
                                 ref_min_score=0.0, ref_max_score=1.0, pixels=pixels))


def train_vla_bc(datasets: Mapping[str, Any], cfg: VLAConfig | None = None,
                 instructions: Mapping[str, str] | None = None,
                 pretrain_views: Mapping[str, Any] | None = None) -> tuple[VLAPolicy, list[float]]:
    """A VLA cloned from several datasets at once, each under its instruction (`instructions[name]`, default
    `ARM_INSTRUCTIONS`); every dataset needs a "pixels" group of one frame size and a "policy" group.

    `pretrain_views` (task name -> a dataset with the same groups, e.g. `collect_views`' random-action episodes):
    more frames for vision pre-training only (`cfg.pretrain_steps`), where the demos' frames mostly show the
    gripper at its goal. Their actions are never cloned."""
    cfg = cfg if cfg is not None else VLAConfig()
    instructions = ARM_INSTRUCTIONS if instructions is None else instructions
    if not datasets:
        raise ConfigError("train_vla_bc needs at least one dataset")
    frames, states, chunks, texts, privileged, points = [], [], [], [], [], []
    for name, data in datasets.items():
        if name not in instructions:
            raise ConfigError(f"no instruction for dataset {name!r}: pass instructions={{{name!r}: '...'}}")
        frame, policy_obs, point = _frames_and_labels(name, data, cfg)
        frames.append(frame)
        states.append(policy_obs[:, :cfg.state_dim])
        privileged.append(policy_obs[:, cfg.state_dim:])  # what the frame must tell: goal, cube, ...
        points.append(point)
        chunks.append(action_chunks(data.actions, data.step_starts, cfg.chunk))
        texts += [instructions[name]] * len(frame)
    views = [_frames_and_labels(name, data, cfg) for name, data in (pretrain_views or {}).items()]
    shapes = {tuple(f.shape[1:]) for f in frames + [v[0] for v in views]}
    if len(shapes) != 1:
        raise ConfigError(f"the datasets' frames differ in size: {sorted(shapes)}")
    torch.manual_seed(cfg.seed)
    names = list(datasets)
    policy = VLAPolicy(shapes.pop(), cfg.state_dim, chunks[0].shape[2], cfg.chunk, cfg.max_tokens, cfg.width,
                       tuple(cfg.hidden), cfg.num_steps, noise_head=cfg.noise_head,
                       instructions=tuple(instructions[n] for n in names), camera=cfg.camera,
                       stem_stride=cfg.stem_stride, fine_keypoints=cfg.fine_keypoints)
    unique = sorted(set(texts))
    token_of = dict(zip(unique, policy.tokenizer.encode(unique), strict=True))
    rows = PackedRows(policy, torch.cat(frames), torch.cat(states), torch.stack([token_of[t] for t in texts]),
                      cfg.shift, cfg.seed)
    policy.obs_norm.update(rows.states)  # the state's statistics; frames scale by 1/255, tokens are ids
    if cfg.pretrain_steps:
        pretrain_vision(policy, torch.cat([rows.frames] + [v[0] for v in views]),
                        privileged + [v[1][:, cfg.state_dim:] for v in views], cfg, points + [v[2] for v in views])
    encoder = policy.keypoint_parameters()  # frozen or not, the projection of the keypoints learns
    for p in encoder:
        p.requires_grad_(not cfg.freeze_vision)
    losses = fit_chunk_policy(policy, rows, torch.cat(chunks), cfg)
    for p in encoder:
        p.requires_grad_(True)
    return policy, losses


def _frames_and_labels(name: str, data: Any, cfg: VLAConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A pixels dataset's per-step frames [N, H, W, 3] (uint8), "policy" rows [N, D] and, when pre-training points
    keypoints, the task's points in the frames ([N, K, 2]; K = 0 otherwise)."""
    missing = {"pixels", "policy"} - set(data.observations)
    if missing:
        raise ConfigError(f"dataset {name!r} lacks observation groups {sorted(missing)} (collect it with pixels)")
    index = np.asarray(data.obs_index)  # each step's observation (an episode stores T + 1)
    frames = torch.as_tensor(np.asarray(data.observations["pixels"])[index])
    policy_obs = torch.as_tensor(np.asarray(data.observations["policy"])[index], dtype=torch.float32)
    if cfg.pretrain_steps and cfg.keypoint_weight > 0 and name in ARM_POINTS:  # where they are in the frame
        points = point_pixels(name, cfg.camera, frames.shape[1], policy_obs)
    else:
        points = torch.zeros(len(index), 0, 2)
    return frames, policy_obs, points


def stack_padded(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of several datasets [n_i, k_i, ...] stacked into [sum n_i, max k_i, ...], zero-padded, and the mask
    [sum n_i, max k_i] of the real entries."""
    width = max(p.shape[1] for p in parts)
    out = torch.zeros(sum(len(p) for p in parts), width, *parts[0].shape[2:])
    mask = torch.zeros(len(out), width)
    start = 0
    for p in parts:
        out[start:start + len(p), :p.shape[1]] = p
        mask[start:start + len(p), :p.shape[1]] = 1.0
        start += len(p)
    return out, mask


def pretrain_vision(policy: VLAPolicy, frames: torch.Tensor, privileged: list[torch.Tensor], cfg: VLAConfig,
                    points: list[torch.Tensor] | None = None) -> list[float]:
    """Pre-train the vision encoder (CNN, keypoints, projection) to regress, from the frame alone (`frames` [N, H, W,
    3] uint8, the datasets' rows one after another), the privileged state the policy does not get (each dataset's
    "policy" values past `state_dim`: goal, cube, their offsets), standardised, through a linear head that is then
    dropped; returns the losses.

    `points` (per dataset [n, K, 2], `point_pixels`; K may be 0): the first K keypoint maps also learn to point at
    those pixels, by cross-entropy of each map's spatial softmax against a Gaussian around its point
    (`VLAPolicy.keypoint_loss`), `keypoint_weight` times the regression beside it. That is the dense signal a
    pretrained detector has had (PaliGemma, pi0's VLM, was trained on pointing and detection): through the
    regression alone a keypoint learns where the ball is only via the head, and on arm-reach stays 7-10 cm off;
    with the keypoints it places held-out goals within about 4 cm after 1,500 steps (README). Frames are drawn
    unshifted then, so the targets stay where the points are.

    The stand-in for a VLA's pretrained vision backbone: behaviour cloning alone teaches a small CNN to find a goal
    a few pixels wide too slowly (arm-reach: 2-8 % success from pixels after 2,000-3,000 BC steps, 100 % when given
    the goal's coordinates; `benchmarks/studies/vla_vision_probe.py`). Datasets with fewer privileged values or points
    are zero-padded and masked."""
    if max(p.shape[1] for p in privileged) == 0:
        raise ConfigError("vision pre-training needs privileged state past state_dim in the datasets' policy group")
    target, mask = stack_padded(privileged)
    count = mask.sum(0).clamp(min=1.0)
    mean = (target * mask).sum(0) / count
    std = ((((target - mean) * mask) ** 2).sum(0) / count).sqrt().clamp(min=1e-3)
    target = (target - mean) / std * mask
    if len(target) != len(frames):
        raise ConfigError(f"{len(frames)} frames but {len(target)} rows of privileged state")
    pixels, pixel_mask = stack_padded(points) if points else (torch.zeros(len(frames), 0, 2),
                                                              torch.zeros(len(frames), 0))
    keypoints = pixels.shape[1]
    available = policy.fine_keypoints or policy.config["keypoints"]
    if keypoints > available:
        raise ConfigError(f"{keypoints} points to learn, but the policy has {available} pointing keypoints")
    head = torch.nn.Linear(policy.vision_proj.out_features, target.shape[1])
    opt = torch.optim.Adam([*policy.vision_parameters(), *head.parameters()], lr=cfg.pretrain_lr)
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in range(cfg.pretrain_steps):
        i = torch.randint(0, len(frames), (cfg.batch_size,), generator=generator)
        batch = frames[i]
        if cfg.shift and not keypoints:  # shifted as BC draws them; with keypoints unshifted, the targets stay put
            batch = random_shift(batch, cfg.shift, generator)
        maps, features = policy.encode(batch.permute(0, 3, 1, 2).float() / 255.0)
        loss = (((head(torch.nn.functional.silu(features)) - target[i]) * mask[i]) ** 2).sum() / mask[i].sum()
        if keypoints:
            loss = loss + cfg.keypoint_weight * policy.keypoint_loss(maps, pixels[i], pixel_mask[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class VLAEnv:
    """A pixels VecEnv as a VLA sees it: every observation's "policy" group becomes the packed row (frame,
    instruction tokens, state) and "pixels" is dropped; "critic" stays. The rsl_rl VecEnv surface that
    `robolearn.core.chunks` and `robolearn.algos.chunk.flow_rl` use (reset with groups, step, final_obs) passes
    through."""

    def __init__(self, env: Any, policy: VLAPolicy, instruction: str):
        if "pixels" not in env.observation_shapes:
            raise ConfigError("a VLA env needs camera frames: "
                              "sim.make(..., pixels=robolearn.algos.chunk.vla.camera(size))")
        if tuple(env.observation_shapes["pixels"]) != policy.image_shape:
            raise ConfigError(f"the env renders {tuple(env.observation_shapes['pixels'])} frames, the policy "
                              f"takes {policy.image_shape}")
        self.env, self.policy = env, policy
        self.tokens = policy.tokenizer.encode(instruction)
        self.num_envs, self.num_actions = env.num_envs, env.num_actions
        self.max_episode_length, self.device, self.task = env.max_episode_length, env.device, env.task
        self.observation_shapes = {k: v for k, v in env.observation_shapes.items() if k != "pixels"}
        self.observation_shapes["policy"] = (policy.obs_dim,)
        h, w, _ = policy.image_shape
        views = len(str(policy.config["camera"]).split(","))  # tiled views, each w / views wide
        self.pixels = {"camera": policy.config["camera"], "width": w // views, "height": h}  # what a run records

    def _view(self, obs: Any) -> TensorDict:
        groups = {k: v for k, v in obs.items() if k != "pixels"}
        groups["policy"] = self.policy.pack(obs["pixels"], obs["policy"], self.tokens)
        return TensorDict(groups, batch_size=[self.num_envs])

    def reset(self, seed: int | None = None, group_size: int = 1) -> TensorDict:
        return self._view(self.env.reset(seed=seed, group_size=group_size))

    def get_observations(self) -> TensorDict:
        return self._view(self.env.get_observations())

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs, rewards, dones, extras = self.env.step(actions)
        extras = {**extras, "final_obs": self._view(extras["final_obs"])}
        return self._view(obs), rewards, dones, extras

    def close(self) -> None:
        self.env.close()
