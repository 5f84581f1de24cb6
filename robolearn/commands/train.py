"""`robolearn train`: PPO, SAC (and its recipes), TD3 on a simulated task, or an offline algorithm on a dataset.

    robolearn train env=pendulum-swingup algo=sac seed=1 algo.batch_size=128 runner.env_steps=50000
    robolearn train algo=iql dataset=data/d4rl-like/cheetah-run-medium-v0 runner.gradient_steps=100000
    robolearn train resume=runs/<run> iterations=400
    robolearn train algo=wsrl init=runs/<offline run> env=cheetah-run    # warm start (robolearn finetune)

The command composes the config (`load_train_config`) and makes one library call (`run_training`).
"""

from __future__ import annotations

from robolearn.runners.train import load_train_config, run_training


def cmd_train(overrides: list[str]) -> int:
    """Train as configured by `key=value` overrides of configs/train.yaml (a resumed run reads its own config)."""
    run_training(load_train_config(overrides))
    return 0
