"""The learner process of real-world RL: SAC on the transitions robots send, parameters back every few seconds.

    ROBOLEARN_TOKEN=... robolearn learner run_dir=runs/car algo=serl port=50051 host=0.0.0.0 publish_s=2

`Learner` takes transition batches from a `LearnerServer` into a robolearn `ReplayBuffer`, runs SAC critic
updates at the algorithm's update-to-data ratio once ``learning_starts`` transitions arrived, and publishes the
actor's parameters (``actor.*`` of the SAC actor, the key layout of a deployable checkpoint) every
``publish_interval`` seconds when they changed (FastRLAP 2 s, LeRobot 4 s) and as soon as the networks exist.
It checkpoints with robolearn's atomic checkpoint format (networks, optimizers, replay buffer, counters,
parameter version) and resumes from ``run_dir/checkpoints/latest``, so a learner killed and restarted continues
its versions and data (minus what arrived after its last checkpoint).

The SAC settings come from the algo presets (``configs/algo/<algo>.yaml``, with ``algo.<key>=`` overrides; a
resumed run keeps its checkpoint's); the observation and action sizes from ``obs_dim``/``num_actions``, the
first batch, or the checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import torch

from real.rl.codec import PayloadError
from real.rl.link import LearnerServer, TransitionBatch
from robolearn import checkpoint
from robolearn.algos.sac import SAC, SACConfig
from robolearn.buffers import ReplayBuffer
from robolearn.errors import CheckpointError, ConfigError

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoints/latest"


def policy_config(sac: SAC) -> dict[str, Any]:
    """What an actor needs to build the policy network the published parameters fit."""
    return dict(sac.config)


class Learner:
    """SAC fed by a `LearnerServer`. Call `step` in a loop (or `run`).

    Args:
        server: a started server.
        obs_dim, num_actions: build (and publish) the networks at once; otherwise on the first batch.
        run_dir: where checkpoints (and the resolved config) go; an existing checkpoint is resumed.
        sac_config: the SAC settings (batch size, UTD, learning_starts, buffer_size, ...).
        publish_interval, checkpoint_interval: seconds between parameter publications / checkpoints.
        max_updates_per_step: cap on critic updates per `step`, so publication and intake stay timely.
    """

    def __init__(self, server: LearnerServer, run_dir: str | Path, sac_config: SACConfig | None = None,
                 device: str = "cpu", publish_interval: float = 2.0, checkpoint_interval: float = 60.0,
                 max_updates_per_step: int = 64, seed: int = 0, save_buffer: bool = True,
                 obs_dim: int | None = None, num_actions: int | None = None) -> None:  # fmt: skip
        self.server, self.run_dir = server, Path(run_dir)
        self.cfg = sac_config or SACConfig()
        self.cfg.validate()
        self.device, self.seed, self.save_buffer = device, seed, save_buffer
        self.publish_interval, self.checkpoint_interval = publish_interval, checkpoint_interval
        self.max_updates_per_step = max_updates_per_step
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.sac: SAC | None = None
        self.buffer: ReplayBuffer | None = None
        self.transitions = 0  # received in total (across restarts)
        self.updates = 0
        self.update_debt = 0.0
        self._last_publish = self._last_checkpoint = time.monotonic()
        self._published_updates = -1  # updates at the last publication (nothing new: no new version)
        if (self.run_dir / CHECKPOINT).is_dir():
            self.restore(self.run_dir / CHECKPOINT)
        elif obs_dim and num_actions:  # known sizes: publish a first policy before any data arrives
            self._build(obs_dim, num_actions)
            self.publish()

    # --- networks ----------------------------------------------------------------------------------------

    def _build(self, obs_dim: int, num_actions: int) -> None:
        torch.manual_seed(self.seed)
        self.sac = SAC(obs_dim, obs_dim, num_actions, self.cfg, self.device)
        self.buffer = ReplayBuffer(self.cfg.buffer_size, 1, {"policy": obs_dim}, num_actions, self.device,
                                   self.cfg.n_step, self.cfg.gamma)  # fmt: skip
        log.info("SAC built for %d observations, %d actions", obs_dim, num_actions)

    def publish(self) -> int | None:
        """Publish the actor's parameters now; returns their version, or None when they hold NaN/inf (then the
        robots keep acting with the last good version; the error is logged)."""
        state = {f"actor.{k}": v for k, v in self.sac.actor.state_dict().items()}
        meta = {"policy": policy_config(self.sac), "transitions": self.transitions, "updates": self.updates}
        self._last_publish, self._published_updates = time.monotonic(), self.updates
        try:
            version = self.server.publish_parameters(state, meta)
        except PayloadError as e:
            log.error("not publishing after %d updates: %s; actors keep v%d", self.updates, e, self.server.version)
            return None
        log.info("published parameters v%d (%d transitions, %d updates)", version, self.transitions, self.updates)
        return version

    # --- the loop ----------------------------------------------------------------------------------------

    def step(self, timeout: float = 0.05) -> dict[str, float]:
        """Take what arrived, update, and publish / checkpoint when due. Returns the update statistics."""
        for batch in self.server.get_batches(timeout=timeout if self._idle() else None):
            self._ingest(batch)
        stats: dict[str, torch.Tensor] = {}
        if self.sac is None:
            return {}
        if len(self.buffer) >= max(self.cfg.learning_starts, 1):
            n = min(int(self.update_debt), self.max_updates_per_step)
            for _ in range(n):
                stats = self.sac.update_critic(self.buffer.sample(self.cfg.batch_size, self.generator), self.generator)
            self.update_debt -= n
            self.updates += n
        now = time.monotonic()
        if now - self._last_publish >= self.publish_interval and self.updates != self._published_updates:
            self.publish()
        if now - self._last_checkpoint >= self.checkpoint_interval:
            self.save()
        return {k: float(v) for k, v in stats.items()}

    def _idle(self) -> bool:
        return self.sac is None or len(self.buffer) < self.cfg.learning_starts or self.update_debt < 1

    def _ingest(self, batch: TransitionBatch) -> None:
        t = {k: torch.from_numpy(v.copy()) for k, v in batch.tensors.items()}
        obs_dim, num_actions = t["obs"].shape[1], t["actions"].shape[1]
        if self.sac is None:
            self._build(obs_dim, num_actions)
            self.publish()
        if (obs_dim, num_actions) != (self.buffer.obs_dims["policy"], self.buffer.num_actions):
            log.error("dropping %d transitions of %s with %d observations / %d actions (learner: %d / %d)",
                      batch.size, batch.peer, obs_dim, num_actions, self.buffer.obs_dims["policy"],
                      self.buffer.num_actions)  # fmt: skip
            return
        for i in range(batch.size):
            self.buffer.add({"policy": t["obs"][i : i + 1]}, t["actions"][i : i + 1], t["rewards"][i : i + 1],
                            {"policy": t["next_obs"][i : i + 1]}, t["terminated"][i : i + 1],
                            t["truncated"][i : i + 1])  # fmt: skip
        self.transitions += batch.size
        past_start = min(batch.size, self.transitions - self.cfg.learning_starts)  # transitions after the warm-up
        self.update_debt += max(0, past_start) * self.cfg.utd_ratio

    def run(self, stop: threading.Event | None = None, duration: float | None = None) -> None:
        """Step until ``stop`` is set or ``duration`` seconds passed; checkpoints at the end."""
        stop = stop or threading.Event()
        end = None if duration is None else time.monotonic() + duration
        try:
            while not stop.is_set() and (end is None or time.monotonic() < end):
                self.step()
        finally:
            if self.sac is not None:
                self.save()

    # --- checkpoints -------------------------------------------------------------------------------------

    def save(self, path: str | Path | None = None) -> Path:
        """Atomically checkpoint networks, optimizers, (buffer), counters and the parameter version."""
        path = Path(path or self.run_dir / CHECKPOINT)
        tensors: dict[str, torch.Tensor] = {}
        optimizers = {}
        for name, opt in self.sac.optimizers.items():
            flat, meta = checkpoint.flatten_optimizer(opt)
            tensors.update({f"{name}/{k}": v for k, v in flat.items()})
            optimizers[name] = meta
        meta = {"optimizers": optimizers, "transitions": self.transitions, "updates": self.updates,
                "update_debt": self.update_debt, "critic_updates": self.sac.critic_updates,
                "version": self.server.version}  # fmt: skip
        if self.save_buffer:
            buffer_tensors, meta["buffer"] = self.buffer.state_dict()
            tensors.update({f"buffer/{k}": v for k, v in buffer_tensors.items()})
        config = {"policy": policy_config(self.sac), "run": {"learner": "real.rl.learner", "seed": self.seed}}
        out = checkpoint.save(path, config, self.sac.model_state(), tensors, meta)
        self._last_checkpoint = time.monotonic()
        return out

    def restore(self, path: str | Path) -> None:
        """Continue from `save`: networks, optimizers, buffer, counters; versions continue after the saved one."""
        config, model_state = checkpoint.load(path)
        meta, tensors = checkpoint.load_trainer(path)
        policy = config.get("policy", {})
        if "sac" not in policy:
            raise CheckpointError(f"{path} is not a SAC learner checkpoint")
        self.cfg = SACConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in policy["sac"].items()})
        self._build(policy["obs_dim"], policy["num_actions"])
        try:
            self.sac.load_model_state(model_state)
            for name, opt in self.sac.optimizers.items():
                prefix = name + "/"
                checkpoint.restore_optimizer(opt, {k[len(prefix):]: v for k, v in tensors.items()
                                                   if k.startswith(prefix)}, meta["optimizers"][name])  # fmt: skip
            if "buffer" in meta:
                self.buffer.load_state_dict({k[7:]: v for k, v in tensors.items() if k.startswith("buffer/")},
                                            meta["buffer"])  # fmt: skip
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this learner: {e}") from e
        self.transitions, self.updates = meta["transitions"], meta["updates"]
        self.update_debt, self.sac.critic_updates = meta["update_debt"], meta["critic_updates"]
        self.server.version = max(self.server.version, int(meta["version"]))
        log.info("resumed %s: %d transitions, %d updates, parameters v%d", path, self.transitions, self.updates,
                 self.server.version)  # fmt: skip
        self.publish()


# --- CLI ---------------------------------------------------------------------------------------------------


def sac_config(algo: str = "sac", overrides: dict[str, str] | None = None) -> SACConfig:
    """The SACConfig of an algo preset (configs/algo/<algo>.yaml) with ``key=value`` overrides."""
    from robolearn.train import _off_policy_config, compose

    if algo == "td3" or algo == "ppo":
        raise ConfigError(f"the real-world learner runs SAC recipes (sac, redq, rlpd, serl, wsrl), not {algo}")
    cfg = compose([f"algo={algo}", *(f"algo.{k}={v}" for k, v in (overrides or {}).items())])
    return _off_policy_config(cfg["algo"])


def read_token(opts: dict[str, str]) -> str:
    """The shared secret from ``token=`` / ``token_file=`` in ``opts`` (removed from it) or ROBOLEARN_TOKEN."""
    token = opts.pop("token", None) or os.environ.get("ROBOLEARN_TOKEN", "")
    if "token_file" in opts:
        token = Path(opts.pop("token_file")).read_text().strip()
    if not token:
        raise ConfigError("the learner needs a shared secret: set ROBOLEARN_TOKEN (or token_file=, token=)")
    return token


def cmd_learner(opts: dict[str, str]) -> int:
    """``robolearn learner run_dir=<dir> [algo=sac] [algo.<key>=v] [port=50051] [host=127.0.0.1] [publish_s=2]
    [checkpoint_s=60] [duration=s] [device=cpu] [seed=0] [obs_dim=D num_actions=A]``; the token from
    ROBOLEARN_TOKEN or token_file=."""
    opts = dict(opts)
    token = read_token(opts)
    overrides = {k[5:]: opts.pop(k) for k in [k for k in opts if k.startswith("algo.")]}
    try:
        run_dir = Path(opts.pop("run_dir"))
        algo, host, device = opts.pop("algo", "sac"), opts.pop("host", "127.0.0.1"), opts.pop("device", "cpu")
        port, seed = int(opts.pop("port", "50051")), int(opts.pop("seed", "0"))
        publish_s, checkpoint_s = float(opts.pop("publish_s", "2")), float(opts.pop("checkpoint_s", "60"))
        duration = float(opts.pop("duration", "0")) or None
        obs_dim, num_actions = int(opts.pop("obs_dim", "0")) or None, int(opts.pop("num_actions", "0")) or None
    except KeyError as e:
        raise ConfigError("learner needs run_dir=<dir>") from e
    except ValueError as e:
        raise ConfigError(f"bad learner option: {e}") from e
    if opts:
        raise ConfigError(f"unknown learner options {sorted(opts)}; valid: run_dir, algo, algo.<key>, port, host, "
                          "publish_s, checkpoint_s, duration, device, seed, obs_dim, num_actions, token_file")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = sac_config(algo, overrides)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "learner.json").write_text(json.dumps({"algo": algo, "sac": dataclasses.asdict(cfg), "port": port,
                                                      "host": host, "publish_s": publish_s}, indent=2))  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with LearnerServer(token, port, host) as server:
        learner = Learner(server, run_dir, cfg, device, publish_s, checkpoint_s, seed=seed, obs_dim=obs_dim,
                          num_actions=num_actions)
        print(f"learner on {host}:{server.port}, run_dir {run_dir}", flush=True)
        learner.run(stop, duration)
    return 0
