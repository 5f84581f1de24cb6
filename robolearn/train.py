"""`robolearn train`, `eval` and `render` on top of the Hydra configs in `configs/`."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch

from robolearn import checkpoint
from robolearn.errors import CheckpointError, ConfigError


def config_dir() -> Path:
    """The `configs/` folder: beside the packages in a checkout, inside `robolearn` in a wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "configs", here / "configs"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError("robolearn's configs/ folder was not found next to the package; reinstall robolearn")


def compose(overrides: list[str], name: str = "train") -> dict[str, Any]:
    """Resolve `configs/<name>.yaml` with Hydra-style `key=value` overrides into a plain dict."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose(config_name=name, overrides=overrides)
        return OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"bad configuration override: {e}") from e


def _make_env(env_cfg: dict[str, Any], seed: int, num_envs: int | None = None):
    import sim

    return sim.make(env_cfg["name"], num_envs=num_envs or env_cfg["num_envs"], backend=env_cfg["backend"],
                    seed=seed, **(env_cfg.get("overrides") or {}))


def _ppo_config(algo_cfg: dict[str, Any]):
    from robolearn.algos.ppo import PPOConfig

    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = set(algo_cfg) - fields - {"name"}
    if unknown:
        raise ConfigError(f"unknown PPO settings {sorted(unknown)}; valid: {sorted(fields)}")
    return PPOConfig(**{k: v for k, v in algo_cfg.items() if k in fields})


def _off_policy_config(algo_cfg: dict[str, Any]):
    from robolearn.algos.sac import SACConfig
    from robolearn.algos.td3 import TD3Config

    config_class = TD3Config if algo_cfg["name"] == "td3" else SACConfig
    fields = {f.name for f in dataclasses.fields(config_class)}
    runner_keys = {"name", "recipe", "steps_per_iteration", "num_envs", "env_steps", "offline_data"}
    unknown = set(algo_cfg) - fields - runner_keys
    if unknown:
        raise ConfigError(f"unknown {algo_cfg['name']} settings {sorted(unknown)}; "
                          f"valid: {sorted(fields | runner_keys)}")
    return config_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in algo_cfg.items() if k in fields})


class SquashedPolicy(torch.nn.Module):
    """The deterministic action of a SAC or TD3 checkpoint's actor, called like the PPO policy: obs -> actions."""

    def __init__(self, obs_dim: int, num_actions: int, sac: dict[str, Any] | None = None,
                 td3: dict[str, Any] | None = None, **_: Any):
        super().__init__()
        from policies.ensemble import TanhGaussianActor
        from robolearn.algos.td3 import DeterministicActor

        c = sac or td3
        actor_class = TanhGaussianActor if sac is not None else DeterministicActor
        self.actor = actor_class(obs_dim, num_actions, tuple(c["actor_hidden"]), c["activation"], c["actor_layer_norm"])

    def forward(self, obs: Any) -> torch.Tensor:
        return self.actor.mode(obs["policy"])


def _policy_from_config(cfg: dict[str, Any]):
    from policies.actor_critic import ActorCritic

    try:
        return SquashedPolicy(**cfg) if "sac" in cfg or "td3" in cfg else ActorCritic(**cfg)
    except TypeError as e:
        raise CheckpointError(f"checkpoint policy config does not fit the policy: {e}") from e


def train(overrides: list[str]) -> Path:
    """Train PPO or SAC (and its recipes) as configured; returns the run directory."""
    cfg = compose(overrides)
    resuming = bool(cfg.get("resume"))
    if resuming:
        run_dir = Path(cfg["resume"])
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise CheckpointError(f"cannot resume {run_dir}: it has no config.yaml (not a robolearn run directory)")
        iterations = cfg["iterations"] if any(o.startswith("iterations=") for o in overrides) else None
        cfg = json.loads(saved.read_text())
        if iterations is not None:
            cfg["iterations"] = iterations
    else:
        if cfg["algo"]["name"] not in ("ppo", "sac", "td3"):
            raise ConfigError(f"algo name {cfg['algo']['name']!r} is not available; use ppo, sac or td3")
        if cfg["algo"]["name"] in ("sac", "td3"):
            _off_policy_defaults(cfg, overrides)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        label = cfg["algo"].get("recipe", cfg["algo"]["name"])
        run_dir = Path(cfg["run_dir"] or f"runs/{cfg['env']['name']}-{label}-{stamp}")
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg["run_dir"] = str(run_dir)
        # JSON is valid YAML: the resolved config, readable by both.
        (run_dir / "config.yaml").write_text(json.dumps(cfg, indent=2))

    seed = int(cfg["seed"])
    torch.manual_seed(seed)
    env = _make_env(cfg["env"], seed)
    runner = _runner(env, cfg, run_dir, seed)
    if resuming:
        runner.restore(run_dir / "checkpoints" / "latest")
    try:
        runner.learn(int(cfg["iterations"]), checkpoint_interval=int(cfg["checkpoint_interval"]))
        final = runner.save(run_dir / "checkpoints" / "final")
    finally:
        runner.close()
        env.close()
    from robolearn.plots import learning_curve

    learning_curve(run_dir / "metrics.jsonl", run_dir / "learning_curve.png", task=cfg["env"]["name"])
    if cfg["video"]:
        render_checkpoint(final, run_dir / "video.mp4")
    print(f"run directory: {run_dir}")
    return run_dir


def _off_policy_defaults(cfg: dict[str, Any], overrides: list[str]) -> None:
    """Off-policy runs use few envs (`algo.num_envs`) and size `iterations` from `algo.env_steps`."""
    algo = cfg["algo"]
    if not any(o.startswith("env.num_envs=") for o in overrides) and algo.get("num_envs"):
        cfg["env"]["num_envs"] = int(algo["num_envs"])
    if not any(o.startswith("iterations=") for o in overrides):
        per_iteration = int(algo["steps_per_iteration"]) * int(cfg["env"]["num_envs"])
        cfg["iterations"] = max(1, -(-int(algo["env_steps"]) // per_iteration))


def _runner(env: Any, cfg: dict[str, Any], run_dir: Path, seed: int):
    device = torch.device(cfg["device"])
    if cfg["algo"]["name"] in ("sac", "td3"):
        from robolearn.algos.sac import SAC
        from robolearn.algos.td3 import TD3
        from robolearn.runners.off_policy import OffPolicyRunner

        learner = TD3 if cfg["algo"]["name"] == "td3" else SAC
        algo_cfg = _off_policy_config(cfg["algo"])
        algo = learner.for_env(env, algo_cfg, device)
        offline = _offline_buffer(cfg["algo"].get("offline_data"), env, algo_cfg, device)
        return OffPolicyRunner(env, algo, run_dir, cfg, seed=seed, progress=cfg["progress"],
                               steps_per_iteration=int(cfg["algo"]["steps_per_iteration"]), offline=offline)
    from robolearn.algos.ppo import PPO
    from robolearn.runners.on_policy import OnPolicyRunner

    algo = PPO.for_env(env, _ppo_config(cfg["algo"]), device)
    return OnPolicyRunner(env, algo, run_dir, cfg, seed=seed, progress=cfg["progress"])


def _offline_buffer(path: str | None, env: Any, algo_cfg: Any, device: torch.device):
    """The offline dataset (`algo.offline_data`, a robolearn episode folder) as a replay buffer, or None.

    Its observations must be the env's `"policy"` observations (same size); batches then mix it in at
    `algo.offline_ratio` (RLPD's and SERL's 50/50). Without a dataset every batch is online.
    """
    if not path:
        if algo_cfg.offline_ratio > 0:
            print(f"note: offline_ratio {algo_cfg.offline_ratio} but no algo.offline_data: every batch is online")
        return None
    from robolearn.data.episodes import load_episodes, to_replay_buffer

    episodes, _ = load_episodes(path)
    obs_dim, act_dim = episodes[0].observations.shape[1], episodes[0].actions.shape[1]
    want = env.observation_shapes["policy"][0]
    if obs_dim != want or act_dim != env.num_actions:
        raise ConfigError(f"offline data {path} has observations of size {obs_dim} and actions of size {act_dim}; "
                          f"the env has {want} and {env.num_actions}")
    if "critic" in env.observation_shapes and env.observation_shapes["critic"] != env.observation_shapes["policy"]:
        raise ConfigError(f"offline data {path} has policy observations only, but this env's critic reads "
                          "privileged observations: use a task without a separate critic group")
    buffer = to_replay_buffer(episodes, device=str(device), n_step=algo_cfg.n_step, gamma=algo_cfg.gamma)
    print(f"offline data: {len(buffer)} transitions from {len(episodes)} episodes in {path}")
    return buffer


def load_policy(path: str | Path):
    """The trained policy and the run config stored in a checkpoint folder."""
    config, state = checkpoint.load(path)
    if "policy" not in config or "run" not in config:
        raise CheckpointError(f"{Path(path) / checkpoint.CONFIG} lacks 'policy' or 'run': "
                              "not a robolearn checkpoint")
    policy = _policy_from_config(config["policy"])
    if isinstance(policy, SquashedPolicy):  # deployment needs the actor only, not critics and targets
        state = {k: v for k, v in state.items() if k.startswith("actor.")}
    try:
        policy.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(f"model.safetensors in {path} does not match its config.json: {e}") from e
    return policy.eval(), config["run"]


@torch.no_grad()
def evaluate(path: str | Path, episodes: int = 10, seed: int = 1000) -> float:
    """Mean return of the deterministic policy over `episodes` full episodes (one per env)."""
    policy, run = load_policy(path)
    env = _make_env(run["env"], seed, num_envs=episodes)
    total = torch.zeros(episodes, dtype=torch.float64)
    finished = torch.zeros(episodes, dtype=torch.bool)
    obs = env.get_observations()
    try:
        while not bool(finished.all()):
            obs, rewards, dones, _ = env.step(policy(obs))
            total += rewards.double() * (~finished)
            finished |= dones.bool()
    finally:
        env.close()
    return float(total.mean())


def render_checkpoint(path: str | Path, out: str | Path, seed: int = 0) -> Path:
    """A video of one episode of the checkpoint's deterministic policy."""
    import sim

    policy, run = load_policy(path)
    env_cfg = run["env"]
    return sim.render(env_cfg["name"], policy=policy, path=out, seed=seed, **(env_cfg.get("overrides") or {}))
