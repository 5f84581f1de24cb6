"""Flow-policy RL (robolearn/algos/flow_rl.py): chunk rollouts credit rewards and episode ends to the right decision,
and PPO (GAE per chunk) and GRPO (groups reset alike) both improve a flow policy on a small target-tracking task
within seconds; Flow-Noise trains its noise head."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict

from policies.flow import FlowPolicy
from robolearn.algos.chunk.flow_rl import FlowRLConfig
from robolearn.errors import ConfigError
from robolearn.runners.flow import collect_chunks, finetune_flow


class CountingEnv:
    """Fixed-length episodes; the reward of step s (1-based, within the episode) is s; obs = [s, env index]."""

    def __init__(self, num_envs: int, length: int):
        self.num_envs, self.max_episode_length, self.num_actions = num_envs, length, 1
        self.observation_shapes = {"policy": (2,)}
        self.t = 0

    def _obs(self, t: int) -> TensorDict:
        obs = torch.stack([torch.full((self.num_envs,), float(t)), torch.arange(self.num_envs).float()], -1)
        return TensorDict({"policy": obs}, batch_size=[self.num_envs])

    def reset(self, seed: int | None = None, group_size: int = 1) -> TensorDict:
        self.t = 0
        return self._obs(0)

    def step(self, actions: torch.Tensor):
        self.t += 1
        reward = torch.full((self.num_envs,), float(self.t))
        done = torch.full((self.num_envs,), self.t == self.max_episode_length)
        extras = {"time_outs": done, "terminated": torch.zeros_like(done), "final_obs": self._obs(self.t), "log": {}}
        if self.t == self.max_episode_length:
            self.t = 0
        return self._obs(self.t), reward, done.long(), extras


class TargetEnv:
    """Reward -|a - target(o)|^2 every step, observations redrawn each step, episodes of `length` steps; a reset
    with `group_size` G gives each block of G envs the same observations (the same initial state)."""

    def __init__(self, num_envs: int, length: int = 8, seed: int = 0):
        self.num_envs, self.max_episode_length, self.num_actions = num_envs, length, 2
        self.observation_shapes = {"policy": (2,)}
        self.generator = torch.Generator().manual_seed(seed)
        self.t, self.group_size = 0, 1

    def _obs(self) -> TensorDict:
        draw = torch.rand(self.num_envs // self.group_size, 2, generator=self.generator) * 2 - 1
        self.obs = draw.repeat_interleave(self.group_size, 0)
        return TensorDict({"policy": self.obs}, batch_size=[self.num_envs])

    def reset(self, seed: int | None = None, group_size: int = 1) -> TensorDict:
        if seed is not None:
            self.generator.manual_seed(seed)
        self.t, self.group_size = 0, group_size
        return self._obs()

    def step(self, actions: torch.Tensor):
        reward = -((actions - 0.8 * self.obs.flip(-1)) ** 2).sum(-1)
        self.t += 1
        done = torch.full((self.num_envs,), self.t == self.max_episode_length)
        self.t %= self.max_episode_length
        obs = self._obs()
        return obs, reward, done.long(), {"time_outs": done, "terminated": torch.zeros_like(done),
                                          "final_obs": obs, "log": {}}


def test_chunk_rewards_stop_at_the_episode_end():
    """Episodes of 5 steps, chunks of 2: decision 2 holds step 5 only (the 6th action acts in the next episode);
    the time-out is a truncation of that decision, and GRPO's mask drops the decisions after the episode."""
    env = CountingEnv(num_envs=3, length=5)
    policy = FlowPolicy(2, 1, chunk=2, hidden=(8,), num_steps=2)
    ro, _ = collect_chunks(env, policy, None, env.reset(), decisions=4, mode="sde",
                           generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ro.rewards[:, 0], torch.tensor([1.0 + 2, 3 + 4, 5, 2 + 3]))
    assert ro.truncs[:, 0].tolist() == [False, False, True, False] and not ro.dones.any()
    assert ro.alive[:, 0].tolist() == [True, True, True, False]
    assert [r for r, _ in ro.episodes] == [15.0] * 3
    assert ro.chains.shape == (4, 3, 3, 2, 1) and ro.log_probs.shape == (4, 3, 2, 1)


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_flow_rl_improves_a_flow_policy(algo):
    torch.manual_seed(0)
    policy = FlowPolicy(2, 2, chunk=2, hidden=(64, 64), num_steps=4)
    cfg = FlowRLConfig(algo=algo, iterations=20, actor_lr=3e-3, eval_every=20, critic_warmup=1, seed=0)
    _, history = finetune_flow(policy, TargetEnv(64), cfg, eval_env=TargetEnv(64, seed=1))
    before, after = history[0]["eval/return"], history[-1]["eval/return"]
    assert after > before + 3.0, (before, after)  # about -11 at the start, 0 is perfect


def test_flow_noise_trains_its_noise_head_and_errors():
    torch.manual_seed(0)
    policy = FlowPolicy(2, 2, chunk=2, hidden=(32,), num_steps=3, noise_head=True)
    head = [p.clone() for p in policy.noise_net.parameters()]
    cfg = FlowRLConfig(mode="noise", iterations=2, critic_warmup=0, entropy_coef=0.005)
    _, history = finetune_flow(policy, TargetEnv(16), cfg)
    assert history[-1]["entropy"] != 0.0
    assert any(not torch.equal(a, b) for a, b in zip(head, policy.noise_net.parameters(), strict=True))
    with pytest.raises(ConfigError, match="noise_head=True"):
        finetune_flow(FlowPolicy(2, 2), TargetEnv(4), FlowRLConfig(mode="noise"))
    with pytest.raises(ConfigError, match="group_size"):
        finetune_flow(FlowPolicy(2, 2), TargetEnv(6), FlowRLConfig(algo="grpo", group_size=4))
    with pytest.raises(ConfigError, match="algo"):
        FlowRLConfig(algo="dpo")
    with pytest.raises(ConfigError, match="VLAPolicy"):
        finetune_flow(FlowPolicy(2, 2), TargetEnv(4), FlowRLConfig(freeze_vision=True))


def test_fine_tuning_checkpoints_resume_and_load_as_a_policy(tmp_path):
    """`run_dir`: `latest` at each evaluation and `final` at the end, a policy `load_policy` runs; `resume` goes on
    from `latest` with the policy, critic, optimizers, generator and counters it holds."""
    from robolearn.checkpoints import checkpoint
    from robolearn.checkpoints.policy import load_policy

    def fresh() -> FlowPolicy:
        torch.manual_seed(0)
        return FlowPolicy(2, 2, chunk=2, hidden=(16,), num_steps=2)

    cfg = FlowRLConfig(iterations=2, eval_every=1, critic_warmup=0, critic_hidden=(16,))
    first, rows = finetune_flow(fresh(), TargetEnv(8), cfg, run_dir=tmp_path, run={"env": {"name": "target"}})
    saved = {k: v.clone() for k, v in first.state_dict().items()}
    _, state = checkpoint.load(tmp_path / "checkpoints" / "latest")
    assert any(k.startswith("critic.") for k in state)
    resumed, more = finetune_flow(fresh(), TargetEnv(8), dataclasses.replace(cfg, iterations=4), run_dir=tmp_path,
                                  resume=True)
    assert [r["iteration"] for r in more] == [3, 4] and more[0]["env_steps"] == rows[-1]["env_steps"] + 8 * 8
    assert any(not torch.equal(saved[k], v) for k, v in resumed.state_dict().items())  # it trained on from there
    meta, _ = checkpoint.load_trainer(tmp_path / "checkpoints" / "final")
    assert meta["iteration"] == 4
    policy = load_policy(tmp_path / "checkpoints" / "final")
    obs = {"policy": torch.rand(3, 2)}
    with torch.no_grad():
        torch.testing.assert_close(policy(obs), resumed(obs["policy"]).clamp(-1, 1)[:, 0])
    with pytest.raises(ConfigError, match="run_dir"):
        finetune_flow(fresh(), TargetEnv(8), cfg, resume=True)


def test_cli_chunk_bc_then_flow_rl_resumed_then_eval(tmp_path, capsys):
    """The command line end to end on a sim task: demos, `robolearn chunk-bc`, `robolearn flow-rl` and its resume;
    the run's checkpoint records the task, so `robolearn eval` plays it as it is."""
    from robolearn.commands.cli import main

    data, bc, rl = tmp_path / "demos", tmp_path / "bc", tmp_path / "rl"
    short = "+env.overrides.episode_length=20"  # recorded with the data, then with each checkpoint
    assert main(["collect", "env=point-mass", "env.num_envs=4", short, "kind=expert", "policy=reference",
                 "episodes=4", "ref_min_score=0", "ref_max_score=1", "progress=false", f"out={data}"]) == 0
    assert main(["chunk-bc", f"data={data}", f"out={bc}"]) == 2  # renamed: the error names dataset=
    assert "`dataset`" in capsys.readouterr().err
    assert main(["chunk-bc", f"dataset={data}", f"out={bc}", "bc.chunk=4", "bc.num_steps=2", "bc.hidden=[16]",
                 "bc.steps=20", "bc.batch_size=16"]) == 0
    assert "flow policy (chunks of 4) cloned from 80 steps" in capsys.readouterr().out
    common = [f"run_dir={rl}", "num_envs=4", "eval_envs=0", "rl.critic_hidden=[16]", "rl.critic_warmup=0",
              "rl.rollout_chunks=5"]
    assert main(["flow-rl", f"checkpoint={bc}", "rl.iterations=1", *common]) == 0
    first = capsys.readouterr().out
    assert main(["flow-rl", "resume=true", "rl.iterations=2", *common]) == 2  # resume takes the run folder
    assert "resume=<run_dir>" in capsys.readouterr().err
    assert main(["flow-rl", f"resume={rl}", "rl.iterations=2", *common]) == 0
    history = [line for line in (first + capsys.readouterr().out).splitlines() if line.startswith("iteration=")]
    assert [h.split()[0] for h in history] == ["iteration=0", "iteration=1", "iteration=2"]
    assert main(["eval", f"checkpoint={rl / 'checkpoints' / 'final'}", "episodes=2", "device=cpu"]) == 0
    assert main(["flow-rl", f"checkpoint={data}"]) != 0  # not a checkpoint: a clear error, no traceback

    # DSRL from the same BC checkpoint: SAC over its noise, resumed, then its steered policy evaluated
    from robolearn.checkpoints.policy import load_policy

    ds = tmp_path / "dsrl"
    small = [f"checkpoint={bc}", f"run_dir={ds}", "num_envs=4", "eval_envs=2", "checkpoint_interval=1",
             "dsrl.steps_per_iteration=5", "dsrl.eval_every=40", "sac.learning_starts=8", "sac.batch_size=8",
             "sac.actor_hidden=[16]", "sac.critic_hidden=[16]"]
    assert main(["dsrl", "iterations=1", *small]) == 0
    assert main(["dsrl", "iterations=3", f"resume={ds}", "dsrl.magnitude=1.0", *small]) != 0  # not its settings
    assert main(["dsrl", "iterations=2", f"resume={ds}", *small]) == 0
    assert "steered policy:" in capsys.readouterr().out
    steered = load_policy(ds / "policy")
    assert steered.kind == "steered" and steered.run["env"]["name"] == "point-mass"
    assert main(["eval", f"checkpoint={ds / 'policy'}", "episodes=2", "device=cpu"]) == 0
    assert main(["dsrl", f"checkpoint={data}"]) != 0
