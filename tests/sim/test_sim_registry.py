"""The task registry: variants are a task class plus config overrides plus documentation numbers."""

from __future__ import annotations

import dataclasses

import pytest

import sim
from sim.core import Task
from sim.tasks import TASKS, TaskSpec, get_task_class, spec
from sim.tasks.maze import LAYOUTS, PointMaze


def test_every_spec_names_a_task_class_and_valid_overrides():
    assert sorted(TASKS) == sim.list_tasks()
    for name, entry in TASKS.items():
        assert entry.name == name and isinstance(entry, TaskSpec)
        assert issubclass(entry.task_class(), Task)
        cfg = entry.default_config()  # the overrides are known fields of the class's config
        for field, value in entry.overrides.items():
            assert getattr(cfg, field) == value, (name, field)
        assert entry.reference_return > entry.random_return and entry.reference_doc
        assert bool(entry.reference_policy) + bool(entry.reference_checkpoint) <= 1


def test_variants_share_their_base_class():
    assert get_task_class("point-maze-umaze") is get_task_class("point-maze-large") is PointMaze
    assert get_task_class("cartpole-balance") is get_task_class("cartpole-swingup")
    assert spec("cartpole-swingup").overrides == {"swing_up": True} and not spec("cartpole-balance").overrides
    assert spec("point-maze-medium").overrides == {"layout": "medium", "episode_length": 600}


def test_spec_is_immutable():
    entry = spec("point-maze-umaze")
    with pytest.raises(TypeError):
        entry.overrides["layout"] = "large"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.random_return = 1.0  # type: ignore[misc]


def test_make_task_applies_the_variant_then_the_user():
    task = sim.make_task("point-maze-medium")
    assert task.name == "point-maze-medium" and task.cfg.layout == "medium" and task.cfg.episode_length == 600
    task = sim.make_task("point-maze-medium", episode_length=900)
    assert task.cfg.layout == "medium" and task.cfg.episode_length == 900


def test_user_layout_override_wins():
    """`layout=` on point-maze-umaze gives that layout (its walls in the model), under the registry name."""
    task = sim.make_task("point-maze-umaze", layout="large")
    assert task.name == "point-maze-umaze" and task.cfg.layout == "large" and task.layout == LAYOUTS["large"]
    walls = sum(row.count("#") for row in LAYOUTS["large"])
    assert sum(task.mj_model.geom(i).name.startswith("wall_") for i in range(task.mj_model.ngeom)) == walls
    with pytest.raises(sim.ConfigError, match="layout must be one of"):
        sim.make_task("point-maze-umaze", layout="labyrinth")


def test_reward_scales_of_a_variant_merge_with_the_user_s():
    task = sim.make_task("arm-push", reward_scales={"place": 2.0})
    assert task.cfg.reward_scales == {"success": 1.0, "reach": 0.1, "place": 2.0}
    with pytest.raises(sim.ConfigError, match="grasp"):
        sim.make_task("arm-push", reward_scales={"grasp": 1.0})  # a pick-place term


def test_bad_reward_term_raises_from_make_task_naming_it():
    with pytest.raises(sim.ConfigError, match="uprite"):
        sim.make_task("cartpole-swingup", reward_scales={"uprite": 2.0})


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(sim.UnknownTaskError, match="point-maze-umaze"):
        spec("point-maze-xl")
    with pytest.raises(sim.UnknownTaskError):
        sim.make_task("point-maze-xl")


def test_construction_only_stores_the_config():
    """No overridable method runs in `Task.__init__`: a subclass sets itself up after `super().__init__`,
    and the model is compiled on first use (or by `build`, which `sim.make_task` calls)."""

    class Shifted(PointMaze):
        def __init__(self, config=None, name=None):
            super().__init__(config, name)
            self.start_xy = self.start_xy + 0.1  # read by `init`, which must not have run yet

    task = Shifted(spec("point-maze-umaze").default_config())
    assert "mj_model" not in vars(task) and "reward_scales" not in vars(task)
    assert task.name == "Shifted" and task.cfg.reward_scales == {}
    assert task.build() is task and task.cfg.reward_scales == {"goal": 1.0}
    assert task.mj_model.nu == 2
