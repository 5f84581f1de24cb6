"""`robolearn train`: PPO, SAC (and its recipes), TD3 on a simulated task, or an offline algorithm on a dataset.

    robolearn train env=pendulum-swingup algo=sac seed=1 algo.batch_size=128
    robolearn train algo=iql dataset=data/d4rl-like/cheetah-run-medium-v0 algo.gradient_steps=100000
    robolearn train resume=runs/<run> iterations=400
    robolearn train algo=wsrl init=runs/<offline run> env=cheetah-run    # warm start (robolearn finetune)

The run itself is `robolearn.runners.train.train`; this module is only the command's entry point.
"""

from __future__ import annotations

from robolearn.runners.train import train


def cmd_train(overrides: list[str]) -> int:
    """Train as configured by `key=value` overrides of configs/train.yaml (a resumed run reads its own config)."""
    train(overrides)
    return 0
