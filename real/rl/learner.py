"""The learner process of real-world RL: off-policy training on the transitions robots send, parameters back.

    robolearn tls-cert out=certs host=gpu-box       # once: certs/learner.crt (for the robots) + learner.key
    ROBOLEARN_TOKEN=... robolearn learner run_dir=runs/car algo=serl offline_data=demos host=0.0.0.0
        tls_cert=certs/learner.crt tls_key=certs/learner.key (TLS; or insecure=true for plaintext)

`Learner` is robolearn's off-policy learner (`robolearn.runners.off_policy.OffPolicyLearner`: the update
schedule, `sample_mixed` with the offline data at ``algo.offline_ratio``, checkpoints) fed by a `LearnerServer`
instead of a VecEnv. Each actor (robot) gets its own replay lane (`ActorLanes`), appended in the order it sent
its transitions, so n-step returns stay inside one robot's episodes. The actor's parameters (``actor.*``, the
key layout of a deployable checkpoint) are published every ``publish_s`` seconds when they changed (FastRLAP
2 s, LeRobot 4 s) and as soon as the networks exist. Checkpoints go to ``run_dir/checkpoints/latest`` every
``checkpoint_s`` seconds and at exit; a learner started on a run directory with one resumes it, so a learner
killed and restarted continues its parameter versions and data (minus what arrived after its last checkpoint).

The SAC settings come from the algo presets (``configs/algo/<recipe>.yaml``, ``algo.<key>=`` overrides, as in
training; a resumed run keeps its checkpoint's); the observation and action sizes from ``obs_dim`` and
``num_actions``, the offline data, the checkpoint or the first batch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from real.rl.codec import PayloadError
from real.rl.link import LearnerServer, TransitionBatch, read_token
from robolearn.algos.online.sac import SAC, SACConfig
from robolearn.checkpoints import checkpoint
from robolearn.config import algo_config
from robolearn.core.buffers import ReplayBuffer
from robolearn.errors import CheckpointError, ConfigError
from robolearn.runners.off_policy import Means, OffPolicyLearner

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoints/latest"
IDLE_S = 30.0  # an actor silent this long gives up its lane to a new actor when all lanes are taken


@dataclasses.dataclass
class LearnerConfig:
    """`robolearn learner`: SAC on the transitions robots send over the link, its parameters sent back."""

    run_dir: str | None = None      # required: checkpoints and learner.json; a checkpoint there is resumed
    host: str = "127.0.0.1"         # interface to listen on (0.0.0.0: every interface)
    port: int = 50051
    token_file: str | None = None   # the shared secret's file; default: the ROBOLEARN_TOKEN environment variable
    tls_cert: str | None = None     # TLS: the certificate to serve, PEM (robolearn tls-cert out=<dir> host=<name>)
    tls_key: str | None = None      # TLS: its private key, PEM
    insecure: bool = False          # serve plaintext instead of TLS (a trusted network only); needed without tls_cert
    publish_s: float = 2.0          # seconds between parameter publications (only when the parameters changed)
    checkpoint_s: float = 60.0      # seconds between checkpoints (one more at exit)
    duration: float | None = None   # seconds to run; null: until Ctrl-C or SIGTERM
    device: str = "cpu"             # the learner's torch device
    seed: int = 0
    obs_dim: int | None = None      # with num_actions: build and publish a policy before any data arrives
    num_actions: int | None = None  # (otherwise the sizes come from the offline data, checkpoint or first batch)
    max_actors: int = 1             # robots sending at once: one replay lane each, algo.buffer_size split evenly
    max_updates_per_step: int = 64  # critic updates between intakes of data, so intake and publication stay timely
    offline_data: str | None = None  # robot episodes (a robolearn episode folder) mixed in at algo.offline_ratio
    algo: Any = None                # the algo group: a SAC recipe
    env: dict[str, Any] = dataclasses.field(default_factory=dict)  # unused: the algo presets' env.num_envs (sim)

    def read_token(self) -> str:
        """The link's shared secret: the file ``token_file``, else the ROBOLEARN_TOKEN environment variable."""
        return read_token(self.token_file)


def sac_recipe(algo: Mapping[str, Any] | None) -> SACConfig:
    """The SAC settings of a composed ``algo`` group."""
    algo = dict(algo or {"name": "sac"})
    if algo.get("name") != "sac":
        raise ConfigError(f"the real-world learner runs SAC recipes (algo=sac|redq|rlpd|serl|wsrl), "
                          f"not {algo.get('recipe', algo.get('name'))}")  # fmt: skip
    return algo_config(algo)


class ActorLanes:
    """The learner's online replay buffer: one lane, a one-env `ReplayBuffer`, per actor.

    A lane holds one robot's transitions in the order it sent them, so n-step returns walk along that robot's
    episodes only. Where its stream has a gap (transitions the actor dropped, lost with a killed learner, or a
    new actor taking over the lane) the step before the gap is closed as truncated: a gap is a step whose next
    observation is not the next step's observation although its episode did not end. `sample` draws uniformly
    over every lane's transitions. Lanes are made as actors appear, up to `max_actors`, with
    ``capacity // max_actors`` slots each; when all are taken, a new actor takes the lane of an actor silent
    for `IDLE_S` seconds (an actor restarted under a new id), or its transitions are refused.
    """

    def __init__(self, capacity: int, max_actors: int, obs_dim: int, num_actions: int,
                 device: str | torch.device = "cpu", n_step: int = 1, gamma: float = 0.99) -> None:  # fmt: skip
        if max_actors < 1 or capacity < max_actors:
            raise ConfigError(f"need 1 <= max_actors ({max_actors}) <= algo.buffer_size ({capacity})")
        self.max_actors, self.lane_capacity = max_actors, capacity // max_actors
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.device, self.n_step, self.gamma = torch.device(device), n_step, gamma
        self.lanes: list[ReplayBuffer] = []
        self.actors: list[str] = []  # the actor id of each lane
        self.last_seen: list[float] = []  # time.monotonic() of each lane's newest batch
        self._handed_over: set[int] = set()  # lanes taken over by a new actor since its last batch
        self.refused: dict[str, int] = {}  # transitions refused per actor (no lane free)
        self.cuts = 0  # steps closed as truncated at a gap
        self.clock = time.monotonic

    def __len__(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    def lane(self, actor: str) -> int | None:
        """The lane of ``actor``: its own, a new one, or an idle actor's; None when every lane is busy."""
        now = self.clock()
        if actor in self.actors:
            i = self.actors.index(actor)
        elif len(self.lanes) < self.max_actors:
            i = len(self.lanes)
            self.lanes.append(ReplayBuffer(self.lane_capacity, 1, {"policy": self.obs_dim}, self.num_actions,
                                           self.device, self.n_step, self.gamma))  # fmt: skip
            self.actors.append(actor)
            self.last_seen.append(now)
            log.info("actor %s: replay lane %d of %d", actor, i, self.max_actors)
        else:
            i = min(range(len(self.lanes)), key=self.last_seen.__getitem__)
            if now - self.last_seen[i] < IDLE_S:
                if actor not in self.refused:
                    log.error("actor %s refused: all max_actors=%d replay lanes are in use (actors %s); its "
                              "transitions are dropped. Raise max_actors= (each robot needs a lane)",
                              actor, self.max_actors, self.actors)  # fmt: skip
                    self.refused[actor] = 0
                return None
            log.warning("actor %s takes over replay lane %d of actor %s, silent for %.0f s", actor, i,
                        self.actors[i], now - self.last_seen[i])  # fmt: skip
            self.actors[i] = actor
            self._handed_over.add(i)
        self.last_seen[i] = now
        return i

    def add(self, actor: str, batch: Mapping[str, torch.Tensor]) -> bool:
        """Append a batch of ``actor``'s transitions (`codec.TRANSITION_FIELDS`, in time order) to its lane;
        False when it has none (refused)."""
        i = self.lane(actor)
        if i is None:
            self.refused[actor] += len(batch["rewards"])
            return False
        obs, next_obs, terminated = batch["obs"], batch["next_obs"], batch["terminated"].bool()
        truncated = batch["truncated"].bool().clone()
        done = terminated | truncated
        jump = ~done[:-1] & (next_obs[:-1] != obs[1:]).any(dim=1)  # a step missing between two of this batch
        truncated[:-1] |= jump
        lane = self.lanes[i]
        gap = len(lane) > 0 and (i in self._handed_over or not _continues(lane, obs[0]))
        lane.extend({"policy": obs[:, None]}, batch["actions"][:, None], batch["rewards"][:, None],
                    {"policy": next_obs[:, None]}, terminated[:, None], truncated[:, None], after_gap=gap)  # fmt: skip
        self._handed_over.discard(i)
        self.cuts += int(jump.sum()) + int(gap)
        return True

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
        """A batch drawn uniformly over all lanes' transitions (`ReplayBuffer.sample`'s fields)."""
        lanes = [lane for lane in self.lanes if len(lane)]
        if not lanes:
            raise ConfigError("cannot sample from an empty replay buffer")
        if len(lanes) == 1:
            return lanes[0].sample(batch_size, generator)
        sizes = [len(lane) for lane in lanes]
        device = self.device if generator is None else generator.device
        draws = torch.randint(sum(sizes), (batch_size,), generator=generator, device=device)
        ends = torch.tensor(sizes, device=device).cumsum(0)
        counts = torch.bincount(torch.searchsorted(ends, draws, right=True), minlength=len(lanes)).tolist()  # syncs
        return _concat([lane.sample(n, generator) for lane, n in zip(lanes, counts, strict=True) if n])

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Every lane's tensors (under ``<lane>/``) and the layout: lane capacity, actors, lane metadata."""
        tensors: dict[str, torch.Tensor] = {}
        lanes = []
        for i, lane in enumerate(self.lanes):
            t, m = lane.state_dict()
            tensors.update({f"{i}/{k}": v for k, v in t.items()})
            lanes.append(m)
        meta = {"max_actors": self.max_actors, "lane_capacity": self.lane_capacity, "actors": list(self.actors),
                "lanes": lanes, "cuts": self.cuts}  # fmt: skip
        return tensors, meta

    def load_state_dict(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Take the saved lanes and layout (max_actors, lane capacity); a robot's next batch is checked against its
        lane's newest step as before, so data lost in between (a killed learner) is a gap."""
        self.max_actors, self.lane_capacity, self.cuts = meta["max_actors"], meta["lane_capacity"], meta["cuts"]
        self.lanes, self.actors, self.last_seen, self._handed_over = [], [], [], set()
        for i, actor in enumerate(meta["actors"]):
            self.lane(actor)
            self.lanes[i].load_state_dict({k[len(f"{i}/"):]: v for k, v in tensors.items() if k.startswith(f"{i}/")},
                                          meta["lanes"][i])  # fmt: skip


def _continues(lane: ReplayBuffer, obs: torch.Tensor) -> bool:
    """Whether a step from ``obs`` follows the lane's newest step (or that step ended its episode)."""
    newest = (lane.ptr - 1) % lane.steps
    return bool(lane.dones[newest, 0]) or torch.equal(lane.next_obs["policy"][newest, 0].cpu(), obs)


def _concat(parts: list[Any]) -> Any:
    if isinstance(parts[0], dict):
        return {k: _concat([p[k] for p in parts]) for k in parts[0]}
    return torch.cat(parts, 0)


class Learner:
    """The off-policy learner fed by a `LearnerServer`. Call `step` in a loop (or `run`).

    Args:
        server: a started server.
        cfg: the learner's settings (`LearnerConfig`; ``run_dir`` is required).
    """

    def __init__(self, server: LearnerServer, cfg: LearnerConfig) -> None:
        if not cfg.run_dir:
            raise ConfigError("learner needs run_dir=<dir>")
        if cfg.max_updates_per_step < 1:
            raise ConfigError(f"max_updates_per_step must be >= 1, got {cfg.max_updates_per_step}")
        if bool(cfg.obs_dim) != bool(cfg.num_actions):
            raise ConfigError("give obs_dim= and num_actions= together (or neither: the sizes come from the data)")
        self.server, self.cfg, self.run_dir = server, cfg, Path(cfg.run_dir)
        self.sac_cfg = sac_recipe(cfg.algo)
        self.generator = torch.Generator(device=cfg.device).manual_seed(cfg.seed)
        self.off_policy: OffPolicyLearner | None = None  # built once the observation and action sizes are known
        self.transitions = 0  # received and stored in total (across restarts)
        self._last_publish = self._last_checkpoint = time.monotonic()
        self._published_updates = -1  # updates at the last publication (nothing new: no new version)
        self._offline_data = None  # the robot episodes (`offline_data`) as a Dataset
        sizes = (cfg.obs_dim, cfg.num_actions) if cfg.obs_dim and cfg.num_actions else None
        if cfg.offline_data:
            from robolearn.data.formats import load_dataset

            self._offline_data = load_dataset(cfg.offline_data)
            sizes = sizes or (self._offline_data.observations["policy"].shape[1], self._offline_data.actions.shape[1])
        if (self.run_dir / CHECKPOINT).is_dir():
            self.restore(self.run_dir / CHECKPOINT)
        elif sizes:  # known sizes: publish a first policy before any data arrives
            self._build(*sizes)
            self.publish()

    @property
    def sac(self) -> SAC | None:
        return None if self.off_policy is None else self.off_policy.algo

    @property
    def buffer(self) -> ActorLanes | None:
        return None if self.off_policy is None else self.off_policy.buffer

    @property
    def updates(self) -> int:
        return 0 if self.off_policy is None else self.off_policy.updates

    # --- networks ----------------------------------------------------------------------------------------

    def _build(self, obs_dim: int, num_actions: int) -> None:
        torch.manual_seed(self.cfg.seed)
        cfg, device = self.sac_cfg, self.cfg.device
        sac = SAC(obs_dim, obs_dim, num_actions, cfg, device)
        lanes = ActorLanes(cfg.buffer_size, self.cfg.max_actors, obs_dim, num_actions, device, cfg.n_step, cfg.gamma)
        self.off_policy = OffPolicyLearner(sac, lanes, self._offline_buffer(obs_dim, num_actions), self.generator)
        log.info("SAC built for %d observations, %d actions", obs_dim, num_actions)

    def _offline_buffer(self, obs_dim: int, num_actions: int) -> ReplayBuffer | None:
        """The offline episodes (``offline_data``) as a replay buffer, mixed in at ``algo.offline_ratio``."""
        if self._offline_data is None:
            if self.sac_cfg.offline_ratio > 0:
                log.warning("offline_ratio %s but no offline_data: every batch is online",
                            self.sac_cfg.offline_ratio)
            return None
        from robolearn.data.replay import dataset_buffer

        buffer = dataset_buffer(self._offline_data, {"policy": (obs_dim,)}, num_actions, source=self.cfg.offline_data,
                                device=str(self.cfg.device), n_step=self.sac_cfg.n_step, gamma=self.sac_cfg.gamma)
        log.info("offline data: %d transitions from %d episodes, mixed in at %s", len(buffer),
                 self._offline_data.num_episodes, self.sac_cfg.offline_ratio)  # fmt: skip
        return buffer

    def publish(self) -> int | None:
        """Publish the actor's parameters now; returns their version, or None when they hold NaN/inf (then the
        robots keep acting with the last good version; the error is logged)."""
        state = {f"actor.{k}": v for k, v in self.sac.actor.state_dict().items()}
        meta = {"policy": self.sac.config, "transitions": self.transitions, "updates": self.updates}
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
        """Take what arrived, update, and publish / checkpoint when due. Returns the mean update statistics."""
        idle = self.off_policy is None or self.off_policy.update_debt < 1
        for batch in self.server.get_batches(timeout=timeout if idle else None):
            self._ingest(batch)
        if self.off_policy is None:
            return {}
        stats = Means()
        self.off_policy.update(stats, limit=self.cfg.max_updates_per_step)
        now = time.monotonic()
        if now - self._last_publish >= self.cfg.publish_s and self.updates != self._published_updates:
            self.publish()
        if now - self._last_checkpoint >= self.cfg.checkpoint_s:
            self.save()
        return stats.means()

    def _ingest(self, batch: TransitionBatch) -> None:
        t = {k: torch.from_numpy(v.copy()) for k, v in batch.tensors.items()}
        obs_dim, num_actions = t["obs"].shape[1], t["actions"].shape[1]
        if self.off_policy is None:
            self._build(obs_dim, num_actions)
            self.publish()
        lanes = self.off_policy.buffer
        if (obs_dim, num_actions) != (lanes.obs_dim, lanes.num_actions):
            log.error("dropping %d transitions of %s with %d observations / %d actions (learner: %d / %d)",
                      batch.size, batch.peer, obs_dim, num_actions, lanes.obs_dim, lanes.num_actions)  # fmt: skip
            return
        if lanes.add(str(batch.meta.get("actor_id") or batch.peer), t):
            self.transitions += batch.size
            self.off_policy.collected(batch.size, self.transitions)

    def run(self, stop: threading.Event | None = None, duration: float | None = None) -> None:
        """Step until ``stop`` is set or ``duration`` seconds passed; checkpoints at the end."""
        stop = stop or threading.Event()
        end = None if duration is None else time.monotonic() + duration
        try:
            while not stop.is_set() and (end is None or time.monotonic() < end):
                self.step()
        finally:
            if self.off_policy is not None:
                self.save()

    # --- checkpoints -------------------------------------------------------------------------------------

    def save(self, path: str | Path | None = None) -> Path:
        """Atomically checkpoint (`OffPolicyLearner.save`) with the transitions received and parameter version."""
        run = {"learner": "real.rl.learner", **{k: v for k, v in dataclasses.asdict(self.cfg).items() if k != "env"}}
        meta = {"transitions": self.transitions, "version": self.server.version}
        out = self.off_policy.save(Path(path or self.run_dir / CHECKPOINT), run, meta=meta)
        self._last_checkpoint = time.monotonic()
        return out

    def restore(self, path: str | Path) -> None:
        """Continue from `save` with the checkpoint's SAC settings and lanes; versions continue after the saved one."""
        config, _ = checkpoint.load(path)
        policy = config.get("policy", {})
        if "sac" not in policy:
            raise CheckpointError(f"{path} is not a SAC learner checkpoint; give another run_dir=")
        saved = SACConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in policy["sac"].items()})
        if saved != self.sac_cfg:
            changed = sorted(k for k, v in dataclasses.asdict(saved).items() if getattr(self.sac_cfg, k) != v)
            log.warning("resuming %s with its own SAC settings; ignoring the new values of %s", path, changed)
        self.sac_cfg = saved
        self._build(policy["obs_dim"], policy["num_actions"])
        _, meta = self.off_policy.restore(path)
        if self.off_policy.buffer.max_actors != self.cfg.max_actors:
            log.warning("resuming %s with its max_actors=%d (lanes of %d transitions); ignoring max_actors=%d", path,
                        self.off_policy.buffer.max_actors, self.off_policy.buffer.lane_capacity, self.cfg.max_actors)
        self.transitions = meta["transitions"]
        self.server.version = max(self.server.version, int(meta["version"]))
        log.info("resumed %s: %d transitions, %d updates, parameters v%d", path, self.transitions, self.updates,
                 self.server.version)  # fmt: skip
        self.publish()


# --- CLI ---------------------------------------------------------------------------------------------------


def cmd_learner(cfg: LearnerConfig) -> int:
    """Learn from the robots' transitions until Ctrl-C, SIGTERM or `duration`, publishing parameters; resumes a
    run directory that has a checkpoint. The token: ROBOLEARN_TOKEN or token_file=; TLS: tls_cert= and tls_key=
    (plaintext only with insecure=true)."""
    token = cfg.read_token()
    if not cfg.run_dir:
        raise ConfigError("learner needs run_dir=<dir>")
    sac_cfg = sac_recipe(cfg.algo)
    server = LearnerServer(token, cfg.port, cfg.host, tls_cert=cfg.tls_cert, tls_key=cfg.tls_key,
                           insecure=cfg.insecure)  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "env"}
    (run_dir / "learner.json").write_text(json.dumps({**resolved, "sac": dataclasses.asdict(sac_cfg)}, indent=2))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        learner = Learner(server, cfg)
        print(f"learner on {cfg.host}:{server.port} ({'TLS' if server.tls else 'UNENCRYPTED, insecure=true'}), "
              f"run_dir {run_dir}", flush=True)  # fmt: skip
        learner.run(stop, cfg.duration)
    return 0
