"""`robolearn finetune`: offline-to-online (O2O) fine-tuning, one method per `algo=` (`configs/finetune.yaml`).

    robolearn finetune algo=wsrl dataset=point-maze-umaze-diverse offline_steps=50000 online_steps=100000
    robolearn finetune algo=ro2o checkpoint=runs/<offline ro2o run> online_steps=250000

The command composes the config (`load_config`) and makes one library call (`finetune`: both phases).
"""

from __future__ import annotations

from robolearn.runners.o2o import finetune, load_config


def cmd_finetune(overrides: list[str]) -> int:
    """Run the O2O method configured by `key=value` overrides of configs/finetune.yaml."""
    finetune(load_config(overrides))
    return 0
