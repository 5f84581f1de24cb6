"""A checkpoint (or a scripted controller) as a policy: the one place a policy is loaded.

    policy = load_policy("runs/<run>/checkpoints/final")                  # deterministic, on the CPU
    actions = policy({"policy": obs})                                       # obs [N, D] -> actions [N, A]
    policy.run                                                              # the run config it was trained with

Every checkpoint kind loads here, by the actor network it holds (`robolearn.algos.base.ActorKind`, which each
registered algorithm declares): `"gaussian"` (PPO's `ActorCritic`: the mean, or a Gaussian sample),
`"tanh_gaussian"` (SAC, IQL, CQL...: tanh(mu), or a reparameterised sample), `"deterministic"` (TD3, TD3+BC,
ReBRAC: tanh(mu), or with its exploration noise). The offline algorithms (`robolearn.algos.offline.base`) name
their actor in the config (`"actor"`, with `actor_hidden`, `activation` and `actor_layer_norm` beside it at the
top level); SAC and TD3 keep their settings under their algorithm's name, which the registry maps to its actor.
Action-chunk policies (`policies.flow.FlowPolicy`,
`policies.diffusion.DiffusionPolicy`; `"kind": "flow"` or `"diffusion"` with the network's constructor arguments,
written by `save_chunk_policy`; and the small VLA `policies.vla.VLAPolicy`, `"kind": "vla"`, which reads the
`"pixels"` group and the state from `"policy"` and follows `policy.actor.instruction`; and a DSRL run's result,
`policies.steered.SteeredChunkPolicy`, `"kind": "steered"`: its latent actor's noise through its frozen base)
return one action per call
from a queue of H: a chunk is sampled when the queue is empty (deterministic: denoised from zero noise; sample: from
the policy's generator) and executed open-loop, every env re-planning in lockstep (LeRobot's action queue);
`reset()` empties it, as at an episode's start. Deployment, the real-world actor, evaluation and rendering use it;
none needs critics or target networks, so only the actor's weights are read. This module imports neither
the simulator nor JAX.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from robolearn.checkpoints import checkpoint
from robolearn.errors import CheckpointError, ConfigError

Mode = Literal["deterministic", "sample"]
MODES = ("deterministic", "sample")


class Policy(torch.nn.Module):
    """`{"policy": obs[N, D]} -> actions[N, A]`, deterministic or sampled.

    Attributes: `actor` (the actor network), `kind` (an actor kind: "gaussian", "tanh_gaussian", "deterministic";
    a chunk kind: "flow", "diffusion", "vla", "steered"; or "scripted"),
    `mode`, `run` (the run config stored with the checkpoint, `{}` for a scripted controller), `policy_config`
    (the network's config, which the real-world learner publishes parameters for), `generator` (the draws of
    `mode="sample"`).
    """

    def __init__(self, net: torch.nn.Module | Callable[[torch.Tensor], torch.Tensor], kind: str,
                 mode: Mode = "deterministic", run: Mapping[str, Any] | None = None,
                 policy_config: Mapping[str, Any] | None = None, exploration_noise: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        if mode not in MODES:
            raise ConfigError(f"policy mode must be one of {MODES}, got {mode!r}")
        if isinstance(net, torch.nn.Module):
            self.actor = net  # named as in checkpoints: a SAC/TD3 Policy's state_dict is the checkpoint's `actor.*`
        else:
            self.fn = net
        self.kind, self.mode = kind, mode
        self.run, self.policy_config = dict(run or {}), dict(policy_config or {})
        self.exploration_noise = exploration_noise
        self.generator = torch.Generator().manual_seed(seed)
        self._queue: torch.Tensor | None = None  # a chunk policy's actions still to run [N, H, A]
        self._next = 0                           # the queue's next step

    def reset(self) -> None:
        """Forget the queued actions of a chunk policy (call it when the episodes start again); others keep none."""
        self._queue = None

    @property
    def name(self) -> str:
        return self.policy_config.get("function", self.kind)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if self.kind == "scripted":
            return self.fn(obs["policy"])
        if self.kind == "gaussian":
            if self.mode == "deterministic":
                return self.actor.act_deterministic(obs)
            dist = self.actor.distribution(obs)
            return dist.mean + dist.stddev * self._noise(dist.mean)
        x = obs["policy"]
        if self.kind == "vla":  # one packed row per env: the camera frame, the instruction's tokens, the state
            x = self.actor.pack(obs["pixels"], x)
        if self.kind in CHUNK_KINDS:
            return self._chunk_action(x)
        if self.kind == "tanh_gaussian":
            if self.mode == "deterministic":
                return self.actor.mode(x)
            noise = self._noise(x.new_empty(x.shape[0], self.policy_config["num_actions"]))
            return self.actor.sample(x, noise=noise)[0]
        action = self.actor(x)  # deterministic
        if self.mode == "deterministic":
            return action
        return (action + self.exploration_noise * self._noise(action)).clamp(-1.0, 1.0)

    def load_actor_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """Load actor weights in a checkpoint's key layout (`actor.*` for SAC/TD3, as the real-world learner
        publishes them; the whole `ActorCritic` for PPO); a mismatch is a `CheckpointError`."""
        try:
            if self.kind == "gaussian":  # a PPO checkpoint is the whole ActorCritic
                self.actor.load_state_dict(state)
            else:
                self.load_state_dict({k: v for k, v in state.items() if k.startswith("actor.")})
        except RuntimeError as e:
            raise CheckpointError(f"the parameters do not fit this {self.kind} policy: {e}") from e

    def _chunk_action(self, x: torch.Tensor) -> torch.Tensor:
        """The next action of the queued chunk, planning a new chunk [N, H, A] for every env when it has run out
        (or the batch size changed)."""
        if self._queue is None or self._next >= self._queue.shape[1] or self._queue.shape[0] != x.shape[0]:
            if self.mode == "deterministic":
                chunk = self.actor(x)
            else:
                noise = self._noise(x.new_empty(x.shape[0], self.actor.chunk, self.actor.action_dim))
                chunk = self.actor.sample(x, noise=noise)  # from this initial noise, deterministically
                chunk = chunk[0] if isinstance(chunk, tuple) else chunk  # a flow's sample also returns its chain
            self._queue, self._next = chunk.clamp(-1.0, 1.0), 0
        self._next += 1
        return self._queue[:, self._next - 1]

    def _noise(self, like: torch.Tensor) -> torch.Tensor:
        """Standard normal draws from this policy's own generator (on the CPU, moved to the policy's device)."""
        return torch.randn(like.shape, generator=self.generator).to(like.device, like.dtype)


def _actor(kind: str, cfg: Mapping[str, Any]) -> torch.nn.Module:
    """The actor network of a checkpoint's policy config."""
    from policies.actor_critic import ActorCritic
    from policies.diffusion import DiffusionPolicy
    from policies.ensemble import DeterministicActor, TanhGaussianActor
    from policies.flow import FlowPolicy

    try:
        if kind == "gaussian":
            return ActorCritic(**cfg)
        if kind in CHUNK_KINDS:
            from policies.steered import SteeredChunkPolicy
            from policies.vla import VLAPolicy

            net_class = {"flow": FlowPolicy, "diffusion": DiffusionPolicy, "vla": VLAPolicy,
                         "steered": SteeredChunkPolicy}[kind]
            return net_class(**{k: v for k, v in cfg.items() if k != "kind"})
        c = _settings(cfg)
        args = (cfg["obs_dim"], cfg["num_actions"], tuple(c["actor_hidden"]), c["activation"], c["actor_layer_norm"],
                bool(c.get("normalize_states", False)))
        if kind == "tanh_gaussian":  # IQL's Gaussian: one log-std for all states (`actor_shared_std`)
            return TanhGaussianActor(*args, shared_std=bool(c.get("actor_shared_std", False)))
        return DeterministicActor(*args)
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"checkpoint policy config does not fit the policy: {e}") from e


#: Action-chunk policies: `"kind"` in a checkpoint's policy config.
CHUNK_KINDS = ("flow", "diffusion", "vla", "steered")

#: The actor networks of the learners (`robolearn.algos.base.ActorKind`).
ACTOR_KINDS = ("gaussian", "tanh_gaussian", "deterministic")


def _algorithm(policy_config: Mapping[str, Any]) -> str | None:
    """The registered algorithm whose settings a SAC-style policy config holds under its name (None: none)."""
    from robolearn.algos.base import registry

    return next((name for name in registry() if isinstance(policy_config.get(name), Mapping)), None)


def _settings(policy_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The actor's settings: an offline algorithm keeps them at the top level, SAC and TD3 under their name."""
    if "actor" in policy_config:
        return policy_config
    name = _algorithm(policy_config)
    return policy_config[name] if name else {}


def policy_kind(policy_config: Mapping[str, Any]) -> str:
    """Which network a checkpoint's policy config describes: an actor kind (`ACTOR_KINDS`) or a chunk kind."""
    if policy_config.get("kind") in CHUNK_KINDS:
        return policy_config["kind"]
    if "actor" in policy_config:  # an offline algorithm's checkpoint names its actor
        actor = policy_config["actor"]
        if actor not in ACTOR_KINDS[1:]:
            raise CheckpointError(f"checkpoint policy config has actor {actor!r}; expected one of "
                                  f"{sorted(ACTOR_KINDS[1:])}")
        return actor
    name = _algorithm(policy_config)
    if name is None:  # PPO's config is the ActorCritic's arguments
        return "gaussian"
    from robolearn.algos.base import spec

    return spec(name).actor


def build_policy(policy_config: Mapping[str, Any], mode: Mode = "deterministic", run: Mapping[str, Any] | None = None,
                 seed: int = 0) -> Policy:
    """A freshly initialised `Policy` for a checkpoint's policy config (load weights with `load_actor_state`)."""
    kind = policy_kind(policy_config)
    noise = float(_settings(policy_config).get("exploration_noise", 0.1))
    return Policy(_actor(kind, policy_config), kind, mode, run, policy_config, exploration_noise=noise, seed=seed)


def load_policy(path: str | Path, mode: Mode = "deterministic", device: str | torch.device = "cpu",
                seed: int = 0) -> Policy:
    """The policy in the checkpoint folder `path` (config.json + model.safetensors), on `device`, in eval mode.

    `mode="sample"` draws exploratory actions (SAC's sample, PPO's Gaussian, TD3's exploration noise) from
    the policy's own generator seeded with `seed`.
    """
    config, state = checkpoint.load(path)
    if "policy" not in config or "run" not in config:
        raise CheckpointError(f"{Path(path) / checkpoint.CONFIG} lacks 'policy' or 'run': not a robolearn checkpoint")
    policy = build_policy(config["policy"], mode, config["run"], seed)
    try:
        policy.load_actor_state(state)  # the actor only, not critics and targets
    except CheckpointError as e:
        raise CheckpointError(f"model.safetensors in {path} does not match its config.json: {e}") from e
    return policy.to(device).eval()


def chunk_policy_checkpoint(net: torch.nn.Module) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(policy config, `actor.*` tensors) of a `FlowPolicy`, `DiffusionPolicy`, `VLAPolicy` or
    `SteeredChunkPolicy`: what `load_policy` rebuilds."""
    from policies.flow import FlowPolicy
    from policies.steered import SteeredChunkPolicy
    from policies.vla import VLAPolicy

    kinds = ((VLAPolicy, "vla"), (FlowPolicy, "flow"), (SteeredChunkPolicy, "steered"))
    kind = next((name for cls, name in kinds if isinstance(net, cls)), "diffusion")
    return {"kind": kind, **net.config}, {f"actor.{k}": v.detach() for k, v in net.state_dict().items()}


def save_chunk_policy(path: str | Path, net: torch.nn.Module, run: Mapping[str, Any] | None = None) -> Path:
    """Write a chunk policy (`chunk_policy_checkpoint`'s kinds) as a checkpoint folder (config.json +
    model.safetensors) that `load_policy` loads; `run` is the run config stored beside it (what it was trained on)."""
    config, state = chunk_policy_checkpoint(net)
    return checkpoint.save(path, {**lerobot_fields(net), "policy": config, "run": dict(run or {})}, state)


def lerobot_fields(net: torch.nn.Module) -> dict[str, Any]:
    """A VLA checkpoint's config.json also carries LeRobot's top-level policy fields (`type`, `input_features`,
    `output_features`, `chunk_size`, `n_action_steps`...) so LeRobot-style tooling reads its inputs; else {}."""
    features = getattr(net, "lerobot_features", None)
    return {"type": "robolearn_vla", **features()} if features is not None else {}


def scripted_policy(spec: str) -> Policy:
    """A scripted controller `"module.path:function"` mapping obs[N, D] -> actions[N, A], as a `Policy`."""
    path, _, attr = str(spec).partition(":")
    try:
        fn = getattr(importlib.import_module(path), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"policy={spec!r}: cannot import it ({e}); use module.path:function") from e
    return Policy(fn, "scripted", policy_config={"function": str(spec)})
