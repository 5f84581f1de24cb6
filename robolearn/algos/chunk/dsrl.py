"""DSRL (Wagenmaker et al. 2025, "Steering Your Diffusion Policy with Latent Space RL"): keep a behaviour-cloned
diffusion (or flow) chunk policy frozen and run SAC over its initial noise.

`NoiseActionEnv` turns a VecEnv and a frozen chunk policy into the latent-action MDP: the action w in [-1, 1]^(H*A)
(SAC's tanh-squashed output) becomes the sampler's initial noise x_T = `magnitude` * w (DSRL-NA's noise-action
bound, `action_magnitude` 1-2 in the paper's code), the policy denoises it deterministically (DDIM, or the flow's
ODE) into a chunk, and the chunk runs in the env as one transition (`robolearn.core.chunks.run_chunk`: summed reward,
terminal vs time-out, true final observation). Everything else is robolearn's SAC and off-policy runner unchanged:
replay, UTD, checkpoints, exact resume, evaluation, metrics.

The runner that plays it is `robolearn.runners.dsrl.dsrl_runner`.

`latent: shared` is DSRL-pi0's action space (`nakamotoo/dsrl_pi0`: one noise vector repeated over pi0's whole
horizon): the latent action is one A-dim noise used at every step of the chunk, A dimensions to search where the
full latent has H * A.

Before `learning_starts` the runner plays the base policy itself (`warmup: base`: noise ~ N(0, I), the paper's
`init_rollout_steps`), so the critic first sees what the base does. Evaluation plays sampled latents as the paper's
default (`eval_deterministic: false`); with true, the deterministic latent policy w = tanh(mean), where w = 0
replays the base policy's own deterministic chunk (its `forward`).

`variant: na` is DSRL-NA (noise aliasing; the paper's code, `stable_baselines3/dsrl/dsrl.py`, and its README's
preferred variant), `DSRLNA` below: the TD critic Q^A(s, a) is on the real action chunk a = pi_dp(s, w) (recomputed
from the stored noise, the base being frozen and deterministic), a noise critic Q^W(s, w) is distilled from it on
fresh noise w ~ N(0, I) (member i onto member i), and the actor maximises Q^W. Many noises alias to one chunk, so
Q^W learns from every relabelled noise, not only the played ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from policies.diffusion import DiffusionPolicy
from policies.ensemble import QEnsemble
from policies.flow import FlowPolicy
from policies.steered import denoise, latent_noise
from robolearn.algos.common import polyak_update, shaped_rewards
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.core.chunks import run_chunk
from robolearn.errors import ConfigError


class NoiseActionEnv:
    """A VecEnv whose actions are a frozen chunk policy's initial noise (scaled by `magnitude`) and whose steps are
    whole chunks; it has the VecEnv contract the runners use (and delegates state for checkpoints)."""

    def __init__(self, env: Any, base: FlowPolicy | DiffusionPolicy, magnitude: float = 1.0, shared: bool = False):
        if magnitude <= 0:
            raise ConfigError(f"DSRL's noise magnitude must be > 0, got {magnitude}")
        if str(getattr(env, "device", "cpu")) != "cpu":
            raise ConfigError("DSRL runs its frozen policy and SAC on the CPU: make the env with device='cpu'")
        self.env, self.base, self.magnitude = env, base.eval().requires_grad_(False), magnitude
        self.num_envs, self.device = env.num_envs, env.device
        self.shared = shared
        self.num_actions = base.action_dim if shared else base.chunk * base.action_dim
        self.max_episode_length = -(-env.max_episode_length // base.chunk)
        self.observation_shapes = env.observation_shapes
        self.cfg = {**env.cfg, "dsrl": {"magnitude": magnitude, "chunk": base.chunk, "shared": shared}}

    def reset(self, seed: int | None = None) -> Any:
        return self.env.reset(seed=seed)

    def get_observations(self) -> Any:
        return self.env.get_observations()

    @torch.no_grad()
    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs = self.env.get_observations()
        noise = latent_noise(actions, self.base, self.magnitude)
        step = run_chunk(self.env, denoise(self.base, obs["policy"], noise))
        extras = {"time_outs": step.truncated, "terminated": step.terminated, "final_obs": step.final_obs,
                  "log": {k: torch.tensor(v) for k, v in step.log.items()}}
        return step.obs, step.reward, step.done.long(), extras

    def state_dict(self) -> dict[str, Any]:
        return self.env.state_dict()

    def load_state_dict(self, arrays: dict[str, Any]) -> None:
        self.env.load_state_dict(arrays)

    def close(self) -> None:
        self.env.close()


class DSRLNA(SAC):
    """DSRL-NA: SAC whose TD critic sees real action chunks and whose actor follows a noise critic distilled from
    it (see the module docstring). Acts, checkpoints (base policy included) and resumes like SAC."""

    def __init__(self, base: FlowPolicy | DiffusionPolicy, magnitude: float, obs_dim: int, critic_obs_dim: int,
                 cfg: SACConfig, noise_critic_steps: int = 1, device: str | torch.device = "cpu", shared: bool = False):
        if cfg.compile or cfg.hl_gauss or cfg.max_target_backup:
            raise ConfigError("DSRL-NA supports none of sac.compile, sac.hl_gauss and sac.max_target_backup")
        self.chunk_dim = base.chunk * base.action_dim  # the TD critic's actions: whole chunks, shared latent or not
        super().__init__(obs_dim, critic_obs_dim, base.action_dim if shared else self.chunk_dim, cfg, device)
        self.base, self.magnitude, self.noise_critic_steps = base.to(self.device), magnitude, noise_critic_steps
        self.noise_critic = super()._make_critic(critic_obs_dim, self.num_actions).to(self.device)  # on latents
        self.noise_critic_opt = torch.optim.Adam(self.noise_critic.parameters(), lr=cfg.critic_lr, fused=True)
        self.graph_methods = ()  # its update is its own (no seed-batch)

    def _make_critic(self, critic_obs_dim: int, num_actions: int) -> QEnsemble:
        return super()._make_critic(critic_obs_dim, self.chunk_dim)

    @torch.no_grad()
    def chunk(self, obs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """[B, H * A] the base policy's chunk for latent actions w in [-1, 1]^(H * A) (or ^A, shared)."""
        chunk = denoise(self.base, obs, latent_noise(w, self.base, self.magnitude))
        return chunk.flatten(1).clamp(-1.0, 1.0)  # what `run_chunk` executes

    def update(self, batch: dict[str, Any], generator: torch.Generator | None = None
                      ) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        obs, next_obs = batch["obs"]["policy"], batch["next_obs"]["policy"]
        obs_c, next_obs_c = self.critic_obs(batch["obs"]), self.critic_obs(batch["next_obs"])
        steps = batch.get("steps")
        steps = torch.ones_like(batch["rewards"]) if steps is None else steps
        with torch.no_grad():  # Q^A's TD target on the chunk the next latent action denoises to
            next_w, next_logp = self.actor.sample(next_obs, noise=self._noise(next_obs.shape[0], generator))
            next_v = self._target_min(next_obs_c, self.chunk(next_obs, next_w), self._subset(generator))
            if cfg.backup_entropy:
                next_v = next_v - self.alpha * next_logp
            target = shaped_rewards(batch["rewards"], steps, cfg.gamma, cfg.reward_scale, cfg.reward_bias)
            target = target + batch["discount"] * next_v
        stats = self._critic_step(obs_c, self.chunk(obs, batch["actions"]), target)
        polyak_update(self.critic_target, self.critic, cfg.tau)
        for _ in range(self.noise_critic_steps):  # Q^W(s, w) <- Q^A(s, pi_dp(s, w)), w ~ N(0, I) in noise units
            w = (torch.randn(obs.shape[0], self.num_actions, generator=generator, device=self.device)
                 / self.magnitude).clamp(-1.0, 1.0)
            with torch.no_grad():
                q_a = self.critic(obs_c, self.chunk(obs, w))
            loss = self._step(self.noise_critic_opt,
                              lambda w=w, q_a=q_a: 0.5 * ((self.noise_critic(obs_c, w) - q_a) ** 2).mean(-1).sum())
        stats["noise_critic_loss"] = loss.detach()
        self.updates += 1
        if self.updates % self.actor_period == 0:
            stats.update(self.update_actor(batch, generator))
        return stats

    def _policy_q(self, obs_c: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The actor climbs the noise critic."""
        return self.noise_critic(obs_c, actions)

    def model_state(self) -> dict[str, torch.Tensor]:
        state = super().model_state()
        state.update({f"noise_critic.{k}": v for k, v in self.noise_critic.state_dict().items()})
        state.update({f"base.{k}": v for k, v in self.base.state_dict().items()})
        return state

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        super().load_model_state(state)
        for name, module in (("noise_critic", self.noise_critic), ("base", self.base)):
            module.load_state_dict({k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")})

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {**super().optimizers, "noise_critic": self.noise_critic_opt}


@dataclasses.dataclass
class DSRLConfig:
    magnitude: float = 1.5          # |noise| bound: x_T = magnitude * tanh(SAC's pre-activation) (paper: ~1.5)
    steps_per_iteration: int = 30   # chunk decisions per env per logged iteration (arm-push: one episode of 5-chunks)
    eval_every: int = 19200         # decisions (all envs) between evaluations (64 envs: every 10 iterations); 0: none
    variant: str = "sac"            # sac (DSRL-SAC) | na (DSRL-NA, noise aliasing)
    noise_critic_steps: int = 1     # DSRL-NA: noise-critic distillation steps per critic update (paper: 10)
    warmup: str = "base"            # before learning_starts: base (the base policy, noise ~ N(0, I) clipped to the
    #                                 magnitude: the paper's init_rollout_steps) | uniform (uniform latent actions)
    eval_deterministic: bool = False  # evaluate tanh(mean) latents; the paper's default evaluates sampled latents
    latent: str = "shared"          # shared: one A-dim noise for the chunk (arm-push: 28% -> 93%) | chunk: H * A

    def __post_init__(self) -> None:
        if self.variant not in ("sac", "na"):
            raise ConfigError(f"DSRL variant must be 'sac' or 'na', got {self.variant!r}")
        if self.warmup not in ("base", "uniform"):
            raise ConfigError(f"DSRL warmup must be 'base' or 'uniform', got {self.warmup!r}")
        if self.latent not in ("chunk", "shared"):
            raise ConfigError(f"DSRL latent must be 'chunk' or 'shared', got {self.latent!r}")
        if self.noise_critic_steps < 1:
            raise ConfigError(f"DSRL noise_critic_steps must be >= 1, got {self.noise_critic_steps}")


def dsrl_sac(**overrides: Any) -> SACConfig:
    """SAC's settings for DSRL as measured on arm-push (28% -> 93%, README): 0.5 updates per decision after 3,000
    warm-up decisions of the base, LayerNorm critics, target entropy 0 (the paper's), start temperature 0.1."""
    settings = {"utd_ratio": 0.5, "learning_starts": 3000, "random_warmup": False, "critic_layer_norm": True,
                "target_entropy_scale": 0.0, "init_temperature": 0.1}
    return SACConfig(**{**settings, **overrides})


def uniform_latents(num_actions: int, magnitude: float) -> Any:
    """Uniform latent actions in [-1, 1] (DSRL's `warmup: uniform`), whatever SAC's own `random_warmup` says."""

    def draw(num_envs: int, generator: torch.Generator) -> torch.Tensor:
        return torch.rand(num_envs, num_actions, generator=generator) * 2.0 - 1.0

    return draw


def base_policy_latents(num_actions: int, magnitude: float) -> Any:
    """Latent actions that replay the base policy: noise x_T ~ N(0, I) as the base samples it, clipped to the
    magnitude and expressed in latent units (x_T / magnitude). DSRL's warm-up collects these before SAC learns."""

    def draw(num_envs: int, generator: torch.Generator) -> torch.Tensor:
        noise = torch.randn(num_envs, num_actions, generator=generator)
        return (noise / magnitude).clamp(-1.0, 1.0)

    return draw
