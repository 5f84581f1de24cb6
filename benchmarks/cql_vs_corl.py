"""robolearn's CQL against CORL's own `algorithms/offline/cql.py`, step by step on one dataset (issue 15).

Question: is a CQL whose Q sinks far below zero on our cheetah-run data a fault of ours, or CQL with CORL's
hyperparameters on rewards of this scale? Both train on the same transitions, for the same steps, from the same
seed: CORL's `ContinuousCQL` (critics, actor and update imported from a CORL checkout given with ``--corl``: the
file's own code runs, its d4rl / gym / pyrallis / wandb imports stubbed since only the classes are used) with its
halfcheetah config (cql_alpha 10, 10 actions per kind, importance sampling, policy lr 3e-5, qf lr 3e-4,
orthogonal init) and `robolearn.algos.cql.CQL` with `configs/algo/cql.yaml` (the same values). Both normalise
states by the dataset's mean and std (+ 1e-3), scale rewards by ``--reward-scale`` and use ``--hidden``-wide layers
(3 hidden layers, CORL's depth; CORL's width 256 is patched to it). Every ``--log-every`` steps each side's mean
Q(s, a_data), CQL gap (logsumexp minus Q(s, a_data)), log pi and temperature are recorded; ``--eval-every``
steps each policy is scored deterministically on 10 episodes in our simulator (normalised by the dataset's
reference returns). The two run one after the other in this process, one thread each.

    git clone https://github.com/tinkoff-ai/CORL /tmp/CORL   # (any checkout of its algorithms/offline/cql.py)
    .venv/bin/python benchmarks/cql_vs_corl.py --corl /tmp/CORL/algorithms/offline/cql.py \\
        --dataset data/d4rl-like/cheetah-run-medium-replay-v0 --steps 5000

Results: ``results/cql_vs_corl_cpu.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.sim_throughput import machine_info  # noqa: E402


def load_corl(path: str, hidden: int) -> types.ModuleType:
    """CORL's cql.py as a module: its unused top-level imports stubbed, its 256-wide layers made `hidden` wide."""
    for name in ("d4rl", "gym", "pyrallis", "wandb"):
        stub = types.ModuleType(name)
        stub.Env = object  # gym.Env in annotations
        stub.wrap = lambda *a, **k: (lambda f: f)  # pyrallis.wrap()
        sys.modules.setdefault(name, stub)
    spec = importlib.util.spec_from_file_location("corl_cql", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    class Narrow(torch.nn.Linear):
        """CORL's Linear layers with `hidden` in place of 256 (it hard-codes its width)."""

        def __init__(self, i: int, o: int, *args, **kwargs) -> None:
            super().__init__(hidden if i == 256 else i, hidden if o == 256 else o, *args, **kwargs)

    module.nn = types.SimpleNamespace(**{k: getattr(torch.nn, k) for k in dir(torch.nn) if not k.startswith("_")})
    module.nn.Linear = Narrow
    return module


def corl_side(corl: types.ModuleType, batches: tuple[torch.Tensor, ...], norm: tuple[torch.Tensor, torch.Tensor],
              gen: torch.Generator):
    """CORL's ContinuousCQL with its halfcheetah config on normalised `batches` (obs, actions, rewards, next obs,
    dones): a one-step function and the policy (`act`, as `evaluate_policy` calls it)."""
    obs, acts = batches[0], batches[1]
    sd, ad = obs.shape[1], acts.shape[1]
    c1, c2 = corl.FullyConnectedQFunction(sd, ad, True, 3), corl.FullyConnectedQFunction(sd, ad, True)
    actor = corl.TanhGaussianPolicy(sd, ad, 1.0, log_std_multiplier=1.0, orthogonal_init=True)
    algo = corl.ContinuousCQL(
        c1, torch.optim.Adam(c1.parameters(), 3e-4), c2, torch.optim.Adam(c2.parameters(), 3e-4), actor,
        torch.optim.Adam(actor.parameters(), 3e-5), target_entropy=-ad, discount=0.99, policy_lr=3e-5,
        qf_lr=3e-4, bc_steps=0, cql_alpha=10.0, cql_n_actions=10, cql_importance_sample=True)

    def step() -> dict[str, float]:
        i = torch.randint(len(acts), (256,), generator=gen)
        log = algo.train([b[i] for b in batches])
        return {"q_data": log["average_qf1"], "gap": log["cql_qf1_diff"], "log_pi": log["log_pi"],
                "alpha": log["alpha"]}

    def act(obs: dict[str, torch.Tensor], deterministic: bool = True) -> torch.Tensor:
        return actor((obs["policy"] - norm[0]) / norm[1], deterministic=True)[0]

    return step, types.SimpleNamespace(act=act)  # what `evaluate_policy` calls


def robolearn_side(data, hidden: int, scale: float, gen: torch.Generator):
    """robolearn's CQL (configs/algo/cql.yaml's values) with `hidden`-wide layers: a one-step function and
    the algorithm (its own `act`)."""
    from robolearn.algos.cql import CQL, CQLConfig
    from robolearn.data.dataset import to_replay_buffer

    buffer = to_replay_buffer(data, ["policy"])
    widths = (hidden,) * 3
    algo = CQL(buffer.obs["policy"].shape[-1], buffer.actions.shape[-1],
               CQLConfig(actor_hidden=widths, critic_hidden=widths, reward_scale=scale))
    algo.fit_state_normalizer(buffer.obs["policy"][:buffer.filled])  # as `robolearn train` does

    def step() -> dict[str, float]:
        s = algo.update(buffer.sample(256, gen), gen)
        return {"q_data": float(s["q_mean"]), "gap": float(s["cql_gap"]), "log_pi": -float(s["entropy"]),
                "alpha": float(s["alpha"])}

    return step, algo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", required=True, help="path to CORL's algorithms/offline/cql.py")
    parser.add_argument("--dataset", default="data/d4rl-like/cheetah-run-medium-replay-v0")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--reward-scale", type=float, nargs="+", default=[1.0])
    parser.add_argument("--log-every", type=int, default=500)
    parser.add_argument("--eval-every", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/cql_vs_corl_cpu.json")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from robolearn.config import EnvConfig, make_env
    from robolearn.data.dataset import Dataset
    from robolearn.runners.base import evaluate_policy

    data = Dataset.load(args.dataset)
    flat = data.transitions("policy").arrays()
    obs, nxt = flat["obs"].astype(np.float32), flat["next_obs"].astype(np.float32)
    actions = np.clip(flat["actions"], -1.0, 1.0).astype(np.float32)
    mean, std = obs.mean(0), obs.std(0) + 1e-3
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    norm_obs, norm_next = as_t((obs - mean) / std), as_t((nxt - mean) / std)
    acts, dones = as_t(actions), as_t(flat["terminated"].astype(np.float32))[:, None]
    state_mean, state_std = as_t(mean), as_t(std)
    env = make_env(dataclasses.asdict(EnvConfig(data.metadata["task"], num_envs=10, backend="mujoco")), seed=0)
    reference = (data.metadata["ref_min_score"], data.metadata["ref_max_score"])
    corl = load_corl(args.corl, args.hidden)
    runs = []
    for scale in args.reward_scale:
        rewards = as_t(flat["rewards"].astype(np.float32) * scale)[:, None]
        batches = (norm_obs, acts, rewards, norm_next, dones)
        for side in ("corl", "robolearn"):
            torch.manual_seed(args.seed)
            gen = torch.Generator().manual_seed(args.seed)
            if side == "corl":
                step, policy = corl_side(corl, batches, (state_mean, state_std), gen)
            else:
                step, policy = robolearn_side(data, args.hidden, scale, gen)
            rows, start = [], time.perf_counter()
            acc: dict[str, list[float]] = {}
            for it in range(1, args.steps + 1):
                for k, v in step().items():
                    acc.setdefault(k, []).append(v)
                if it % args.log_every == 0:
                    row = {"step": it, **{k: round(float(np.mean(v)), 3) for k, v in acc.items()}}
                    acc = {}
                    if it % args.eval_every == 0:
                        row["score"] = round(evaluate_policy(env, policy, 1000, reference)["eval/normalized_score"], 2)
                    rows.append(row)
                    print(side, scale, json.dumps(row), flush=True)
            runs.append({"side": side, "reward_scale": scale, "seconds": round(time.perf_counter() - start, 1),
                         "rows": rows})
    result = {"machine": machine_info(), "dataset": args.dataset, "steps": args.steps, "hidden": args.hidden,
              "seed": args.seed, "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
