"""The diffusion chunk policy (policies/diffusion.py) and DSRL (robolearn/algos/chunk/dsrl.py): the cosine schedule and
DDIM written out by hand, BC that fits a state-dependent chunk, the latent-noise env as a VecEnv, and SAC over the
noise of a frozen policy learning to steer it, with a checkpoint and resume through robolearn's off-policy runner."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import bc_fit_error
from tensordict import TensorDict

from policies.diffusion import DiffusionPolicy, cosine_alphas_cumprod
from policies.flow import FlowPolicy
from policies.steered import SteeredChunkPolicy
from robolearn.algos.chunk.dsrl import DSRLConfig, NoiseActionEnv
from robolearn.algos.online.sac import SACConfig
from robolearn.errors import ConfigError
from robolearn.runners.dsrl import dsrl_runner, steered_policy


def test_cosine_schedule_and_ddim_by_hand():
    abar = cosine_alphas_cumprod(100)
    f = [math.cos((t / 100 + 0.008) / 1.008 * math.pi / 2) ** 2 for t in (0, 1, 2)]
    torch.testing.assert_close(abar[:2], torch.tensor([f[1] / f[0], f[2] / f[0]]))  # abar_k = f(k+1) / f(0)
    assert bool((abar[1:] < abar[:-1]).all()) and 0 < float(abar[-1]) < 1e-3
    policy = DiffusionPolicy(3, 2, chunk=2, hidden=(16,), train_steps=100, inference_steps=5, clip_sample=0.0)
    assert policy.timesteps.tolist() == [80, 60, 40, 20, 0]
    with torch.no_grad():  # eps = 0: each DDIM step scales x by sqrt(abar_prev / abar), so x_0 = x_T / sqrt(abar_80)
        policy.eps_net[-1].weight.zero_()
        policy.eps_net[-1].bias.zero_()
    obs, noise = torch.randn(4, 3), torch.randn(4, 2, 2)
    torch.testing.assert_close(policy.sample(obs, noise), noise / policy.alphas_cumprod[80].sqrt())
    clipped = DiffusionPolicy(3, 2, chunk=2, hidden=(16,), inference_steps=5)
    clipped.load_state_dict(policy.state_dict())
    assert float(clipped.sample(obs, 10 * noise).detach().abs().max()) <= 1.0 + 1e-5  # a0 clipped to the action box
    with pytest.raises(ValueError, match="inference_steps"):
        DiffusionPolicy(3, 2, train_steps=10, inference_steps=20)


def test_diffusion_bc_fits_a_chunk():
    """Epsilon regression on a state-dependent chunk: DDIM from x_T = 0 reproduces it."""
    torch.manual_seed(2)
    policy = DiffusionPolicy(2, 1, chunk=2, hidden=(64, 64), train_steps=50, inference_steps=10)
    err = bc_fit_error(policy, lambda n, gen: torch.randint(0, 50, (n,), generator=gen), 800)
    assert err < 0.1, err


class ReachEnv:
    """Reward -|a - (0.6, -0.4)|^2 each step, episodes of 4 steps; obs = [step / 4, 1]."""

    def __init__(self, num_envs: int):
        self.num_envs, self.max_episode_length, self.num_actions = num_envs, 4, 2
        self.observation_shapes = {"policy": (2,)}
        self.device, self.cfg, self.t = torch.device("cpu"), {"task": "reach-toy"}, 0

    def _obs(self) -> TensorDict:
        obs = torch.tensor([self.t / 4, 1.0]).expand(self.num_envs, 2).clone()
        return TensorDict({"policy": obs}, batch_size=[self.num_envs])

    def reset(self, seed: int | None = None) -> TensorDict:
        self.t = 0
        return self._obs()

    def get_observations(self) -> TensorDict:
        return self._obs()

    def step(self, actions: torch.Tensor):
        reward = -((actions - torch.tensor([0.6, -0.4])) ** 2).sum(-1)
        self.t += 1
        done = torch.full((self.num_envs,), self.t == 4)
        final = self._obs()
        self.t %= 4
        return self._obs(), reward, done.long(), {"time_outs": done, "terminated": torch.zeros_like(done),
                                                  "final_obs": final, "log": {}}

    def state_dict(self) -> dict:
        import numpy as np

        return {"t": np.array(self.t)}

    def load_state_dict(self, arrays: dict) -> None:
        self.t = int(arrays["t"])


def identity_flow() -> FlowPolicy:
    """A flow policy whose velocity is 0: its ODE returns the initial noise, so the latent action is the action."""
    policy = FlowPolicy(2, 2, chunk=2, hidden=(8,), num_steps=2)
    with torch.no_grad():
        policy.velocity_net[-1].weight.zero_()
        policy.velocity_net[-1].bias.zero_()
    return policy


def test_noise_env_runs_chunks_of_the_frozen_policy():
    env = NoiseActionEnv(ReachEnv(3), identity_flow(), magnitude=2.0)
    assert env.num_actions == 4 and env.max_episode_length == 2
    w = torch.tensor([[0.3, -0.2, 0.3, -0.2]]).expand(3, 4)  # x_T = 2 w = (0.6, -0.4) twice: reward 0
    obs, reward, done, extras = env.step(w)
    assert torch.equal(reward, torch.zeros(3)) and not done.any()
    _, reward, done, extras = env.step(torch.zeros(3, 4))  # actions 0: -(0.36 + 0.16) per step, two steps
    torch.testing.assert_close(reward, torch.full((3,), -1.04))
    assert done.all() and extras["time_outs"].all()
    with pytest.raises(ConfigError, match="magnitude"):
        NoiseActionEnv(ReachEnv(1), identity_flow(), magnitude=0.0)
    shared = NoiseActionEnv(ReachEnv(3), identity_flow(), magnitude=2.0, shared=True)  # one noise for the chunk
    assert shared.num_actions == 2
    _, reward, _, _ = shared.step(torch.tensor([[0.3, -0.2]]).expand(3, 2))
    assert torch.equal(reward, torch.zeros(3))
    with pytest.raises(ConfigError, match="latent"):
        DSRLConfig(latent="token")


@pytest.mark.parametrize(("variant", "latent"), [("sac", "chunk"), ("na", "chunk"), ("na", "shared")])
def test_dsrl_steers_a_frozen_policy_and_resumes(tmp_path, variant, latent):
    sac = SACConfig(actor_hidden=(32, 32), critic_hidden=(32, 32), batch_size=64, learning_starts=64,
                    actor_lr=3e-3, critic_lr=3e-3, temperature_lr=3e-3)
    cfg = DSRLConfig(magnitude=1.0, steps_per_iteration=4, eval_every=128, variant=variant, eval_deterministic=True,
                     latent=latent)
    runner = dsrl_runner(identity_flow(), ReachEnv(8), ReachEnv(4), sac, tmp_path / "run", cfg, seed=0)
    rows = runner.learn(16, checkpoint_interval=8)
    before, after = rows[0]["eval/return"], rows[-1]["eval/return"]
    assert before < -1.2 and after > -0.3, (before, after)  # w = 0 plays a = 0: 4 x -0.52
    resumed = dsrl_runner(identity_flow(), ReachEnv(8), ReachEnv(4), sac, tmp_path / "run2", cfg, seed=0)
    resumed.restore(tmp_path / "run" / "checkpoints" / "latest")
    assert resumed.updates == runner.updates and resumed.env_steps == runner.env_steps
    for name, tensor in runner.algo.model_state().items():  # DSRL-NA's noise critic and base policy included
        torch.testing.assert_close(resumed.algo.model_state()[name], tensor, msg=name)
    steered, obs = steered_policy(runner), torch.randn(5, 2)  # the result as one policy: w = tanh(mu) -> chunk
    with torch.no_grad():
        w = runner.algo.actor.mode(obs)
        torch.testing.assert_close(steered(obs), runner.env.base.sample(obs, "ode", noise=w.reshape(5, -1, 2)
                                                                        .expand(-1, 2, -1))[0])


def test_dsrl_warm_up_plays_the_base_policy_and_evaluates_sampled_latents(tmp_path):
    """Before learning_starts the latents are the base's own noise N(0, I) / magnitude, clipped (the paper's
    init_rollout_steps), not uniform; evaluation samples latents unless eval_deterministic."""
    sac = SACConfig(actor_hidden=(8,), critic_hidden=(8,), batch_size=16, learning_starts=2000)
    runner = dsrl_runner(identity_flow(), ReachEnv(50), ReachEnv(2), sac, tmp_path, DSRLConfig(magnitude=2.0,
                         steps_per_iteration=20, eval_every=1000, latent="chunk"), seed=0)
    runner.learn(1, checkpoint_interval=10)
    w = runner.learner.buffer.actions[:20].flatten()
    assert len(w) == 4000 and abs(float(w.std()) - 0.5) < 0.03  # N(0, 1) / 2: std 0.5 (uniform: 0.58)
    assert 0.02 < float((w.abs() == 1.0).float().mean()) < 0.07  # |N(0, 1)| > 2 clipped: 4.6%
    assert runner.eval_deterministic is False
    uniform = dsrl_runner(identity_flow(), ReachEnv(50), ReachEnv(2), sac, tmp_path / "u", DSRLConfig(
        magnitude=2.0, steps_per_iteration=20, eval_every=1000, latent="chunk", warmup="uniform"), seed=0)
    uniform.learn(1, checkpoint_interval=10)
    w = uniform.learner.buffer.actions[:20].flatten()
    assert abs(float(w.std()) - 3 ** -0.5) < 0.03 and float(w.abs().max()) <= 1.0  # uniform in [-1, 1]
    with pytest.raises(ConfigError, match="warmup"):
        DSRLConfig(warmup="random")


@pytest.mark.parametrize("kind", ["flow", "diffusion", "steered"])
def test_chunk_checkpoints_load_as_policies_that_run_their_chunks(tmp_path, kind):
    """`save_chunk_policy` -> `load_policy`: the same network (normaliser included); one action per call from a
    queue of H, re-planned from the observation of the call that finds it empty; `reset` empties it; sampling is
    seeded by the policy's own generator."""
    from robolearn.checkpoints.policy import load_policy, save_chunk_policy

    torch.manual_seed(0)
    if kind == "steered":  # a DSRL result: a latent actor (one 2-dim noise for the chunk) over a frozen flow
        actor = {"obs_dim": 3, "num_actions": 2, "hidden": (16,)}
        net = SteeredChunkPolicy("flow", FlowPolicy(3, 2, chunk=3, hidden=(16,), num_steps=4).config, actor, 1.5, True)
        with pytest.raises(ValueError, match="latent"):
            SteeredChunkPolicy("flow", net.base.config, {**actor, "num_actions": 6}, 1.5, True)
    else:
        net = (FlowPolicy(3, 2, chunk=3, hidden=(16,), num_steps=4) if kind == "flow"
               else DiffusionPolicy(3, 2, chunk=3, hidden=(16,), train_steps=20, inference_steps=4))
    (net.base if kind == "steered" else net).obs_norm.update(torch.randn(50, 3) * 4.0 + 1.0)
    save_chunk_policy(tmp_path / "ckpt", net, {"env": {"name": "point-mass"}})
    policy = load_policy(tmp_path / "ckpt")
    assert policy.kind == kind and policy.run["env"]["name"] == "point-mass"
    obs = [{"policy": torch.randn(5, 3)} for _ in range(5)]
    with torch.no_grad():
        first, second = net(obs[0]["policy"]).clamp(-1, 1), net(obs[3]["policy"]).clamp(-1, 1)
        acts = [policy(o) for o in obs]
    for k in range(3):
        torch.testing.assert_close(acts[k], first[:, k])  # obs[1], obs[2] are not looked at: open loop
    torch.testing.assert_close(acts[3], second[:, 0])
    torch.testing.assert_close(acts[4], second[:, 1])
    policy.reset()
    with torch.no_grad():
        torch.testing.assert_close(policy(obs[4]), net(obs[4]["policy"]).clamp(-1, 1)[:, 0])
    a = load_policy(tmp_path / "ckpt", mode="sample", seed=7)
    b = load_policy(tmp_path / "ckpt", mode="sample", seed=7)
    with torch.no_grad():
        draws = [a(obs[0]), b(obs[0])]
    torch.testing.assert_close(draws[0], draws[1])
    assert not torch.allclose(draws[0], acts[0]) and float(draws[0].abs().max()) <= 1.0
