"""The one evaluation loop: every env of a batched env plays one whole episode of a policy, and the returns (and
the success rate, where the task reports one) come back.

    episodes = run_episodes(env, lambda obs: algo.act(obs, deterministic=True), seed=1000)
    episodes.returns.mean(), episodes.success

Training runs' periodic evaluation (`robolearn.runners.base.evaluate_policy`), `robolearn eval`
(`robolearn.eval.evaluate.evaluate`), the flow runner's (`robolearn.runners.flow.evaluate_flow`) and through those
the dataset suite's behaviour scores all call it, so they count episodes the same way:

- only each env's first episode counts: an env that finishes early keeps stepping (batched envs step together)
  but adds nothing more;
- `seed`: re-seed the envs first (`env.reset(seed=seed)`), so two calls start from the same states; None plays
  from the env's current observations (a freshly made env: its construction seed decides);
- `chunks=True`: `act` returns action chunks [N, H, A], stepped through with `robolearn.core.chunks.run_chunk`
  (the way chunk policies' RL sees the env); a chunk that outlives an episode credits it only up to its end;
- the success rate is the mean of the task's `episode/success` over the counted episodes (tasks with a success
  metric: the arm, the mazes); None where the task has none.

`act` owns its randomness (a sampled policy draws from its own generator), so the loop itself draws nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from robolearn.core.chunks import run_chunk

Act = Callable[[Any], torch.Tensor]


@dataclasses.dataclass
class Episodes:
    """What `run_episodes` measured: one episode per env."""

    returns: torch.Tensor   # [num_envs] undiscounted return of each env's first episode (on the rewards' device)
    success: float | None   # the fraction of those episodes that succeeded; None when the task reports no success


@torch.no_grad()
def run_episodes(env: Any, act: Act, seed: int | None = None, *, chunks: bool = False,
                 dtype: torch.dtype = torch.float64) -> Episodes:
    """Step `env` with `act(obs)` until every env has finished one episode; see the module docstring.

    `dtype`: what the returns are summed in (float64; the flow runner's evaluation has always summed its chunk
    rewards in float32). The sums stay on the device the rewards come on, so callers reduce them where they need."""
    obs = env.reset(seed=seed) if seed is not None else env.get_observations()
    n = env.num_envs
    returns: torch.Tensor | None = None
    running: torch.Tensor | None = None
    successes, finished = 0.0, 0
    while running is None or bool(running.any()):
        obs, rewards, dones, log = _step(env, act(obs), chunks)
        if running is None or returns is None:
            returns = torch.zeros(n, dtype=dtype, device=rewards.device)
            running = torch.ones(n, dtype=torch.bool, device=rewards.device)
        returns += rewards.to(dtype) * running
        ended = running & dones.bool()
        rate = float(log.get("episode/success", float("nan")))  # the mean over the episodes ending at this step
        if rate == rate and bool(ended.any()):
            count = int(ended.sum())
            successes, finished = successes + rate * count, finished + count
        running &= ~ended
    assert returns is not None
    return Episodes(returns, successes / finished if finished else None)


def _step(env: Any, actions: torch.Tensor, chunks: bool) -> tuple[Any, torch.Tensor, torch.Tensor, dict[str, Any]]:
    """One decision: an env step, or a whole chunk of them; (obs, rewards, dones, log)."""
    if chunks:
        step = run_chunk(env, actions)
        return step.obs, step.reward, step.done, step.log
    obs, rewards, dones, extras = env.step(actions)
    return obs, rewards, dones, extras.get("log", {})
