"""Which LeRobot features a `Dataset` becomes when written: one `Feature` per observation group, the action, the
step outcomes and each info, keyed and typed as LeRobot names them (see the package docstring's mapping); and
the way back, the group and info names of the features read (`group_names`, `info_names`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robolearn.data.dataset import DEFAULT_GROUP, Dataset
from robolearn.data.formats.lerobot.layout import (
    ACTION,
    DEFAULT_FEATURES,
    DONE,
    IMAGES_PREFIX,
    INFO_PREFIX,
    OBS_PREFIX,
    REWARD,
    STATE,
    SUCCESS,
    TRUNCATED,
)
from robolearn.errors import DatasetError


@dataclass
class Feature:
    """One LeRobot feature written from the dataset."""

    key: str
    kind: str  # "array" (parquet numbers), "image" (PNG in the parquet) or "video" (mp4)
    values: np.ndarray  # [N, ...] per step, or [N+E, ...] for an observation group (``per_obs``)
    per_obs: bool
    dtype: str
    shape: tuple[int, ...]

    def episode(self, data: Dataset, ep: int) -> np.ndarray:
        """Episode ``ep``'s T frames (an observation group without its final observation)."""
        s, t = int(data.step_starts[ep]), int(data.step_starts[ep + 1])
        return self.values[s + ep : t + ep] if self.per_obs else self.values[s:t]

    def frames(self, data: Dataset) -> np.ndarray:
        """Every frame's value [N, ...] (observation groups without the final observations)."""
        return self.values[data.obs_index] if self.per_obs else np.asarray(self.values)

    def spec(self) -> dict[str, Any]:
        """The feature's entry in meta/info.json's ``features`` (a video's ``info`` is added by the writer)."""
        if self.kind == "array":
            return {"dtype": self.dtype, "shape": list(self.shape), "names": None}
        return {"dtype": self.kind, "shape": list(self.shape), "names": ["height", "width", "channels"],
                "info": {"is_depth_map": False}}


def _observation_features(dataset: Dataset, video: bool) -> tuple[list[Feature], dict[str, str]]:
    """One feature per observation group (uint8 [H, W, 1|3] groups as images or video), and group -> key."""
    features: list[Feature] = []
    groups: dict[str, str] = {}
    default = dataset.default_group
    for group, values in dataset.observations.items():
        image = values.dtype == np.uint8 and values.ndim == 4 and values.shape[-1] in (1, 3)
        if image:
            key = IMAGES_PREFIX + group
            kind = "video" if video and values.shape[-1] == 3 else "image"
            h, w = values.shape[1:3]
            if kind == "video" and (h % 2 or w % 2):
                raise DatasetError(f"{dataset.source}: observations[{group!r}] is {h}x{w}; yuv420p video needs an "
                                   "even height and width: crop or pad the images, or write(..., video=False) for "
                                   "PNG frames")
        else:
            key = STATE if group == default and values.ndim == 2 else OBS_PREFIX + group
            kind = "array"
        features.append(Feature(key, kind, values, True, values.dtype.name, tuple(values.shape[1:])))
        groups[group] = key
    return features, groups


def _step_features(dataset: Dataset) -> tuple[list[Feature], dict[str, str]]:
    """The action, next.reward / next.done / next.truncated and one feature per info, and info -> key."""
    features = [Feature(ACTION, "array", dataset.actions, False, "float32", tuple(dataset.actions.shape[1:])),
                Feature(REWARD, "array", dataset.rewards, False, "float32", (1,)),
                Feature(DONE, "array", dataset.terminations | dataset.truncations, False, "bool", (1,)),
                Feature(TRUNCATED, "array", dataset.truncations, False, "bool", (1,))]
    infos: dict[str, str] = {}
    for name, values in dataset.infos.items():
        if values.dtype.kind not in "biuf":
            raise DatasetError(f"{dataset.source}: infos[{name!r}] has dtype {values.dtype}; LeRobot columns hold "
                               "numbers and bools: encode it as numbers or drop it")
        key = SUCCESS if name == "success" and values.ndim == 1 else INFO_PREFIX + name
        features.append(Feature(key, "array", values, False, values.dtype.name, tuple(values.shape[1:]) or (1,)))
        infos[name] = key
    return features, infos


def plan_features(dataset: Dataset, video: bool) -> tuple[list[Feature], dict[str, str], dict[str, str]]:
    """The features to write, in LeRobot's order, with the group -> key and info -> key maps."""
    obs_feats, groups = _observation_features(dataset, video)
    step_feats, infos = _step_features(dataset)
    features = obs_feats + step_feats
    keys = [f.key for f in features]
    clash = sorted({k for k in keys if keys.count(k) > 1} | (set(keys) & set(DEFAULT_FEATURES)))
    if clash:
        raise DatasetError(f"{dataset.source}: observation groups / infos map to the same LeRobot feature {clash}; "
                           "rename them")
    slashed = [k for k in keys if "/" in k]
    if slashed:
        raise DatasetError(f"{dataset.source}: LeRobot feature names cannot contain '/' ({slashed}); rename those "
                           "groups/infos")
    return features, groups, infos


def group_names(obs_keys: Sequence[str], sidecar: Mapping[str, Any] | None) -> dict[str, str]:
    """LeRobot feature -> observation group: the sidecar's names, else observation.state -> "policy",
    observation.images.<cam> -> <cam>, observation.<name> -> <name>."""
    known = {v: k for k, v in (sidecar or {}).get("groups", {}).items()}
    names: dict[str, str] = {}
    for key in obs_keys:
        if key in known:
            name = known[key]
        elif key == STATE:
            name = DEFAULT_GROUP
        elif key.startswith(IMAGES_PREFIX):
            name = key[len(IMAGES_PREFIX) :]
        else:
            name = key[len(OBS_PREFIX) :]
        if name in names.values():
            name = key
        names[key] = name
    return names


def info_names(numeric: set[str], obs_keys: Sequence[str], sidecar: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(feature, info name) of every numeric per-frame feature that is not an observation, action, reward or end."""
    known = {v: k for k, v in (sidecar or {}).get("infos", {}).items()}
    used = {ACTION, REWARD, DONE, TRUNCATED, *DEFAULT_FEATURES, *obs_keys}
    out: list[tuple[str, str]] = []
    for key in sorted(numeric - used):
        if key in known:
            name = known[key]
        elif key == SUCCESS:
            name = "success"
        elif key.startswith(INFO_PREFIX):
            name = key[len(INFO_PREFIX) :]
        else:
            name = key
        if name in {n for _, n in out}:
            name = key
        out.append((key, name))
    return out
