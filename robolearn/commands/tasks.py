"""`robolearn tasks`: every registered task with its random and reference returns.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class TasksConfig:
    """`robolearn tasks`: every registered task with its random and reference returns."""

    verbose: bool = False           # also print each task's documentation


def cmd_tasks(cfg: TasksConfig) -> int:
    import sim

    for name in sim.list_tasks():
        spec = sim.task_spec(name)
        print(f"{name:20s} random return {spec.random_return:8.1f}   reference {spec.reference_return:8.1f}")
        if cfg.verbose:
            print("    " + spec.describe().replace("\n", "\n    ") + "\n")
    return 0
