"""A small vision-language-action policy: pi0's layout in miniature, trainable on a CPU.

A prefix encodes what the robot sees and is told, and a flow-matching action expert (`policies.flow.FlowPolicy`,
with all its samplers, so Flow-SDE / Flow-Noise PPO fine-tune it unchanged) denoises action chunks conditioned on
that prefix:

- vision: a camera frame (uint8 RGB [H, W, 3]) through a small CNN whose last feature maps become keypoints by a
  spatial softmax (each map's expected image coordinates, Levine et al. 2016; robomimic's visuomotor default), to
  `width` features: a goal marker a few pixels wide is a position, which a flattened feature map localises poorly.
  `fine_keypoints` adds pointing maps on the stem's features (1-2 pixels a cell, each looking in one view of
  tiled cameras, read near their peak): trained to point at the task's objects (`keypoint_loss`), they place
  them within a pixel after a few hundred steps, where the deep maps (2-4 pixels a cell) stay 3-5 pixels off;
- language: the instruction, tokenised by characters (`CharTokenizer`), through a one-layer transformer encoder
  with learned positions, mean-pooled over its real tokens (padding masked) to `width` features;
- state: the robot's proprioception (`state_dim` values, normalised by its dataset statistics) to `width` features.

The three are concatenated and mixed by one layer into the condition of the velocity field. Every sampler and
trainer in robolearn passes observations as one flat tensor, so a VLA observation is packed into one row:
``[frame (H * W * 3 values, 0-255), tokens (max_tokens ids), state (state_dim)]`` (`pack`); frames stay uint8
until a batch is packed. The checkpoint layout is LeRobot's: `config.json` (with LeRobot's `input_features` /
`output_features`, `chunk_size`, `n_action_steps`) and `model.safetensors`.
"""

from __future__ import annotations

import math
import string

import torch
from torch import nn

from policies.flow import FlowPolicy
from policies.normalizer import RunningNorm

#: The characters an instruction may use; id 0 pads, id 1 stands for any other character.
VOCAB = string.ascii_lowercase + string.digits + " ,.-'"


class CharTokenizer:
    """Lower-cased characters to ids 2..; 0 pads to `max_tokens`, 1 is any character outside `VOCAB`."""

    def __init__(self, max_tokens: int = 48):
        self.max_tokens = max_tokens
        self.vocab_size = len(VOCAB) + 2
        self._ids = {c: i + 2 for i, c in enumerate(VOCAB)}

    def encode(self, texts: str | list[str]) -> torch.Tensor:
        """[B, max_tokens] token ids of each text (one text: [1, max_tokens]); longer texts are an error."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = torch.zeros(len(texts), self.max_tokens, dtype=torch.long)
        for row, text in enumerate(texts):
            ids = [self._ids.get(c, 1) for c in text.lower().strip()]
            if not ids or len(ids) > self.max_tokens:
                raise ValueError(f"an instruction needs 1 to {self.max_tokens} characters, got {len(ids)}: {text!r}")
            out[row, :len(ids)] = torch.tensor(ids)
        return out


class SpatialSoftmax(nn.Module):
    """[B, K, H, W] feature maps -> [B, 3K]: each map's keypoint, the expected (x, y) in [-1, 1] under its softmax
    over pixels, and its mean activation (how strongly the feature is present, which a keypoint alone drops).

    The softmax divides each map by a learned temperature (one per map, 1 at first; Levine et al. 2016 learn it,
    robomimic too): a keypoint is only as precise as its softmax is peaked, and sharpening through the conv
    weights alone takes many small Adam steps, where one parameter per map can do it at once."""

    def __init__(self, keypoints: int = 1, temperature: float = 1.0, window: int = 0, views: int = 1):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.full((keypoints,), math.log(temperature)))
        self.window, self.views = window, views

    def map_views(self, k: int, device: torch.device | None = None) -> torch.Tensor:
        """[k]: the view each of the first k maps looks in (frames tiled side by side: map k in view k mod views)."""
        return torch.arange(k, device=device) % self.views

    def outside(self, maps: torch.Tensor) -> torch.Tensor | None:
        """[1, K, 1, W] True where a column is not in its map's view (`map_views`); None for one view."""
        if self.views == 1:
            return None
        k, w = maps.shape[1], maps.shape[-1]
        column_view = torch.arange(w, device=maps.device) * self.views // w
        return column_view.view(1, 1, 1, w) != self.map_views(k, maps.device).view(1, k, 1, 1)

    def log_weights(self, maps: torch.Tensor, outside: torch.Tensor | None = None) -> torch.Tensor:
        """[B, K, H * W]: each map's log-softmax over its pixels (after the temperature; outside its view about
        -1e4; `outside`: `self.outside(maps)` when the caller has it); K may be fewer than the module's keypoints
        (the first K)."""
        k = maps.shape[1]
        logits = maps * torch.exp(-self.log_temperature[:k]).view(1, k, 1, 1)
        outside = self.outside(maps) if outside is None else outside
        if outside is not None:
            logits = logits.masked_fill(outside, -1e4)
        return torch.log_softmax(logits.flatten(2), -1)

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        b, k, h, w = maps.shape
        outside = self.outside(maps)
        weights = self.log_weights(maps, outside).exp().view(b, k, h, w)
        ys, xs = grid(h, maps), grid(w, maps)
        if self.window:  # the expectation within `window` cells of the peak: mass spread over a big map pulls
            peak = weights.flatten(2).argmax(-1)  # the plain expectation toward the centre
            near_y = ((torch.arange(h, device=maps.device) - (peak // w).unsqueeze(-1)).abs() <= self.window)
            near_x = ((torch.arange(w, device=maps.device) - (peak % w).unsqueeze(-1)).abs() <= self.window)
            weights = weights * (near_y.unsqueeze(-1) & near_x.unsqueeze(-2))
            weights = weights / weights.sum((2, 3), keepdim=True).clamp(min=1e-12)
        if outside is None:
            mean = maps.mean((2, 3))
        else:  # over the map's own view
            mean = maps.masked_fill(outside, 0.0).sum((2, 3)) * self.views / (h * w)
        return torch.cat([(weights.sum(2) * xs).sum(-1), (weights.sum(3) * ys).sum(-1), mean], -1)


def grid(n: int, like: torch.Tensor) -> torch.Tensor:
    """The keypoint coordinates of n cells along one axis: -1 at the first cell's centre, +1 at the last's."""
    return torch.linspace(-1.0, 1.0, n, device=like.device, dtype=like.dtype)


def keypoint_targets(points: torch.Tensor, shape: tuple[int, int], sigma: float = 0.75) -> torch.Tensor:
    """Target distributions [..., h * w] over an h x w map for points [..., 2] given as (x, y) in the spatial
    softmax's coordinates ([-1, 1] across the map; `VLAPolicy.pixel_to_keypoint`): a Gaussian of `sigma` cells
    around each, normalised, so its expected position is the point itself (sub-cell precise away from the edges)."""
    h, w = shape
    cell_x, cell_y = 2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)
    gx = torch.exp(-0.5 * ((grid(w, points) - points[..., :1]) / (sigma * cell_x)) ** 2)  # [..., w]
    gy = torch.exp(-0.5 * ((grid(h, points) - points[..., 1:]) / (sigma * cell_y)) ** 2)  # [..., h]
    target = (gy.unsqueeze(-1) * gx.unsqueeze(-2)).flatten(-2)
    return target / target.sum(-1, keepdim=True).clamp(min=1e-12)


class VLAPolicy(FlowPolicy):
    """Camera frame + instruction + state -> action chunks by flow matching; see the module docstring."""

    def __init__(self, image_shape: tuple[int, int, int], state_dim: int, action_dim: int, chunk: int = 5,
                 max_tokens: int = 48, width: int = 64, hidden: tuple[int, ...] = (256, 256), num_steps: int = 4,
                 noise_level: float = 0.5, noise_std: tuple[float, float] = (0.08, 0.16), noise_head: bool = False,
                 instructions: tuple[str, ...] = (), camera: str | None = None, keypoints: int = 32,
                 stem_stride: int = 1, fine_keypoints: int = 0):
        h, w, c = image_shape
        if c != 3 or min(h, w) < 16:
            raise ValueError(f"image_shape must be (H, W, 3) with H, W >= 16, got {tuple(image_shape)}")
        self.image_shape, self.state_dim, self.max_tokens = (h, w, c), state_dim, max_tokens
        obs_dim = h * w * c + max_tokens + state_dim
        super().__init__(obs_dim, action_dim, chunk, hidden, num_steps, noise_level, noise_std, noise_head,
                         cond_dim=width)
        self.tokenizer = CharTokenizer(max_tokens)
        self.config = {"image_shape": [h, w, c], "state_dim": state_dim, "action_dim": action_dim, "chunk": chunk,
                       "max_tokens": max_tokens, "width": width, "hidden": list(hidden), "num_steps": num_steps,
                       "noise_level": noise_level, "noise_std": list(noise_std), "noise_head": noise_head,
                       "instructions": list(instructions), "camera": camera, "keypoints": keypoints,
                       "stem_stride": stem_stride, "fine_keypoints": fine_keypoints}
        self.instruction = instructions[0] if instructions else None  # what `pack` says when no tokens are given
        self.vision = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=stem_stride, padding=1), nn.SiLU(),  # 2: 64x64 frames at 32x32's cost
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.SiLU(),
            nn.Conv2d(32, keypoints, 1), SpatialSoftmax(keypoints))
        self.fine_keypoints = fine_keypoints
        if fine_keypoints:  # keypoints on the stem's maps: 1 or 2 pixels a cell, where the deep maps have 2-4
            views = len(camera.split(",")) if camera else 1  # fine map k looks in view k mod views
            self.pointer = nn.Sequential(nn.Conv2d(32, 32, 1), nn.SiLU(), nn.Conv2d(32, fine_keypoints, 1))
            self.pointer_softmax = SpatialSoftmax(fine_keypoints, temperature=0.5, window=2, views=views)
        self.vision_proj = nn.Linear(3 * (keypoints + fine_keypoints), width)
        self.token_emb = nn.Embedding(self.tokenizer.vocab_size, width, padding_idx=0)
        self.pos_emb = nn.Parameter(torch.randn(max_tokens, width) * 0.02)
        self.text = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=2 * width, dropout=0.0,
                                               batch_first=True)
        self.obs_norm = RunningNorm(state_dim)  # the state's statistics only (frames: /255; tokens: ids)
        self.state_proj = nn.Linear(state_dim, width)
        self.mix = nn.Sequential(nn.SiLU(), nn.Linear(3 * width, width), nn.SiLU())

    # --- packing: one flat row per observation, as every sampler and trainer passes them ---------------
    def pack(self, frames: torch.Tensor, state: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """[B, obs_dim] from frames [B, H, W, 3] (uint8), state [B, >= state_dim] (its first `state_dim` values)
        and tokens [B or 1, max_tokens] (None: `self.instruction`'s)."""
        if tokens is None:
            if self.instruction is None:
                raise ValueError("no instruction: pass tokens, or set policy.instruction")
            tokens = self.tokenizer.encode(self.instruction)
        if tuple(frames.shape[1:]) != self.image_shape:
            raise ValueError(f"frames must be [B, {', '.join(map(str, self.image_shape))}], got {tuple(frames.shape)}")
        b = frames.shape[0]
        return torch.cat([frames.reshape(b, -1).float(), tokens.to(frames.device).float().expand(b, -1),
                          state[:, :self.state_dim].float()], -1)

    def unpack(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(frames [B, 3, H, W] in [0, 1], tokens [B, max_tokens] long, state [B, state_dim]) of packed rows."""
        h, w, c = self.image_shape
        n = h * w * c
        frames = obs[:, :n].reshape(-1, h, w, c).permute(0, 3, 1, 2) / 255.0
        tokens = obs[:, n:n + self.max_tokens].round().long()
        return frames, tokens, obs[:, n + self.max_tokens:]

    # --- the prefix --------------------------------------------------------------------------------
    def encode(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the pointing maps [B, K, h, w] before their spatial softmax, the vision features [B, width]) of frames
        [B, 3, H, W] in [0, 1] (`unpack`'s). The pointing maps are those keypoint supervision trains
        (`keypoint_loss`): the fine ones on the stem's maps when the policy has them, else the deep ones."""
        stem = self.vision[:2](frames)
        deep = self.vision[2:-1](stem)
        keys = [self.vision[-1](deep)]
        maps = deep
        if self.fine_keypoints:
            maps = self.pointer(stem)
            keys.append(self.pointer_softmax(maps))
        return maps, self.vision_proj(torch.cat(keys, -1))

    def see(self, frames: torch.Tensor) -> torch.Tensor:
        """The vision features [B, width] of frames [B, 3, H, W] in [0, 1] (`unpack`'s)."""
        return self.encode(frames)[1]

    def keypoint_maps(self, frames: torch.Tensor) -> torch.Tensor:
        """[B, K, h, w]: the pointing maps (`encode`) before their spatial softmax."""
        return self.encode(frames)[0]

    @property
    def pointing(self) -> SpatialSoftmax:
        """The spatial softmax over the pointing maps (`encode`)."""
        return self.pointer_softmax if self.fine_keypoints else self.vision[-1]

    def keypoint_parameters(self) -> list[nn.Parameter]:
        """The parameters from the frame to the keypoints (CNN, pointing maps, softmax temperatures)."""
        fine = [*self.pointer.parameters(), *self.pointer_softmax.parameters()] if self.fine_keypoints else []
        return [*self.vision.parameters(), *fine]

    def vision_parameters(self) -> list[nn.Parameter]:
        """Every parameter from the frame to the vision features (the keypoints' and the projection's)."""
        return [*self.keypoint_parameters(), *self.vision_proj.parameters()]

    def pixel_to_keypoint(self, pixels: torch.Tensor, map_shape: tuple[int, int]) -> torch.Tensor:
        """Image positions [..., 2] (x right, y down, in pixels of the whole frame, a pixel's centre at +0.5) in the
        spatial softmax's coordinates for maps of `map_shape` (h, w): -1 / +1 at the first / last cell's centre, a
        cell covering H / h x W / w pixels."""
        h_img, w_img, _ = self.image_shape
        out = []
        for value, size, cells in ((pixels[..., 0], w_img, map_shape[1]), (pixels[..., 1], h_img, map_shape[0])):
            cell = value / (size / cells) - 0.5  # in cell units, 0 at the first cell's centre
            out.append(cell * 2.0 / max(cells - 1, 1) - 1.0)
        return torch.stack(out, -1)

    def keypoint_loss(self, maps: torch.Tensor, pixels: torch.Tensor, mask: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """Cross-entropy of the first K keypoint maps' spatial softmax (`maps` [B, >= K, h, w], `keypoint_maps`)
        against a Gaussian around each map's pixel (`pixels` [B, K, 2], `pixel_to_keypoint`'s units;
        `keypoint_targets`), averaged over the entries `mask` [B, K] keeps (default: all) whose point lies inside
        its map's view (an arm or cube out of the camera's field has nothing to point at)."""
        shape = tuple(maps.shape[-2:])
        target = keypoint_targets(self.pixel_to_keypoint(pixels, shape), shape)
        cross_entropy = -(target * self.pointing.log_weights(maps[:, :pixels.shape[1]])).sum(-1)
        h, w, _ = self.image_shape
        view_width = w // self.pointing.views
        left = self.pointing.map_views(pixels.shape[1], pixels.device) * view_width
        inside = ((pixels[..., 0] >= left) & (pixels[..., 0] < left + view_width)
                  & (pixels[..., 1] >= 0) & (pixels[..., 1] < h)).float()
        mask = inside if mask is None else mask * inside
        return (cross_entropy * mask).sum() / mask.sum().clamp(min=1.0)

    def condition(self, obs: torch.Tensor) -> torch.Tensor:
        """The prefix features [B, width] of packed observations."""
        frames, tokens, state = self.unpack(obs)
        vision = self.see(frames)
        pad = tokens == 0
        text = self.text(self.token_emb(tokens) + self.pos_emb, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        text = (text * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.mix(torch.cat([vision, text, self.state_proj(self.obs_norm(state))], -1))

    def fit_normalizer(self, obs: torch.Tensor) -> None:
        """Fit the state statistics on packed training rows (frames and tokens are not normalised)."""
        self.obs_norm.update(obs[:, -self.state_dim:])

    def lerobot_features(self) -> dict[str, dict]:
        """LeRobot's `input_features` / `output_features` for config.json (images channel-first, as LeRobot)."""
        h, w, c = self.image_shape
        camera = (self.config["camera"] or "camera").replace(",", "_")  # tiled views: one image key
        return {"input_features": {f"observation.images.{camera}": {"type": "VISUAL", "shape": [c, h, w]},
                                   "observation.state": {"type": "STATE", "shape": [self.state_dim]}},
                "output_features": {"action": {"type": "ACTION", "shape": [self.action_dim]}},
                "chunk_size": self.chunk, "n_action_steps": self.chunk, "num_inference_steps": self.num_steps,
                "tokenizer_max_length": self.max_tokens}
