"""`robolearn collect suite=d4rl-like`: a whole standard suite of offline datasets, generated, not downloaded.

    robolearn collect suite=d4rl-like                        # configs/dataset/d4rl-like.yaml -> data/d4rl-like/
    robolearn collect suite=path/to/suite.yaml out=data/mine

A suite YAML names, per task, the dataset kinds to make (`robolearn.collect.generate.KINDS`), how many episodes each and
how the behaviour policies come about (D4RL's recipes, on our tasks):

- ``expert``: the task's reference controller (``policy: reference``: scripted, or the trained checkpoint the
  task registry names), sampled or with Gaussian action ``noise``, or a checkpoint path;
- ``medium``: a policy at about 1/3 of the expert's normalised score, as D4RL's early-stopped SAC. The suite
  trains one (``train``: `robolearn train` overrides, ``iterations`` in ``chunk``s): after each chunk it scores
  the policy as the dataset will play it (``eval_episodes`` episodes of the *sampled* policy: an early SAC actor's
  mean can score 47 where its samples score 10, ant-velocity at 10K steps) and keeps the first checkpoint whose
  normalised score (task's random and reference returns) reaches ``medium_score`` (33 by default); training goes on to
  ``iterations`` only when ``full-replay`` is wanted. Runs resume exactly, so chunks change nothing;
- ``medium-replay`` / ``full-replay``: the replay buffers saved with the medium and the last checkpoints;
- ``diverse`` / ``play``: the maze goal datasets (`robolearn.collect.generate`);
- ``waypoint``: D4RL's maze2d datasets for pointmaze-* (``steps`` env steps; `robolearn.collect.waypoint`).

With ``behaviour: <folder>`` (a behaviour folder, `robolearn.collect.behaviour`: one committed SAC run's policy
snapshots, as D4RL and Minari built theirs from one run per task) the suite trains nothing and regenerates the same
datasets on any machine: expert = the folder's expert snapshot (its final policy), medium = its medium snapshot,
medium-expert = both, each sampled; medium-replay = every snapshot taken before the medium one, and full-replay =
every snapshot, each played again (sampled, one seeded noise stream) for the env steps it acted in the run, so the
replay datasets have the run's transitions per snapshot; episodes run on across snapshot switches, and those still
running at the end are cut there as truncations (`robolearn.collect.generate.play_snapshots`). A missing folder
is a `ConfigError` naming the commands that make it. Every kind of such a task (random too) is collected in the
task as the run trained in it (the folder's ``env_overrides``, e.g. a shorter episode), so its datasets agree.

Everything is seeded (``seed``), and the suite resumes: a dataset folder that exists is kept, a training run
continues from its last chunk. ``<out>/suite.json`` records every dataset's size, return, normalised score,
generation time, fingerprint (`Dataset.fingerprint`: the sha256 of its arrays) and where it came from (``source``:
the behaviour folder and snapshots, or the policy; the behaviour training is timed per task), and `suite_table`
renders it as markdown. A suite YAML's ``fingerprints:`` (dataset name -> sha256) are the datasets its committed
results were measured on; the run ends by saying which datasets it made bit for bit (`check_fingerprints`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robolearn.collect.behaviour import load_behaviour
from robolearn.collect.generate import KINDS, REPLAY_KINDS, TRANSITION_KINDS, CollectConfig, collect
from robolearn.config import EnvConfig, config_dir
from robolearn.data.dataset import DatasetError, write_json
from robolearn.errors import ConfigError

TRAINED_KINDS = ("medium", "medium-expert", *REPLAY_KINDS)  # the kinds that need the suite's training run
BEHAVIOUR_KINDS = ("expert", *TRAINED_KINDS)  # the kinds a behaviour folder's snapshots play


@dataclasses.dataclass
class TrainSpec:
    """How a suite trains the medium policy (and fills the replay buffers)."""

    overrides: list[str] = dataclasses.field(default_factory=lambda: ["algo=sac"])
    iterations: int = 400           # the whole run (full-replay's buffer is its last checkpoint's)
    chunk: int = 40                 # iterations between evaluations
    eval_episodes: int = 10
    medium_score: float = 33.0      # normalised score the medium checkpoint must reach (D4RL: about 1/3 expert)
    prior_data: str | None = None   # a kind of the same task (e.g. expert) whose dataset is mixed into the
    #                                 training batches (`runner.offline_data`; RLPD / SERL style, for tasks SAC alone
    #                                 does not learn in the budget); it is generated before the training run


@dataclasses.dataclass
class TaskSuite:
    """One task's part of a suite."""

    task: str
    kinds: list[str]
    episodes: int = 100
    transitions: int | None = None  # instead of `episodes`: whole episodes until this many transitions (D4RL's 1M)
    num_envs: int = 64              # envs collecting together
    expert: str = "reference"       # expert behaviour: "reference" or a checkpoint (with `behaviour:`, its expert)
    noise: float | None = None      # Gaussian action noise of the expert / goal behaviours (null: collect's default,
    #                                 Minari's for waypoint, else 0)
    train: TrainSpec | None = None
    behaviour: str | None = None    # a behaviour folder (robolearn.collect.behaviour): its snapshots play the expert,
    #                                 medium and replay kinds, and nothing is trained
    steps: int = 1_000_000          # waypoint: env steps (robolearn.collect.waypoint)

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in KINDS]
        if bad:
            raise ConfigError(f"suite task {self.task}: unknown kinds {bad}; use {', '.join(KINDS)}")
        if self.behaviour is not None:
            if self.train is not None:
                raise ConfigError(f"suite task {self.task}: give `behaviour:` (committed snapshots) or `train:` (train "
                                  "in the suite), not both")
            try:
                load_behaviour(self.behaviour, self.task)  # there, whole and of this task; else how to make it
            except ConfigError as e:
                raise ConfigError(f"suite task {self.task}: {e}") from e
        elif any(k in TRAINED_KINDS for k in self.kinds) and self.train is None:
            raise ConfigError(f"suite task {self.task}: kinds {sorted(set(self.kinds) & set(TRAINED_KINDS))} need "
                              "a `train:` section (how to train the medium policy) or a `behaviour:` folder (a "
                              "run's committed snapshots)")
        prior = self.train.prior_data if self.train else None
        if prior is not None and (prior not in self.kinds or prior in TRAINED_KINDS):
            raise ConfigError(f"suite task {self.task}: train.prior_data={prior!r} must be one of this task's kinds "
                              f"that need no training ({[k for k in self.kinds if k not in TRAINED_KINDS]})")


def load_suite(name: str, only: list[str] | None = None) -> tuple[str, dict[str, Any], list[TaskSuite]]:
    """The suite `name` (configs/dataset/<name>.yaml, or a YAML path): its name, settings and tasks (`only` these,
    when given: the others are not checked, so a suite can be collected while some of its behaviour folders are
    still being made)."""
    path = Path(name)
    if not path.suffix:
        path = config_dir() / "dataset" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (config_dir() / "dataset").glob("*.yaml"))
        raise ConfigError(f"no dataset suite {name!r} ({path}); suites: {known}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        entries = raw.get("tasks") or {}
        unknown = sorted(set(only or ()) - set(entries))
        if unknown:
            raise ConfigError(f"collect tasks={unknown} are not in suite {path.stem} (its tasks: {', '.join(entries)})")
        tasks = []
        for task, entry in entries.items():
            if only is not None and task not in only:
                continue
            entry = dict(entry)
            train = entry.pop("train", None)
            tasks.append(TaskSuite(task=task, train=TrainSpec(**train) if train else None, **entry))
    except (yaml.YAMLError, TypeError) as e:
        raise ConfigError(f"dataset suite {path} is malformed: {e}") from e
    if not tasks:
        raise ConfigError(f"dataset suite {path} lists no tasks")
    settings = {k: v for k, v in raw.items() if k != "tasks"}
    prints = settings.get("fingerprints") or {}
    if not isinstance(prints, dict) or any(not (isinstance(v, str) and len(v) == 64) for v in prints.values()):
        raise ConfigError(f"dataset suite {path}: fingerprints must map dataset names to sha256 hex strings of 64 "
                          "characters (quote them: YAML reads some hex strings as numbers)")
    return path.stem, settings, tasks


def run_suite(cfg: CollectConfig) -> Path:
    """Generate every dataset of suite `cfg.suite` under `cfg.out` (default data/<suite>); returns that folder."""
    name, settings, tasks = load_suite(cfg.suite, only=cfg.tasks)
    out = Path(cfg.out or f"data/{name}")
    out.mkdir(parents=True, exist_ok=True)
    record_path = out / "suite.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"suite": name, "datasets": {}}
    seed = int(settings.get("seed", cfg.seed))
    fmt = settings.get("format", cfg.format)
    for t in tasks:
        lo, hi = _reference(t.task)  # every dataset of a task normalises by the registry's returns
        if t.behaviour is not None:
            behaviour = record.setdefault("behaviour", {})[t.task] = _behaviour_record(t.behaviour, t.task)
            for kind in t.kinds:
                policy = t.behaviour if kind in BEHAVIOUR_KINDS else None
                _collect_kind(t, kind, policy, out, fmt, seed, (lo, hi), cfg.progress, record, record_path,
                              env_overrides=behaviour["env_overrides"])
            continue
        untrained = [k for k in t.kinds if k not in TRAINED_KINDS]  # first: a training run may use them
        for kind in untrained:  # the maze kinds: the expert names antmaze's goal reacher ("reference": the registry's)
            goal_kind = kind in ("waypoint", "diverse", "play") and t.expert != "reference"
            policy = t.expert if kind == "expert" or goal_kind else None
            _collect_kind(t, kind, policy, out, fmt, seed, (lo, hi), cfg.progress, record, record_path)
        if len(untrained) < len(t.kinds):
            policies = train_behaviour(t, out / "_train" / t.task, seed, record, cfg.progress, out)
            write_json(record_path, record)
            for kind in t.kinds:
                if kind in TRAINED_KINDS:
                    policy = policies["full"] if kind == "full-replay" else policies["medium"]
                    _collect_kind(t, kind, policy, out, fmt, seed, (lo, hi), cfg.progress, record, record_path)
    (out / "README.md").write_text(f"# Dataset suite {name}\n\n{suite_table(record)}\n")
    print(suite_table(record))
    print(check_fingerprints(record, settings.get("fingerprints") or {}))
    return out


def check_fingerprints(record: dict[str, Any], expected: dict[str, str]) -> str:
    """Whether the suite's datasets are bit for bit the ones its YAML's ``fingerprints`` name (the data behind the
    committed results; `Dataset.fingerprint`). A mismatch is reported, not raised: the same recipe on another
    machine or library version can round differently, and then the numbers measured on the recorded data are for
    comparison, not reproduction."""
    if not expected:
        return "fingerprints: the suite records none to check against"
    made = {k: v.get("fingerprint") for k, v in record["datasets"].items() if k in expected}
    same = sorted(k for k, v in made.items() if v == expected[k])
    other = sorted(k for k, v in made.items() if v is not None and v != expected[k])
    lines = [f"fingerprints: {len(same)} of the {len(made)} datasets made here are bit for bit the suite's recorded "
             f"ones ({len(expected) - len(made)} of its {len(expected)} not made here)"]
    if other:
        lines.append(f"  other bits than recorded (same recipe; compare statistics, not bits): {', '.join(other)}")
    return "\n".join(lines)


def _collect_kind(t: TaskSuite, kind: str, policy: str | None, out: Path, fmt: str, seed: int,
                  reference: tuple[float, float], progress: bool, record: dict[str, Any], record_path: Path,
                  env_overrides: dict[str, Any] | None = None) -> None:
    """Collect and save `t`'s dataset of `kind` (in the task with `env_overrides`) unless its folder exists; record its
    size, return, time and source."""
    from robolearn.data.formats import save_dataset

    path = out / f"{t.task}-{kind}-v0"
    if path.exists():
        kept = record["datasets"].get(path.name)
        if kept is not None and "fingerprint" not in kept:  # made before fingerprints were recorded
            from robolearn.data.formats import load_dataset

            kept["fingerprint"] = load_dataset(path).fingerprint()
            write_json(record_path, record)
        return
    env = EnvConfig(name=t.task, num_envs=t.num_envs, overrides=dict(env_overrides or {}))
    transitions = t.transitions if kind in TRANSITION_KINDS else None  # the replay kinds hold their run's env steps
    one = CollectConfig(env=env, kind=kind, episodes=t.episodes, transitions=transitions, steps=t.steps,
                        policy=policy,
                        expert_policy=t.expert if kind == "medium-expert" and t.behaviour is None else None,
                        noise=t.noise if kind in ("expert", "diverse", "play", "waypoint") else 0.0,
                        out=str(path), format=fmt, seed=seed, progress=progress,
                        # waypoint: Minari's references, measured in the evaluation task (collect/generate.py)
                        ref_min_score=None if kind == "waypoint" else reference[0],
                        ref_max_score=None if kind == "waypoint" else reference[1])
    began = time.perf_counter()
    dataset = collect(one)
    written = save_dataset(dataset, path, fmt)
    record["datasets"][path.name] = {
        "task": t.task, "kind": kind, "episodes": dataset.num_episodes, "steps": dataset.num_steps,
        "bytes": _size(written), "seconds": round(time.perf_counter() - began, 2),
        "return_mean": dataset.metadata.get("return_mean", float(dataset.episode_returns().mean())),
        "normalized_score": _normalized(dataset), "source": _source(dataset.metadata),
        "fingerprint": dataset.fingerprint(),
    }
    write_json(record_path, record)
    print(f"{path.name}: {dataset.num_steps} steps, {record['datasets'][path.name]['seconds']} s")


def train_behaviour(t: TaskSuite, run_dir: Path, seed: int, record: dict[str, Any], progress: bool,
                    out: Path) -> dict[str, str]:
    """Train `t`'s behaviour run in chunks; returns the medium and final checkpoint folders (see the module doc).
    With `train.prior_data`, that kind's dataset (in `out`, made first) is mixed into the training batches."""
    from robolearn.eval.evaluate import evaluate
    from robolearn.eval.scores import normalized_score
    from robolearn.runners.train import load_train_config, resume_config, run_training

    spec = t.train
    assert spec is not None
    state_path = run_dir / "behaviour.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"iterations": 0, "seconds": 0.0,
                                                                             "evaluations": []}
    random_return, reference_return = _reference(t.task)
    want_full = "full-replay" in t.kinds
    medium = run_dir / "medium"
    while state["iterations"] < spec.iterations and not (medium.exists() and not want_full):
        began = time.perf_counter()
        k = min(state["iterations"] + spec.chunk, spec.iterations)
        if (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints" / "latest").exists():
            run_training(resume_config(run_dir, iterations=k))
        else:
            if run_dir.exists():
                shutil.rmtree(run_dir)  # a first chunk that never checkpointed
            cfg = load_train_config([*spec.overrides, f"env={t.task}"])
            if spec.prior_data:
                cfg["runner"]["offline_data"] = str(out / f"{t.task}-{spec.prior_data}-v0")
            cfg.update(seed=seed, run_dir=str(run_dir), iterations=k, video=False, progress=progress,
                       checkpoint_interval=spec.chunk)
            run_training(cfg)
        final = run_dir / "checkpoints" / "final"
        score = normalized_score(evaluate(final, spec.eval_episodes, mode="sample"), random_return,
                                 reference_return)  # sampled, as `collect` plays the medium policy
        state["evaluations"].append([k, round(score, 2)])
        if not medium.exists() and score >= spec.medium_score:
            shutil.copytree(final, medium)
            state["medium"] = {"iterations": k, "normalized_score": round(score, 2)}
        state["iterations"] = k
        state["seconds"] += time.perf_counter() - began
        write_json(state_path, state)
    if not medium.exists():
        raise ConfigError(f"suite task {t.task}: the behaviour run reached normalised scores {state['evaluations']}, "
                          f"never {spec.medium_score}; give train.iterations more (or another algo)")
    record.setdefault("training", {})[t.task] = {**state, "overrides": spec.overrides}
    return {"medium": str(medium), "full": str(run_dir / "checkpoints" / "final")}


def _behaviour_record(folder: str, task: str) -> dict[str, Any]:
    """What suite.json keeps of a task's behaviour folder: where it is and what its run and picks were."""
    b = load_behaviour(folder, task)
    keep = ("env_overrides", "algo", "overrides", "seed", "env_steps", "expert", "expert_score", "medium",
            "medium_score", "medium_threshold")
    return {"folder": str(folder), **{k: b.get(k) for k in keep}, "snapshots": len(b["snapshots"])}


def _source(meta: dict[str, Any]) -> dict[str, Any]:
    """Where a dataset came from, from its metadata: the behaviour folder and its snapshots played, or the policy
    (a checkpoint, "reference", a training run's; none for random actions)."""
    if "behaviour" in meta:
        return {"behaviour": meta["behaviour"], "snapshots": meta["snapshots"]}
    return {k: meta[k] for k in ("policy", "expert_policy", "noise") if meta.get(k) is not None}


def _reference(task: str) -> tuple[float, float]:
    from sim.tasks import spec

    s = spec(task)
    return s.random_return, s.reference_return


def _normalized(dataset: Any) -> float | None:
    """The dataset's mean normalised score, its episodes counted as its evaluation task counts them: where that task
    ends at the goal and the data went on (antmaze: D4RL's evaluation, the data's continuing episodes), an episode's
    return is its sparse reward up to its first arrival, 1 or 0: the score is 100 x the share that arrived."""
    returns = dataset.episode_returns()
    meta = dataset.metadata
    ends = ((meta.get("env") or {}).get("overrides") or {}).get("continuing_task") is False
    went_on = ((meta.get("collected_in") or {}).get("overrides") or {}).get("continuing_task") is True
    if ends and went_on:
        returns = (returns > 0).astype(np.float64)
    try:
        return round(float(dataset.normalized_score(returns).mean()), 1)
    except DatasetError:  # no reference returns: nothing to normalise by
        return None


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def suite_table(record: dict[str, Any]) -> str:
    """Markdown table of a suite's datasets (from suite.json) and its behaviour training."""
    lines = ["| dataset | episodes | transitions | size (MB) | return | normalised | seconds |",
             "|---|---|---|---|---|---|---|"]
    for name, d in sorted(record.get("datasets", {}).items()):
        score = "-" if d["normalized_score"] is None else f"{d['normalized_score']:.1f}"
        lines.append(f"| {name} | {d['episodes']} | {d['steps']} | {d['bytes'] / 1e6:.1f} | {d['return_mean']:.1f} | "
                     f"{score} | {d['seconds']:.0f} |")
    for task, b in sorted(record.get("behaviour", {}).items()):
        lines.append(f"\nBehaviour of {task}: {b['folder']} ({' '.join(b['overrides'] or [])}; {b['env_steps']} env "
                     f"steps, {b['snapshots']} snapshots); medium {b['medium']} (normalised {b['medium_score']}), "
                     f"expert {b['expert']} (normalised {b['expert_score']})")
    for task, tr in sorted(record.get("training", {}).items()):
        lines.append(f"\nBehaviour training of {task} ({' '.join(tr['overrides'])}): {tr['iterations']} iterations in "
                     f"{tr['seconds']:.0f} s; medium at {tr.get('medium')}; evaluations {tr['evaluations']}")
    return "\n".join(lines)
