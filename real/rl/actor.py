"""The robot side of real-world RL: control ticks -> transitions for the learner, new parameters -> the policy.

`Actor.on_tick` is a per-tick hook (`real.runner.PolicyRunner.add_hook`, or any loop that produces records with
the fields of `TickLike`). It runs on the control thread and never waits on the network: transitions go into
`ActorClient`'s bounded queue, and parameters that arrived are handed to ``swap`` (e.g. the runner's
``swap_policy``), which installs them between two ticks.

Transitions follow the recorder's conventions (`real.recorder`): the reward and end flags computed at a tick
belong to the step that ended there. Ticks whose mode is not in ``learn_modes`` (recovery manoeuvres,
stale inputs, e-stop) are not learning data: the step that led into one is closed as truncated (FastRLAP marks
recovery resets truncated), and the next episode starts at the next learning tick. The stored action is the
command that went out (normalized), which is the human's during an intervention, as SERL and HIL-SERL store it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from real.deploy import DeployConfig
from real.recorder import LEARN_MODES
from robolearn.checkpoints.policy import Policy, build_policy, load_policy
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

RewardFn = Callable[[Any, Any], "float | tuple[float, str | None]"]
"""``reward_fn(previous_tick, tick) -> reward`` or ``(reward, "terminated" | "truncated" | None)``."""


class TickLike(Protocol):
    """The fields of a control tick the actor reads (`real.runner.Tick` has them)."""

    time_ns: int
    mode: str
    obs: np.ndarray
    raw_action: np.ndarray | None
    command: np.ndarray
    safety: Any  # SafetyInfo: .intervention
    policy_version: int
    status: dict[str, Any]


class Actor:
    """Builds transitions from ticks and ships them; swaps in parameters the learner publishes.

    Args:
        client: an `ActorClient` (or anything with ``send_transitions`` and ``latest_parameters``).
        reward_fn: see `RewardFn`; the robot's task reward (e.g. from ``tick.status``).
        swap: ``swap(version, state_dict)`` installs new parameters (e.g. ``runner.swap_policy``).
        batch_size: transitions per queued batch (SERL ships every 30 steps); episode ends ship at once.
        learn_modes: tick modes that are learning data (policy acting, or a human intervening).
    """

    def __init__(self, client: Any, reward_fn: RewardFn, swap: Callable[[int, dict[str, torch.Tensor]], None],
                 batch_size: int = 32, learn_modes: Sequence[str] = LEARN_MODES,
                 recorder: Any = None) -> None:  # fmt: skip
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1")
        self.client, self.reward_fn, self.swap = client, reward_fn, swap
        self.batch_size, self.learn_modes = batch_size, tuple(learn_modes)
        self.recorder = recorder  # a `real.recorder.Recorder`: every tick with its reward, episode and end
        self.stats = {"ticks": 0, "transitions": 0, "episodes": 0, "swaps": 0, "swap_errors": 0, "nonfinite": 0}
        self._prev: Any = None  # the previous learning tick (start of the pending step)
        self._rows: list[tuple] = []
        self._episode = -1  # id of the episode in progress (or last ended)

    def on_tick(self, tick: TickLike) -> None:
        """The per-tick hook: close the pending step, maybe ship a batch, maybe swap parameters."""
        self.stats["ticks"] += 1
        finite = bool(np.all(np.isfinite(tick.obs)))
        learning = tick.mode in self.learn_modes and finite
        reward, done, episode = None, None, -1
        if self._prev is not None:
            episode = self._episode
            if finite:
                reward, done = self._reward(self._prev, tick)
                done = done if learning else "truncated"  # a reset or stop begins: the episode is cut here
            if finite and np.isfinite(reward):
                self._add(self._prev, tick, reward, done)
            else:  # no next observation or reward for the pending step: drop it, the step before ends the episode
                if finite:
                    self.stats["nonfinite"] += 1
                    log.error("reward_fn returned %s: dropping that step and ending the episode", reward)
                done, episode = "truncated", -1
                self._truncate_last()
            if done:
                self.stats["episodes"] += 1
                self._flush()
                self._prev = None
            else:
                self._prev = tick
        elif learning:
            self._episode += 1
            self._prev, episode = tick, self._episode
        if self.recorder is not None:
            self._record(tick, reward, episode, done if episode >= 0 else None)
        if len(self._rows) > self.batch_size:
            self._flush(keep_last=True)  # the last step of an episode may still get its end flag
        self._maybe_swap()

    def _record(self, tick: Any, reward: float | None, episode: int, done: str | None) -> None:
        self.recorder.on_tick(tick, reward=reward, episode=episode, done=done)

    def _reward(self, prev: Any, tick: Any) -> tuple[float, str | None]:
        out = self.reward_fn(prev, tick)
        reward, done = out if isinstance(out, tuple) else (out, None)
        if done not in (None, "terminated", "truncated"):
            raise ValueError(f"reward_fn's end flag must be None, 'terminated' or 'truncated', got {done!r}")
        return float(reward), done

    def _add(self, prev: Any, tick: Any, reward: float, done: str | None) -> None:
        intervention = bool(getattr(prev.safety, "intervention", False))
        self._rows.append((prev.obs, prev.command, reward, tick.obs, done == "terminated", done == "truncated",
                           intervention, prev.policy_version))  # fmt: skip

    def _truncate_last(self) -> None:
        if self._rows:  # mid-episode the last step is never shipped yet (see on_tick), so it can still be cut
            self._rows[-1] = (*self._rows[-1][:5], True, *self._rows[-1][6:])

    def _flush(self, keep_last: bool = False) -> None:
        rows, self._rows = (self._rows[:-1], self._rows[-1:]) if keep_last else (self._rows, [])
        if not rows:
            return
        cols = list(zip(*rows, strict=True))
        batch = {
            "obs": np.stack(cols[0]).astype(np.float32), "actions": np.stack(cols[1]).astype(np.float32),
            "rewards": np.asarray(cols[2], np.float32), "next_obs": np.stack(cols[3]).astype(np.float32),
            "terminated": np.asarray(cols[4]), "truncated": np.asarray(cols[5]),
            "interventions": np.asarray(cols[6]), "policy_versions": np.asarray(cols[7], np.int64),
        }  # fmt: skip
        self.client.send_transitions(batch)
        self.stats["transitions"] += len(cols[0])

    def _maybe_swap(self) -> None:
        params = self.client.latest_parameters()
        if params is None:
            return
        version, state = params
        try:
            self.swap(version, state)
            self.stats["swaps"] += 1
        except (ValueError, RuntimeError) as e:  # another architecture: keep acting with the current policy
            self.stats["swap_errors"] += 1
            log.error("parameters v%d do not fit the acting policy: %s", version, e)

    def end(self) -> None:
        """The run stops: its last step is truncated (as `real.bag2dataset` cuts a bag's last episode) and queued."""
        self._truncate_last()
        if self._prev is not None:
            self.stats["episodes"] += 1
        self._prev = None
        self._flush()


# --- on a robot: PolicyRunner + Actor (robolearn actor) -------------------------------------------------------


def checkpoint_progress(prev: Any, tick: Any) -> tuple[float, str | None]:
    """A sparse RC-car reward from the adapter's course progress: +1 per checkpoint passed, -10 and terminated
    on a crash (FastRLAP charges crashes and ends the episode; a stuck car is cut by its recovery, truncated)."""
    status = tick.status or {}
    if status.get("event") == "crash":
        return -10.0, "terminated"
    return float(status.get("passed_now", 0)), None


DEFAULT_REWARDS = {"rc_car": checkpoint_progress}


def _import(spec: str) -> Any:
    import importlib

    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"cannot import {spec!r} ({e}); use module.path:function") from e


def fresh_policy(obs_dim: int, num_actions: int, seed: int = 0) -> Policy:
    """A new SAC actor (SACConfig's network) that samples: what a robot collects with before the learner publishes."""
    import dataclasses

    from robolearn.algos.online.sac import SACConfig

    sac = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(SACConfig()).items()}
    return build_policy({"obs_dim": obs_dim, "num_actions": num_actions, "sac": sac}, mode="sample", seed=seed)


def initial_policy(cfg: Mapping[str, Any], client: Any, wait_s: float, seed: int = 0) -> tuple[Policy, int]:
    """The acting policy to start with (sampling, as SAC collects), and its version: the deploy config's SAC
    ``checkpoint``, else the learner's parameters if they arrive within ``wait_s``, else a fresh SAC actor."""
    import time

    from real.deploy import PROCESS_KEYS, resolve_rate
    from real.observation import ObservationBuilder
    from real.robots import make_adapter
    from real.runner import RunnerConfig

    if cfg.get("checkpoint"):
        policy = load_policy(cfg["checkpoint"], mode="sample", seed=seed)
        if policy.kind != "tanh_gaussian":
            raise ConfigError(f"checkpoint {cfg['checkpoint']} is not a SAC policy (a tanh-Gaussian actor; it holds a "
                              f"{policy.kind} one); the actor collects with SAC")
        return policy, 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        params = client.latest_parameters()
        if params is not None:
            policy = build_policy(client.latest_meta["policy"], mode="sample", seed=seed)
            policy.load_actor_state(params[1])
            return policy, params[0]
        time.sleep(0.05)
    rate = resolve_rate(cfg.get("rate_hz"), str(cfg.get("robot", "")), {}, bool(cfg.get("force_rate")))
    runner_cfg = RunnerConfig.from_dict({**{k: v for k, v in cfg.items() if k not in PROCESS_KEYS}, "rate_hz": rate})
    adapter = make_adapter(runner_cfg.robot, runner_cfg.adapter, runner_cfg.rate_hz, {})
    builder = ObservationBuilder(runner_cfg.observation, runner_cfg.inputs, adapter.num_actions, adapter.features)
    log.warning("no parameters from the learner within %.0f s: starting from a fresh SAC actor (%d obs, %d actions)"
                "; the link's last error: %s", wait_s, len(builder), adapter.num_actions,
                getattr(client, "last_error", None))  # fmt: skip
    return fresh_policy(len(builder), adapter.num_actions, seed), 0


def run_actor(cfg: Mapping[str, Any], transport: Any, client: Any, reward_fn: RewardFn, batch_size: int = 32,
              wait_s: float = 10.0, duration: float | None = None, recorder: Any = None, seed: int = 0) -> Actor:
    """Drive the robot of deploy config ``cfg`` with the learner's policy, shipping transitions, until
    ``duration`` s, Ctrl-C or SIGTERM (the robot's stop command goes out either way). Returns the actor."""
    from real.deploy import build_runner

    policy, version = initial_policy(cfg, client, wait_s, seed)
    runner = build_runner(cfg, transport, policy)
    runner.swap_policy(state_dict=policy.state_dict(), version=version)  # start at the learner's version
    actor = Actor(client, reward_fn, lambda v, state: runner.swap_policy(state_dict=state, version=v), batch_size,
                  recorder=recorder)  # fmt: skip
    runner.add_hook(actor.on_tick)
    try:
        runner.run(duration=duration)
    finally:
        actor.end()
        runner.close()
    return actor


@dataclasses.dataclass
class ActorConfig(DeployConfig):
    """`robolearn actor`: a robot acting with the learner's SAC policy and shipping its transitions.

    Every `DeployConfig` option (robot preset, transport, duration, runner overrides) plus the link's."""

    learner: str | None = None      # the learner's host:port (required)
    token_file: str | None = None   # the shared secret's file; default: the ROBOLEARN_TOKEN environment variable
    tls_ca: str | None = None       # TLS: the learner's certificate (robolearn tls-cert's .crt) or its CA, PEM
    tls_server_name: str | None = None  # TLS: the name the learner's certificate holds, if not learner='s host
    insecure: bool = False          # connect in plaintext, not TLS (a trusted network only); needed without tls_ca
    reward: str | None = None       # module:function(prev_tick, tick) -> reward [, end]; default: the robot's
    record: str | None = None       # a rosbag2 folder to record the run to (inputs and /rl/* per tick)
    batch_size: int = 32            # transitions per shipped batch
    wait_s: float = 10.0            # seconds to wait for the learner's first parameters
    seed: int = 0
    actor_id: str | None = None     # this robot's name at the learner (its replay lane); null: <hostname>/<robot>


def cmd_actor(cfg: ActorConfig) -> int:
    """Act on a robot with the learner's policy until Ctrl-C, SIGTERM or `duration`, shipping transitions.
    The token: ROBOLEARN_TOKEN or token_file=; TLS: tls_ca= (plaintext only with insecure=true)."""
    from real.deploy import open_transport
    from real.rl.link import ActorClient, read_token

    token = read_token(cfg.token_file)
    if not cfg.learner:
        raise ConfigError("actor needs learner=<host:port> (the robolearn learner's address)")
    if cfg.reward is None and cfg.robot not in DEFAULT_REWARDS:
        raise ConfigError(f"robot {cfg.robot!r} has no default reward; give reward=module:function(prev_tick, tick)")
    reward_fn = _import(cfg.reward) if cfg.reward else DEFAULT_REWARDS[cfg.robot]
    if cfg.policy:
        raise ConfigError("the actor acts with the learner's SAC policy; start from a checkpoint= instead of policy=")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(cfg.torch_threads)
    deploy_keys = {field.name for field in dataclasses.fields(DeployConfig)}  # the link's options are not the runner's
    runner_cfg = {k: v for k, v in dataclasses.asdict(cfg).items() if k in deploy_keys}
    import socket

    client = ActorClient(cfg.learner, token, actor_id=cfg.actor_id or f"{socket.gethostname()}/{cfg.robot}",
                         tls_ca=cfg.tls_ca, tls_server_name=cfg.tls_server_name, insecure=cfg.insecure)  # fmt: skip
    try:
        with open_transport(cfg.transport, cfg.domain_id) as transport:
            recorder = None
            if cfg.record:
                from real.recorder import Recorder

                topics = [(spec.topic, spec.msg_type, spec.qos) for spec in _inputs(runner_cfg)]
                recorder = Recorder(transport, cfg.record, topics)
            try:
                actor = run_actor(runner_cfg, transport, client, reward_fn, cfg.batch_size, cfg.wait_s, cfg.duration,
                                  recorder, cfg.seed)
            finally:
                if recorder is not None:
                    recorder.close()
        client.close(flush_timeout=5.0)
    finally:
        client.close()
    print(f"actor: {actor.stats['transitions']} transitions in {actor.stats['episodes']} episodes, "
          f"{actor.stats['swaps']} parameter updates; link {client.stats}")
    return 0


def _inputs(cfg: Mapping[str, Any]) -> list[Any]:
    from real.observation import InputSpec

    return [InputSpec.from_dict(name, spec or {}) for name, spec in dict(cfg["inputs"]).items()]
