"""Issue 12, item 7: per-step reward bias in n-step targets, end flags on every episode, the learner
device's default generator in checkpoints (PPO on CUDA), and TD3's actor on Q1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robolearn.algos.common import shaped_rewards
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.algos.online.td3 import TD3, TD3Config
from robolearn.config import algo_config, compose
from robolearn.core.buffers import ReplayBuffer
from robolearn.data.episodes import Episode, load_episodes, save_episodes
from robolearn.errors import ConfigError, DatasetError

# --- 1. reward_bias per step of an n-step window -------------------------------------------------------------

GAMMA, SCALE, BIAS, NEXT_V = 0.9, 2.0, 0.5, 10.0
REWARDS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
TERMINATED = [False, False, True, False, False, False, False]


def _hand_target(start: int) -> float:
    """sum_{i<k} gamma^i (scale r_i + bias) + gamma^k V', written out: up to 3 steps, stopping after a
    termination (no bootstrap) or at the newest step."""
    total, k = 0.0, 0
    while k < 3 and start + k < len(REWARDS):
        total += GAMMA**k * (SCALE * REWARDS[start + k] + BIAS)
        k += 1
        if TERMINATED[start + k - 1]:
            return total
    return total + GAMMA**k * NEXT_V


@pytest.mark.parametrize("cls, config", [(SAC, SACConfig), (TD3, TD3Config)])
def test_n_step_target_biases_every_step(cls, config):
    buf = ReplayBuffer(16, 1, {"policy": 1}, 1, n_step=3, gamma=GAMMA)
    for t, (r, term) in enumerate(zip(REWARDS, TERMINATED, strict=True)):
        buf.add({"policy": torch.tensor([[float(t)]])}, torch.zeros(1, 1), torch.tensor([r]),
                {"policy": torch.tensor([[t + 0.5]])}, torch.tensor([term]), torch.tensor([False]))
    batch = buf.sample(256, torch.Generator().manual_seed(0))
    assert sorted(set(zip(batch["obs"]["policy"][:, 0].tolist(), batch["steps"].tolist(), strict=True))) == [
        (0.0, 3.0), (1.0, 2.0), (2.0, 1.0), (3.0, 3.0), (4.0, 3.0), (5.0, 2.0), (6.0, 1.0)]

    learner = cls(1, 1, 1, config(gamma=GAMMA, n_step=3, reward_scale=SCALE, reward_bias=BIAS, backup_entropy=False,
                                  actor_hidden=(8,), critic_hidden=(8,)))
    learner._target_min = lambda next_obs_c, next_actions, idx: torch.full((next_obs_c.shape[0],), NEXT_V)
    targets: list[torch.Tensor] = []
    learner._critic_step = lambda obs_c, actions, target: targets.append(target) or {}
    learner.update_critic(batch)
    for o, got in zip(batch["obs"]["policy"][:, 0].tolist(), targets[0].tolist(), strict=True):
        assert got == pytest.approx(_hand_target(int(o)), rel=1e-6), o


def test_shaped_rewards_closed_form_and_edge_cases():
    steps, sums = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 1.5, 2.0])
    torch.testing.assert_close(shaped_rewards(sums, steps, 0.5, 3.0, 1.0), 3.0 * sums + torch.tensor([1.0, 1.5, 1.75]))
    torch.testing.assert_close(shaped_rewards(sums, steps, 1.0, 1.0, 2.0), sums + 2.0 * steps)  # gamma = 1: k steps
    assert torch.equal(shaped_rewards(sums, steps, 0.9, 2.0, 0.0), 2.0 * sums)  # no bias: the scaled sums exactly


# --- 2. every episode ends in a flag ---------------------------------------------------------------------------

def _episode(terminations: list[bool], truncations: list[bool], **metadata) -> Episode:
    t = len(terminations)
    return Episode(observations=np.zeros((t + 1, 2)), actions=np.zeros((t, 1)), rewards=np.zeros(t),
                   terminations=terminations, truncations=truncations, metadata=metadata)


def test_an_episode_without_an_end_flag_is_refused(tmp_path):
    _episode([False, True], [False, False])
    _episode([False, False], [False, True])
    with pytest.raises(DatasetError, match=r"episode 7 of run\.bag \(T=2 steps\) has no end flag.*truncations\[-1\]"):
        _episode([False, False], [False, False], episode_id=7, source="run.bag")
    # a file holding one (written before the rule, or by another tool) names the file
    ok = _episode([False, True], [False, False])
    save_episodes(tmp_path / "d", [ok])
    file = tmp_path / "d" / "episode_000000.safetensors"
    ok.terminations[-1] = False  # bypass the constructor's check, as an old writer would have
    file.write_bytes(ok.to_bytes())
    with pytest.raises(DatasetError, match=f"{file.name}: episode .*no end flag"):
        load_episodes(tmp_path / "d")


def _bag_cut_mid_episode(path: Path) -> None:
    """Six ticks: episode 0 (ticks 0-2) ends terminated, episode 1 (ticks 3-5) is still running when the bag ends."""
    from real.recorder import Recorder
    from real.transport.memory import FakeClock, MemoryBus, MemoryTransport

    clock = FakeClock(1_000_000_000)
    with Recorder(MemoryTransport(MemoryBus(), clock), path, [], clock_offset_ns=0) as rec:
        for k in range(6):
            rec.record_tick(clock(), [0.0], [0.0], intervention=False, policy_version=0, reward=1.0,
                            episode=0 if k < 3 else 1, done="terminated" if k == 2 else None, observation=[float(k)])
            clock.advance(0.1)


def test_a_bag_ending_mid_episode_gives_a_truncated_last_step(tmp_path):
    from real.bag2dataset import bag_to_episodes

    _bag_cut_mid_episode(tmp_path / "bag")
    first, second = bag_to_episodes(tmp_path / "bag")
    assert first.terminations[-1] and not first.truncations.any()
    assert np.array_equal(second.observations[:, 0], [3.0, 4.0, 5.0])
    assert second.truncations.tolist() == [False, True] and not second.terminations.any()


# --- 3. the learner device's default generator travels in the checkpoint ---------------------------------------

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


# --- 4. TD3's actor maximises Q1 -------------------------------------------------------------------------------

def _td3(seed: int = 0, **overrides) -> TD3:
    torch.manual_seed(seed)
    return TD3(3, 3, 2, TD3Config(actor_hidden=(16,), critic_hidden=(16,), **overrides))


def _actor_batch() -> dict:
    g = torch.Generator().manual_seed(5)
    return {"obs": {"policy": torch.randn(32, 3, generator=g)}}


def test_td3_actor_gradient_comes_from_the_first_critic_only():
    learner = _td3()
    assert learner.cfg.actor_q == "first"
    losses: list[torch.Tensor] = []
    learner._step = lambda opt, loss: losses.append(loss)
    learner.update_actor(_actor_batch())
    critic_grads = torch.autograd.grad(losses[0], list(learner.critic.parameters()))
    assert all(g[1].abs().max() == 0 for g in critic_grads)  # member 1 takes no part
    assert any(g[0].abs().max() > 0 for g in critic_grads)

    # so the actor's step does not depend on critic 1 at all
    a, b = _td3(), _td3()
    with torch.no_grad():
        for p in b.critic.parameters():
            p[1].normal_()
    a.update_actor(_actor_batch())
    b.update_actor(_actor_batch())
    for p, q in zip(a.actor.parameters(), b.actor.parameters(), strict=True):
        assert torch.equal(p, q)
    # while the SAC-style "min" does
    a, b = _td3(actor_q="min"), _td3(actor_q="min")
    with torch.no_grad():
        for p in b.critic.parameters():
            p[1].normal_()
    a.update_actor(_actor_batch())
    b.update_actor(_actor_batch())
    assert not all(torch.equal(p, q) for p, q in zip(a.actor.parameters(), b.actor.parameters(), strict=True))


def test_actor_q_options_and_the_td3_preset():
    algo = compose("train", ["algo=td3"])["algo"]
    assert algo["actor_q"] == "first" and algo_config(algo).actor_q == "first"
    SACConfig(actor_q="first").validate()  # one list of options for SAC and TD3
    with pytest.raises(ConfigError, match="'first'"):
        TD3Config(actor_q="q1").validate()
