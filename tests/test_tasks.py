"""Each task is documented and scores as recorded: random and scripted-reference returns."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim
from sim.tasks import TASKS
from sim.tasks.reference import REFERENCE_POLICIES, measure_returns

# Tasks whose reference is a trained policy shipped as a checkpoint rather than a scripted controller.
TRAINED = {"cheetah-run": Path(__file__).parents[1] / "benchmarks" / "references" / "cheetah-run-ppo"}


def _reference_policy(name: str):
    if name not in TRAINED:
        return REFERENCE_POLICIES[name]
    from tensordict import TensorDict

    from robolearn.train import load_policy

    policy, _ = load_policy(TRAINED[name])
    return lambda obs: policy(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))


@pytest.mark.parametrize("name", sim.list_tasks())
def test_task_is_documented(name):
    cls = TASKS[name]
    doc = cls.describe()
    for word in ("Observation", "Action", "Reward"):
        assert word in doc, f"{name}'s docstring must describe its {word.lower()}"
    assert cls.reference_return > cls.random_return and cls.reference_doc
    assert name in REFERENCE_POLICIES or name in TRAINED


@pytest.mark.parametrize("name", sim.list_tasks())
def test_recorded_returns_reproduce(name):
    """The normalisation anchors stored on each task class are what `measure_returns` gives."""
    cls = TASKS[name]
    random = measure_returns(name, None, num_envs=16, seed=0)
    reference = measure_returns(name, _reference_policy(name), num_envs=16, seed=0)
    # 16 envs instead of the recorded 64: both are noisier means (the start states differ).
    assert abs(random - cls.random_return) < 0.15 * cls.reference_return
    assert reference > 0.9 * cls.reference_return
    assert reference > random + 0.5 * (cls.reference_return - cls.random_return)
