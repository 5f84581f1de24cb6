"""Runner state in checkpoints: the learner device's default generator (PPO on CUDA) is saved and restored, and CPU
checkpoints are unchanged by it."""

from __future__ import annotations

import numpy as np
import pytest
import torch


class _Env:
    """The little of a VecEnv that `RunnerBase`'s trainer state touches."""

    num_envs = 2

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"t": np.zeros(2)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        pass


def test_device_generator_is_cuda_default_generator_of_the_learner_device(monkeypatch):
    gens = (torch.Generator(), torch.Generator())  # stand-ins for two GPUs' default generators
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "default_generators", gens)
    from robolearn.runners.base import device_generator

    assert device_generator(torch.device("cuda:0")) is gens[0]
    assert device_generator(torch.device("cuda")) is gens[1]  # the current device
    assert device_generator(torch.device("cpu")) is None  # the global CPU RNG: saved as rng.torch already


def test_runner_checkpoint_carries_the_device_generator(tmp_path, monkeypatch):
    """PPO samples actions on the learner's device without a generator; on CUDA that is the device's default
    generator, which `torch.get_rng_state` does not hold. The trainer state carries it and resume restores it."""
    from robolearn.checkpoints import checkpoint
    from robolearn.runners import base

    device_gen, asked = torch.Generator().manual_seed(3), []
    monkeypatch.setattr(base, "device_generator", lambda device: asked.append(device) or device_gen)
    runner = base.RunnerBase(_Env(), tmp_path, {}, seed=0, device=torch.device("cpu"), progress=False)
    runner.ep_return += 1.0  # something else that must come back too
    tensors, meta = runner._common_state()
    assert asked == [runner.device] and "rng.device" in tensors
    checkpoint.save(tmp_path / "ckpt", {}, {"w": torch.zeros(1)}, tensors, meta)
    expected = torch.randn(5, generator=device_gen)  # what an uninterrupted run draws next

    torch.randn(7, generator=device_gen)  # a fresh process's stream is elsewhere
    meta, tensors = checkpoint.load_trainer(tmp_path / "ckpt")
    runner._restore_common(tensors, meta)
    assert torch.equal(torch.randn(5, generator=device_gen), expected)
    assert runner.ep_return.tolist() == [1.0, 1.0]

    del tensors["rng.device"], meta["rng_device"]  # a checkpoint saved on the CPU, resumed on the GPU
    with pytest.warns(UserWarning, match="no random state"):
        runner._restore_common(tensors, meta)


def test_cpu_checkpoints_are_unchanged(tmp_path):
    from robolearn.runners.base import RunnerBase

    tensors, meta = RunnerBase(_Env(), tmp_path, {}, 0, torch.device("cpu"), False)._common_state()
    assert "rng.device" not in tensors and "rng_device" not in meta
