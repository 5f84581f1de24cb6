"""Standard datasets and robolearn's tasks: which task a D4RL or Minari dataset trains and scores on
(`dataset_task`), and which Gymnasium env a task equals (`gymnasium_spec`, for `robolearn eval backend=gymnasium`).
One table, `GYMNASIUM`, says which task equals which Gymnasium env:

| Gymnasium env (Minari ``env_spec``)      | robolearn task                         | D4RL HDF5 datasets            |
| ---------------------------------------- | -------------------------------------- | ----------------------------- |
| HalfCheetah-v5, Hopper-v5, Walker2d-v5   | halfcheetah-v5, hopper-v5, walker2d-v5 | {halfcheetah,hopper,walker2d}-* |
| Ant-v5                                   | ant-v5                                 | ant-*: refused (111 numbers)  |
| PointMaze_{UMaze,Medium,Large}[Dense]-v3 | pointmaze-{umaze,medium,large}[-dense] | maze2d-*: refused             |
| AntMaze_{UMaze,Medium,Large}-v4          | antmaze-{umaze,medium,large}           | antmaze-*: refused            |

A Minari dataset names its env in ``eval_env_spec`` (preferred: the env its reference scores were measured in)
or ``env_spec``: the env id picks the task, each keyword argument that is a task option of the same name becomes a
task override (``reset_noise_scale``, ``reward_type``, ...), a maze's ``maze_map`` picks the task's ``layout`` with
that map, arguments that only render are ignored, and any other argument must equal what the task always is
(`FIXED`: the mazes' ``reset_target=False``) or Gymnasium's default (else the env differs from every task: a
`ConfigError` naming it); ``max_episode_steps`` becomes ``episode_length``. A
robolearn dataset names its task in its metadata; a D4RL file is named by its D4RL id (the gym-mujoco robots map to
the v5 task with the same observation layout; D4RL recorded them in gym's v2 envs, so this is the same observation,
not the same simulator). An explicit ``env=`` always wins over all of this (the observation and action sizes are
still checked: `robolearn.data.replay.dataset_buffer`).

The reverse, `gymnasium_spec`, gives the Gymnasium id, keyword arguments and ``max_episode_steps`` a task (with its
overrides) equals, refusing overrides Gymnasium has no argument for; `make_gymnasium` builds the env of such a spec
(registering gymnasium-robotics' envs when it needs them).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from robolearn.errors import ConfigError

#: Gymnasium env id -> the robolearn task equal to it (the one table: tasks, eval's cross-check and the docs)
GYMNASIUM: dict[str, str] = {
    "HalfCheetah-v5": "halfcheetah-v5", "Hopper-v5": "hopper-v5", "Walker2d-v5": "walker2d-v5", "Ant-v5": "ant-v5",
    **{f"PointMaze_{maze}{dense}-v3": f"pointmaze-{layout}{'-dense' if dense else ''}"
       for maze, layout in (("UMaze", "umaze"), ("Medium", "medium"), ("Large", "large")) for dense in ("", "Dense")},
    **{f"AntMaze_{maze}-v4": f"antmaze-{layout}"
       for maze, layout in (("UMaze", "umaze"), ("Medium", "medium"), ("Large", "large"))},
}

#: Keyword arguments a task has no option for but always equals (checked without importing the env's package)
FIXED: dict[str, dict[str, Any]] = {gym_id: {"reset_target": False} for gym_id in GYMNASIUM
                                    if gym_id.startswith(("PointMaze_", "AntMaze_"))}

#: D4RL gym-mujoco robot (a D4RL id's first part) -> the Gymnasium env whose task has the same observation layout
D4RL_ROBOTS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker2d": "Walker2d-v5", "ant": "Ant-v5"}

#: D4RL families whose HDF5 files no robolearn task reproduces, and why (their Minari re-releases do map)
D4RL_REFUSED = {
    "maze2d": ("D4RL's maze2d files observe the ball's [x, y, vx, vy] (4 numbers) without the goal, in maze2d's "
               "own frame and point model; pointmaze-* is gymnasium-robotics' PointMaze and observes its flattened "
               "dict (achieved_goal 2, desired_goal 2, observation 4: 8 numbers). Train on Minari's "
               "D4RL/pointmaze/<maze>-v2 instead (dataset=D4RL/pointmaze/umaze-v2)"),
    "antmaze": ("D4RL's antmaze files observe the ant's qpos (15, its x, y included) and qvel (14): 29 numbers "
                "without the goal; antmaze-* is gymnasium-robotics' AntMaze and observes its flattened dict "
                "(achieved_goal 2, desired_goal 2, observation 27: 31 numbers). Train on Minari's "
                "D4RL/antmaze/<name>-v1 instead (dataset=D4RL/antmaze/umaze-v1)"),
}

#: Keyword arguments that only change rendering: ignored when matching, never passed to the cross-check
RENDERING = frozenset({"render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config",
                       "visual_options", "max_geom"})


@dataclasses.dataclass(frozen=True)
class TaskChoice:
    """The robolearn task a dataset trains and scores on."""

    task: str                       # a registered task (`sim.tasks.TASKS`)
    overrides: dict[str, Any]       # its config overrides (episode_length, reward_type, ...)
    gymnasium: dict[str, Any] | None  # the dataset's own Gymnasium env: {"id", "kwargs", "max_episode_steps"}
    origin: str                     # where the choice came from, for messages ("Minari env_spec HalfCheetah-v5")


def dataset_task(metadata: Mapping[str, Any], obs_size: int | None, source: Any) -> TaskChoice | None:
    """The task for a dataset with `metadata` (as `robolearn.data.sources.load_source` returns it) whose "policy"
    observations hold `obs_size` numbers: its recorded robolearn task, else its Minari env spec's, else its D4RL
    id's; None when it names none. A dataset whose env no task reproduces is a `ConfigError` naming why."""
    from sim.tasks import TASKS

    task = metadata.get("task")
    if isinstance(task, str) and task in TASKS:
        # a dataset that names an evaluation task apart from the one it was collected in (`collected_in`: the maze
        # recipes) trains and scores with that task's options (antmaze: continuing_task=False, D4RL's evaluation);
        # otherwise the recorded env is the collection's, whose options (a diverse kind's random starts) are not
        env = metadata.get("env") if "collected_in" in metadata else None
        overrides = dict(env.get("overrides") or {}) if isinstance(env, Mapping) else {}
        return TaskChoice(task, overrides, None, "the dataset's metadata")
    minari = metadata.get("minari") if isinstance(metadata.get("minari"), Mapping) else {}
    for key in ("eval_env_spec", "env_spec"):
        spec = _env_spec(minari.get(key), f"{source}: {key}")
        if spec is not None:
            return _from_env_spec(spec, f"Minari {key} {spec['id']}", source)
    name = metadata.get("d4rl_dataset")
    if isinstance(name, str):
        return _from_d4rl(name, obs_size, source)
    return None


def _env_spec(value: Any, where: str) -> dict[str, Any] | None:
    """A Gymnasium EnvSpec as Minari stores it (its JSON, or a dict); None if absent."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ConfigError(f"{where} is not valid JSON ({e}); the dataset's metadata is corrupt") from None
    if not isinstance(value, Mapping) or not isinstance(value.get("id"), str):
        raise ConfigError(f"{where} names no env id; the dataset's metadata is corrupt: pass env=<task>")
    return dict(value)


def _from_env_spec(spec: dict[str, Any], origin: str, source: Any) -> TaskChoice:
    """The task equal to a Gymnasium env spec (id, kwargs, max_episode_steps); see the module docstring."""
    gym_id, kwargs = spec["id"], dict(spec.get("kwargs") or {})
    task = GYMNASIUM.get(gym_id)
    if task is None:
        raise ConfigError(f"dataset {source} was recorded in Gymnasium's {gym_id}, which no robolearn task equals "
                          f"(those that do: {', '.join(sorted(GYMNASIUM))}); pass env=<task> to train on one anyway")
    cfg, fields = _task_config(task)
    fixed = FIXED.get(gym_id, {})
    overrides: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in RENDERING:
            continue
        if key == "maze_map" and "layout" in fields:
            layout = _layout(value, cfg, task, source)
            if layout != cfg.layout:
                overrides["layout"] = layout
        elif key in fields:
            if not same(value, getattr(cfg, key)):
                overrides[key] = value
        elif not same(value, fixed[key] if key in fixed else _default(gym_id, key)):
            raise ConfigError(f"dataset {source}: its env {gym_id} was made with {key}={value!r}, which changes the "
                              f"env, and {task} has no option {key!r} (its options: "
                              f"{', '.join(sorted(fields))}); pass env=<task> to train on a task anyway (scores then "
                              "come from another env than the dataset's)")
    steps = spec.get("max_episode_steps")
    if steps is not None and int(steps) != cfg.episode_length:
        overrides["episode_length"] = int(steps)
    recorded = {"id": gym_id, "kwargs": {k: v for k, v in kwargs.items() if k not in RENDERING},
                "max_episode_steps": None if steps is None else int(steps)}
    return TaskChoice(task, overrides, recorded, origin)


def _from_d4rl(name: str, obs_size: int | None, source: Any) -> TaskChoice:
    """The task of a D4RL HDF5 dataset id (``halfcheetah-medium-v2``); refused families say why."""
    family = name.split("-", 1)[0]
    if family in D4RL_REFUSED:
        raise ConfigError(f"dataset {source} ({name}, observations of {obs_size} numbers): "
                          f"{D4RL_REFUSED[family]}; or pass env=<task> to train on a task anyway")
    gym_id = D4RL_ROBOTS.get(family)
    if gym_id is None:
        raise ConfigError(f"dataset {source} is D4RL's {name}, whose env no robolearn task reproduces (robolearn "
                          f"has D4RL's {', '.join(sorted(D4RL_ROBOTS))}); pass env=<task> to train on one anyway")
    overrides: dict[str, Any] = {}
    if family == "ant":  # D4RL recorded gym's Ant-v2: 27 + cfrc_ext of all 14 bodies, the world body included
        if obs_size == 27:
            overrides["include_cfrc_ext_in_observation"] = False
        elif obs_size != 105:
            raise ConfigError(f"dataset {source} is D4RL's {name}, whose observations hold {obs_size} numbers (gym "
                              "Ant-v2's: qpos[2:] 13, qvel 14 and the clipped contact forces of all 14 bodies, the "
                              "world body's included: 111); ant-v5 observes 105 (13 bodies: Gymnasium v5) or 27 "
                              "(include_cfrc_ext_in_observation=false), so no task reproduces this layout: keep the "
                              "first 27 columns (drop the contact forces) and pass env=ant-v5 "
                              "+env.overrides.include_cfrc_ext_in_observation=false")
    kwargs = dict(overrides)
    return TaskChoice(GYMNASIUM[gym_id], overrides, {"id": gym_id, "kwargs": kwargs, "max_episode_steps": 1000},
                      f"D4RL {name} (recorded in gym's {gym_id[:-1]}2, observed as {gym_id})")


def _task_config(task: str) -> tuple[Any, set[str]]:
    """A registered task's config (its variant's defaults) and its field names."""
    from sim.tasks import spec

    cfg = spec(task).default_config()
    return cfg, {f.name for f in dataclasses.fields(cfg)}


def _gym_map(rows: Any) -> list[list[Any]]:
    """A maze map as gymnasium-robotics' ``maze_map`` (1 wall, 0 open, 'g' / 'r' / 'c' markers), from the task's
    rows of '#', '.', 'g', 'r', 'c' or from a stored ``maze_map``."""
    cell = {"#": 1, ".": 0, "1": 1, "0": 0}
    out = []
    for row in rows:
        items = list(row) if isinstance(row, str) else row
        out.append([cell.get(str(c).lower(), str(c).lower()) if not isinstance(c, bool) else int(c) for c in items])
    return out


def _layout(maze_map: Any, cfg: Any, task: str, source: Any) -> str:
    """The task's layout whose map is ``maze_map`` (its own first), or a ConfigError listing the maps it has."""
    layouts = getattr(cfg, "layouts", {})
    wanted = _gym_map(maze_map)
    for name in sorted(layouts, key=lambda n: n != cfg.layout):
        if _gym_map(layouts[name]) == wanted:
            return name
    raise ConfigError(f"dataset {source}: its env's maze_map {wanted} is none of {task}'s layouts "
                      f"({', '.join(layouts)}: `layouts` of sim/tasks/d4rl_maze.py, maps with the datasets' goal and "
                      "start cells, which decide the returns); pass env=<task> to train on one anyway")


def same(a: Any, b: Any) -> bool:
    """Whether two keyword-argument values are equal as Gymnasium would use them (tuples and lists alike, 1 == 1.0,
    numpy values as Python's)."""
    if hasattr(a, "tolist"):
        a = a.tolist()
    if hasattr(b, "tolist"):
        b = b.tolist()
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def _registered(gym_id: str) -> Any:
    """The Gymnasium EnvSpec of ``gym_id``, registering gymnasium-robotics' envs when the id is theirs."""
    import gymnasium as gym

    if gym_id not in gym.registry:
        try:
            import gymnasium_robotics
        except ImportError:
            raise ConfigError(f"Gymnasium env {gym_id} is not registered; it is gymnasium-robotics': pip install "
                              "gymnasium-robotics") from None
        gym.register_envs(gymnasium_robotics)
    if gym_id not in gym.registry:
        raise ConfigError(f"Gymnasium env {gym_id} is not registered (gymnasium {gym.__version__}); install the "
                          "package that registers it")
    return gym.spec(gym_id)


def _default(gym_id: str, key: str) -> Any:
    """Gymnasium's default of one keyword argument (a marker object, equal to nothing, when it has none)."""
    return gymnasium_defaults(gym_id).get(key, _NO_DEFAULT)


_NO_DEFAULT = object()


def gymnasium_defaults(gym_id: str) -> dict[str, Any]:
    """Every keyword argument of Gymnasium env ``gym_id`` with its default: the env class's own, then the
    registration's (``PointMaze_UMazeDense-v3``'s reward_type="dense")."""
    import inspect

    from gymnasium.envs.registration import load_env_creator

    env_spec = _registered(gym_id)
    creator = load_env_creator(env_spec.entry_point) if isinstance(env_spec.entry_point, str) else env_spec.entry_point
    defaults = {name: p.default for name, p in inspect.signature(creator).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return {**defaults, **dict(env_spec.kwargs)}


def gymnasium_spec(task: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The Gymnasium env robolearn task ``task`` with ``overrides`` equals: {"id", "kwargs" (those differing from
    Gymnasium's defaults), "max_episode_steps"}. An override Gymnasium has no argument for (action_repeat,
    reward_scales, obs_noise, ...) is a `ConfigError`: that task is no Gymnasium env."""
    from sim.core import apply_overrides

    gym_id = next((g for g, t in GYMNASIUM.items() if t == task), None)
    if gym_id is None:
        raise ConfigError(f"task {task} equals no Gymnasium env (those that do: "
                          f"{', '.join(sorted(set(GYMNASIUM.values())))}): backend=gymnasium cannot cross-check it")
    base, _ = _task_config(task)
    cfg = apply_overrides(base, dict(overrides))
    defaults = gymnasium_defaults(gym_id)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name == "episode_length":
            continue
        if f.name == "layout" and "maze_map" in defaults:
            name, value = "maze_map", _gym_map(cfg.layouts[value])
        else:
            name = f.name
        if name in defaults:
            if not same(value, defaults[name]):
                kwargs[name] = list(value) if isinstance(value, tuple) else value
        elif not same(value, getattr(base, f.name)):
            raise ConfigError(f"{task} with {f.name}={value!r} is no Gymnasium env: {gym_id} has no argument "
                              f"{f.name!r}; backend=gymnasium cross-checks tasks as Gymnasium has them")
    return {"id": gym_id, "kwargs": kwargs, "max_episode_steps": int(cfg.episode_length)}


def make_gymnasium(spec: Mapping[str, Any]) -> Any:
    """``gymnasium.make`` of a spec from `gymnasium_spec` or a dataset's recorded env (`TaskChoice.gymnasium`)."""
    import gymnasium as gym

    _registered(spec["id"])
    kwargs = {k: v for k, v in (spec.get("kwargs") or {}).items() if k not in RENDERING}
    steps = spec.get("max_episode_steps")
    return gym.make(spec["id"], **({"max_episode_steps": int(steps)} if steps else {}), **kwargs)


__all__ = ["D4RL_REFUSED", "D4RL_ROBOTS", "FIXED", "GYMNASIUM", "RENDERING", "TaskChoice", "dataset_task",
           "gymnasium_defaults", "gymnasium_spec", "make_gymnasium", "same"]
