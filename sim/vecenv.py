"""The torch VecEnv: rsl_rl / IsaacGym-style batched environments over a jitted JAX step.

The whole step (physics, task math, episode clock, auto-reset) is one jitted JAX call; tensors
cross to torch by DLPack (zero-copy on the same device) and observations come back as a
`TensorDict` of observation groups, as rsl_rl >= 3 expects.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDict

from sim.core import State, Task
from sim.env import Env
from sim.errors import ActionError, ConfigError

#: XLA options for the C engine's VecEnv executables: None, XLA's defaults. `FAST_C_ENGINE_COMPILE` (LLVM's
#: optimisation passes off) halves a VecEnv's compile (halfcheetah-v5 1.5 -> 0.7 s, ant-goal 2.9 -> 1.55 s on this CPU;
#: benchmarks/speed/c_engine_compile.py) but rounds the JAX side's arithmetic differently: the reset noise lands one
#: ulp away (every one of 100 hopper-v5 resets), and from there a falling hopper's trajectory is another. Every
#: C-engine dataset, evaluation and training run depends on these bits, and the committed datasets' fingerprints
#: (configs/dataset/*.yaml) are those of the defaults, so the defaults stay (the test suite, which builds some 280
#: VecEnvs, takes the fast options: tests/conftest.py).
C_ENGINE_COMPILE: dict[str, Any] | None = None
FAST_C_ENGINE_COMPILE = {"xla_backend_optimization_level": 0}


def to_torch(x: jax.Array, device: torch.device) -> torch.Tensor:
    """JAX array -> torch tensor, zero-copy when both live on the same device."""
    t = torch.from_dlpack(x)
    return t if t.device == device else t.to(device)


def to_jax(t: torch.Tensor, like_gpu: bool) -> jax.Array:
    """torch tensor -> JAX array; zero-copy on GPU, a cheap host copy on CPU."""
    t = t.detach()
    if like_gpu and t.is_cuda:
        return jax.dlpack.from_dlpack(t.contiguous())
    return jnp.asarray(t.cpu().numpy())


class VecEnv:
    """`num_envs` copies of a task, stepped together; compatible with rsl_rl's `VecEnv`.

    Attributes: `num_envs`, `num_actions`, `max_episode_length`, `device`, `cfg`, and the settable
    `episode_length_buf`. `step` returns `(obs, rewards[N], dones[N], extras)` with
    `extras["time_outs"]` (episode ended by the time limit, not a terminal state),
    `extras["final_obs"]` (the observation each env reached before an auto-reset, for bootstrapping
    at time-outs) and `extras["log"]` (per-step means of every reward term and task metric;
    `episode/` metrics average over the episodes ending at the step, NaN if none). With `pixels`, every
    observation (and `final_obs`) also carries a `"pixels"` group: uint8 RGB frames [N, H, W, 3]
    rendered by MuJoCo from a named camera (without shadows, reflections and skybox unless `effects`: 17x
    faster on a CPU's software OpenGL).

    Tensors returned by `step` view the simulator's buffers without copying: treat them as read-only
    (clone before modifying in place).
    """

    def __init__(self, task: Task, backend: Any, num_envs: int, device: torch.device, seed: int = 0,
                 check_actions: bool = True, pixels: dict[str, Any] | None = None):
        if num_envs < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        self.task = task
        self.backend = backend
        self.env = Env(task, backend)
        self.num_envs = int(num_envs)
        self.num_actions = task.num_actions
        self.max_episode_length = int(task.cfg.episode_length)
        self.device = device
        self.check_actions = check_actions
        self.cfg: dict[str, Any] = {"task": task.name, "backend": backend.name, "num_envs": self.num_envs,
                                    "seed": seed, **dataclasses.asdict(task.cfg)}
        self._on_gpu = backend.name == "mjx" and jax.default_backend() == "gpu"
        self._pixels = None
        if pixels is not None:  # a "pixels" observation group rendered by MuJoCo on the host
            from sim.rendering import Renderer

            unknown = set(pixels) - {"camera", "width", "height", "effects"}
            if unknown:
                raise ConfigError(f"unknown pixels settings {sorted(unknown)}; valid: camera, width, height, effects")
            self._pixels = Renderer(task, width=int(pixels.get("width", 64)), height=int(pixels.get("height", 64)),
                                    camera=pixels.get("camera"), effects=bool(pixels.get("effects", False)))
        self.seed = int(seed)
        self._resets = 0
        self._reset_fn, self._step_fn = self._compile()
        self.state: State = self._reset_fn(self._keys())
        self.observation_shapes = {k: tuple(v.shape[1:]) for k, v in self.state.obs.items()}
        if self._pixels is not None:
            self.observation_shapes["pixels"] = self._pixels.shape

    # --- rsl_rl VecEnv contract ------------------------------------------------------------------
    def reset(self, seed: int | None = None, group_size: int = 1) -> TensorDict:
        """Reset every env to a new episode; returns the observations.

        With a `seed`, every env restarts from that seed's initial states (env i's randomness depends
        only on (seed, i)); without one, the random stream carries on, so repeated resets (evaluation
        rounds) see new initial states. `group_size` G > 1 starts each block of G consecutive envs from
        the same initial state, with the same random stream (GRPO's groups: one reset state, G attempts).
        """
        if group_size < 1 or self.num_envs % group_size:
            raise ConfigError(f"group_size must divide num_envs = {self.num_envs}, got {group_size}")
        if seed is not None:
            self.seed, self._resets = int(seed), 0
        else:
            self._resets += 1
        self.state = self._reset_fn(self._keys(group_size))
        return self.get_observations()

    def _keys(self, group_size: int = 1) -> jax.Array:
        key = jax.random.PRNGKey(self.seed)
        if self._resets:
            key = jax.random.fold_in(key, self._resets)
        if group_size > 1:
            return jnp.repeat(jax.random.split(key, self.num_envs // group_size), group_size, axis=0)
        return jax.random.split(key, self.num_envs)

    def get_observations(self) -> TensorDict:
        """The current observations (a copy); never resets."""
        return self._obs_to_torch(self.state.obs).clone()

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        actions = self._validate(actions)
        self.state, final_obs, packed, log = self._step_fn(self.state, to_jax(actions, self._on_gpu))
        if self._pixels is not None:
            final_obs = dict(final_obs)
            final_obs["pixels"] = self._render(np.asarray(final_obs.pop("__qpos__")))
        # One hand-off for the per-env scalars and one for the log: fewer DLPack round trips per step.
        packed = to_torch(packed, self.device)
        log = to_torch(log, self.device)
        rewards, terminated, time_outs = packed[:, 0], packed[:, 1] > 0, packed[:, 2] > 0
        extras = {
            "time_outs": time_outs,
            "terminated": terminated,
            "final_obs": self._obs_to_torch(final_obs),
            "log": dict(zip(self._log_keys, log.unbind(0), strict=True)),
        }
        return self._obs_to_torch(self.state.obs), rewards, (terminated | time_outs).long(), extras

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Control steps taken in each env's current episode (a copy; assign to change it)."""
        return to_torch(self.state.info["steps"], self.device).clone()

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        value = torch.as_tensor(value)
        if value.shape != (self.num_envs,):
            raise ConfigError(f"episode_length_buf must have shape ({self.num_envs},), got {tuple(value.shape)}")
        steps = jnp.asarray(value.detach().cpu().numpy().astype(np.int32))
        self.state = self.state.replace(info={**self.state.info, "steps": steps})

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every env's full state as named host arrays (for checkpoints: exact, no pickle)."""
        leaves = jax.tree_util.tree_flatten_with_path(self.state)[0]
        out = {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}
        out["__seed_resets__"] = np.array([self.seed, self._resets], dtype=np.int64)
        return out

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore a `state_dict` taken from an env of the same task, backend and num_envs."""
        leaves, treedef = jax.tree_util.tree_flatten_with_path(self.state)
        new = []
        for path, leaf in leaves:
            name = jax.tree_util.keystr(path)
            if name not in arrays:
                raise ConfigError(f"saved env state has no {name!r}: it is from another task or backend")
            value = np.asarray(arrays[name])
            if value.shape != leaf.shape:
                raise ConfigError(f"saved env state {name!r} has shape {value.shape}, this env needs {leaf.shape} "
                                  f"(num_envs={self.num_envs})")
            new.append(jnp.asarray(value, dtype=leaf.dtype))
        self.state = jax.tree_util.tree_unflatten(treedef, new)
        params = self.state.info["dr"]
        if params and hasattr(self.backend, "set_params"):  # the C backend keeps them in per-env models
            self.backend.set_params({k: np.asarray(v) for k, v in params.items()})
        if "__seed_resets__" in arrays:
            self.seed, self._resets = (int(x) for x in np.asarray(arrays["__seed_resets__"]))

    def close(self) -> None:
        if self._pixels is not None:
            self._pixels.close()
            self._pixels = None
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    # --- helpers ---------------------------------------------------------------------------------
    def _compile(self):
        """Compile reset and step ahead of time, side by side (cold start is the top MJX complaint).

        Executables that call back into the C engine cannot enter JAX's persistent cache, so on the
        CPU backend every VecEnv compiles its own; compiling both at once is what keeps its first step
        quick (with XLA's default options, `C_ENGINE_COMPILE`: they decide the bits of every trajectory).
        """
        keys = jax.ShapeDtypeStruct((self.num_envs, 2), jnp.uint32)
        state = jax.eval_shape(self.env.batched_reset, keys)
        self._log_keys = sorted(state.metrics)
        actions = jax.ShapeDtypeStruct((self.num_envs, self.num_actions), jnp.float32)
        options = C_ENGINE_COMPILE if self.backend.name == "mujoco" else None
        with ThreadPoolExecutor(2) as pool:
            reset = pool.submit(lambda: jax.jit(self.env.batched_reset).lower(keys).compile(options))
            step = pool.submit(lambda: jax.jit(self._step_and_log).lower(state, actions).compile(options))
            return reset.result(), step.result()

    def _step_and_log(self, state: State, actions: jax.Array):
        state, stepped = self.env.batched_step(state, actions)
        f32 = jnp.float32
        packed = jnp.stack([state.reward.astype(f32), state.terminated.astype(f32), state.truncated.astype(f32)], 1)
        done = (stepped.terminated | stepped.truncated).astype(f32)
        log = jnp.stack([_log_value(stepped.metrics[k].astype(f32), done, k) for k in self._log_keys])
        final_obs = dict(stepped.obs)
        if self._pixels is not None:  # joint positions before the reset, to render the final frames
            final_obs["__qpos__"] = self.backend.view(stepped.data).qpos
        return state, final_obs, packed, log

    def _obs_to_torch(self, obs: dict[str, jax.Array]) -> TensorDict:
        groups = {k: to_torch(v, self.device) for k, v in obs.items()}
        if self._pixels is not None and "pixels" not in groups:
            groups["pixels"] = self._render(np.asarray(self.backend.view(self.state.data).qpos))
        return TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    def _render(self, qpos: np.ndarray) -> torch.Tensor:
        """RGB frames [N, H, W, 3] (uint8) of every env at the given joint positions."""
        frames = np.stack([self._pixels.frame(q) for q in qpos])
        return torch.from_numpy(frames).to(self.device)

    def _validate(self, actions: torch.Tensor) -> torch.Tensor:
        if not isinstance(actions, torch.Tensor):
            actions = torch.as_tensor(np.asarray(actions), dtype=torch.float32)
        if actions.shape != (self.num_envs, self.num_actions):
            raise ActionError(f"actions must have shape (num_envs, num_actions) = "
                              f"({self.num_envs}, {self.num_actions}), got {tuple(actions.shape)}")
        actions = actions.to(torch.float32)
        if self.check_actions and not bool(torch.isfinite(actions).all()):
            bad = (~torch.isfinite(actions)).any(dim=1).nonzero().flatten()[:5].tolist()
            raise ActionError(f"actions contain NaN or inf (envs {bad}...); check the policy's outputs, "
                              f"or pass check_actions=False to sim.make to skip this check")
        return actions

    def qpos(self, env_id: int = 0) -> np.ndarray:
        """Joint positions of one env (float64 where the backend keeps them), for rendering."""
        qpos = self.backend.qpos64(self.state.data)
        return np.asarray(qpos)[env_id].astype(np.float64)

    def __repr__(self) -> str:
        return (f"VecEnv({self.task.name!r}, num_envs={self.num_envs}, backend={self.backend.name!r}, "
                f"device={self.device})")


def _log_value(value: jax.Array, done: jax.Array, name: str) -> jax.Array:
    """Mean over envs; for `episode/` metrics, over the envs that finished (NaN when none did)."""
    if not name.startswith("episode/"):
        return jnp.mean(value)
    count = jnp.sum(done)
    return jnp.where(count > 0, jnp.sum(value * done) / jnp.maximum(count, 1.0), jnp.nan)
