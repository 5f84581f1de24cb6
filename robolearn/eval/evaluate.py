"""A checkpoint's policy scored on, or filmed in, its own task (`robolearn eval`, `robolearn render`).

`score_checkpoint` scores it in our batched sim and, with ``backend="gymnasium"``, also in the Gymnasium env the
run's dataset was recorded in (its `dataset_source`), or else the one its task equals
(`robolearn.data.standard.gymnasium_spec`), as a cross-check: raw returns and normalised scores side by side.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.checkpoints.policy import Mode, Policy, load_policy
from robolearn.config import make_env
from robolearn.errors import ConfigError
from robolearn.eval.episodes import Episodes, run_episodes

BACKENDS = ("sim", "gymnasium")


def evaluate(path: str | Path, episodes: int = 10, seed: int = 1000, mode: Mode = "deterministic",
             device: str = "auto") -> float:
    """Mean undiscounted return of the checkpoint's policy over `episodes` full episodes (one per env of an env
    made with `seed`, played from its first observations: `robolearn.eval.episodes.run_episodes`)."""
    policy = load_policy(path, mode=mode, seed=seed)
    return float(_sim_episodes(policy, episodes, seed, device).returns.mean())


def _sim_episodes(policy: Policy, episodes: int, seed: int, device: str) -> Episodes:
    """One episode per env of the run's task, made with `seed`, on `device`."""
    env = make_env(policy.run["env"], seed, num_envs=episodes, device=device)
    policy.to(env.device)
    try:
        return run_episodes(env, policy)
    finally:
        env.close()


@dataclasses.dataclass
class Score:
    """One backend's episodes of a policy."""

    backend: str                  # "sim" (our batched sim) or "gymnasium"
    env: str                      # the task, or the Gymnasium env id
    returns: np.ndarray           # [episodes] undiscounted returns
    seeds: str                    # how the episodes were seeded
    normalized: float | None      # the mean return normalised with the reference returns (None: unknown)
    success: float | None         # the success rate where the env reports one


@dataclasses.dataclass
class Scores:
    """A checkpoint's scores on one or more backends, with the reference returns they are normalised by."""

    checkpoint: str
    task: str
    mode: str
    reference: tuple[float, float] | None
    reference_source: str
    rows: list[Score]

    def table(self) -> str:
        """The scores side by side, as `robolearn eval` prints them."""
        lines = [f"{self.checkpoint}: task {self.task}, {self.mode} policy, {len(self.rows[0].returns)} episodes "
                 "per backend"]
        if self.reference is not None:
            lo, hi = self.reference
            lines.append(f"normalised score: 100 * (return - {lo:g}) / ({hi:g} - {lo:g}), the reference returns of "
                         f"the {self.reference_source}")
        lines.append(f"{'backend':<10} {'env':<26} {'return (mean +- std)':>22} {'normalised':>11} {'success':>8}  "
                     "seeds")
        for row in self.rows:
            norm = f"{row.normalized:.2f}" if row.normalized is not None else "-"
            success = f"{row.success:.2f}" if row.success is not None else "-"
            ret = f"{row.returns.mean():.2f} +- {row.returns.std():.2f}"
            lines.append(f"{row.backend:<10} {row.env:<26} {ret:>22} {norm:>11} {success:>8}  {row.seeds}")
        return "\n".join(lines)


def score_checkpoint(path: str | Path, episodes: int = 10, seed: int = 1000, mode: Mode = "deterministic",
                     device: str = "auto", backend: str = "sim") -> Scores:
    """The checkpoint's policy over `episodes` full episodes in our batched sim (one per env of an env made with
    `seed`) and, with `backend="gymnasium"`, in its Gymnasium env too (episode i from ``reset(seed=seed + i)``):
    mean returns, normalised by the run's dataset's reference returns (its `dataset_source`), else its task's."""
    from robolearn.eval.scores import normalized_score, reference_source

    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend!r}: use one of {', '.join(BACKENDS)}")
    policy = load_policy(path, mode=mode, seed=seed)
    run = policy.run
    task = (run.get("env") or {}).get("name")
    if not task:
        raise ConfigError(f"checkpoint {path} records no task (its run config has no env.name): it cannot be scored")
    source = run.get("dataset_source") or {}
    if source.get("reference"):
        reference, origin = (float(source["reference"][0]), float(source["reference"][1])), source["reference_source"]
    else:
        reference, origin = reference_source({}, task)
    norm = lambda r: None if reference is None else float(normalized_score(float(np.mean(r)), *reference))  # noqa: E731

    rows = []
    policy.reset()
    sim = _sim_episodes(policy, episodes, seed, device)
    returns = sim.returns.cpu().double().numpy()
    rows.append(Score("sim", task, returns, f"env i of a {task} env made with seed {seed}", norm(returns),
                      sim.success))
    if backend == "gymnasium":
        from robolearn.data.standard import gymnasium_spec
        from robolearn.eval.gymnasium_check import gymnasium_returns

        spec = source.get("gymnasium") or gymnasium_spec(task, (run.get("env") or {}).get("overrides") or {})
        policy.reset()
        policy.to("cpu")
        returns, success = gymnasium_returns(spec, policy, episodes, seed)
        rows.append(Score("gymnasium", _describe(spec), returns, f"reset(seed={seed} + i)", norm(returns), success))
    return Scores(str(path), task, mode, reference, origin, rows)


def _describe(spec: dict[str, Any]) -> str:
    """A Gymnasium spec in a few words: its id, and how many keyword arguments it sets."""
    kwargs = spec.get("kwargs") or {}
    return spec["id"] + (f" (+{len(kwargs)} kwargs)" if kwargs else "")


def render_checkpoint(path: str | Path, out: str | Path, seed: int = 0, num_steps: int | None = None) -> Path:
    """A video of one episode of the checkpoint's deterministic policy (rendered on the CPU backend)."""
    import sim

    policy = load_policy(path)
    env_cfg = policy.run["env"]
    return sim.render(env_cfg["name"], policy=policy, path=out, seed=seed, num_steps=num_steps,
                      **(env_cfg.get("overrides") or {}))
