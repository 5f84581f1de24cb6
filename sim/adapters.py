"""gymnasium and stable-baselines3 adapters over the torch VecEnv, so peers' algorithms run on our tasks.

- `GymEnv`: a single `gymnasium.Env` (passes `gymnasium.utils.env_checker.check_env`).
- `GymVectorEnv`: a `gymnasium.vector.VectorEnv` with same-step auto-reset; the true final
  observation of a finished env is in `infos["final_obs"]` (masked by `infos["_final_obs"]`).
- `SB3VecEnv`: a stable-baselines3 `VecEnv`; finished envs carry `"terminal_observation"` and
  `"TimeLimit.truncated"` in their info dicts, as SB3's own wrappers do.

Only the `"policy"` observation group is exposed (these APIs take one flat observation).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env.base_vec_env import VecEnv as _SB3VecEnvBase

from sim.errors import ActionError
from sim.vecenv import VecEnv


def _spaces(env: VecEnv) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    (obs_dim,) = env.observation_shapes["policy"]
    obs_space = gym.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, shape=(env.num_actions,), dtype=np.float32)
    return obs_space, act_space


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


class GymEnv(gym.Env):
    """One task as a `gymnasium.Env`; `reset(seed=...)` re-seeds, episodes end on terminated/truncated."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, vec_env: VecEnv, render_mode: str | None = None):
        if vec_env.num_envs != 1:
            raise ValueError("GymEnv wraps a VecEnv with num_envs=1")
        self.vec_env = vec_env
        self.observation_space, self.action_space = _spaces(vec_env)
        self.render_mode = render_mode
        self._renderer = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs = self.vec_env.reset(seed=seed if seed is not None else int(self.np_random.integers(2**31)))
        return _np(obs["policy"][0]), {}

    def step(self, action):
        action = np.asarray(action, dtype=np.float32).reshape(1, -1)
        _, rew, _, extras = self.vec_env.step(torch.from_numpy(action))
        # The VecEnv auto-resets; a gymnasium user sees the final observation and calls reset().
        obs = _np(extras["final_obs"]["policy"][0])
        return obs, float(rew[0]), bool(extras["terminated"][0]), bool(extras["time_outs"][0]), {}

    def render(self):
        from sim.rendering import Renderer

        if self._renderer is None:
            self._renderer = Renderer(self.vec_env.task)
        return self._renderer.frame(self.vec_env.qpos(0))

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.vec_env.close()


class GymVectorEnv(gym.vector.VectorEnv):
    """The VecEnv as a gymnasium `VectorEnv` (numpy in, numpy out, same-step auto-reset)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, vec_env: VecEnv):
        self.vec_env = vec_env
        self.num_envs = vec_env.num_envs
        self.single_observation_space, self.single_action_space = _spaces(vec_env)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs = self.vec_env.reset(seed=seed)
        return _np(obs["policy"]), {}

    def step(self, actions):
        obs, rew, dones, extras = self.vec_env.step(torch.as_tensor(np.asarray(actions), dtype=torch.float32))
        done = _np(dones).astype(bool)
        infos: dict[str, Any] = {}
        if done.any():
            infos = {"final_obs": _np(extras["final_obs"]["policy"]), "_final_obs": done}
        return (_np(obs["policy"]), _np(rew), _np(extras["terminated"]), _np(extras["time_outs"]), infos)

    def close_extras(self, **kwargs: Any) -> None:
        self.vec_env.close()


class SB3VecEnv(_SB3VecEnvBase):
    """The VecEnv as a stable-baselines3 `VecEnv`."""

    def __init__(self, vec_env: VecEnv):
        self.vec_env = vec_env
        obs_space, act_space = _spaces(vec_env)
        super().__init__(vec_env.num_envs, obs_space, act_space)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        self._reset_seeds()
        return _np(self.vec_env.reset(seed=seed)["policy"])

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, -1)

    def step_wait(self):
        if self._actions is None:
            raise ActionError("step_wait() called before step_async()")
        obs, rew, dones, extras = self.vec_env.step(torch.from_numpy(self._actions))
        self._actions = None
        done = _np(dones).astype(bool)
        truncated = _np(extras["time_outs"])
        final = _np(extras["final_obs"]["policy"])
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for i in np.flatnonzero(done):
            infos[i] = {"terminal_observation": final[i], "TimeLimit.truncated": bool(truncated[i])}
        return _np(obs["policy"]), _np(rew), done, infos

    def close(self) -> None:
        self.vec_env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        value = "rgb_array" if attr_name == "render_mode" else getattr(self.vec_env, attr_name)
        return [value] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.vec_env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        result = getattr(self.vec_env, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def get_images(self):
        from sim.rendering import Renderer

        renderer = Renderer(self.vec_env.task)
        try:
            return [renderer.frame(self.vec_env.qpos(i)) for i in range(self.num_envs)]
        finally:
            renderer.close()
