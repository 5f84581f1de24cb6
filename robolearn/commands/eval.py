"""`robolearn eval` and `robolearn render`: a checkpoint's policy scored on, or filmed in, its own task.

    robolearn eval checkpoint=runs/<run>/checkpoints/final episodes=10
    robolearn eval checkpoint=runs/<run>/checkpoints/final backend=gymnasium   # also in the Gymnasium env
    robolearn render checkpoint=runs/<run>/checkpoints/final out=policy.mp4
"""

from __future__ import annotations

import dataclasses

from robolearn.config import EnvConfig
from robolearn.errors import ConfigError
from robolearn.eval.evaluate import BACKENDS, render_checkpoint, score_checkpoint


@dataclasses.dataclass
class EvalConfig:
    """`robolearn eval`: mean return and normalised score of a checkpoint over full episodes (one env per episode),
    in our batched sim and, with backend=gymnasium, also in the Gymnasium env of its dataset (or task), side by
    side."""

    checkpoint: str | None = None   # a checkpoint folder, e.g. runs/<run>/checkpoints/final (required)
    episodes: int = 10
    seed: int = 1000                # evaluation seeds differ from training's (0)
    mode: str = "deterministic"     # deterministic | sample
    device: str = "auto"            # the env's device (auto: where its physics runs); the policy follows
    backend: str = "sim"            # sim | gymnasium: also score in the Gymnasium env the run's dataset was recorded
    #                                 in (or its task equals), episode i from reset(seed=seed + i): a cross-check

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"eval backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")


@dataclasses.dataclass
class RenderConfig:
    """`robolearn render`: a video of one episode of a checkpoint's policy, or of random actions in `env`."""

    checkpoint: str | None = None   # a checkpoint folder; without one, random actions in `env`
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)  # env=<task>: a random-policy video's task
    out: str | None = None          # default: policy.mp4 (checkpoint) or <env>.mp4
    steps: int | None = None        # null: one episode
    seed: int = 0


def cmd_eval(cfg: EvalConfig) -> int:
    if not cfg.checkpoint:
        raise ConfigError("eval needs checkpoint=<run_dir>/checkpoints/final")
    scores = score_checkpoint(cfg.checkpoint, cfg.episodes, cfg.seed, cfg.mode, cfg.device,  # type: ignore[arg-type]
                              cfg.backend)
    print(scores.table())
    return 0


def cmd_render(cfg: RenderConfig) -> int:
    import sim

    if cfg.checkpoint:
        path = render_checkpoint(cfg.checkpoint, cfg.out or "policy.mp4", seed=cfg.seed, num_steps=cfg.steps)
    else:
        name = cfg.env.name
        path = sim.render(name, path=cfg.out or f"{name}.mp4", num_steps=cfg.steps, seed=cfg.seed,
                          **(cfg.env.overrides or {}))
    print(f"wrote {path}")
    return 0
