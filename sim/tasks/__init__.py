"""The task registry: every task by name.

To add a task family: write `sim/tasks/<family>.py`, import its classes here and list them in
`_CLASSES` (one line per family).
"""

from __future__ import annotations

from sim.core import Task
from sim.errors import UnknownTaskError
from sim.tasks.ant import AntMazeLarge, AntMazeMedium, AntMazeUmaze, AntVelocity
from sim.tasks.arm import ArmPickPlace, ArmPush, ArmReach
from sim.tasks.cartpole import CartpoleBalance, CartpoleSwingup
from sim.tasks.cheetah import CheetahRun
from sim.tasks.maze import PointMazeLarge, PointMazeMedium, PointMazeUmaze
from sim.tasks.pendulum import PendulumSwingup
from sim.tasks.point_mass import PointMass
from sim.tasks.quadrotor import QuadrotorHover, QuadrotorTrack
from sim.tasks.quadruped import QuadrupedJoystick
from sim.tasks.rc_car import RcCarTrack
from sim.tasks.walker import WalkerWalk

_CLASSES: list[type[Task]] = [
    AntVelocity, AntMazeUmaze, AntMazeMedium, AntMazeLarge,
    ArmReach, ArmPush, ArmPickPlace,
    CartpoleBalance, CartpoleSwingup,
    PendulumSwingup,
    PointMass,
    QuadrotorHover, QuadrotorTrack,
    QuadrupedJoystick,
    PointMazeUmaze, PointMazeMedium, PointMazeLarge,
    CheetahRun,
    RcCarTrack,
    WalkerWalk,
]

TASKS: dict[str, type[Task]] = {t.name: t for t in _CLASSES}


def get_task_class(name: str) -> type[Task]:
    """The task class registered under `name`; an unknown name raises with the list of valid ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; available tasks: {sorted(TASKS)}") from None
