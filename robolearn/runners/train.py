"""`robolearn train`: PPO, SAC (and its recipes) or TD3 on a simulated task, or an offline algorithm (BC, TD3+BC,
IQL, CQL, Cal-QL, ReBRAC) on a dataset, as `configs/train.yaml` composes it.

    robolearn train env=pendulum-swingup algo=sac seed=1 algo.batch_size=128
    robolearn train algo=iql dataset=data/d4rl-like/cheetah-run-medium-v0 runner.gradient_steps=100000
    robolearn train algo=iql dataset=mujoco/halfcheetah/medium-v0      # a Minari id: task halfcheetah-v5
    robolearn train algo=iql dataset=halfcheetah-medium-v2             # a D4RL id (D4RL_DATASET_DIR)
    robolearn train resume=runs/<run> iterations=400
    robolearn train algo=wsrl init=runs/<offline run> env=cheetah-run    # warm start (robolearn.runners.o2o)

Without `dataset=` an offline algorithm but BC learns online, as SAC does (fine-tuning: `robolearn finetune`).
`dataset=` is found by `robolearn.data.sources` (a path, a name under data/, a Minari or D4RL id); without `env=`
the task is the dataset's (`robolearn.data.standard`: its metadata's task, its Minari env spec, its D4RL id), and
the run records where the dataset came from, its reference returns and its Gymnasium env as `dataset_source`
(what `robolearn eval backend=gymnasium` cross-checks in).

A run directory holds the resolved `config.yaml`, `metrics.jsonl`, TensorBoard events, checkpoints,
`learning_curve.png` and a video of the final policy (see the runners).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from robolearn.algos.base import spec
from robolearn.config import algo_config, compose, make_env, migrate_run_config, runner_config
from robolearn.core import distributed
from robolearn.errors import CheckpointError, ConfigError
from robolearn.runners.offline import OfflineRunConfig


def is_online(cfg: dict[str, Any]) -> bool:
    """Whether a train config learns online: always without `dataset=` (an offline algorithm then continues online)."""
    return not cfg.get("dataset")


def resolve_run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill what depends on the algorithm: the network sizes of a warm start (`init`), `iterations` (PPO: the task
    preset's; off-policy: from `runner.env_steps`; offline: from `runner.gradient_steps`)."""
    if cfg.get("init"):
        if not is_online(cfg):
            raise ConfigError("init= warm-starts online learning: leave dataset= out (runner.offline_data= keeps "
                              "data)")
        if runner_config(cfg, online=True) is None:
            raise ConfigError(f"init= warm-starts an off-policy learner; algo={cfg['algo']['name']} is on-policy")
        from robolearn.checkpoints.warm_start import adopt_architecture, seed_path

        first = seed_path(cfg["init"], (cfg.get("seeds") or [cfg["seed"]])[0])  # every seed's must match it to load
        for key, (was, now) in adopt_architecture(cfg["algo"], first).items():
            print(f"init: algo.{key} = {now} as the checkpoint's (the preset had {was})")
    algo_cfg, run_cfg = algo_config(cfg["algo"], online=is_online(cfg)), runner_config(cfg, online=is_online(cfg))
    if is_online(cfg) and spec(cfg["algo"]["name"]).runner == "offline":
        print(f"algo={cfg['algo']['name']} without dataset=: it learns online (runner.env_steps={run_cfg.env_steps})")
    if not is_online(cfg) and spec(cfg["algo"]["name"]).runner != "offline":
        raise ConfigError(f"algo={cfg['algo']['name']} is online: dataset= is for the offline algorithms (online: "
                          "runner.offline_data=)")
    unused = _other_mode_settings(cfg, algo_cfg, run_cfg)
    if unused:
        mode = "PPO" if run_cfg is None else "online learning" if is_online(cfg) else "offline training (dataset=)"
        print(f"note: {', '.join(unused)}: not used by this run ({mode} reads "
              + (", ".join(f"runner.{f}" for f in sorted(vars(run_cfg))) if run_cfg is not None else "no runner.*")
              + ")")
    if cfg.get("dataset"):
        cfg["dataset_source"] = dataset_source(cfg["dataset"], cfg["env"])
    if cfg["iterations"] is None:
        if isinstance(run_cfg, OfflineRunConfig):
            steps, every = run_cfg.gradient_steps, run_cfg.log_every
            if 0 < steps < every:  # a short run logs once, at its end, rather than running log_every steps
                cfg["runner"]["log_every"] = every = steps
            elif steps % every:
                raise ConfigError(f"runner.gradient_steps ({steps}) must be a multiple of runner.log_every ({every}): "
                                  "training runs whole logged iterations")
            cfg["iterations"] = max(1, steps // every)
        elif run_cfg is None:
            cfg["iterations"] = int(cfg["env"]["iterations"])
        else:
            per_iteration = run_cfg.steps_per_iteration * int(cfg["env"]["num_envs"])
            cfg["iterations"] = max(1, -(-run_cfg.env_steps // per_iteration))
    return cfg


def _other_mode_settings(cfg: dict[str, Any], algo_cfg: Any, run_cfg: Any) -> list[str]:
    """The settings this run does not read that differ from their defaults: `runner` has both runners' fields
    (PPO reads none: its length is `iterations`), and an offline algorithm's `algo` schema has the replay settings
    it reads online only."""
    import dataclasses

    from robolearn.config import ALGORITHMS, RunnerConfig

    algo, schema = cfg["algo"], []
    if spec(algo["name"]).runner == "offline" and run_cfg is not None:  # the replay settings are online-only
        used = {f.name for f in dataclasses.fields(algo_cfg)}
        schema = [(f"algo.{f.name}", f, algo) for f in dataclasses.fields(ALGORITHMS[algo["name"]][0])
                  if f.name not in used and f.name not in ("name", "recipe")]
    used = {f.name for f in dataclasses.fields(run_cfg)} if run_cfg is not None else set()  # PPO's: none
    schema += [(f"runner.{f.name}", f, cfg.get("runner") or {}) for f in dataclasses.fields(RunnerConfig)
               if f.name not in used]
    out = []
    for key, f, given in schema:
        if f.name not in given:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        value = list(given[f.name]) if isinstance(given[f.name], tuple) else given[f.name]
        if value != (list(default) if isinstance(default, tuple) else default):
            out.append(key)
    return out


def load_train_config(overrides: Sequence[str]) -> dict[str, Any]:
    """The train config that `key=value` overrides of configs/train.yaml compose (with `dataset=`, and without `env=`
    the dataset's task with its overrides: `dataset_env`); with `resume=<run>` that run's own config (`iterations=`
    may grow it)."""
    overrides = list(overrides)
    given = {o.split("=", 1)[0].lstrip("+"): o.split("=", 1)[1] for o in overrides if "=" in o}
    choice = None
    if "dataset" in given and not {"env", "env.name", "resume"} & set(given):
        choice = dataset_env(given["dataset"])
        if choice is not None:
            overrides.append(env_override(choice.task))
    cfg = compose("train", overrides)
    if cfg["resume"]:
        return resume_config(cfg["resume"], cfg["iterations"])
    if choice is not None:  # the dataset's task options over the preset's; the user's own +env.overrides.<key>= win
        user = {key.split(".", 2)[2] for key in given if key.startswith("env.overrides.")}
        cfg["env"]["overrides"] = {**(cfg["env"].get("overrides") or {}),
                                   **{k: v for k, v in choice.overrides.items() if k not in user}}
    return cfg


def env_override(task: str) -> str:
    """The override choosing `task`: its preset (`env=<task>`, configs/env/<task>.yaml) or, for a task without one,
    `env.name=<task>` over the default preset."""
    from robolearn.config import config_dir

    return f"env={task}" if (config_dir() / "env" / f"{task}.yaml").is_file() else f"env.name={task}"


def dataset_env(dataset: str) -> Any:
    """The task (`robolearn.data.standard.TaskChoice`: name, overrides, Gymnasium env) the dataset trains and scores
    on, printed; None when it names none (then `env=` says)."""
    from robolearn.data.sources import dataset_task

    choice = dataset_task(dataset)
    if choice is not None:
        extra = ", ".join(f"{k}={v}" for k, v in choice.overrides.items())
        print(f"dataset {dataset}: task {choice.task}{f' ({extra})' if extra else ''} from {choice.origin}")
    return choice


def resume_config(run_dir: str | Path, iterations: int | None = None) -> dict[str, Any]:
    """The config a run saved (`<run_dir>/config.yaml`), to continue it; `iterations` may grow it."""
    saved = Path(run_dir) / "config.yaml"
    if not saved.is_file():
        raise CheckpointError(f"cannot resume {run_dir}: it has no config.yaml (not a robolearn run directory)")
    cfg = migrate_run_config(json.loads(saved.read_text()))
    cfg["resume"] = str(run_dir)
    if iterations is not None:
        cfg["iterations"] = iterations
    return cfg


def train(overrides: Sequence[str]) -> Path:
    """`robolearn train` from `key=value` overrides: `run_training(load_train_config(overrides))`."""
    return run_training(load_train_config(overrides))


def run_training(cfg: dict[str, Any]) -> Path:
    """Train as a composed train config says (`load_train_config`, `resume_config`); returns the run directory.

    Started by `torchrun` with several ranks, each process trains one rank of a data-parallel job
    (`robolearn.core.distributed`)."""
    if distributed.launched():
        return _run_ranks(cfg)
    if cfg.get("seeds"):
        return run_seeds(cfg)
    resuming = bool(cfg.get("resume"))
    if resuming:
        run_dir = Path(cfg["resume"])
        if int(cfg.get("world_size") or 1) > 1:
            raise ConfigError(f"{run_dir} was trained by {cfg['world_size']} torchrun ranks: resume it under torchrun "
                              f"with --nproc_per_node totalling {cfg['world_size']}")
    else:
        cfg = resolve_run(cfg)
        run_dir = _new_run_dir(cfg)
        created = next((p for p in reversed([run_dir, *run_dir.parents]) if not p.exists()), None)  # the top new one
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg["run_dir"] = str(run_dir)

    seed = int(cfg["seed"])
    torch.manual_seed(seed)
    run_cfg = runner_config(cfg, online=is_online(cfg))
    offline = isinstance(run_cfg, OfflineRunConfig)  # its envs are the evaluation episodes
    env = make_env(cfg["env"], seed, num_envs=run_cfg.eval_episodes if offline else None)
    cfg["env"]["policy_dt"] = float(env.task.cfg.policy_dt)  # the policy acts this often
    saved = {**cfg, "resume": None}  # the run's own config: `resume` is how this process was started
    (run_dir / "config.yaml").write_text(json.dumps(saved, indent=2))  # JSON is valid YAML: readable by both
    try:
        runner = make_runner(env, cfg, run_dir, seed)
    except ConfigError:  # a setting the runner refuses: leave no empty run folder behind
        env.close()
        if not resuming and created is not None:  # this run's folder, then the parents it made if still empty
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in [p for p in run_dir.parents if created in (p, *p.parents)]:
                try:
                    parent.rmdir()
                except OSError:  # another run has written into it meanwhile
                    break
        raise
    if resuming:
        runner.restore(run_dir / "checkpoints" / "latest")
    elif cfg.get("init"):
        from robolearn.checkpoints.warm_start import seed_path, warm_start

        init = seed_path(cfg["init"], seed)
        print(f"init: {', '.join(warm_start(runner.algo, init))} from {init}")
    try:
        runner.learn(int(cfg["iterations"]), checkpoint_interval=int(cfg["checkpoint_interval"]),
                     checkpoint_minutes=float(cfg["checkpoint_minutes"]))
        final = runner.save(run_dir / "checkpoints" / "final")
    finally:
        runner.close()
        env.close()
        if getattr(runner, "eval_env", None) is not None:
            runner.eval_env.close()
    _finish(cfg, run_dir, final)
    print(f"run directory: {run_dir}")
    return run_dir


def _new_run_dir(cfg: dict[str, Any]) -> Path:
    label = cfg["algo"].get("recipe", cfg["algo"]["name"])
    return Path(cfg["run_dir"] or f"runs/{cfg['env']['name']}-{label}-{time.strftime('%Y%m%d-%H%M%S')}")


def _finish(cfg: dict[str, Any], run_dir: Path, final: Path) -> None:
    """The learning curve and (with `video`) a video of the final policy."""
    from robolearn.eval.evaluate import render_checkpoint
    from robolearn.eval.plots import learning_curve

    learning_curve(run_dir / "metrics.jsonl", run_dir / "learning_curve.png", task=cfg["env"]["name"])
    if cfg["video"]:
        render_checkpoint(final, run_dir / "video.mp4")


def _run_ranks(cfg: dict[str, Any]) -> Path:
    """One rank of a `torchrun` job (PPO, SAC / TD3 and their presets): its own env block, seed and device, the
    learner's parameters from rank 0, gradients averaged every step; rank 0 logs and writes the run's checkpoints,
    the others their own training state (`robolearn.core.distributed`)."""
    ranks = distributed.setup(str(cfg["device"]))
    # torchrun stops the other ranks with SIGTERM when one fails: unwind (a save in progress removes its
    # temporary folder) instead of dying mid-write
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        resuming = bool(cfg.get("resume"))
        if not resuming:
            cfg = resolve_run(cfg)
        if cfg.get("seeds"):
            raise ConfigError("seeds= and torchrun do not combine: a torchrun job trains one seed over its ranks")
        kind = spec(cfg["algo"]["name"]).runner
        if kind not in ("on_policy", "off_policy") or not is_online(cfg):
            raise ConfigError("torchrun trains PPO and SAC / TD3 (and their presets) online; "
                              f"algo={cfg['algo']['name']} runs in one process")
        if cfg["algo"].get("compile"):
            raise ConfigError("algo.compile=true under torchrun: the compiled update has no gradient all-reduce; "
                              "train the ranks eagerly")
        if cfg["algo"].get("warmup_whole_episodes"):
            raise ConfigError("warmup_whole_episodes under torchrun: each rank's warm-up would end on its own "
                              "episodes and the ranks' updates would fall out of step")
        run_dir = Path(distributed.broadcast_text(
            str(cfg["resume"] if resuming else _new_run_dir(cfg)) if ranks.main else None))
        cfg["run_dir"] = str(run_dir)
        if resuming:
            saved_world = int(cfg.get("world_size") or 1)
            if saved_world != ranks.world_size:
                raise ConfigError(f"{run_dir} was trained with {saved_world} ranks; resume it with as many "
                                  f"(torchrun --nproc_per_node ...), not {ranks.world_size}")
        seed = distributed.rank_seed(int(cfg["seed"]), ranks)
        rank_cfg = {**cfg, "device": distributed.rank_device(str(cfg["device"]), ranks)}
        own = distributed.rank_dir(run_dir, ranks)
        own.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(seed)
        env = make_env(cfg["env"], seed)
        cfg["env"]["policy_dt"] = float(env.task.cfg.policy_dt)
        if ranks.main:
            (run_dir / "config.yaml").write_text(json.dumps({**cfg, "resume": None, **distributed.describe(ranks)},
                                                            indent=2))
        runner = make_runner(env, {**rank_cfg, "progress": bool(cfg["progress"]) and ranks.main}, own, seed)
        runner.logging, runner.world_size = ranks.main, ranks.world_size
        if resuming:
            runner.restore(own / "checkpoints" / "latest")
            distributed.check_same(runner.iteration, "the iteration to resume from")
        else:
            if cfg.get("init"):
                from robolearn.checkpoints.warm_start import seed_path, warm_start

                warm_start(runner.algo, seed_path(cfg["init"], int(cfg["seed"])))  # the job's seed, not the rank's
            distributed.broadcast_(runner.algo.model_state())  # every rank starts from rank 0's parameters
        try:
            runner.learn(int(cfg["iterations"]), checkpoint_interval=int(cfg["checkpoint_interval"]))  # (no
            #   checkpoint_minutes: the ranks would decide by their own clocks, and a resume needs one iteration)
            final = runner.save(own / "checkpoints" / "final")
            distributed.barrier()
        finally:
            runner.close()
            env.close()
            if getattr(runner, "eval_env", None) is not None:
                runner.eval_env.close()
        if ranks.main:
            _finish(cfg, run_dir, final)
            print(f"run directory: {run_dir} ({ranks.world_size} ranks)")
        return run_dir
    finally:
        distributed.shutdown()


def run_seeds(cfg: dict[str, Any]) -> Path:
    """`seeds=[...]`: one run per seed in `<run_dir>/seed<k>/` (offline, PPO, or SAC / TD3 online), trained together
    (`robolearn.runners.seeds`); returns the run directory whose `config.yaml` lists the seeds (`resume=` it to
    resume them all). `seed_dir` places a seed's run elsewhere relative to it (`robolearn finetune seeds=` puts the
    phases of seed k in `<out>/seed<k>/offline` and `.../online`), and `init` with `{seed}` warm-starts each seed
    from its own checkpoint."""
    import copy

    from robolearn.checkpoints.warm_start import seed_path
    from robolearn.eval.evaluate import render_checkpoint
    from robolearn.eval.plots import learning_curve
    from robolearn.runners.seeds import GlobalStreams, OffPolicySeedsRunner, OnPolicySeedsRunner, SeedsRunner

    resuming = bool(cfg.get("resume"))
    if not resuming:
        cfg = resolve_run(cfg)
    seeds = [int(k) for k in cfg["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds= lists a seed twice: {seeds}")
    run_cfg = runner_config(cfg, online=is_online(cfg))
    offline = isinstance(run_cfg, OfflineRunConfig)
    kind = "offline" if offline else spec(cfg["algo"]["name"]).runner
    if not offline and kind == "offline":  # an offline learner online (Cal-QL's, RO2O's fine-tuning): off-policy
        kind = "off_policy"
    if kind not in ("offline", "off_policy", "on_policy"):
        raise ConfigError(f"seeds= trains offline algorithms, PPO, and SAC / TD3 online; algo={cfg['algo']['name']} "
                          "online takes one seed= per run")
    if resuming:
        run_dir = Path(cfg["resume"])
    else:
        label = cfg["algo"].get("recipe", cfg["algo"]["name"])
        run_dir = Path(cfg["run_dir"] or f"runs/{cfg['env']['name']}-{label}-seeds-{time.strftime('%Y%m%d-%H%M%S')}")
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg["run_dir"] = str(run_dir)
    device = torch.device(cfg["device"])
    runners, shared = [], {}
    streams = GlobalStreams(device)  # PPO draws its actions from torch's global streams: one copy per seed
    pattern = cfg.get("seed_dir") or "seed{seed}"  # runs saved before seed_dir: their seed<k>/
    if "{seed}" not in pattern:
        raise ConfigError(f"seed_dir={pattern!r} must contain {{seed}}: each seed needs a run folder of its own")
    for seed in seeds:  # each seed exactly as `robolearn train seed=<seed>` builds it
        seed_run = os.path.normpath(run_dir / seed_path(pattern, seed))
        seed_cfg = copy.deepcopy({**cfg, "seed": seed, "seeds": None, "run_dir": seed_run, "resume": None})
        torch.manual_seed(seed)
        env = make_env(seed_cfg["env"], seed, num_envs=run_cfg.eval_episodes if offline else None)
        seed_cfg["env"]["policy_dt"] = cfg["env"]["policy_dt"] = float(env.task.cfg.policy_dt)
        seed_dir = Path(seed_cfg["run_dir"])
        seed_dir.mkdir(parents=True, exist_ok=True)
        (seed_dir / "config.yaml").write_text(json.dumps(seed_cfg, indent=2))
        if offline:
            algo_cfg = algo_config(seed_cfg["algo"], online=False)
            runners.append(offline_runner(env, seed_cfg, algo_cfg, run_cfg, seed_dir, seed, device, shared))
        else:
            runners.append(make_runner(env, seed_cfg, seed_dir, seed))
        if resuming:
            runners[-1].restore(seed_dir / "checkpoints" / "latest")
        elif cfg.get("init"):
            from robolearn.checkpoints.warm_start import seed_path, warm_start

            init = seed_path(cfg["init"], seed)  # init=runs/x/seed{seed}: each seed its own
            print(f"init: {', '.join(warm_start(runners[-1].algo, init))} from {init}")
        streams.capture()
    (run_dir / "config.yaml").write_text(json.dumps({**cfg, "resume": None}, indent=2))
    try:
        driver = {"offline": lambda: SeedsRunner(runners), "off_policy": lambda: OffPolicySeedsRunner(runners),
                  "on_policy": lambda: OnPolicySeedsRunner(runners, streams)}[kind]()
        driver.learn(int(cfg["iterations"]), checkpoint_interval=int(cfg["checkpoint_interval"]),
                     checkpoint_minutes=float(cfg["checkpoint_minutes"]))
        finals = [runner.save(runner.run_dir / "checkpoints" / "final") for runner in runners]
    finally:
        for runner in runners:
            runner.close()
            runner.env.close()
            if getattr(runner, "eval_env", None) is not None:
                runner.eval_env.close()
    for runner in runners:
        learning_curve(runner.run_dir / "metrics.jsonl", runner.run_dir / "learning_curve.png", task=cfg["env"]["name"])
    if cfg["video"]:  # the first seed's: one video shows what the policy does
        render_checkpoint(finals[0], runners[0].run_dir / "video.mp4")
    print(f"run directory: {run_dir} (seeds {seeds}: {', '.join(str(runner.run_dir) for runner in runners)})")
    return run_dir


def make_runner(env: Any, cfg: dict[str, Any], run_dir: Path, seed: int):
    """The on- or off-policy runner, with its algorithm, for a resolved train config."""
    device = torch.device(cfg["device"])
    algo_cfg, run_cfg = algo_config(cfg["algo"], online=is_online(cfg)), runner_config(cfg, online=is_online(cfg))
    if isinstance(run_cfg, OfflineRunConfig):
        return offline_runner(env, cfg, algo_cfg, run_cfg, run_dir, seed, device)
    algo = spec(cfg["algo"]["name"]).learner_class().for_env(env, algo_cfg, device)
    if run_cfg is None:
        from robolearn.runners.on_policy import OnPolicyRunner

        return OnPolicyRunner(env, algo, run_dir, cfg, seed=seed, progress=cfg["progress"])
    from robolearn.runners.off_policy import OffPolicyRunner

    offline = offline_buffer(run_cfg.offline_data, env, algo_cfg, device)
    eval_env = None
    if run_cfg.eval_every:  # a separate VecEnv: evaluating never disturbs the training envs' episodes
        eval_env = make_env(cfg["env"], seed + 1, num_envs=run_cfg.eval_episodes)
    return OffPolicyRunner(env, algo, run_dir, cfg, seed=seed, progress=cfg["progress"],
                           steps_per_iteration=run_cfg.steps_per_iteration, offline=offline, eval_env=eval_env,
                           eval_every=run_cfg.eval_every, reference=_reference(run_cfg, env.task.name),
                           snapshot_every=run_cfg.snapshot_every)


def _reference(run_cfg: Any, task: str) -> tuple[float, float] | None:
    """The (random, reference) returns online evaluations are normalised by: `runner.eval_reference`, else the
    task's."""
    from robolearn.eval.scores import task_reference

    given = run_cfg.eval_reference
    if given is None:
        return task_reference(task)
    if len(given) != 2 or float(given[0]) == float(given[1]):
        raise ConfigError(f"runner.eval_reference must be [random, reference] returns that differ, got {given}")
    return float(given[0]), float(given[1])


def offline_buffer(path: str | None, env: Any, algo_cfg: Any, device: torch.device):
    """The offline dataset (`runner.offline_data`: named as `dataset=` is, `robolearn.data.sources`) as a replay
    buffer that batches mix in at `algo.offline_ratio` (RLPD's and SERL's 50/50), holding the env's observation
    groups that the learner reads ("policy", and "critic" where the env has a separate one). Without a dataset every
    batch is online."""
    if not path:
        if algo_cfg.offline_ratio > 0:
            print(f"note: offline_ratio {algo_cfg.offline_ratio} but no runner.offline_data: every batch is online")
        return None
    from robolearn.data.replay import dataset_buffer
    from robolearn.data.sources import load_source

    path, data = load_source(path)
    groups = ["policy"] + (["critic"] if "critic" in env.observation_shapes else [])
    buffer = dataset_buffer(data, env.observation_shapes, env.num_actions, source=path, groups=groups,
                            device=str(device), n_step=algo_cfg.n_step, gamma=algo_cfg.gamma)
    print(f"offline data: {len(buffer)} transitions from {data.num_episodes} episodes in {path}")
    return buffer


def dataset_source(dataset: str, env: dict[str, Any]) -> dict[str, Any]:
    """What a run records of its dataset: where it was found, its fingerprint (the sha256 of its arrays: which
    generation of a regenerated dataset it trained on), its reference returns and where they come from, and the
    Gymnasium env it was recorded in when the run's task is the one that env maps to (else None: an explicit
    `env=` of another task; `robolearn eval backend=gymnasium` then uses the Gymnasium env that task equals)."""
    from robolearn.data.sources import load_source, policy_size
    from robolearn.data.standard import dataset_task, same
    from robolearn.eval.scores import reference_source

    path, data = load_source(dataset)
    try:
        choice = dataset_task(data.metadata, policy_size(data), path)
    except ConfigError:  # a dataset no task reproduces, trained on an explicit env=
        choice = None
    reference, origin = reference_source(data.metadata, env["name"])
    same_env = choice is not None and choice.task == env["name"] and same(choice.overrides, env.get("overrides") or {})
    return {"path": str(path), "reference": list(reference) if reference else None, "reference_source": origin,
            "gymnasium": choice.gymnasium if same_env else None, "fingerprint": data.fingerprint()}


def _return_range_scale(algo_cfg: Any, data: Any, path: Any) -> Any:
    """`algo_cfg` with its reward_scale times 1000 / (max - min episode return of `data`): CORL's `modify_reward` for
    locomotion datasets, which puts every dataset's returns on a span of 1000 (so also in the checkpoint and in a
    warm-started online phase)."""
    if not hasattr(algo_cfg, "reward_scale"):
        raise ConfigError(f"runner.normalize_reward scales the rewards, which {type(algo_cfg).__name__} does not read")
    returns = data.episode_returns()
    span = float(returns.max() - returns.min())
    if span <= 0:
        raise ConfigError(f"runner.normalize_reward: every episode of {path} has the return {returns.max():g}, no span "
                          "to normalise by")
    scale = algo_cfg.reward_scale * 1000.0 / span
    print(f"rewards: x {scale:g} (runner.normalize_reward: 1000 / the dataset's span of episode returns {span:g})")
    return dataclasses.replace(algo_cfg, reward_scale=scale)


def offline_runner(env: Any, cfg: dict[str, Any], algo_cfg: Any, run_cfg: OfflineRunConfig, run_dir: Path, seed: int,
                   device: torch.device, shared: dict[str, Any] | None = None):
    """The offline runner with its algorithm and the dataset's buffer (checked against the env). `shared`: a dict
    the runners of one seed-batch pass along, so that the dataset is loaded and buffered once for all seeds."""
    from robolearn.data.replay import dataset_buffer
    from robolearn.data.sources import load_source
    from robolearn.eval.scores import reference_source
    from robolearn.runners.offline import OfflineRunner

    shared = {} if shared is None else shared
    if "data" not in shared:
        shared["data"] = load_source(cfg["dataset"])
    path, data = shared["data"]
    if run_cfg.normalize_reward:
        algo_cfg = _return_range_scale(algo_cfg, data, path)
    algo = spec(cfg["algo"]["name"]).learner_class().for_env(env, algo_cfg, device)
    extras = {}  # per-transition values some learners need in every batch
    if hasattr(algo, "dataset_returns"):  # Cal-QL: each transition's Monte-Carlo return-to-go
        extras["mc_returns"] = torch.as_tensor(algo.dataset_returns(data.rewards, data.step_starts))
    if hasattr(algo, "dataset_next_actions"):  # ReBRAC's critic penalty: the dataset's next action
        extras["next_actions"] = torch.as_tensor(algo.dataset_next_actions(data.actions, data.step_starts))
    if "buffer" not in shared:
        shared["buffer"] = dataset_buffer(data, env.observation_shapes, env.num_actions, source=path,
                                          task=env.task.name, device=str(device), gamma=algo_cfg.gamma, extras=extras)
        print(f"dataset: {len(shared['buffer'])} transitions from {data.num_episodes} episodes in {path}")
    buffer = shared["buffer"]
    algo.fit_state_normalizer(buffer.obs["policy"][:buffer.filled])  # normalize_states (a resume restores the same)
    reference, origin = reference_source(data.metadata, env.task.name)
    if reference is not None:
        print(f"scores: 100 * (return - {reference[0]:g}) / ({reference[1]:g} - {reference[0]:g}), the reference "
              f"returns of the {origin}")
    return OfflineRunner(env, algo, buffer, run_dir, cfg, run_cfg, reference, seed=seed, progress=cfg["progress"])
