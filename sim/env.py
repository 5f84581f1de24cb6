"""A task on a backend as pure JAX functions, and the batched auto-reset step built on them.

`Env.reset(key)` and `Env.step(state, action)` are unbatched and pure: they add the episode
bookkeeping (step counter, truncation at `episode_length`, action repeat) to the task. Batching is
`jax.vmap`; `Env.batched_step` adds auto-reset on top and keeps the true final observation of every
env that finished (`final_obs`), which the anchors drop, so that time-outs can bootstrap correctly.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from sim.core import State, Task
from sim.errors import ConfigError
from sim.randomization import InverseWeights


class Env:
    """One task on one backend; pure functions only, no hidden state."""

    def __init__(self, task: Task, backend: Any):
        self.task = task.build()  # a task constructed directly (not by `sim.make_task`) is built here
        self.backend = backend
        wants = (tuple(task.data_fields), task.qvel_limit)
        has = (tuple(getattr(backend, "fields", ())), getattr(backend, "qvel_limit", None))
        if wants != has:
            raise ConfigError(f"task {task.name!r} needs a backend with data fields {wants[0]} and qvel_limit "
                              f"{wants[1]}, this one has {has}: build it with sim.make_backend(task, ...)")
        self.cfg = task.cfg

    @functools.cached_property
    def _inverse_weights(self) -> InverseWeights:
        return InverseWeights(self.task.mj_model)

    # --- unbatched ------------------------------------------------------------------------------
    def reset(self, key: jax.Array) -> State:
        """Start a new episode."""
        return self._reset(key, jnp.ones((), dtype=bool), jnp.zeros((), jnp.int32))

    def _reset(self, key: jax.Array, active: jax.Array, env_id: jax.Array) -> State:
        cfg = self.cfg
        key, init_key = jax.random.split(key)
        qpos, qvel, info = self.task.init(init_key)
        params: dict[str, jax.Array] = {}
        if cfg.domain_randomization:
            key, dr_key = jax.random.split(key)
            params = {k: jnp.asarray(v, jnp.float32) for k, v in self.task.randomize(dr_key).items()}
            params = self._inverse_weights.complete(params)  # for randomized masses, as mj_setConst does
        info = {**info, "rng": key, "steps": jnp.zeros((), jnp.int32), "dr": params}
        if cfg.action_latency > 0:
            key, lat_key = jax.random.split(key)
            info["rng"] = key
            info["action_delay"] = jax.random.randint(lat_key, (), 0, cfg.action_latency + 1)
            info["action_buffer"] = jnp.zeros((cfg.action_latency + 1, self.task.num_actions), jnp.float32)
        data = self.backend.init_data(qpos, qvel, active, params, env_id)
        phys = self.backend.view(data)
        obs, info = self._observe(phys, info)
        zeros = jnp.zeros((), jnp.float32)
        # Only the names and shapes of the reward terms are needed here: no computation.
        terms = jax.eval_shape(self.task.reward_terms, phys, jnp.zeros(self.task.num_actions), info)
        metrics = {f"reward/{k}": jnp.zeros(v.shape, jnp.float32) for k, v in terms.items()}
        metrics.update({k: jnp.asarray(v, jnp.float32) for k, v in self.task.metrics(phys, info).items()})
        return State(data=data, obs=obs, reward=zeros, terminated=jnp.zeros((), bool),
                     truncated=jnp.zeros((), bool), info=info, metrics=metrics)

    def _observe(self, phys, info: dict[str, Any]) -> tuple[dict[str, jax.Array], dict[str, Any]]:
        """The task's observations, with the configured noise on the "policy" group."""
        obs = self.task.observe(phys, info)
        if self.cfg.obs_noise > 0:
            key, noise_key = jax.random.split(info["rng"])
            info = {**info, "rng": key}
            pol = obs["policy"]
            obs = {**obs, "policy": pol + self.cfg.obs_noise * jax.random.normal(noise_key, pol.shape, pol.dtype)}
        return obs, info

    def step(self, state: State, action: jax.Array) -> State:
        """One control step: `action_repeat` task steps, rewards summed, then the episode clock."""
        task, cfg = self.task, self.cfg
        info0 = state.info
        applied = action
        if cfg.action_latency > 0:  # the env acts on the action chosen `action_delay` steps ago
            buffer = jnp.concatenate([action[None].astype(jnp.float32), info0["action_buffer"][:-1]])
            applied = buffer[info0["action_delay"]]
            info0 = {**info0, "action_buffer": buffer}
        ctrl = task.action_to_ctrl(applied)
        params = info0["dr"]

        def one(carry, _):
            data, info, reward, terminated, terms_sum = carry
            new_data = self.backend.step(data, ctrl, cfg.n_substeps, params)
            phys = self.backend.view(new_data)
            terms = task.reward_terms(phys, action, info)
            new_info = task.update_info(phys, action, info)
            # Once terminal within a repeat, the state freezes: the terminal state is the final one.
            live = ~terminated
            reward = reward + jnp.where(live, task.reward(terms), 0.0)
            terms_sum = {k: terms_sum[k] + jnp.where(live, v, 0.0) for k, v in terms.items()}
            terminated = terminated | (live & task.terminated(phys, new_info))
            if cfg.action_repeat > 1:
                new_data = jax.tree.map(lambda n, o: jnp.where(live, n, o), new_data, data)
                new_info = jax.tree.map(lambda n, o: jnp.where(live, n, o), new_info, info)
            return (new_data, new_info, reward, terminated, terms_sum), None

        zero_terms = {k[len("reward/"):]: jnp.zeros_like(v) for k, v in state.metrics.items()
                      if k.startswith("reward/")}
        carry = (state.data, info0, jnp.zeros((), jnp.float32), jnp.zeros((), bool), zero_terms)
        if cfg.action_repeat == 1:
            carry, _ = one(carry, None)
        else:
            carry, _ = jax.lax.scan(one, carry, None, length=cfg.action_repeat)
        data, info, reward, terminated, terms_sum = carry
        steps = state.info["steps"] + 1
        info = {**info, "steps": steps}
        truncated = (steps >= cfg.episode_length) & ~terminated
        phys = self.backend.view(data)
        obs, info = self._observe(phys, info)
        metrics = {**state.metrics, **{f"reward/{k}": v.astype(jnp.float32) for k, v in terms_sum.items()},
                   **{k: jnp.asarray(v, jnp.float32) for k, v in task.metrics(phys, info).items()}}
        return State(data=data, obs=obs, reward=reward.astype(jnp.float32), terminated=terminated,
                     truncated=truncated, info=info, metrics=metrics)

    # --- batched ---------------------------------------------------------------------------------
    def batched_reset(self, keys: jax.Array) -> State:
        n = keys.shape[0]
        return jax.vmap(self._reset)(keys, jnp.ones((n,), bool), jnp.arange(n, dtype=jnp.int32))

    def batched_step(self, state: State, action: jax.Array) -> tuple[State, State]:
        """Step every env, reset the finished ones in place, and return the state before the resets.

        Returns the next state (observations of reset envs are their new first observations) and
        the stepped state before any reset, whose `obs` is each env's true final observation.

        Resets cost only what finishes: the indices of finished envs are gathered `reset_slots` at a
        time and only those envs are re-initialised (usually one round, since episodes desynchronise;
        more rounds when many finish together). One reset path keeps compile time down.
        """
        stepped = jax.vmap(self.step)(state, action)
        done = stepped.terminated | stepped.truncated
        n = done.shape[0]
        slots = reset_slots(n)
        count = jnp.sum(done)
        rank = jnp.cumsum(done) - 1  # rank of each finished env among the finished ones

        def reset_round(carry):
            merged, first = carry
            idx = jnp.nonzero(done & (rank >= first) & (rank < first + slots), size=slots, fill_value=0)[0]
            valid = jnp.arange(slots) < count - first
            fresh = jax.vmap(self._reset)(stepped.info["rng"][idx], valid, idx.astype(jnp.int32))
            target = jnp.where(valid, idx, n)  # invalid slots point past the end and are dropped

            def put(new, old):
                return old.at[target].set(new, mode="drop")

            merged = merged.replace(data=jax.tree.map(put, fresh.data, merged.data),
                                    obs=jax.tree.map(put, fresh.obs, merged.obs),
                                    info=jax.tree.map(put, fresh.info, merged.info))
            return merged, first + slots

        next_state, _ = jax.lax.while_loop(lambda c: c[1] < count, reset_round, (stepped, jnp.zeros((), count.dtype)))
        return next_state, stepped


def reset_slots(num_envs: int) -> int:
    """How many finished envs one reset round re-initialises."""
    return min(num_envs, max(4, num_envs // 32))
