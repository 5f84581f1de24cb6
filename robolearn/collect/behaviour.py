"""Behaviour folders: one training run's policy snapshots, committed, from which D4RL-style datasets regenerate
identically on any machine.

    robolearn train env=halfcheetah-v5 algo=sac runner.env_steps=1000000 runner.snapshot_every=50000 \\
        run_dir=runs/behaviour/halfcheetah-v5-sac video=false
    robolearn collect behaviour=runs/behaviour/halfcheetah-v5-sac out=benchmarks/behaviour/halfcheetah-v5-sac
    robolearn collect suite=mujoco-v5          # its tasks say behaviour: benchmarks/behaviour/<task>-sac

D4RL and Minari built their locomotion datasets from one SAC run per task: expert = the final policy, medium = the
checkpoint at about a third of the expert's score, the replay kinds = the run's replay buffer. A behaviour folder
keeps what that needs, small enough to commit:

    behaviour.json                 task, its env overrides, algo, training overrides and seed; the run's num_envs,
                                   snapshot_every and uniform-random warm-up steps; `expert` (the last snapshot: the
                                   final policy); `medium` (the first snapshot whose sampled policy reaches
                                   `medium_threshold`, with its `medium_score`); every snapshot with the env steps it
                                   was taken at, the env steps it `acted` in the run (until the next one), the run's
                                   evaluation near it and its `score` where the builder scored it
    snapshots/step_<env_steps>/    policy-only checkpoints (`robolearn.checkpoints.snapshots`) that `load_policy` loads

`robolearn collect kind=<kind> policy=<behaviour folder>` then plays them (`robolearn.collect.generate`): medium /
expert the medium / expert snapshot, medium-expert both, and the replay kinds every snapshot again for the env steps
it acted (`replay_schedule`), instead of shipping a replay buffer of a million transitions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from robolearn.checkpoints import checkpoint
from robolearn.checkpoints.snapshots import SNAPSHOTS, read_index
from robolearn.data.dataset import staged_folder, write_json
from robolearn.errors import ConfigError

BEHAVIOUR = "behaviour.json"
MEDIUM_SCORE = 33.0  # D4RL's medium: "about 1/3 of the expert" (normalised score, sampled policy)
ROOT = Path(__file__).resolve().parents[2]  # a relative folder not under the working directory is looked up here


def resolve(folder: str | Path) -> Path:
    """The behaviour folder `folder` names: as given (absolute, or under the working directory), else under the
    repository root (where `benchmarks/behaviour/` is committed)."""
    path = Path(folder)
    if path.is_absolute() or (path / BEHAVIOUR).is_file():
        return path
    return ROOT / path if (ROOT / path / BEHAVIOUR).is_file() else path


def is_behaviour(folder: str | Path | None) -> bool:
    """Whether `folder` names a behaviour folder (one with behaviour.json)."""
    return folder is not None and folder != "reference" and (resolve(folder) / BEHAVIOUR).is_file()


def make_command(task: str, folder: str | Path) -> str:
    """The two commands that make the behaviour folder `folder` of `task` (what a missing folder's error says): the
    algorithm is the folder name's suffix, as in benchmarks/behaviour/<task>-<algo>."""
    name = Path(folder).name
    algo = name[len(task) + 1:] if name.startswith(f"{task}-") else "<algo>"
    run = f"runs/behaviour/{name}"
    return (f"`robolearn train env={task} algo={algo} seed=0 runner.env_steps=1000000 runner.snapshot_every=50000 "
            f"runner.eval_every=50000 run_dir={run} video=false`, then "
            f"`robolearn collect behaviour={run} out={folder}`")


def load_behaviour(folder: str | Path, task: str | None = None) -> dict[str, Any]:
    """behaviour.json of `folder`, checked: it exists (else a `ConfigError` with the commands that make it), is of
    `task` when given, and its expert, medium and every snapshot folder are there."""
    path = resolve(folder)
    if not (path / BEHAVIOUR).is_file():
        raise ConfigError(f"behaviour folder {folder} does not exist (no {BEHAVIOUR} there); make it with "
                          f"{make_command(task or '<task>', folder)}")
    try:
        behaviour = json.loads((path / BEHAVIOUR).read_text())
        names = [s["name"] for s in behaviour["snapshots"]]
        missing = [n for n in names if not (path / SNAPSHOTS / n / checkpoint.MODEL).is_file()]
        picked = {behaviour["expert"], behaviour["medium"]}
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{path / BEHAVIOUR} is malformed ({e}); rebuild it with `robolearn collect "
                          f"behaviour=<run dir> out={folder}`") from e
    if missing or not picked <= set(names):
        raise ConfigError(f"behaviour folder {path} lacks snapshots {missing or sorted(picked - set(names))}; "
                          "rebuild it from its run")
    if task is not None and behaviour["task"] != task:
        raise ConfigError(f"behaviour folder {folder} is of task {behaviour['task']}, not {task}: collect "
                          f"env={behaviour['task']} with it, or give {task}'s folder (benchmarks/behaviour/{task}-sac)")
    return behaviour


def snapshot(folder: str | Path, name: str) -> str:
    """The path of snapshot `name` of a behaviour folder, spelled from `folder` as given (datasets record it)."""
    return str(Path(folder) / SNAPSHOTS / name)


def replay_schedule(folder: str | Path, behaviour: dict[str, Any], kind: str) -> list[tuple[str, int]]:
    """(snapshot path, env steps it plays) in the run's order for a replay kind: ``full-replay`` every snapshot that
    acted, ``medium-replay`` those taken before the medium one (the data the run had collected when it reached the
    medium checkpoint, D4RL's medium-replay: the medium snapshot itself acted only after it)."""
    if kind not in ("medium-replay", "full-replay"):
        raise ConfigError(f"replay_schedule is for medium-replay and full-replay, not {kind!r}")
    names = [s["name"] for s in behaviour["snapshots"]]
    end = behaviour["snapshots"][names.index(behaviour["medium"])]["env_steps"] if kind == "medium-replay" else None
    return [(snapshot(folder, s["name"]), int(s["acted"])) for s in behaviour["snapshots"]
            if s["acted"] > 0 and (end is None or s["env_steps"] < end)]


def build_behaviour(run_dir: str | Path, out: str | Path | None = None, medium_score: float = MEDIUM_SCORE,
                    eval_episodes: int = 10, seed: int = 0, expert: str = "last") -> Path:
    """A behaviour folder at `out` (default benchmarks/behaviour/<task>-<algo>) from the finished run `run_dir`'s
    snapshots (`runner.snapshot_every`): all of them copied, expert = the last (D4RL's final policy) or, with
    `expert="best"`, the snapshot the run's own evaluation rated highest (for a run that degraded at its end, as
    SAC on hopper can), medium = the first whose sampled policy's normalised score over `eval_episodes` episodes
    (env seed `seed`; the task's random and reference returns) reaches `medium_score`, as D4RL sampled its behaviour
    policies. Never overwrites a folder."""
    from robolearn.eval.evaluate import evaluate
    from robolearn.eval.scores import normalized_score, task_reference

    if expert not in ("last", "best"):
        raise ConfigError(f"expert= takes last or best, got {expert!r}")
    index = read_index(Path(run_dir) / SNAPSHOTS)
    if not index["snapshots"]:
        raise ConfigError(f"run {run_dir} has no policy snapshots ({Path(run_dir) / SNAPSHOTS / 'index.json'}); "
                          "train it with runner.snapshot_every=<env steps> (e.g. 50000)")
    entries = [dict(s) for s in index["snapshots"]]
    paths = [Path(run_dir) / SNAPSHOTS / s["name"] for s in entries]
    run = checkpoint.load(paths[-1])[0]["run"]
    task, algo = run["env"]["name"], run["algo"].get("recipe", run["algo"]["name"])
    out = Path(out or f"benchmarks/behaviour/{task}-{algo}")
    if out.exists():
        raise ConfigError(f"out={out} exists already; behaviour folders are never overwritten (remove it to rebuild)")
    reference = task_reference(task)
    if reference is None:
        raise ConfigError(f"task {task} has no reference returns, so no medium snapshot can be picked by score")
    score = lambda path: round(normalized_score(evaluate(path, eval_episodes, seed, mode="sample"),  # noqa: E731
                                                *reference), 2)
    medium = None
    for entry, path in zip(entries, paths, strict=True):
        entry["score"] = score(path)
        print(f"{entry['name']}: normalised score {entry['score']} (sampled, {eval_episodes} episodes)")
        if entry["score"] >= medium_score:
            medium = entry
            break
    if medium is None:
        raise ConfigError(f"no snapshot of {run_dir} reaches normalised score {medium_score} (scores "
                          f"{[(e['name'], e.get('score')) for e in entries]}); train longer, or lower medium_score")
    top = len(entries) - 1
    if expert == "best":
        rated = [i for i, e in enumerate(entries) if (e.get("eval") or {}).get("return") is not None]
        if not rated:
            raise ConfigError(f"expert=best needs the run's evaluations at its snapshots; {run_dir} has none "
                              "(train with runner.eval_every=<snapshot_every>)")
        top = max(rated, key=lambda i: entries[i]["eval"]["return"])
    if "score" not in entries[top]:
        entries[top]["score"] = score(paths[top])
    behaviour = {"task": task, "env_overrides": run["env"].get("overrides") or {}, "algo": algo,
                 "overrides": training_overrides(run), "seed": run.get("seed"),
                 **{k: index.get(k) for k in ("num_envs", "steps_per_iteration", "snapshot_every",
                                              "random_warmup_steps", "env_steps")},
                 "expert": entries[top]["name"], "expert_score": entries[top]["score"], "expert_rule": expert,
                 "medium": medium["name"],
                 "medium_score": medium["score"], "medium_threshold": medium_score, "eval_episodes": eval_episodes,
                 "eval_seed": seed, "snapshots": entries}
    with staged_folder(out) as tmp:
        for path in paths:
            shutil.copytree(path, tmp / SNAPSHOTS / path.name)
        write_json(tmp / BEHAVIOUR, behaviour)
    print(f"behaviour folder {out}: {len(entries)} snapshots, medium {medium['name']} ({medium['score']}), expert "
          f"{entries[top]['name']} ({entries[top]['score']}, {expert})")
    return out


def training_overrides(run: dict[str, Any]) -> list[str]:
    """The `robolearn train` overrides that compose the run's config from its task's and algorithm's presets (what
    behaviour.json records of how the run was trained; the run's whole config is in every snapshot's config.json)."""
    from robolearn.config import config_dir
    from robolearn.runners.train import env_override, load_train_config

    algo = run["algo"].get("recipe", run["algo"]["name"])
    if not (config_dir() / "algo" / f"{algo}.yaml").is_file():
        algo = run["algo"]["name"]
    given = [env_override(run["env"]["name"]), f"algo={algo}"]
    base = load_train_config(given)
    out = given + ([f"seed={run['seed']}"] if run.get("seed") != base.get("seed") else [])
    for section in ("env", "algo", "runner"):
        out += _differences(section, base.get(section) or {}, run.get(section) or {})
    return out


def _differences(prefix: str, base: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """`key=value` for every setting of `run` that differs from `base` (`+key=value` for one `base` lacks)."""
    out = []
    for key, value in run.items():
        name = f"{prefix}.{key}"
        if name == "env.policy_dt":  # recorded by the run, not a setting
            continue
        if isinstance(value, dict) and isinstance(base.get(key, {}), dict):
            out += _differences(name, base.get(key) or {}, value)  # keys new to the preset get their "+"
        elif key not in base:
            out.append(f"+{name}={_format(value)}")
        elif json.loads(json.dumps(base[key])) != json.loads(json.dumps(value)):
            out.append(f"{name}={_format(value)}")
    return out


def _format(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
