"""`robolearn collect`: offline datasets from the simulator, D4RL-style, batched over many envs.

    robolearn collect env=cheetah-run kind=random episodes=100 out=data/cheetah-run-random
    robolearn collect env=cheetah-run kind=expert policy=runs/<run>/checkpoints/final episodes=100 format=minari
    robolearn collect env=point-mass format=minari out=$MINARI_DATASETS_PATH/point-mass/random-v0  # id point-mass/...
    robolearn collect env=cheetah-run kind=medium-expert policy=<medium ckpt> expert_policy=<expert ckpt> ...
    robolearn collect env=ant-maze-medium kind=diverse episodes=1000     # goal datasets: diverse | play
    robolearn collect suite=d4rl-like                      # every dataset of configs/dataset/d4rl-like.yaml
    robolearn collect env=halfcheetah-v5 kind=medium-replay policy=benchmarks/behaviour/halfcheetah-v5-sac
    robolearn collect behaviour=runs/<run> out=benchmarks/behaviour/halfcheetah-v5-sac  # a behaviour folder
    robolearn collect env=pointmaze-umaze kind=waypoint steps=1000000   # D4RL's maze2d recipe (collect/waypoint.py)
    robolearn collect env=antmaze-medium kind=diverse policy=<ant-goal checkpoint>  # D4RL's antmaze (waypoint | play)

Kinds (D4RL's recipes): ``random`` (uniform actions), ``medium`` / ``expert`` (a checkpoint's stochastic policy,
as D4RL sampled its SAC policies; medium is a checkpoint at about 1/3 of the expert's normalised score: pick it
from a training run's checkpoints, or let ``suite=`` train and pick it), ``medium-expert`` (half medium, half
expert episodes, D4RL's 1:1 mix). ``policy=reference`` is the task's reference controller (scripted, or the
trained checkpoint the registry names), with Gaussian action noise ``noise=`` for a stochastic behaviour.
Goal kinds for the point and ant mazes, as D4RL's antmaze: ``diverse`` (episodes start in any open cell and the
reference controller is commanded to random open cells, a new one each time it arrives) and ``play`` (starts
and commanded goals among the maze's decision points: dead ends, junctions, turns). The observations and
rewards stay those of the task's own goal, so the data is relabelled for it as D4RL's was. ``waypoint`` is D4RL's
maze2d recipe for the pointmaze-* tasks, as Minari rebuilt it (`robolearn.collect.waypoint`): ``steps`` env steps of
a noisy waypoint controller sent to goal after goal, cut into an episode at each goal reached. On the D4RL ant mazes
(antmaze-*) ``waypoint``, ``diverse`` and ``play`` are D4RL's antmaze recipe instead: a goal reacher (``policy=``)
steered by the waypoints through 1000-step episodes from the layout's start or any cell, to its goal or any cell.
``pixels.enabled=true``
(``pixels.camera``, ``pixels.width``, ``pixels.height``) adds the camera's frames as a ``pixels`` observation
group (uint8 [H, W, 3]; LeRobot exports them as mp4).

Every env runs whole episodes; an episode's T+1 observations include the final one (``final_obs`` before the
auto-reset), time-outs are truncations, true terminal states terminations. The metadata carries the task,
kind, policies, seed, return statistics and the task's reference returns (``ref_min_score``: mean return of
uniform random actions, measured here when not given; ``ref_max_score``: the expert's, given as
``ref_max_score=``, or measured: the noise-free reference controller's when it is a behaviour, else the mean
of ``kind=expert`` runs) so scores normalise as D4RL's.

Replay kinds read a training run instead of stepping the sim: ``medium-replay`` is the replay buffer saved with
an off-policy checkpoint at about the medium level, ``full-replay`` the one saved with the final checkpoint
(``policy=runs/<run>/checkpoints/<name>``; a checkpoint keeps its buffer for resume). Each env's timeline
splits into episodes at its done flags; the newest, unfinished one ends in a truncation (its next observation
is stored), and when the buffer wrapped, the oldest one begins mid-episode (``metadata["partial_first"]``).

``policy=<behaviour folder>`` (`robolearn.collect.behaviour`: a run's committed policy snapshots) plays that run
instead, identically on any machine: medium / expert its medium / expert snapshot (sampled), medium-expert both, and
the replay kinds every snapshot that acted before the medium one (medium-replay) or all of them (full-replay), each
for the env steps it acted in the run (`play_snapshots`), so a replay dataset has the run's number of transitions
without shipping its buffer. ``behaviour=<run dir>`` builds such a folder from a run trained with
``runner.snapshot_every`` (into ``out=``, picking medium at ``medium_score``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.collect import waypoint
from robolearn.collect.behaviour import MEDIUM_SCORE, is_behaviour, load_behaviour, replay_schedule, snapshot
from robolearn.config import EnvConfig, make_env
from robolearn.core.cpu import cpu_model
from robolearn.data.dataset import Dataset
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)


KINDS = ("random", "medium", "expert", "medium-expert", "medium-replay", "full-replay", "diverse", "play", "waypoint")


REPLAY_KINDS = ("medium-replay", "full-replay")
#: The kinds whose size `transitions=` sets (whole episodes of one policy); a replay kind holds its run's env steps, a
#: waypoint kind `steps` transitions.
TRANSITION_KINDS = ("random", "medium", "expert", "medium-expert")


GOAL_KINDS = ("diverse", "play")  # the maze kinds: episodes start where MazeConfig.start says


Actor = Callable[[Any], torch.Tensor]


@dataclasses.dataclass
class PixelsConfig:
    """Camera frames as a "pixels" observation group (uint8 [H, W, 3], rendered by MuJoCo on the host)."""

    enabled: bool = False
    camera: str | None = None       # a camera of the task's model; null: its default view
    width: int = 64
    height: int = 64
    effects: bool = False           # MuJoCo's shadows, reflections and skybox (17x slower on a CPU)


@dataclasses.dataclass
class CollectConfig:
    """`robolearn collect`: episodes of a policy (or random actions) in `env`, written as a dataset."""

    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)  # env=<task>; env.num_envs envs step together
    kind: str = "random"            # random | medium | expert | medium-expert | medium-replay | full-replay
    #                                 | diverse | play (mazes) | waypoint (pointmaze-*, antmaze-*)
    episodes: int = 100             # whole episodes to keep (per policy for medium-expert: half each)
    transitions: int | None = None  # instead: whole episodes until this many transitions, spread evenly over the
    #                                 envs (D4RL's 1M; medium-expert: this many of each, D4RL's concatenation)
    steps: int = 1_000_000          # waypoint: env steps to record (Minari's 1M), split into episodes at the goals
    policy: str | None = None       # checkpoint of medium / expert (medium-expert: the medium one; replay kinds:
    #                                 the off-policy checkpoint whose saved replay buffer becomes the dataset);
    #                                 "reference": the task's reference controller (default of the goal kinds);
    #                                 a behaviour folder: its snapshots (medium, expert, medium-expert, replay kinds)
    noise: float | None = None      # std of Gaussian noise added to the behaviour policy's actions (then clipped);
    #                                 null: Minari's for waypoint (0.5 point, 0.2 ant), else 0
    expert_policy: str | None = None  # medium-expert: the expert checkpoint
    out: str | None = None          # the dataset to create (default: data/<task>-<kind>-v0); format=minari under
    #                                 $MINARI_DATASETS_PATH: its Minari id is the path there (point-mass/random-v0)
    format: str = "robolearn"       # robolearn | minari | d4rl | lerobot
    seed: int = 0
    ref_min_score: float | None = None  # null: measured (mean return of random actions, ref_episodes episodes)
    ref_max_score: float | None = None  # null: the expert's mean return when kind=expert, else unknown
    ref_episodes: int = 20
    pixels: PixelsConfig = dataclasses.field(default_factory=lambda: PixelsConfig())
    progress: bool = True
    suite: str | None = None        # a suite of datasets (configs/dataset/<suite>.yaml or a path): see collect_suite
    tasks: list[str] | None = None  # suite=: only these of its tasks (null: all); a later run completes the rest
    behaviour: str | None = None    # a run trained with runner.snapshot_every: build its behaviour folder at out=
    #                                 (default benchmarks/behaviour/<task>-<algo>; robolearn.collect.behaviour)
    medium_score: float = MEDIUM_SCORE  # behaviour=: the normalised score (sampled) the medium snapshot reaches first
    expert: str = "last"            # behaviour=: the expert snapshot, the last (D4RL's final policy) or the best the
    #                                 run's own evaluation rated (a run that degraded at its end)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"collect kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        antmaze = waypoint.is_antmaze_recipe(self.env.name, self.kind)
        if self.noise is None:
            self.noise = waypoint.default_noise(self.env.name) if self.kind == "waypoint" or antmaze else 0.0
        if self.noise < 0:
            raise ConfigError(f"collect noise must be >= 0, got {self.noise}")
        if self.kind == "waypoint" and not self.policy:
            self.policy = "waypoint"  # D4RL's controller (robolearn.collect.waypoint); antmaze-*: its goal reacher
        if self.kind in GOAL_KINDS and not self.policy:
            self.policy = "reference"
        if self.kind != "random" and not self.policy and not self.suite and not self.behaviour:
            raise ConfigError(f"collect kind={self.kind} needs policy=<checkpoint>")
        if (self.kind == "medium-expert" and not self.expert_policy and not self.suite
                and not is_behaviour(self.policy)):
            raise ConfigError("collect kind=medium-expert needs policy=<medium checkpoint> and "
                              "expert_policy=<expert checkpoint> (or policy=<behaviour folder>)")
        if self.episodes < 1:
            raise ConfigError(f"collect episodes must be >= 1, got {self.episodes}")
        if self.transitions is not None and self.transitions < 1:
            raise ConfigError(f"collect transitions must be >= 1 (null: `episodes` episodes), got {self.transitions}")
        if self.transitions is not None and self.kind not in TRANSITION_KINDS:
            raise ConfigError(f"collect transitions= is for random, medium, expert and medium-expert, not "
                              f"kind={self.kind} (waypoint: steps=; the replay kinds hold the run's env steps)")


@torch.no_grad()
def rollout(env: Any, actor: Actor, episodes: int, progress: bool = False, label: str = "collect",
            transitions: int | None = None) -> list[dict[str, Any]]:
    """``episodes`` whole episodes of ``actor`` over the batched ``env`` (started episodes past the count are
    discarded, so none is cut short), or with ``transitions``: each env's whole episodes, one after another, until
    it has recorded ceil(transitions / num_envs) transitions (so every env is a stream of consecutive episodes, as
    D4RL's one env was, and short episodes are not favoured by finishing first). A list of episode mappings for
    `Dataset.from_episodes`. Actions are recorded as the env applies them, clipped to [-1, 1]."""
    n = env.num_envs
    obs = env.reset()
    steps: list[dict[str, Any]] = []  # per step: obs groups [n, ...], action, reward, terminated, time_out, final
    done_count = 0
    quota = None if transitions is None else -(-transitions // n)
    recorded = np.zeros(n, dtype=np.int64)  # transitions kept per env (with a quota)
    start = np.zeros(n, dtype=np.int64)  # the step index each env's current episode began at
    out: list[dict[str, Any]] = []
    bar = (_progress(episodes, label) if quota is None else _progress(quota * n, label, "steps")) if progress else None

    def finished() -> bool:
        return done_count >= episodes if quota is None else bool((recorded >= quota).all())

    while not finished():
        next_obs, step, dones_np = _step(env, obs, actor(obs))
        steps.append(step)
        t = len(steps) - 1
        for i in np.flatnonzero(dones_np):
            if (done_count < episodes) if quota is None else (recorded[i] < quota):
                out.append(_episode(steps, i, int(start[i]), t))
                done_count += 1
                recorded[i] += t + 1 - start[i]
                if bar is not None:
                    bar.update(1 if quota is None else int(t + 1 - start[i]))
            start[i] = t + 1
        # steps every live episode still needs are those from the earliest start on: drop the rest
        first = int(start.min())
        if first > 0 and not finished():
            steps = steps[first:]
            start -= first
        obs = next_obs
    if bar is not None:
        bar.close()
    return out


def _step(env: Any, obs: Any, actions: torch.Tensor) -> tuple[Any, dict[str, Any], np.ndarray]:
    """Step ``env`` with ``actions`` clipped to [-1, 1] (the box the sims apply: a sampled Gaussian policy's raw draws,
    |a| up to ~18, would otherwise be recorded, actions no tanh actor can reproduce and no critic should be fitted on):
    the next observations, the step's record (obs groups [n, ...], action, reward, terminated, time_out, final: the
    true next observations) and the done flags."""
    actions = actions.clamp(-1.0, 1.0)
    next_obs, rewards, dones, extras = env.step(actions)
    time_outs = extras["time_outs"].bool().cpu().numpy()
    dones_np = dones.bool().cpu().numpy()
    step = {"obs": {g: v.cpu().numpy() for g, v in obs.items()}, "action": actions.cpu().numpy(),
            "reward": rewards.cpu().numpy(), "terminated": dones_np & ~time_outs, "time_out": time_outs,
            "final": {g: v.cpu().numpy() for g, v in extras["final_obs"].items()}}
    return next_obs, step, dones_np


@torch.no_grad()
def play_snapshots(env: Any, schedule: list[tuple[str, int]], seed: int, random_steps: int = 0,
                   progress: bool = False, label: str = "replay") -> list[dict[str, Any]]:
    """A training run's collection again, from its policy snapshots: each ``(checkpoint, env steps)`` of ``schedule``
    in turn plays its share of env steps, sampled, all from one generator seeded with ``seed`` (as the run drew from
    one), uniform random actions for the first ``random_steps`` (the run's warm-up); the envs run on across the
    switches, as the run's did, so episodes may span two snapshots as in a replay buffer.

    Each share is played in whole vec-env steps (``num_envs`` env steps each; share boundaries are rounded to them,
    exact when the run's snapshot interval is a multiple of ``num_envs``). Each env's timeline splits into episodes at
    its done flags; the episodes still running when the schedule ends are cut there as truncations (their next
    observation kept, as a time-out's), so every env step played is in the dataset: whole episodes everywhere but
    at the end."""
    from robolearn.checkpoints.policy import load_policy

    n = env.num_envs
    bounds = np.rint(np.cumsum([0] + [acted for _, acted in schedule]) / n).astype(np.int64)  # vec-step boundaries
    random_until = int(np.rint(random_steps / n))
    uniform, generator = random_actor(env, seed), torch.Generator().manual_seed(seed)
    obs = env.reset()
    steps: list[dict[str, Any]] = []
    start = np.zeros(n, dtype=np.int64)  # the index in `steps` each env's current episode began at
    out: list[dict[str, Any]] = []
    bar = _progress(int(bounds[-1]) * n, label, "steps") if progress else None
    for k, (path, _) in enumerate(schedule):
        policy = load_policy(path, mode="sample").to(env.device)
        policy.generator = generator  # one noise stream through the whole schedule
        for j in range(int(bounds[k]), int(bounds[k + 1])):
            obs, step, dones = _step(env, obs, (uniform if j < random_until else policy)(obs))
            steps.append(step)
            t = len(steps) - 1
            for i in np.flatnonzero(dones):
                out.append(_episode(steps, i, int(start[i]), t))
                start[i] = t + 1
            if bar is not None:
                bar.update(n)
            first = int(start.min())  # steps before every live episode's start are no longer needed
            if first > 0:
                steps = steps[first:]
                start -= first
    for i in range(n):  # the episodes still running: cut at the schedule's end
        if start[i] < len(steps):
            episode = _episode(steps, i, int(start[i]), len(steps) - 1)
            episode["truncations"][-1] = True
            out.append(episode)
    if bar is not None:
        bar.close()
    return out


def _episode(steps: list[dict[str, Any]], env: int, s: int, t: int) -> dict[str, Any]:
    """Env ``env``'s episode over steps s..t (inclusive): T+1 observations ending in the final observation."""
    part = steps[s : t + 1]
    groups = part[0]["obs"].keys()
    obs = {g: np.stack([p["obs"][g][env] for p in part] + [part[-1]["final"][g][env]]) for g in groups}
    return {"observations": obs, "actions": np.stack([p["action"][env] for p in part]),
            "rewards": np.array([p["reward"][env] for p in part], dtype=np.float32),
            "terminations": np.array([p["terminated"][env] for p in part]),
            "truncations": np.array([p["time_out"][env] for p in part])}


def random_actor(env: Any, seed: int) -> Actor:
    """Uniform actions in [-1, 1] (the sim's normalised action range), seeded."""
    gen = torch.Generator().manual_seed(seed)

    def act(_obs: Any) -> torch.Tensor:
        return (torch.rand((env.num_envs, env.num_actions), generator=gen) * 2 - 1).to(env.device)

    return act


def policy_actor(path: str, env: Any, seed: int, noise: float = 0.0) -> Actor:
    """A checkpoint's stochastic policy (D4RL sampled its behaviour policies, it did not take their mean), or
    ``"reference"``: the task's reference controller (scripted; or its registered checkpoint, sampled). With
    ``noise`` > 0, N(0, noise^2) is added to every action (`rollout` clips to [-1, 1])."""
    from robolearn.checkpoints.policy import Policy, load_policy

    if path == "reference":
        from sim.tasks import spec
        from sim.tasks.reference import scripted_policy

        task, fn = spec(env.task.name), scripted_policy(env.task.name)
        if fn is not None:
            policy = Policy(fn, "scripted", policy_config={"function": f"reference of {env.task.name}"})
        elif task.reference_checkpoint:
            policy = load_policy(task.checkpoint_path(), mode="sample", seed=seed)
        else:
            raise ConfigError(f"task {env.task.name} has no reference controller; give policy=<checkpoint>")
    else:
        policy = load_policy(path, mode="sample", seed=seed)
    policy.to(env.device)
    if noise == 0.0:
        return policy
    gen = torch.Generator().manual_seed(seed + 1)

    def noisy(obs: Any) -> torch.Tensor:
        actions = policy(obs)
        return actions + noise * torch.randn(actions.shape, generator=gen).to(actions.device)  # `rollout` clips

    return noisy


def goal_actor(actor: Actor, env: Any, kind: str, seed: int) -> Actor:
    """``actor`` (a goal-reaching maze controller reading its goal from the observation) commanded to goals of its
    own, per env: uniform over the open cells (``diverse``) or the decision points (``play``), a new one when it
    arrives within `GOAL_RADIUS`. Only the actor's copy of the observation carries the commanded goal."""
    from sim.tasks.maze import GOAL_RADIUS, cell_center, open_cells, play_cells

    task = env.task
    cells = open_cells(task.layout) if kind == "diverse" else play_cells(task.layout)
    centers = task.cell_size * torch.tensor([cell_center(*c, task.layout) for c in cells], device=env.device)
    gen = torch.Generator().manual_seed(seed + 2)
    draw = lambda n: centers[torch.randint(len(cells), (n,), generator=gen).to(env.device)]  # noqa: E731
    goals = draw(env.num_envs)
    where = task.goal_obs

    def act(obs: Any) -> torch.Tensor:
        nonlocal goals
        policy_obs = obs["policy"].clone()
        pos = policy_obs[:, 0:2]  # both mazes observe the (x, y) position first
        arrived = (pos - goals).norm(dim=-1) <= GOAL_RADIUS
        if bool(arrived.any()):
            goals = torch.where(arrived[:, None], draw(env.num_envs), goals)
        policy_obs[:, where] = goals
        return actor({**{k: obs[k] for k in obs.keys()}, "policy": policy_obs})

    return act


def replay_episodes(path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The replay buffer saved with an off-policy checkpoint, as episodes (see the module docstring)."""
    from robolearn.checkpoints import checkpoint

    config, _ = checkpoint.load(path)
    meta, tensors = checkpoint.load_trainer(path)
    buf = meta.get("buffer")
    if not buf or "buffer/actions" not in tensors:
        raise ConfigError(f"checkpoint {path} has no replay buffer (an on-policy run?); replay kinds need an "
                          "off-policy checkpoint (algo=sac, td3, rlpd, ...)")
    get = lambda k: tensors[f"buffer/{k}"].cpu().numpy()  # noqa: E731  [filled, num_envs, ...]
    actions, rewards, terminated, dones = get("actions"), get("rewards"), get("terminated"), get("dones")
    groups = list(buf["obs_dims"])
    obs, next_obs = {g: get(f"obs/{g}") for g in groups}, {g: get(f"next_obs/{g}") for g in groups}
    filled, wrapped = int(buf["filled"]), int(buf["filled"]) == int(buf["steps"])
    episodes = []
    for env in range(actions.shape[1]):
        ends = list(np.flatnonzero(dones[:filled, env])) + ([filled - 1] if not dones[filled - 1, env] else [])
        start = 0
        for end in ends:
            steps = slice(start, end + 1)
            episodes.append({
                "observations": {g: np.concatenate([obs[g][steps, env], next_obs[g][end : end + 1, env]])
                                 for g in groups},
                "actions": actions[steps, env], "rewards": rewards[steps, env].astype(np.float32),
                "terminations": terminated[steps, env].astype(bool),
                "truncations": np.eye(end + 1 - start, dtype=bool)[-1] & ~terminated[end, env].astype(bool),
            })  # fmt: skip
            start = end + 1
    task = ((config.get("run") or {}).get("env") or {}).get("name")
    return episodes, {"task": task, "partial_first": wrapped, "replay_buffer_steps": filled * actions.shape[1],
                      "seed": (config.get("run") or {}).get("seed")}


def collect(cfg: CollectConfig) -> Dataset:
    """The dataset `cfg` describes (not yet written)."""
    behaviour, origin = None, {}
    if is_behaviour(cfg.policy):
        cfg, behaviour, origin = _from_behaviour(cfg)
    if cfg.kind in REPLAY_KINDS and behaviour is None:
        episodes, extra = replay_episodes(cfg.policy)
        meta = {"kind": cfg.kind, "policy": cfg.policy, "collected_with": "robolearn collect", **extra,
                "ref_min_score": cfg.ref_min_score, "ref_max_score": cfg.ref_max_score}
        return Dataset.from_episodes(episodes, {k: v for k, v in meta.items() if v is not None},
                                     source=f"replay buffer of {cfg.policy}")
    env_cfg = dataclasses.asdict(cfg.env)
    antmaze = waypoint.is_antmaze_recipe(cfg.env.name, cfg.kind)  # D4RL's antmaze episodes (collect/waypoint.py)
    if cfg.kind in GOAL_KINDS and not antmaze:
        from sim.tasks import spec

        if cfg.env.name.startswith("pointmaze-"):
            raise ConfigError(f"collect kind={cfg.kind} on {cfg.env.name}: Minari's pointmaze data is kind=waypoint")
        if not hasattr(spec(cfg.env.name).task_class(), "goal_obs"):
            raise ConfigError(f"collect kind={cfg.kind} is for the mazes (point-maze-*, ant-maze-*), "
                              f"not {cfg.env.name}")
        env_cfg["overrides"] = {**env_cfg["overrides"], "start": "random" if cfg.kind == "diverse" else "play"}
    recorded_env = None  # the env the dataset names, when it is not the one collected in
    if cfg.kind == "waypoint" or antmaze:
        if cfg.policy != "waypoint" and not waypoint.is_ant(cfg.env.name):
            raise ConfigError(f"collect kind=waypoint plays D4RL's waypoint controller on {cfg.env.name}; "
                              f"policy={cfg.policy} is not taken (antmaze-* take the goal reacher it steers)")
        recorded_env = {**env_cfg, "overrides": dict(env_cfg["overrides"])}
        collection = waypoint.collection_overrides(cfg.env.name, cfg.steps, cfg.env.num_envs, cfg.kind)
        if antmaze and "episode_length" in env_cfg["overrides"]:  # shorter antmaze episodes than D4RL's (tests)
            del collection["episode_length"]
        env_cfg["overrides"] = {**env_cfg["overrides"], **collection}
    pixels = cfg.pixels
    env = make_env(env_cfg, cfg.seed, pixels={"camera": pixels.camera, "width": pixels.width, "height": pixels.height,
                                              "effects": pixels.effects} if pixels.enabled else None)
    env_cfg["policy_dt"] = float(env.task.cfg.policy_dt)  # as train records it
    began = time.perf_counter()
    try:
        if cfg.kind == "random":
            episodes = rollout(env, random_actor(env, cfg.seed), cfg.episodes, cfg.progress, "random", cfg.transitions)
        elif cfg.kind in ("medium", "expert"):
            actor = policy_actor(cfg.policy, env, cfg.seed, cfg.noise)
            episodes = rollout(env, actor, cfg.episodes, cfg.progress, cfg.kind, cfg.transitions)
        elif antmaze:  # D4RL's 1000-step episodes, each env's one after another up to `steps` in all
            episodes = rollout(env, waypoint.waypoint_actor(env, cfg.noise, cfg.seed, cfg.policy), cfg.episodes,
                               cfg.progress, cfg.kind, transitions=cfg.steps)
        elif cfg.kind in GOAL_KINDS:
            actor = goal_actor(policy_actor(cfg.policy, env, cfg.seed, cfg.noise), env, cfg.kind, cfg.seed)
            episodes = rollout(env, actor, cfg.episodes, cfg.progress, cfg.kind)
        elif cfg.kind == "waypoint":  # one long run per env, cut at the goals
            from sim.tasks.d4rl_maze import GOAL_RADIUS

            runs = rollout(env, waypoint.waypoint_actor(env, cfg.noise, cfg.seed, cfg.policy), env.num_envs,
                           cfg.progress, "waypoint runs")
            episodes = waypoint.split_at_goals(runs, env.task.goal_obs, GOAL_RADIUS)
        elif cfg.kind in REPLAY_KINDS:  # a behaviour folder's snapshots, played as its run collected
            schedule = replay_schedule(cfg.policy, behaviour, cfg.kind)
            episodes = play_snapshots(env, schedule, cfg.seed, int(behaviour.get("random_warmup_steps") or 0),
                                      cfg.progress, cfg.kind)
        else:  # medium-expert: D4RL concatenates equal parts (with transitions=, a medium and an expert set)
            half = cfg.episodes // 2
            episodes = rollout(env, policy_actor(cfg.policy, env, cfg.seed, cfg.noise), cfg.episodes - half,
                               cfg.progress, "medium", cfg.transitions)
            episodes += rollout(env, policy_actor(cfg.expert_policy, env, cfg.seed + 1, cfg.noise), half,
                                cfg.progress, "expert", cfg.transitions)
        returns = np.array([float(np.sum(e["rewards"], dtype=np.float64)) for e in episodes])
        ref_min = cfg.ref_min_score
        if ref_min is None and recorded_env is None:  # (waypoint: measured in the evaluation task, below)
            ref_min = returns.mean() if cfg.kind == "random" else _random_return(env, cfg)
        ref_max = cfg.ref_max_score
        if ref_max is None and recorded_env is None and "reference" in (cfg.policy, cfg.expert_policy):
            episodes_ref = rollout(env, policy_actor("reference", env, cfg.seed + 20_000), cfg.ref_episodes)  # no noise
            ref_max = float(np.mean([np.sum(e["rewards"], dtype=np.float64) for e in episodes_ref]))
        if ref_max is None and cfg.kind == "expert":
            ref_max = float(returns.mean())
    finally:
        env.close()
    if recorded_env is not None:
        origin = {**origin, "collected_in": env_cfg, "steps": cfg.steps}
        env_cfg = {**recorded_env, "policy_dt": env_cfg["policy_dt"]}
        if antmaze:
            env_cfg["overrides"], (ref_min, ref_max) = _antmaze_evaluation(cfg, recorded_env["overrides"])
        else:
            ref_min, ref_max = _waypoint_references(cfg, recorded_env, cfg.ref_min_score, cfg.ref_max_score)
    meta = {"task": cfg.env.name, "kind": cfg.kind, "seed": cfg.seed, "policy": cfg.policy, "noise": cfg.noise,
            "transitions": cfg.transitions,
            "fps": 1.0 / env_cfg["policy_dt"],
            "expert_policy": cfg.expert_policy, "env": env_cfg, "collected_with": "robolearn collect",
            "return_mean": float(returns.mean()), "return_std": float(returns.std()),
            "ref_min_score": None if ref_min is None else float(ref_min),
            "ref_max_score": None if ref_max is None else float(ref_max),
            "collection_seconds": time.perf_counter() - began, "software": _software(), "cpu": cpu_model(),
            **origin}
    return Dataset.from_episodes(episodes, {k: v for k, v in meta.items() if v is not None},
                                 source=f"collect {cfg.env.name} {cfg.kind}")


def _software() -> dict[str, str]:
    """The versions that decide a collected dataset's bits (the simulator, JAX's compiler around it, the policy's
    torch), recorded in its metadata with the CPU: two machines that make different bits from one recipe differ in
    these or in the kind of CPU (another instruction set rounds the policy's matrix products otherwise)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("robolearn", "mujoco", "jax", "jaxlib", "torch", "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    return found


def _from_behaviour(cfg: CollectConfig) -> tuple[CollectConfig, dict[str, Any], dict[str, Any]]:
    """`cfg` with `policy=<behaviour folder>` resolved (medium / expert / medium-expert: its snapshots; the replay
    kinds keep the folder, `play_snapshots` reads it), the folder's behaviour.json, and what the dataset's metadata
    records of where it came from (the folder, the snapshots played)."""
    folder = cfg.policy
    behaviour = load_behaviour(folder, cfg.env.name)
    if cfg.kind in REPLAY_KINDS:
        names = [Path(path).name for path, _ in replay_schedule(folder, behaviour, cfg.kind)]
    elif cfg.kind in ("medium", "expert", "medium-expert"):
        names = [behaviour["expert" if cfg.kind == "expert" else "medium"]]
        expert = snapshot(folder, behaviour["expert"]) if cfg.kind == "medium-expert" else cfg.expert_policy
        names += [behaviour["expert"]] if cfg.kind == "medium-expert" else []
        cfg = dataclasses.replace(cfg, policy=snapshot(folder, names[0]), expert_policy=expert)
    else:
        raise ConfigError(f"collect kind={cfg.kind} takes no behaviour folder (policy={folder}); it is for medium, "
                          "expert, medium-expert and the replay kinds")
    return cfg, behaviour, {"behaviour": str(folder), "snapshots": names}


def _antmaze_evaluation(cfg: CollectConfig, overrides: dict[str, Any]) -> tuple[dict[str, Any], tuple[float, float]]:
    """An antmaze dataset's evaluation task and references, D4RL's: its antmaze envs (``eval=True``) end the episode
    on reaching the goal, so a return is 1 on success and 0 otherwise, normalised by 0 / 1 (the registry's anchors):
    the score is 100 x the success rate, as D4RL, CORL and the O2O papers report it. (Minari evaluates the continuing
    task, whose return counts the steps spent at the goal; its scores cannot be set beside the papers'.) A
    ``continuing_task`` given in the env's overrides is kept, as are given references."""
    from sim.tasks import spec

    task = spec(cfg.env.name)
    ref_min = task.random_return if cfg.ref_min_score is None else cfg.ref_min_score
    ref_max = task.reference_return if cfg.ref_max_score is None else cfg.ref_max_score
    return {"continuing_task": False, **overrides}, (ref_min, ref_max)


def _waypoint_references(cfg: CollectConfig, env_cfg: dict[str, Any], ref_min: float | None,
                         ref_max: float | None) -> tuple[float, float]:
    """A waypoint dataset's reference returns where not given, as Minari measures its pointmaze datasets': in the
    evaluation task, 100 episodes of uniform random actions and 100 of the noise-free waypoint controller. (D4RL's
    maze2d anchors, the registry's, came from D4RL's older point mass, on which the same controller is slower.)"""
    env = make_env({**env_cfg, "num_envs": 100}, cfg.seed + 30_000)
    try:
        if ref_min is None:
            episodes = rollout(env, random_actor(env, cfg.seed + 10_000), 100)
            ref_min = float(np.mean([np.sum(e["rewards"], dtype=np.float64) for e in episodes]))
        if ref_max is None:
            episodes = rollout(env, waypoint.waypoint_actor(env, 0.0, cfg.seed + 20_000, cfg.policy), 100)
            ref_max = float(np.mean([np.sum(e["rewards"], dtype=np.float64) for e in episodes]))
    finally:
        env.close()
    return ref_min, ref_max


def _random_return(env: Any, cfg: CollectConfig) -> float:
    """The task's random-policy reference return (D4RL's ref_min_score): mean of ``ref_episodes`` episodes."""
    episodes = rollout(env, random_actor(env, cfg.seed + 10_000), cfg.ref_episodes, False)
    return float(np.mean([np.sum(e["rewards"], dtype=np.float64) for e in episodes]))


def _progress(total: int, label: str, unit: str = "episodes") -> Any:
    from rich.progress import Progress

    class Bar:
        def __init__(self) -> None:
            self.p = Progress(transient=True)
            self.p.start()
            self.task = self.p.add_task(f"{label} {unit}", total=total)

        def update(self, k: int) -> None:
            self.p.advance(self.task, k)

        def close(self) -> None:
            self.p.stop()

    return Bar()
