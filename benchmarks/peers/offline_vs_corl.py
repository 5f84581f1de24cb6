"""robolearn's offline learners against CORL's own single-file code, step by step on one dataset (issue 15).

Question: when one of our learners scores differently from CORL's table on our data, is it our code or the
algorithm on this data? Both train on the same transitions, for the same steps, from the same seed, one after
the other in this process, one thread each. CORL's side is the file's own code (``corl=``: a checkout's
`algorithms/offline/cql.py`, `iql.py` or `td3_bc.py`; its d4rl / gym / pyrallis / wandb imports stubbed since
only the classes are used), ours is `robolearn.algos.offline.<algo>` with the settings ``cql`` / ``iql`` /
``td3_bc`` (`CQLConfig` / `IQLConfig` / `TD3BCConfig`, their defaults: CORL's values), widths and reward scale set
from ``hidden`` and ``reward_scale`` as on CORL's side:

- ``algo=cql``: CORL's `ContinuousCQL` with its halfcheetah config (cql_alpha 10, 10 actions per kind,
  importance sampling, policy lr 3e-5, qf lr 3e-4, orthogonal init, 3 hidden layers; its hard-coded width 256
  patched to ``hidden``) against `robolearn.algos.offline.cql.CQL`. Logged: mean Q(s, a_data), CQL gap
  (logsumexp minus
  Q(s, a_data)), log pi and temperature.
- ``algo=td3_bc``: CORL's `TD3_BC` (alpha 2.5, policy noise 0.2 clipped at 0.5, actor every 2nd step, its
  hard-coded width 256 patched to ``hidden``) against `robolearn.algos.offline.td3_bc.TD3BC`. Logged: critic and
  actor losses.
- ``algo=rebrac``: CORL's JAX `rebrac.py` (its `DetActor`, `EnsembleCritic` of 2, and `update_td3` /
  `update_td3_no_targets` alternated as its training loop does, batch 1024, lr 1e-3, LayerNorm critics, 3 hidden
  layers of ``hidden``) against `robolearn.algos.offline.rebrac.ReBRAC`, both with the BC coefficients of
  ``rebrac.beta_actor`` / ``rebrac.beta_critic`` (CORL's per-dataset values: halfcheetah-medium 0.001 / 0.01).
  Neither side normalises states (CORL's locomotion configs: `normalize_states: false`). Logged: critic and actor
  losses. Its side needs flax, optax and chex, which robolearn does not install: ``pip install --no-deps --target
  /tmp/corl-jax flax==0.12.8 optax==0.2.8 chex==0.1.92 treescope toolz`` and ``PYTHONPATH=/tmp/corl-jax``.
- ``algo=iql``: CORL's `ImplicitQLearning` with its halfcheetah config (expectile 0.7, beta 3, Gaussian policy
  with a tanh'd mean and one learned log-std, cosine actor lr over 1M steps, 2 hidden layers of ``hidden``)
  against `robolearn.algos.offline.iql.IQL`. Logged: value, critic and actor losses; at each evaluation, on a fixed set
  of 2,000 samples from each half of a medium-expert dataset (the first half of its transitions is the medium
  policy's), the mean advantage per half and the expert half's share of the AWR weight.

Both normalise states by the dataset's mean and std (+ 1e-3; ReBRAC: neither, above) and scale rewards by
``reward_scale`` (one run per value); every ``eval_every`` steps each policy is scored deterministically on 10
episodes in our simulator (normalised by the dataset's reference returns).

    git clone https://github.com/tinkoff-ai/CORL /tmp/CORL   # (any checkout of its algorithms/offline/)
    .venv/bin/python benchmarks/peers/offline_vs_corl.py algo=cql corl=/tmp/CORL/algorithms/offline/cql.py \\
        dataset=data/d4rl-like/cheetah-run-medium-replay-v0 steps=5000
    .venv/bin/python benchmarks/peers/offline_vs_corl.py algo=iql corl=/tmp/CORL/algorithms/offline/iql.py \\
        dataset=data/d4rl-like/cheetah-run-medium-expert-v0 steps=50000 eval_every=10000 reward_scale=[20]
    .venv/bin/python benchmarks/peers/offline_vs_corl.py algo=td3_bc corl=/tmp/CORL/algorithms/offline/td3_bc.py \\
        dataset=data/mujoco-v5/halfcheetah-v5-medium-v0 hidden=256 steps=20000 eval_every=10000
    PYTHONPATH=/tmp/corl-jax .venv/bin/python benchmarks/peers/offline_vs_corl.py algo=rebrac \\
        corl=/tmp/CORL/algorithms/offline/rebrac.py dataset=data/mujoco-v5/halfcheetah-v5-medium-v0 hidden=256 \\
        rebrac.beta_actor=0.001 rebrac.beta_critic=0.01 steps=20000 eval_every=5000

Results: ``results/<algo>_vs_corl_cpu.json`` (``out=`` names another).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from omegaconf import MISSING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, machine_info, settings  # noqa: E402
from robolearn.algos.offline.cql import CQLConfig  # noqa: E402
from robolearn.algos.offline.iql import IQLConfig  # noqa: E402
from robolearn.algos.offline.rebrac import ReBRAC, ReBRACConfig  # noqa: E402
from robolearn.algos.offline.td3_bc import TD3BCConfig  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The algorithm, both sides and the schedule (`key=value` on the command line)."""

    algo: str = "cql"               # cql | iql | td3_bc | rebrac
    corl: str = MISSING             # path to CORL's algorithms/offline/<algo>.py (required)
    dataset: str = "data/d4rl-like/cheetah-run-medium-replay-v0"
    steps: int = 5000
    hidden: int = 64                # layer width of both sides (CQL: 3 layers, IQL: 2)
    reward_scale: list[float] = dataclasses.field(default_factory=lambda: [1.0])  # one run per value, both sides
    log_every: int = 500
    eval_every: int = 5000
    seed: list[int] = dataclasses.field(default_factory=lambda: [0])
    sides: list[str] = dataclasses.field(default_factory=lambda: ["corl", "robolearn"])
    cql: CQLConfig = dataclasses.field(default_factory=CQLConfig)  # robolearn's side (algo=cql)
    iql: IQLConfig = dataclasses.field(default_factory=IQLConfig)  # robolearn's side (algo=iql)
    td3_bc: TD3BCConfig = dataclasses.field(default_factory=TD3BCConfig)  # robolearn's side (algo=td3_bc)
    rebrac: ReBRACConfig = dataclasses.field(default_factory=ReBRACConfig)  # both sides' settings (algo=rebrac)
    out: str | None = None          # null: benchmarks/results/<algo>_vs_corl_cpu.json


def load_corl(path: str, hidden: int) -> types.ModuleType:
    """A CORL file as a module: its unused top-level imports stubbed, its hard-coded 256-wide layers `hidden` wide."""
    for name in ("d4rl", "gym", "pyrallis", "wandb", "tqdm", "tqdm.auto"):  # (rebrac.py: flax, optax, chex real)
        stub = types.ModuleType(name)
        stub.Env = object  # gym.Env in annotations
        stub.wrap = lambda *a, **k: (lambda f: f)  # pyrallis.wrap()
        stub.trange = range  # tqdm.auto.trange
        sys.modules.setdefault(name, stub)
    spec = importlib.util.spec_from_file_location(f"corl_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Narrow(torch.nn.Linear):
        """CORL's Linear layers with `hidden` in place of 256 (cql.py hard-codes its width)."""

        def __init__(self, i: int, o: int, *args, **kwargs) -> None:
            super().__init__(hidden if i == 256 else i, hidden if o == 256 else o, *args, **kwargs)

    if getattr(module, "nn", None) is torch.nn:  # the torch files (rebrac.py's nn is flax's; it takes hidden_dim)
        module.nn = types.SimpleNamespace(**{k: getattr(torch.nn, k) for k in dir(torch.nn) if not k.startswith("_")})
        module.nn.Linear = Narrow
    return module


def corl_cql(corl: types.ModuleType, sd: int, ad: int, hidden: int):
    """CORL's ContinuousCQL with its halfcheetah config: (train(batch) -> its log, actor, row of our names)."""
    c1, c2 = corl.FullyConnectedQFunction(sd, ad, True, 3), corl.FullyConnectedQFunction(sd, ad, True)
    actor = corl.TanhGaussianPolicy(sd, ad, 1.0, log_std_multiplier=1.0, orthogonal_init=True)
    algo = corl.ContinuousCQL(
        c1, torch.optim.Adam(c1.parameters(), 3e-4), c2, torch.optim.Adam(c2.parameters(), 3e-4), actor,
        torch.optim.Adam(actor.parameters(), 3e-5), target_entropy=-ad, discount=0.99, policy_lr=3e-5,
        qf_lr=3e-4, bc_steps=0, cql_alpha=10.0, cql_n_actions=10, cql_importance_sample=True)

    def row(log: dict) -> dict[str, float]:
        return {"q_data": log["average_qf1"], "gap": log["cql_qf1_diff"], "log_pi": log["log_pi"],
                "alpha": log["alpha"]}

    def act(obs: torch.Tensor) -> torch.Tensor:
        return actor(obs, deterministic=True)[0]

    return algo, act, row, None


def corl_iql(corl: types.ModuleType, sd: int, ad: int, hidden: int):
    """CORL's ImplicitQLearning with its halfcheetah config: (algo, deterministic act, row, advantage fn)."""
    q, v = corl.TwinQ(sd, ad, hidden, 2), corl.ValueFunction(sd, hidden, 2)
    actor = corl.GaussianPolicy(sd, ad, 1.0, hidden, 2)
    algo = corl.ImplicitQLearning(
        1.0, actor, torch.optim.Adam(actor.parameters(), 3e-4), q, torch.optim.Adam(q.parameters(), 3e-4),
        v, torch.optim.Adam(v.parameters(), 3e-4), iql_tau=0.7, beta=3.0, max_steps=1_000_000, discount=0.99,
        tau=0.005)

    def row(log: dict) -> dict[str, float]:
        return {"value_loss": log["value_loss"], "critic_loss": log["q_loss"], "actor_loss": log["actor_loss"]}

    def act(obs: torch.Tensor) -> torch.Tensor:
        return actor(obs).mean.clamp(-1.0, 1.0)

    def advantage(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return algo.q_target(obs, actions) - v(obs)

    return algo, act, row, advantage


def corl_td3_bc(corl: types.ModuleType, sd: int, ad: int, hidden: int):
    """CORL's TD3_BC with its defaults (the same on every locomotion dataset): (algo, act, row, no advantage)."""
    actor, c1, c2 = corl.Actor(sd, ad, 1.0), corl.Critic(sd, ad), corl.Critic(sd, ad)
    adam = lambda net: torch.optim.Adam(net.parameters(), 3e-4)  # noqa: E731
    algo = corl.TD3_BC(1.0, actor, adam(actor), c1, adam(c1), c2, adam(c2), discount=0.99, tau=0.005,
                       policy_noise=0.2, noise_clip=0.5, policy_freq=2, alpha=2.5)

    def row(log: dict) -> dict[str, float]:  # the actor steps every 2nd update only
        return {k: log[k] for k in ("critic_loss", "actor_loss") if k in log}

    def act(obs: torch.Tensor) -> torch.Tensor:
        return actor(obs)

    return algo, act, row, None


def corl_rebrac(corl: types.ModuleType, sd: int, ad: int, hidden: int, cfg: ReBRACConfig, seed: int):
    """CORL's JAX ReBRAC as its `main` builds it (same init key for networks and targets), with `cfg`'s
    coefficients: (step(batch of its dict of arrays) -> row, act(obs array) -> actions). Odd steps are its full
    update (critic, actor, both targets), even ones its critic-only update, as its `delayed_updates` alternate."""
    from functools import partial

    import jax
    import jax.numpy as jnp
    import optax

    key, actor_key, critic_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    s0, a0 = jnp.zeros((1, sd)), jnp.zeros((1, ad))
    actor_net = corl.DetActor(action_dim=ad, hidden_dim=hidden, layernorm=cfg.actor_layer_norm, n_hiddens=3)
    critic_net = corl.EnsembleCritic(hidden_dim=hidden, num_critics=cfg.num_critics,
                                     layernorm=cfg.critic_layer_norm, n_hiddens=3)
    state = {"key": key,
             "actor": corl.ActorTrainState.create(apply_fn=actor_net.apply, params=actor_net.init(actor_key, s0),
                                                  target_params=actor_net.init(actor_key, s0),
                                                  tx=optax.adam(cfg.actor_lr)),
             "critic": corl.CriticTrainState.create(apply_fn=critic_net.apply,
                                                    params=critic_net.init(critic_key, s0, a0),
                                                    target_params=critic_net.init(critic_key, s0, a0),
                                                    tx=optax.adam(cfg.critic_lr)),
             "count": 0}
    common = dict(gamma=cfg.gamma, actor_bc_coef=cfg.beta_actor, critic_bc_coef=cfg.beta_critic, tau=cfg.tau,
                  policy_noise=cfg.policy_noise, noise_clip=cfg.noise_clip)
    full = jax.jit(partial(corl.update_td3, **common, normalize_q=cfg.normalize_q))
    critic_only = jax.jit(partial(corl.update_td3_no_targets, **common))
    logged = ["critic_loss", "q_min", "actor_loss", "bc_mse_policy", "bc_mse_random", "action_mse"]

    def step(batch: dict[str, jax.Array]) -> dict[str, float]:
        update = full if state["count"] % cfg.actor_every == 0 else critic_only
        state["key"], state["actor"], state["critic"], metrics = update(
            key=state["key"], actor=state["actor"], critic=state["critic"], batch=batch,
            metrics=corl.Metrics.create(logged))
        state["count"] += 1
        values = metrics.compute()
        return {k: float(values[k][0]) for k in ("critic_loss", "actor_loss") if np.isfinite(values[k][0])}

    act_fn = jax.jit(lambda params, obs: state["actor"].apply_fn(params, obs))

    def act(obs: np.ndarray) -> np.ndarray:
        return np.asarray(act_fn(state["actor"].params, jnp.asarray(obs)))

    return step, act


def corl_rebrac_side(corl: types.ModuleType, arrays: dict[str, np.ndarray], hidden: int, cfg: ReBRACConfig,
                     seed: int, gen: torch.Generator):
    """CORL's JAX ReBRAC on `arrays` (its batch keys: states, actions, rewards, next_states, next_actions, dones;
    raw states): the batch rows drawn by `gen` as on our side, a one-step function and the policy."""
    import jax.numpy as jnp

    step_on, act = corl_rebrac(corl, arrays["states"].shape[1], arrays["actions"].shape[1], hidden, cfg, seed)
    n = len(arrays["actions"])

    def step() -> dict[str, float]:
        i = torch.randint(n, (cfg.batch_size,), generator=gen).numpy()
        return step_on({k: jnp.asarray(v[i]) for k, v in arrays.items()})

    def policy_act(obs: dict[str, torch.Tensor], deterministic: bool = True) -> torch.Tensor:
        return torch.from_numpy(act(obs["policy"].numpy()))

    return step, types.SimpleNamespace(act=policy_act), None


def corl_side(algo_name: str, corl: types.ModuleType, batches: tuple[torch.Tensor, ...],
              norm: tuple[torch.Tensor, torch.Tensor], hidden: int, gen: torch.Generator):
    """CORL's learner on normalised `batches` (obs, actions, rewards, next obs, dones): a one-step function, the
    policy (`act`, as `evaluate_policy` calls it) and an advantage function on raw observations (IQL)."""
    sd, ad = batches[0].shape[1], batches[1].shape[1]
    algo, act, row, advantage = {"cql": corl_cql, "iql": corl_iql, "td3_bc": corl_td3_bc}[algo_name](corl, sd, ad,
                                                                                                   hidden)
    n = len(batches[1])

    def step() -> dict[str, float]:
        i = torch.randint(n, (256,), generator=gen)  # one draw: every tensor of the batch at the same rows
        return row(algo.train([b[i] for b in batches]))

    def policy_act(obs: dict[str, torch.Tensor], deterministic: bool = True) -> torch.Tensor:
        return act((obs["policy"] - norm[0]) / norm[1])

    raw_adv = None if advantage is None else (lambda o, a: advantage((o - norm[0]) / norm[1], a))
    return step, types.SimpleNamespace(act=policy_act), raw_adv


def robolearn_side(args: Settings, data, scale: float, gen: torch.Generator):
    """robolearn's learner (`args.cql` / `args.iql` / `args.td3_bc`, by default their config's defaults: CORL's
    values) with `args.hidden`-wide layers (CQL: 3 layers, IQL and TD3+BC: 2) and rewards times `scale`: a one-step
    function, the algorithm (its own `act`) and an advantage function (IQL)."""
    from robolearn.algos.offline.cql import CQL
    from robolearn.algos.offline.iql import IQL
    from robolearn.algos.offline.td3_bc import TD3BC
    from robolearn.data.dataset import to_replay_buffer

    extras = {"next_actions": ReBRAC.dataset_next_actions(data.actions, data.step_starts)} \
        if args.algo == "rebrac" else None  # its critic penalty's next dataset action, as `robolearn train` gives it
    buffer = to_replay_buffer(data, ["policy"], extras=extras)
    sd, ad = buffer.obs["policy"].shape[-1], buffer.actions.shape[-1]
    batch_size = 256
    if args.algo == "rebrac":
        widths = (args.hidden,) * 3
        algo = ReBRAC(sd, ad, dataclasses.replace(args.rebrac, actor_hidden=widths, critic_hidden=widths,
                                                  reward_scale=scale))
        names = {k: k for k in ("critic_loss", "actor_loss")}
        advantage, batch_size = None, args.rebrac.batch_size
    elif args.algo == "cql":
        widths = (args.hidden,) * 3
        algo = CQL(sd, ad, dataclasses.replace(args.cql, actor_hidden=widths, critic_hidden=widths,
                                               reward_scale=scale))
        names = {"q_data": "q_mean", "gap": "cql_gap", "log_pi": "entropy", "alpha": "alpha"}
        advantage = None
    elif args.algo == "td3_bc":
        widths = (args.hidden,) * 2
        algo = TD3BC(sd, ad, dataclasses.replace(args.td3_bc, actor_hidden=widths, critic_hidden=widths,
                                                 reward_scale=scale))
        names = {k: k for k in ("critic_loss", "actor_loss")}
        advantage = None
    else:
        widths = (args.hidden,) * 2
        algo = IQL(sd, ad, dataclasses.replace(args.iql, actor_hidden=widths, critic_hidden=widths,
                                               value_hidden=widths, reward_scale=scale))
        names = {k: k for k in ("value_loss", "critic_loss", "actor_loss")}

        def advantage(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
            return algo.critic_target(obs, actions).min(0).values - algo.v(obs)
    algo.fit_state_normalizer(buffer.obs["policy"][:buffer.filled])  # as `robolearn train` does

    def step() -> dict[str, float]:
        s = algo.update(buffer.sample(batch_size, gen), gen)
        out = {k: float(s[v]) for k, v in names.items() if v in s}
        if "log_pi" in out:
            out["log_pi"] = -out["log_pi"]  # our CQL logs the entropy estimate
        return out

    return step, algo, advantage


@torch.no_grad()
def weight_split(advantage, obs: torch.Tensor, actions: torch.Tensor, beta: float = 3.0) -> dict[str, float]:
    """On samples whose first half is the medium policy's and second the expert's: each half's mean advantage and
    the expert half's share of IQL's AWR weight min(exp(beta * A), 100)."""
    adv = advantage(obs, actions)
    w = torch.exp(beta * adv).clamp(max=100.0)
    h = len(adv) // 2
    return {"adv_medium": round(float(adv[:h].mean()), 2), "adv_expert": round(float(adv[h:].mean()), 2),
            "expert_weight_share": round(float(w[h:].sum() / w.sum()), 3)}


def main() -> None:
    args = settings(Settings, __doc__)
    if args.algo not in ("cql", "iql", "td3_bc", "rebrac") or set(args.sides) - {"corl", "robolearn"}:
        sys.exit(f"algo= takes cql, iql, td3_bc or rebrac (got {args.algo!r}), sides= corl and/or robolearn (got "
                 f"{args.sides})")
    out = Path(args.out or RESULTS / f"{args.algo}_vs_corl_cpu.json")
    torch.set_num_threads(1)

    from robolearn.config import EnvConfig, make_env
    from robolearn.data.dataset import Dataset
    from robolearn.runners.base import evaluate_policy

    data = Dataset.load(args.dataset)
    flat = data.transitions("policy").arrays()
    obs, nxt = flat["obs"].astype(np.float32), flat["next_obs"].astype(np.float32)
    actions = np.clip(flat["actions"], -1.0, 1.0).astype(np.float32)
    mean, std = obs.mean(0), obs.std(0) + 1e-3
    if args.algo == "rebrac":  # CORL's ReBRAC on locomotion: normalize_states false (ours by default too)
        mean, std = np.zeros_like(mean), np.ones_like(std)
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    norm_obs, norm_next = as_t((obs - mean) / std), as_t((nxt - mean) / std)
    acts, dones = as_t(actions), as_t(flat["terminated"].astype(np.float32))[:, None]
    state_mean, state_std = as_t(mean), as_t(std)
    halves = None
    if "medium-expert" in args.dataset:  # fixed samples of each half for the weight split
        rng, h = np.random.default_rng(0), len(obs) // 2
        pick = np.concatenate([rng.choice(h, 2000, replace=False), h + rng.choice(len(obs) - h, 2000, replace=False)])
        halves = (as_t(obs[pick]), acts[pick])
    env = make_env(dataclasses.asdict(EnvConfig(data.metadata["task"], num_envs=10, backend="mujoco")), seed=0)
    reference = (data.metadata["ref_min_score"], data.metadata["ref_max_score"])
    corl = load_corl(args.corl, args.hidden)
    runs = []
    for seed in args.seed:
        for scale in args.reward_scale:
            rewards = as_t(flat["rewards"].astype(np.float32) * scale)[:, None]
            batches = (norm_obs, acts, rewards, norm_next, dones)
            for side in args.sides:
                torch.manual_seed(seed)
                gen = torch.Generator().manual_seed(seed)
                if side == "corl" and args.algo == "rebrac":
                    next_actions = ReBRAC.dataset_next_actions(data.actions, data.step_starts).numpy()
                    arrays = {"states": obs, "actions": actions, "rewards": rewards[:, 0].numpy(), "next_states": nxt,
                              "next_actions": np.clip(next_actions, -1.0, 1.0), "dones": dones[:, 0].numpy()}
                    step, policy, advantage = corl_rebrac_side(corl, arrays, args.hidden, args.rebrac, seed, gen)
                elif side == "corl":
                    step, policy, advantage = corl_side(args.algo, corl, batches, (state_mean, state_std),
                                                        args.hidden, gen)
                else:
                    step, policy, advantage = robolearn_side(args, data, scale, gen)
                rows, start = [], time.perf_counter()
                acc: dict[str, list[float]] = {}
                for it in range(1, args.steps + 1):
                    for k, v in step().items():
                        acc.setdefault(k, []).append(v)
                    if it % args.log_every == 0:
                        row = {"step": it, **{k: round(float(np.mean(v)), 3) for k, v in acc.items()}}
                        acc = {}
                        if it % args.eval_every == 0:
                            row["score"] = round(evaluate_policy(env, policy, 1000, reference)["eval/normalized_score"],
                                                 2)
                            if advantage is not None and halves is not None:
                                row.update(weight_split(advantage, *halves))
                        rows.append(row)
                        print(side, seed, scale, json.dumps(row), flush=True)
                runs.append({"side": side, "seed": seed, "reward_scale": scale,
                             "seconds": round(time.perf_counter() - start, 1), "rows": rows})
                result = {"machine": machine_info(), "algo": args.algo, "dataset": args.dataset, "steps": args.steps,
                          "hidden": args.hidden, "runs": runs}
                out.write_text(json.dumps(result, indent=1))  # after every run: a stopped job keeps what finished
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
