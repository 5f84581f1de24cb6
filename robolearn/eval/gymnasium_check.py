"""A policy's episodes in a Gymnasium env, the cross-check of our batched sim (`robolearn eval backend=gymnasium`).

The env is ``gymnasium.make`` of a spec (`robolearn.data.standard.make_gymnasium`: the dataset's recorded env, or
the one a task equals), one per episode, episode i reset with seed ``seed + i``. The policy sees what it saw in
training: the observation flattened as ``gymnasium.spaces.flatten`` lays it out (a Dict's keys sorted), float32, as
group "policy"; all envs act in one batched call. Its actions in [-1, 1] are mapped onto the env's action box (the
identity for the standard envs, whose box is [-1, 1]). Each episode counts until it terminates or is truncated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

Act = Callable[[Any], torch.Tensor]


@torch.no_grad()
def gymnasium_returns(spec: Mapping[str, Any], act: Act, episodes: int, seed: int) -> tuple[np.ndarray, float | None]:
    """(undiscounted return of each episode [episodes] float64, success rate or None) of `act` in the Gymnasium env of
    `spec`; episode i starts from ``reset(seed=seed + i)``. The success rate is the fraction of episodes whose
    ``info["success"]`` was ever true (the mazes report it), None when the env reports none."""
    import gymnasium as gym

    from robolearn.data.standard import make_gymnasium

    envs = [make_gymnasium(spec) for _ in range(episodes)]
    try:
        space = envs[0].observation_space
        low, high = envs[0].action_space.low, envs[0].action_space.high
        flat = lambda o: gym.spaces.flatten(space, o).astype(np.float32)  # noqa: E731
        obs = np.stack([flat(env.reset(seed=seed + i)[0]) for i, env in enumerate(envs)])
        returns = np.zeros(episodes)
        running = np.ones(episodes, bool)
        success: np.ndarray | None = None
        while running.any():
            actions = act({"policy": torch.from_numpy(obs)}).detach().cpu().numpy().astype(np.float64)
            actions = np.clip(actions, -1.0, 1.0)
            if not (np.all(low == -1.0) and np.all(high == 1.0)):
                actions = low + (actions + 1.0) / 2.0 * (high - low)
            for i in np.flatnonzero(running):
                o, r, terminated, truncated, info = envs[i].step(actions[i].astype(envs[i].action_space.dtype))
                returns[i] += float(r)
                obs[i] = flat(o)
                if "success" in info:
                    success = np.zeros(episodes, bool) if success is None else success
                    success[i] |= bool(info["success"])
                running[i] = not (terminated or truncated)
    finally:
        for env in envs:
            env.close()
    return returns, None if success is None else float(success.mean())


__all__ = ["gymnasium_returns"]
