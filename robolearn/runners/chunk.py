"""Action-chunk policy jobs (`robolearn chunk-bc`, `flow-rl`, `dsrl`): behaviour cloning of a flow or diffusion
policy, its RL fine-tuning in the batched sim, or SAC over its noise, each from its settings dataclass.

    robolearn collect env=arm-push kind=expert policy=reference episodes=100 out=data/arm-push-demos
    robolearn chunk-bc dataset=data/arm-push-demos out=runs/arm-push-bc bc.chunk=5 bc.num_steps=4 bc.steps=6000
    robolearn flow-rl checkpoint=runs/arm-push-bc run_dir=runs/arm-push-ppo rl.iterations=100 rl.gamma=0.95
    robolearn flow-rl resume=runs/arm-push-ppo rl.iterations=200        # go on
    robolearn eval checkpoint=runs/arm-push-ppo/checkpoints/final
    robolearn dsrl checkpoint=runs/arm-push-bc run_dir=runs/arm-push-dsrl iterations=100   # or steer it (DSRL)
    robolearn eval checkpoint=runs/arm-push-dsrl/policy

`chunk-bc` clones a flow (`bc.policy=flow`) or diffusion policy and writes a checkpoint that `robolearn eval` and
`robolearn deploy` play (the dataset's task is recorded with it). `flow-rl` fine-tunes a flow checkpoint with PPO
or GRPO (`robolearn.algos.chunk.flow_rl`, options under `rl.`) in the batched sim of its task, or of `env=`; a VLA
checkpoint (`robolearn.algos.chunk.vla`) runs in the camera env it was trained with, under `instruction=`
(default: its first).
`dsrl` keeps a flow or diffusion checkpoint frozen and trains SAC over its initial noise (`robolearn.algos.chunk.dsrl`,
options under `dsrl.` and `sac.`), checkpointing like `robolearn train` (`resume=<run_dir>` goes on); at the end
`<run_dir>/policy` holds the steered policy (`policies.steered`) that `robolearn eval` and `deploy` play.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from robolearn.algos.chunk.chunk_bc import ChunkBCConfig
from robolearn.algos.chunk.dsrl import DSRLConfig, dsrl_sac
from robolearn.algos.chunk.flow_rl import FlowRLConfig
from robolearn.algos.online.sac import SACConfig
from robolearn.errors import ConfigError


@dataclasses.dataclass
class ChunkBCJob:
    """`robolearn chunk-bc`: behaviour cloning of a flow / diffusion action-chunk policy from a dataset."""

    dataset: str | None = None      # a dataset: a path, or a name under data/ (required)
    out: str | None = None          # the checkpoint folder (default: runs/<task>-<policy>-bc-<time>)
    group: str = "policy"           # the observation group the policy reads
    bc: ChunkBCConfig = dataclasses.field(default_factory=ChunkBCConfig)


@dataclasses.dataclass
class FlowRLJob:
    """`robolearn flow-rl`: PPO / GRPO fine-tuning of a flow (or VLA) chunk policy in the batched sim."""

    checkpoint: str | None = None   # the policy to fine-tune (required unless resume=)
    run_dir: str | None = None      # default: runs/<task>-flow-<algo>-<time>
    resume: str | None = None       # a run directory to go on from (its checkpoints/latest), as robolearn train's
    env: str | None = None          # the task (default: the checkpoint's)
    num_envs: int = 128
    eval_envs: int = 100            # envs of the evaluation (one episode each, the ODE sampler); 0: none
    instruction: str | None = None  # a VLA's instruction (default: the first it was trained on)
    seed: int = 0
    rl: FlowRLConfig = dataclasses.field(default_factory=FlowRLConfig)


@dataclasses.dataclass
class DSRLJob:
    """`robolearn dsrl`: SAC over a frozen flow / diffusion chunk policy's initial noise in the batched sim."""

    checkpoint: str | None = None   # the frozen base policy (required; also when resuming)
    run_dir: str | None = None      # default: runs/<task>-dsrl-<time>
    resume: str | None = None       # a run directory to go on from (its checkpoints/latest), as robolearn train's
    env: str | None = None          # the task (default: the checkpoint's)
    num_envs: int = 64
    eval_envs: int = 100            # envs of the evaluation (one episode each); 0: none
    iterations: int = 100           # in all, each dsrl.steps_per_iteration decisions of every env
    checkpoint_interval: int = 10   # iterations between checkpoints/latest
    seed: int = 0
    dsrl: DSRLConfig = dataclasses.field(default_factory=DSRLConfig)
    sac: SACConfig = dataclasses.field(default_factory=dsrl_sac)


def _resumed(resume: str | None) -> str | None:
    """`resume=<run_dir>` (one option name and meaning across commands); the old `resume=true` is refused."""
    if resume is not None and str(resume).lower() in ("true", "false"):
        raise ConfigError("resume takes the run directory to go on from: resume=<run_dir> (as robolearn train's); "
                          "resume=true with run_dir= is gone")
    return resume


def checkpoint_task(run: dict, source: object, env: str | None) -> tuple[dict, str, dict]:
    """(the checkpoint's env config, the task: `env` or the recorded one, its recorded overrides when it is that
    task); a checkpoint that records no task needs `env=`."""
    env_cfg = dict(run.get("env") or {})
    task = env or env_cfg.get("name")
    if not task:
        raise ConfigError(f"{source} records no task: pass env=<task>")
    return env_cfg, task, (env_cfg.get("overrides") or {}) if task == env_cfg.get("name") else {}


def clone_chunk_policy(cfg: ChunkBCJob) -> Path:
    """Behaviour-clone a flow / diffusion chunk policy from `cfg.dataset`; returns its checkpoint folder."""
    from robolearn.algos.chunk.chunk_bc import train_chunk_bc
    from robolearn.checkpoints.policy import save_chunk_policy
    from robolearn.data.sources import load_source

    if not cfg.dataset:
        raise ConfigError("chunk-bc needs dataset=<dataset path or name>")
    path, data = load_source(cfg.dataset)
    task = data.metadata.get("task")
    out = Path(cfg.out or f"runs/{task or path.name}-{cfg.bc.policy}-bc-{time.strftime('%Y%m%d-%H%M%S')}")
    began = time.perf_counter()
    policy, losses = train_chunk_bc(data, cfg.bc, cfg.group)
    env = data.metadata.get("env") or ({"name": task, "num_envs": 16} if task else None)  # collect's env config
    run = {"data": str(path), "chunk_bc": dataclasses.asdict(cfg.bc), **({"env": env} if env else {})}
    save_chunk_policy(out, policy, run)
    tail = losses[-100:]
    print(f"{cfg.bc.policy} policy (chunks of {cfg.bc.chunk}) cloned from {data.num_steps} steps of {path} in "
          f"{time.perf_counter() - began:.0f} s, final loss {sum(tail) / len(tail):.4f}: {out}")
    return out


def run_flow_rl(cfg: FlowRLJob) -> Path:
    """PPO / GRPO fine-tuning of a flow (or VLA) chunk policy in the batched sim; returns the run folder."""
    import sim
    from policies.flow import FlowPolicy
    from policies.vla import VLAPolicy
    from robolearn.checkpoints.policy import load_policy
    from robolearn.runners.flow import finetune_flow

    run_dir = Path(_resumed(cfg.resume) or cfg.run_dir) if (cfg.resume or cfg.run_dir) else None
    if cfg.resume:
        source = run_dir / "checkpoints" / "latest"
    elif cfg.checkpoint:
        source = Path(cfg.checkpoint)
    else:
        raise ConfigError("flow-rl needs checkpoint=<a flow policy checkpoint> (or resume=<run_dir>)")
    loaded = load_policy(source)
    policy = loaded.actor.train()
    if not isinstance(policy, FlowPolicy):
        raise ConfigError(f"{source} holds a {loaded.kind} policy; flow-rl fine-tunes flow and VLA chunk policies")
    env_cfg, task, overrides = checkpoint_task(loaded.run, source, cfg.env)
    vla = isinstance(policy, VLAPolicy)
    pixels = None
    if vla:
        h, w, _ = policy.image_shape
        pixels = env_cfg.get("pixels") or {"camera": policy.config["camera"], "width": w, "height": h}

    def make(num_envs: int, seed: int):
        env = sim.make(task, num_envs=num_envs, seed=seed, pixels=pixels, **overrides)
        if vla:
            from robolearn.algos.chunk.vla import VLAEnv

            return VLAEnv(env, policy, cfg.instruction or policy.instruction)
        return env

    run_dir = run_dir or Path(f"runs/{task}-flow-{cfg.rl.algo}-{time.strftime('%Y%m%d-%H%M%S')}")
    rl = dataclasses.replace(cfg.rl, seed=cfg.seed)
    env, eval_env = make(cfg.num_envs, cfg.seed + 1), make(cfg.eval_envs, cfg.seed + 7) if cfg.eval_envs else None
    task_cfg = sim.make_task(task, **overrides).cfg
    run_env = {"name": task, "num_envs": cfg.num_envs, "overrides": overrides,
               "policy_dt": float(task_cfg.policy_dt)}
    run = {"env": {**run_env, "pixels": pixels} if vla else run_env, "source": str(source)}

    def log(row: dict) -> None:
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)

    try:
        finetune_flow(policy, env, rl, eval_env=eval_env, log=log, run_dir=run_dir, run=run, resume=bool(cfg.resume))
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    print(f"final policy: {run_dir / 'checkpoints' / 'final'}")
    return run_dir


def run_dsrl(cfg: DSRLJob) -> Path:
    """SAC over a frozen flow / diffusion policy's noise; returns the steered policy's checkpoint folder."""
    import sim
    from robolearn.checkpoints.policy import load_policy, save_chunk_policy
    from robolearn.runners.dsrl import dsrl_runner, restore_dsrl, steered_policy

    if not cfg.checkpoint:
        raise ConfigError("dsrl needs checkpoint=<a flow or diffusion policy checkpoint> (the frozen base)")
    loaded = load_policy(cfg.checkpoint)
    if loaded.kind not in ("flow", "diffusion"):
        raise ConfigError(f"{cfg.checkpoint} holds a {loaded.kind} policy; dsrl steers flow and diffusion policies")
    env_cfg, task, overrides = checkpoint_task(loaded.run, cfg.checkpoint, cfg.env)
    run_dir = Path(_resumed(cfg.resume) or cfg.run_dir or f"runs/{task}-dsrl-{time.strftime('%Y%m%d-%H%M%S')}")
    if cfg.resume and not (run_dir / "checkpoints" / "latest").exists():
        raise ConfigError(f"resume={cfg.resume}: no {run_dir / 'checkpoints' / 'latest'} to continue from")
    env = sim.make(task, num_envs=cfg.num_envs, seed=cfg.seed + 1, **overrides)
    eval_env = sim.make(task, num_envs=cfg.eval_envs, seed=cfg.seed + 7, **overrides) if cfg.eval_envs else None
    try:
        runner = dsrl_runner(loaded.actor, env, eval_env, cfg.sac, run_dir, cfg.dsrl, seed=cfg.seed, progress=True)
        if cfg.resume:
            restore_dsrl(runner, run_dir / "checkpoints" / "latest")
        runner.learn(cfg.iterations, checkpoint_interval=cfg.checkpoint_interval)
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    run = {"env": {**env_cfg, "name": task, "overrides": overrides}, "source": str(cfg.checkpoint),
           "dsrl": dataclasses.asdict(cfg.dsrl)}
    path = save_chunk_policy(run_dir / "policy", steered_policy(runner), run)
    print(f"steered policy: {path}")
    return path
