"""DSRL through the off-policy runner: SAC (or DSRL-NA) over a frozen chunk policy's initial noise
(`robolearn.algos.chunk.dsrl`: the latent-action env and the learner), run, resumed and turned into one
steered chunk policy.

    base, _ = train_chunk_bc(demos, ChunkBCConfig(policy="diffusion", chunk=5))
    runner = dsrl_runner(base, env, eval_env, SACConfig(utd_ratio=4), run_dir="runs/dsrl")
    runner.learn(iterations=200)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from policies.diffusion import DiffusionPolicy
from policies.flow import FlowPolicy
from policies.steered import SteeredChunkPolicy
from robolearn.algos.chunk.dsrl import DSRLNA, DSRLConfig, NoiseActionEnv, base_policy_latents, uniform_latents
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.checkpoints import checkpoint
from robolearn.errors import ConfigError
from robolearn.eval.scores import task_reference
from robolearn.runners.off_policy import OffPolicyRunner


def dsrl_runner(base: FlowPolicy | DiffusionPolicy, env: Any, eval_env: Any | None, sac: SACConfig,
                run_dir: str | Path, cfg: DSRLConfig | None = None, seed: int = 0, progress: bool = False
                ) -> OffPolicyRunner:
    """SAC (or DSRL-NA) over `base`'s noise in `env` (and `eval_env`), as robolearn's off-policy runner; call
    `.learn(n)`."""
    cfg = cfg if cfg is not None else DSRLConfig()
    if eval_env is None:  # nothing to evaluate on
        cfg = dataclasses.replace(cfg, eval_every=0)
    shared = cfg.latent == "shared"
    noise_env = NoiseActionEnv(env, base, cfg.magnitude, shared)
    eval_noise_env = NoiseActionEnv(eval_env, base, cfg.magnitude, shared) if eval_env is not None else None
    torch.manual_seed(seed)
    if cfg.variant == "na":
        shapes = env.observation_shapes
        algo: SAC = DSRLNA(base, cfg.magnitude, shapes["policy"][0], (shapes.get("critic") or shapes["policy"])[0],
                           sac, cfg.noise_critic_steps, shared=shared)
    else:
        algo = SAC.for_env(noise_env, sac)
    config = {"algo": {"name": "dsrl", **dataclasses.asdict(sac), **dataclasses.asdict(cfg)},
              "env": noise_env.cfg, "seed": seed}
    task = env.cfg.get("task") if isinstance(env.cfg, dict) else None
    warmup = (base_policy_latents if cfg.warmup == "base" else uniform_latents)(noise_env.num_actions, cfg.magnitude)
    return OffPolicyRunner(noise_env, algo, run_dir, config, seed=seed, progress=progress,
                           steps_per_iteration=cfg.steps_per_iteration, eval_env=eval_noise_env,
                           eval_every=cfg.eval_every, reference=task_reference(task) if task else None,
                           warmup_actions=warmup, eval_deterministic=cfg.eval_deterministic)


def steered_policy(runner: OffPolicyRunner) -> SteeredChunkPolicy:
    """A DSRL run's result as one chunk policy (`policies.steered`): its latent actor over its frozen base, which
    `robolearn.checkpoints.policy.save_chunk_policy` writes and `load_policy` plays."""
    env, algo = runner.env, runner.algo
    c = algo.config
    actor_config = {"obs_dim": c["obs_dim"], "num_actions": c["num_actions"], "hidden": tuple(algo.cfg.actor_hidden),
                    "activation": algo.cfg.activation, "layer_norm": algo.cfg.actor_layer_norm,
                    "obs_norm": algo.cfg.normalize_states}
    return SteeredChunkPolicy.wrap(env.base, algo.actor, actor_config, env.magnitude, env.shared)


def restore_dsrl(runner: OffPolicyRunner, path: str | Path) -> None:
    """Continue `runner` from its checkpoint `path`, refusing one saved with other DSRL or SAC settings (a different
    variant, latent, magnitude or network would load partly and silently)."""
    saved = checkpoint.load(path)[0].get("run", {}).get("algo", {})
    current = json.loads(json.dumps(runner.config["algo"]))  # tuples as the saved JSON has them
    saved = {**{k: v for k, v in _defaults().items() if k not in saved}, **saved}  # settings added since: defaults
    differ = sorted(k for k in current.keys() | saved.keys()
                    if k not in ("eval_every", "eval_deterministic") and current.get(k) != saved.get(k))
    if differ:
        raise ConfigError(f"{path} was saved with other DSRL/SAC settings ({', '.join(differ)}): resume with its own")
    runner.restore(path)


def _defaults() -> dict:
    """The SAC and DSRL settings' defaults, as a saved run's JSON holds them (for runs saved before a setting)."""
    return json.loads(json.dumps({**dataclasses.asdict(SACConfig()), **dataclasses.asdict(DSRLConfig())}))
