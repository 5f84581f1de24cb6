"""The task registry: every task by name, as data.

A registered task is a `TaskSpec`: a task class, named as "module:Class" and imported only when the
task is built, the config overrides that make this variant of it (a maze layout, a swing-up start)
and its documentation numbers (returns of random actions and of the reference controller). Listing
tasks and reading their numbers therefore needs neither JAX nor MuJoCo.

    spec("point-maze-medium").reference_return          # 190.2; no JAX imported
    spec("point-maze-medium").overrides                 # {"layout": "medium", "episode_length": 600}
    task = spec("point-maze-medium").make(episode_length=900)  # PointMaze: the variant's fields, then yours

To add a task: write `sim/tasks/<family>.py` (a `Task` subclass and its config) and add one
`TaskSpec` per variant to `_SPECS` below.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sim.errors import UnknownTaskError

if TYPE_CHECKING:
    from sim.core import Task, TaskConfig


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One registered task: a task class plus config overrides plus its documentation numbers."""

    name: str
    #: The task class, "module:Class" (imported on first use).
    cls: str
    #: Config fields this variant sets (applied before the user's overrides).
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: Undiscounted return of uniform random actions over one default episode (for score normalisation),
    #: as measured by `sim.tasks.reference.measure_returns` (64 envs, seed 0).
    random_return: float = 0.0
    #: Return of the reference controller (scripted or trained) described by `reference_doc`.
    reference_return: float = 0.0
    reference_doc: str = ""
    #: Where the reference controller lives: "module:function" of a scripted policy (batched torch
    #: "policy" observation -> actions in [-1, 1]) ...
    reference_policy: str = ""
    #: ... or the repo-relative checkpoint directory of a trained one.
    reference_checkpoint: str = ""
    #: Control steps over which the backend test compares MJX and C trajectories (random actions);
    #: chaotic tasks (float32 round-off grows past the tolerance within a second) set fewer.
    equivalence_steps: int = 60

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))

    def checkpoint_path(self) -> Path | None:
        """The absolute path of `reference_checkpoint` (repo-relative), or None."""
        return Path(__file__).resolve().parents[2] / self.reference_checkpoint if self.reference_checkpoint else None

    def task_class(self) -> type[Task]:
        """The task class (imports its module, and so JAX and MuJoCo)."""
        module, _, attr = self.cls.partition(":")
        return getattr(importlib.import_module(module), attr)

    def default_config(self) -> TaskConfig:
        """The variant's config: the class's defaults with this spec's overrides."""
        from sim.core import apply_overrides

        cls = self.task_class()
        return apply_overrides(cls.config_class(), dict(self.overrides))

    def make(self, **overrides: Any) -> Task:
        """The task, built: the variant's overrides, then `overrides` (unknown fields raise `ConfigError`)."""
        from sim.core import apply_overrides

        cfg = apply_overrides(self.default_config(), overrides)
        return self.task_class()(cfg, name=self.name).build()

    def describe(self) -> str:
        """The task's documentation (its class docstring), for `robolearn tasks` and the docs."""
        return self.task_class().describe()


def _maze(prefix: str, cls: str, episode_length: dict[str, int], reference_return: dict[str, float],
          reference_doc: str, policy: str = "") -> list[TaskSpec]:
    """The three maze layouts of a maze task: D4RL's umaze, medium and large."""
    return [TaskSpec(f"{prefix}-{layout}", cls, {"layout": layout, "episode_length": episode_length[layout]},
                     random_return=0.0, reference_return=reference_return[layout], reference_doc=reference_doc,
                     reference_policy=policy.format(layout=layout))
            for layout in ("umaze", "medium", "large")]


#: D4RL's REF_MIN_SCORE / REF_MAX_SCORE (d4rl/infos.py) of the maze2d-*-v1 and maze2d-*-dense-v1 tasks, and
#: antmaze-*-v0's 0 / 1: (sparse random, sparse expert, dense random, dense expert) per layout.
_D4RL_MAZE_SCORES = {"umaze": (23.85, 161.86, 68.537689, 193.66285642381482),
                     "medium": (13.13, 277.39, 44.264742, 297.4552547777125),
                     "large": (6.7, 273.99, 30.569041, 303.4857382709002)}


def _d4rl_mazes() -> list[TaskSpec]:
    """gymnasium-robotics' D4RL mazes as Minari's datasets record them (sim/tasks/d4rl_maze.py): pointmaze-* (sparse
    and -dense, anchored at D4RL's maze2d-*-v1 scores) and antmaze-* (anchored at 0 / 1: D4RL normalises antmaze by
    success; here the continuing task's return counts the steps spent at the goal, so compare `episode/success`).

    equivalence_steps (tests/sim/test_d4rl_maze.py has the details): MJX and C part at the first contact inside a
    geom margin, which MJX handles differently: the ball's first wall touch inside 0.004 m at step 62 (umaze, large;
    128 medium), the ant's first foot on the floor at step 4 (jax 0.10.2, mujoco 4.0.0, mujoco-mjx 3.17)."""
    doc = ("D4RL's REF_MIN_SCORE / REF_MAX_SCORE of {task} (d4rl/infos.py: a random policy / D4RL's expert in "
           "D4RL's own env), used to normalise D4RL scores; not measured here")
    specs = []
    for layout, steps in {"umaze": 300, "medium": 600, "large": 800}.items():
        lo, hi, dense_lo, dense_hi = _D4RL_MAZE_SCORES[layout]
        specs += [TaskSpec(f"pointmaze-{layout}", "sim.tasks.d4rl_maze:D4RLPointMaze",
                           {"layout": layout, "episode_length": steps}, random_return=lo, reference_return=hi,
                           reference_doc=doc.format(task=f"maze2d-{layout}-v1"), equivalence_steps=50),
                  TaskSpec(f"pointmaze-{layout}-dense", "sim.tasks.d4rl_maze:D4RLPointMaze",
                           {"layout": layout, "episode_length": steps, "reward_type": "dense"},
                           random_return=dense_lo, reference_return=dense_hi,
                           reference_doc=doc.format(task=f"maze2d-{layout}-dense-v1"), equivalence_steps=50)]
    for layout, steps in {"umaze": 700, "medium": 1000, "large": 1000}.items():
        specs.append(TaskSpec(f"antmaze-{layout}", "sim.tasks.d4rl_maze:D4RLAntMaze",
                              {"layout": layout, "episode_length": steps}, random_return=0.0, reference_return=1.0,
                              reference_doc=doc.format(task=f"antmaze-{layout}-v0") + " (a success rate)",
                              equivalence_steps=3))
    return specs


#: The Gymnasium MuJoCo v5 tasks' anchors are D4RL's, as CORL and other offline-RL papers normalise with them.
_D4RL_DOC = ("D4RL's REF_MIN_SCORE / REF_MAX_SCORE (a uniform random policy / D4RL's expert SAC policy, measured "
             "by D4RL in its gym / mujoco-py environments), used to normalise D4RL scores as CORL does; not "
             "measured here")

_SPECS: list[TaskSpec] = [
    TaskSpec("ant-velocity", "sim.tasks.ant:AntVelocity", random_return=595.1, reference_return=1181.7,
             reference_doc="central-pattern-generator trot steered by the command (sim/tasks/ant_control.py)",
             reference_policy="sim.tasks.ant_control:ant_velocity_policy",
             # contact-rich: MJX (float32) and C (float64) start 4e-7 apart and contacts amplify it, to 7.9e-4
             # at step 53 with jax 0.10.2 / mujoco 4.0.0 / mjx 3.17.0 (already so before the registry change)
             equivalence_steps=40),
    *_maze("ant-maze", "sim.tasks.ant:AntMaze", {"umaze": 700, "medium": 1000, "large": 1000},
           {"umaze": 361.9, "medium": 392.9, "large": 163.3},
           "breadth-first waypoints steering the scripted trot (sim/tasks/ant_control.py)",
           "sim.tasks.ant_control:ant_maze_{layout}_policy"),
    TaskSpec("arm-reach", "sim.tasks.arm:Arm",
             {"kind": "reach", "episode_length": 100, "reward_scales": {"success": 1.0, "reach": 0.5}},
             random_return=11.85, reference_return=136.59,
             reference_doc="analytic inverse kinematics + joint-space P control (sim/tasks/arm_control.py)",
             reference_policy="sim.tasks.arm_control:reach_policy"),
    TaskSpec("arm-push", "sim.tasks.arm:Arm",
             {"kind": "push", "episode_length": 150, "reward_scales": {"success": 1.0, "reach": 0.1, "place": 0.5}},
             random_return=28.5, reference_return=170.46,
             reference_doc="inverse kinematics + phases: get behind the cube, lower, push it along the line to the "
                           "goal (sim/tasks/arm_control.py)",
             reference_policy="sim.tasks.arm_control:push_policy"),
    TaskSpec("arm-pick-place", "sim.tasks.arm:Arm",
             {"kind": "pick-place", "episode_length": 200,
              "reward_scales": {"success": 1.0, "reach": 0.1, "grasp": 0.25, "place": 0.5}},
             random_return=29.66, reference_return=304.89,
             reference_doc="inverse kinematics + phases: above the cube, align, descend, close, lift, carry to the "
                           "goal, hold (sim/tasks/arm_control.py)",
             reference_policy="sim.tasks.arm_control:pick_place_policy"),
    TaskSpec("cartpole-balance", "sim.tasks.cartpole:Cartpole", random_return=353.6, reference_return=999.8,
             reference_doc="LQR state feedback (sim/tasks/reference.py)"),
    TaskSpec("cartpole-swingup", "sim.tasks.cartpole:Cartpole", {"swing_up": True}, random_return=27.5,
             reference_return=868.2, reference_doc="energy swing-up + LQR (sim/tasks/reference.py)"),
    TaskSpec("cheetah-run", "sim.tasks.cheetah:CheetahRun", random_return=3.8, reference_return=644.2,
             reference_doc="trained: PPO, 1.6M env-steps, 256 envs, 128x128 networks, deterministic policy "
                           "(benchmarks/references/cheetah-run-ppo)",
             reference_checkpoint="benchmarks/references/cheetah-run-ppo"),
    # Gymnasium's MuJoCo v5 locomotion (sim/tasks/mujoco_v5.py), anchored as D4RL normalises its scores.
    # equivalence_steps: MJX and C part by more than the test's tolerance at step 13 (cheetah, full random torques
    # tumble it), 152 (hopper), 42 (walker) and 2 (ant: its contacts lie inside the geoms' 0.01 margins, where MJX's
    # contact forces differ from MuJoCo C's; see tests/sim/test_mujoco_v5.py::test_mjx_ant), with jax 0.10.2 /
    # mujoco 4.0.0.
    TaskSpec("halfcheetah-v5", "sim.tasks.mujoco_v5:HalfCheetah", random_return=-280.178953,
             reference_return=12135.0, reference_doc=_D4RL_DOC, equivalence_steps=12),
    TaskSpec("hopper-v5", "sim.tasks.mujoco_v5:Hopper", random_return=-20.272305, reference_return=3234.3,
             reference_doc=_D4RL_DOC, equivalence_steps=40),  # parts at 152; 40 keeps the MJX run short
    TaskSpec("walker2d-v5", "sim.tasks.mujoco_v5:Walker2d", random_return=1.629008, reference_return=4592.3,
             reference_doc=_D4RL_DOC, equivalence_steps=36),
    TaskSpec("ant-v5", "sim.tasks.mujoco_v5:Ant", random_return=-325.6, reference_return=3879.7,
             reference_doc=_D4RL_DOC, equivalence_steps=2),
    # Minari's GoalReachAnt recipe on Ant-v5 (sim/tasks/ant_goal.py): the goal reacher under the antmaze waypoints,
    # which `robolearn collect suite=antmaze` drives (benchmarks/results/antmaze_reacher_cpu.json: its success there).
    TaskSpec("ant-goal", "sim.tasks.ant_goal:AntGoal", random_return=-121.9, reference_return=5767.0,
             reference_doc="trained: SAC, 800K env-steps, 8 envs, 256x256 networks, deterministic policy "
                           "(benchmarks/references/ant-goal-sac)",
             reference_checkpoint="benchmarks/references/ant-goal-sac", equivalence_steps=2),
    TaskSpec("pendulum-swingup", "sim.tasks.pendulum:PendulumSwingup", random_return=3.8, reference_return=848.6,
             reference_doc="energy pumping + PD hold (sim/tasks/reference.py)"),
    TaskSpec("point-mass", "sim.tasks.point_mass:PointMass", random_return=10.4, reference_return=898.2,
             reference_doc="saturated PD to the target (sim/tasks/reference.py)"),
    *_d4rl_mazes(),
    *_maze("point-maze", "sim.tasks.maze:PointMaze", {"umaze": 300, "medium": 600, "large": 800},
           {"umaze": 72.6, "medium": 190.2, "large": 238.8}, "breadth-first waypoints + PD (sim/tasks/reference.py)"),
    TaskSpec("quadrotor-hover", "sim.tasks.quadrotor:Quadrotor", random_return=-3.8, reference_return=421.2,
             reference_doc="cascaded geometric PD controller, nominal mass (sim/tasks/reference.py)"),
    TaskSpec("quadrotor-track", "sim.tasks.quadrotor:Quadrotor", {"track": True}, random_return=-3.8,
             reference_return=419.1,
             reference_doc="cascaded geometric PD controller with velocity feed-forward (sim/tasks/reference.py)"),
    TaskSpec("quadruped-joystick", "sim.tasks.quadruped:QuadrupedJoystick", random_return=0.008,
             reference_return=12.71,  # standing still (zero actions) scores 7.22
             reference_doc="scripted trot: gait clock, command-driven foot trajectories, leg inverse kinematics and "
                           "servo compensation (sim/tasks/quadruped_control.py)",
             reference_policy="sim.tasks.quadruped_control:trot_policy"),
    TaskSpec("rc-car-track", "sim.tasks.rc_car:RcCarTrack", random_return=-8.4, reference_return=140.8,
             reference_doc="slow pure pursuit through the observed checkpoints (sim/tasks/rc_car_control.py)",
             reference_policy="sim.tasks.rc_car_control:demo_lap_policy"),
    TaskSpec("walker-walk", "sim.tasks.walker:WalkerWalk", random_return=32.1, reference_return=909.7,
             reference_doc="trained: PPO, 2.9M env-steps (350 iterations), 256 envs, 256x256 networks, "
                           "deterministic policy (benchmarks/references/walker-walk-ppo)",
             reference_checkpoint="benchmarks/references/walker-walk-ppo",
             # 0.4 s: the flailing walker's impacts (light feet on strong motors, stiff joint limits, a 28 kg
             # body landing on the floor) amplify float32 rounding and the float32 contact solve, so past
             # ~0.5 s MJX and C part by more than the test's 1e-4 (C alone, with its state rounded to
             # float32 every physics step, parts from C as far). One-step errors stay small.
             equivalence_steps=16),
]

#: Every registered task by name.
TASKS: Mapping[str, TaskSpec] = MappingProxyType({s.name: s for s in _SPECS})


def spec(name: str) -> TaskSpec:
    """The registry entry of task `name`; an unknown name raises `UnknownTaskError` listing the valid ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; available tasks: {sorted(TASKS)}") from None


def get_task_class(name: str) -> type[Task]:
    """The task class behind `name` (a variant's class is its base class: see `spec(name).overrides`)."""
    return spec(name).task_class()


def make_task(name: str, **overrides: Any) -> Task:
    """Build task `name`: its variant's config overrides, then `overrides`; unknown fields raise `ConfigError`."""
    return spec(name).make(**overrides)
