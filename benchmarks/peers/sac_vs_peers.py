"""SAC against stable-baselines3's SAC, side by side on one machine, at equal settings.

Both learners use the same networks, batch size, UTD, learning start, learning rate, tau, gamma and automatic
temperature with target entropy -|A|: robolearn's SAC takes `sac` (`SACConfig`, its defaults unless overridden: SB3's
SAC recipe), and SB3's is given the same values (its one learning rate is `sac.actor_lr`). With `sac.num_critics=N`
both run N critics with SB3's semantics: the TD target and the actor use the min over all N (SB3's `n_critics`, a
Python loop over N networks; ours, one batched ensemble), so `num_min_critics` and `actor_q` follow from it.

1. Gradient updates per second: each learner's replay buffer is filled with the same number of
   random transitions of the task, then each runs `updates` updates (sampling included), in
   alternating rounds; the median round counts.
2. Sample efficiency: each learns the task from scratch on one env for `env_steps`, for every
   seed in `seeds`; every `eval_every` env-steps its deterministic policy is evaluated on 8
   episodes (seed 1000); the env-steps at which the evaluation first reaches `threshold` are
   reported per seed, and their median (a run that never reaches it counts as `env_steps` + 1).

    python benchmarks/peers/sac_vs_peers.py skip_learning=true updates=500     # update speed only
    # update speed against SB3 and SBX (JAX), every width x ensemble size:
    python benchmarks/peers/sac_vs_peers.py skip_learning=true grid=true compile=true sbx=true
    # update speed over network widths x ensemble sizes, eager and compiled (one JSON with every cell):
    python benchmarks/peers/sac_vs_peers.py skip_learning=true grid=true compile=true task=cheetah-run
    # sample efficiency, small networks, DM Control's action repeat 4 on pendulum-swingup:
    python benchmarks/peers/sac_vs_peers.py skip_speed=true sac.actor_hidden=[64,64] sac.critic_hidden=[64,64] \\
        sac.batch_size=128 sac.learning_starts=1000 action_repeat=4 episode_length=250 env_steps=16000 \\
        eval_every=2000 threshold=100 seeds=[0,1,2]
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import RESULTS, episode_returns, settings, task_overrides, write_result  # noqa: E402
from robolearn.algos.online.sac import SAC, SACConfig  # noqa: E402
from robolearn.runners.off_policy import OffPolicyRunner  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The task, the learners and what is measured (`key=value` on the command line)."""

    task: str = "pendulum-swingup"
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)  # both learners' settings (see the docstring)
    fill: int = 5000                # random transitions in the buffers for the speed test
    updates: int = 300              # timed updates per round
    rounds: int = 3
    env_steps: int = 40_000         # sample efficiency: env steps per learner and seed
    eval_every: int = 5_000
    threshold: float = 600.0
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    compile: bool = False           # also time robolearn with compile=True (one graph per update)
    sbx: bool = False               # also time SBX's SAC (stable-baselines3 in JAX; `pip install -e .[bench]`)
    grid: bool = False              # update speed for hidden 64/128/256 x 2/10 critics instead of `sac`'s own
    action_repeat: int = 1
    episode_length: int = 0         # 0: the task's default
    skip_learning: bool = False
    only: str | None = None         # robolearn | sb3: learning curves of one learner only (to run both in parallel)
    skip_speed: bool = False
    out: str | None = None          # null: results/sac_vs_peers_<task>[_grid]_cpu.json


def utd(sac: SACConfig) -> int:
    """`sac.utd_ratio` as SB3's whole number of gradient steps per env step."""
    if sac.utd_ratio != int(sac.utd_ratio):
        sys.exit(f"sac.utd_ratio={sac.utd_ratio}: SB3 takes a whole number of gradient steps per env step")
    return int(sac.utd_ratio)


def sb3_sac(env: Any, sac: SACConfig, seed: int):
    from stable_baselines3 import SAC as SB3SAC

    return SB3SAC("MlpPolicy", env, learning_rate=sac.actor_lr, batch_size=sac.batch_size, tau=sac.tau,
                  gamma=sac.gamma, learning_starts=sac.learning_starts,
                  policy_kwargs={"net_arch": {"pi": list(sac.actor_hidden), "qf": list(sac.critic_hidden)},
                                 "n_critics": sac.num_critics},
                  train_freq=1, gradient_steps=utd(sac), buffer_size=1_000_000, seed=seed, device="cpu", verbose=0)


def sbx_sac(env: Any, sac: SACConfig, seed: int):
    """SBX's SAC (JAX, one jitted update per `train` call) with the settings SB3's gets."""
    from sbx import SAC as SBXSAC

    return SBXSAC("MlpPolicy", env, learning_rate=sac.actor_lr, batch_size=sac.batch_size, tau=sac.tau,
                  gamma=sac.gamma, learning_starts=sac.learning_starts,
                  policy_kwargs={"net_arch": {"pi": list(sac.actor_hidden), "qf": list(sac.critic_hidden)},
                                 "n_critics": sac.num_critics},
                  train_freq=1, gradient_steps=utd(sac), buffer_size=1_000_000, seed=seed, verbose=0)


def our_sac(env: Any, sac: SACConfig, compile: bool = False) -> SAC:
    """robolearn's SAC with SB3's ensemble semantics (the min over all critics, for the target and the actor)."""
    return SAC.for_env(env, dataclasses.replace(sac, num_min_critics=sac.num_critics, actor_q="min", compile=compile))


def update_speed(args: Settings) -> dict:
    """Updates/s of the learners on buffers of random transitions: robolearn eager, robolearn with
    `compile=True` (with `compile=true`) and SB3, timed in alternating rounds."""
    torch.manual_seed(0)
    ours_env = sim.make(args.task, num_envs=1, seed=0)
    sac = args.sac
    ours = OffPolicyRunner(ours_env, our_sac(ours_env, sac, compile=False), "/tmp/robolearn-bench-sac", {},
                           progress=False, steps_per_iteration=args.fill)
    ours.algo.cfg.learning_starts = 10**12  # fill only
    ours.learn(1, checkpoint_interval=10**9)
    learners = {"robolearn": ours.algo}
    if args.compile:
        learners["robolearn_compiled"] = our_sac(ours_env, sac, compile=True)
    sb3_env = sim.make_sb3(args.task, num_envs=1, seed=0)
    peers = {"sb3": sb3_sac(sb3_env, sac, 0)}
    if args.sbx:
        peers["sbx"] = sbx_sac(sb3_env, sac, 0)
    for peer in peers.values():
        peer.learning_starts = 10**12
        peer.learn(args.fill)
    gen = torch.Generator().manual_seed(0)

    def time_ours(algo: SAC) -> float:
        start = time.perf_counter()
        for _ in range(args.updates):
            algo.update(ours.buffer.sample(sac.batch_size, gen), gen)
        return args.updates / (time.perf_counter() - start)

    def time_peer(peer: Any) -> float:
        """One `train` call per update, as the peers' own training loops call it at train_freq 1 (SBX jits one
        update per call; SB3 runs it eagerly)."""
        start = time.perf_counter()
        for _ in range(args.updates):
            peer.train(gradient_steps=1, batch_size=sac.batch_size)
        return args.updates / (time.perf_counter() - start)

    for algo in learners.values():  # warm-up (and compilation)
        time_ours(algo)
    for peer in peers.values():
        time_peer(peer)
    rates: dict[str, list[float]] = {name: [] for name in [*learners, *peers]}
    for _ in range(args.rounds):
        for name, algo in learners.items():
            rates[name].append(time_ours(algo))
        for name, peer in peers.items():
            rates[name].append(time_peer(peer))
    ours_env.close()
    sb3_env.close()
    med = {name: statistics.median(r) for name, r in rates.items()}
    p = med["sb3"]
    print(f"hidden {list(sac.critic_hidden)}, {sac.num_critics} critics, batch {sac.batch_size}: updates/s "
          + ", ".join(f"{name} {v:.1f} ({v / p:.2f}x SB3)" for name, v in med.items()), flush=True)
    out = {"hidden": list(sac.critic_hidden), "actor_hidden": list(sac.actor_hidden), "num_critics": sac.num_critics,
           "batch_size": sac.batch_size,
           "sb3_updates_per_s": p, "sb3_rounds": rates["sb3"]}
    if "sbx" in peers:
        out.update({"sbx_updates_per_s": med["sbx"], "sbx_rounds": rates["sbx"]})
    for name in learners:
        out.update({f"{name}_updates_per_s": med[name], f"{name}_ratio": med[name] / p, f"{name}_rounds": rates[name]})
        if "sbx" in peers:
            out[f"{name}_vs_sbx"] = med[name] / med["sbx"]
    return out


def evaluate(act, task: str, **overrides: Any) -> float:
    """Mean return of the deterministic policy `act` over 8 episodes (seed 1000) of `task` with `overrides`."""
    return float(episode_returns(act, task, 8, 1000, **overrides).mean())


def learn_ours(args: Settings, seed: int, ov: dict[str, Any], curves: dict, wall: dict,
               rounds: int) -> None:
    start = time.perf_counter()
    torch.manual_seed(seed)
    env = sim.make(args.task, num_envs=1, seed=seed, **ov)
    runner = OffPolicyRunner(env, our_sac(env, args.sac), f"/tmp/robolearn-bench-sac-learn-{seed}", {}, seed=seed,
                             progress=False, steps_per_iteration=args.eval_every)
    curve = curves["robolearn"][seed] = []
    for i in range(rounds):
        runner.learn(i + 1, checkpoint_interval=10**9)
        ret = evaluate(lambda o, r=runner: r.algo.act({"policy": o}, deterministic=True), args.task, **ov)
        curve.append((runner.env_steps, ret))
        print(f"robolearn seed {seed} {runner.env_steps} {ret:.1f} ({time.perf_counter() - start:.0f} s)", flush=True)
    env.close()
    wall["robolearn"] += time.perf_counter() - start


def learn_sb3(args: Settings, seed: int, ov: dict[str, Any], curves: dict, wall: dict,
              rounds: int) -> None:
    start = time.perf_counter()
    sb3_env = sim.make_sb3(args.task, num_envs=1, seed=seed, **ov)
    peer = sb3_sac(sb3_env, args.sac, seed)
    curve = curves["sb3"][seed] = []
    for i in range(rounds):
        peer.learn(args.eval_every, reset_num_timesteps=i == 0)
        ret = evaluate(lambda o, p=peer: torch.as_tensor(p.predict(o.numpy(), deterministic=True)[0]), args.task,
                       **ov)
        curve.append(((i + 1) * args.eval_every, ret))
        print(f"sb3 seed {seed} {(i + 1) * args.eval_every} {ret:.1f} ({time.perf_counter() - start:.0f} s)",
              flush=True)
    sb3_env.close()
    wall["sb3"] += time.perf_counter() - start


def learning(args: Settings) -> dict:
    """Evaluation curves of both learners per seed and the env-steps each needs to reach the threshold."""
    ov = task_overrides(args.action_repeat, args.episode_length)
    curves: dict[str, dict[int, list[tuple[int, float]]]] = {"robolearn": {}, "sb3": {}}
    wall = {"robolearn": 0.0, "sb3": 0.0}
    rounds = args.env_steps // args.eval_every
    for seed in args.seeds:
        if args.only != "sb3":
            learn_ours(args, seed, ov, curves, wall, rounds)
        if args.only != "robolearn":
            learn_sb3(args, seed, ov, curves, wall, rounds)
    curves = {who: c for who, c in curves.items() if c}

    def first(curve):
        return next((s for s, r in curve if r >= args.threshold), args.env_steps + 1)

    out: dict[str, Any] = {"curves": curves, "threshold": args.threshold, "wall_s": wall}
    for who in curves:
        steps = [first(c) for c in curves[who].values()]
        out[f"{who}_steps_to_threshold"] = steps
        out[f"{who}_median_steps_to_threshold"] = statistics.median(steps)
        out[f"{who}_final_return_mean"] = statistics.mean(c[-1][1] for c in curves[who].values())
    print(f"median env-steps to {args.threshold}: "
          + ", ".join(f"{who} {out[f'{who}_median_steps_to_threshold']}" for who in curves))
    return out


def main() -> None:
    args = settings(Settings, __doc__)
    if args.only not in (None, "robolearn", "sb3"):
        sys.exit(f"only= takes robolearn or sb3, not {args.only!r}")
    utd(args.sac)
    fields: dict[str, Any] = {"task": args.task,
                              "settings": {k: v for k, v in dataclasses.asdict(args).items() if k != "out"},
                              "torch_threads": torch.get_num_threads()}
    if args.grid and not args.skip_speed:
        cells = []
        for width in (64, 128, 256):
            for critics in (2, 10):
                sac = dataclasses.replace(args.sac, actor_hidden=(width, width), critic_hidden=(width, width),
                                          num_critics=critics)
                cells.append(update_speed(dataclasses.replace(args, sac=sac)))
        fields["updates_grid"] = cells
    elif not args.skip_speed:
        fields["updates"] = update_speed(args)
    if not args.skip_learning:
        fields["learning"] = learning(args)
    out = args.out or RESULTS / f"sac_vs_peers_{args.task}{'_grid' if args.grid else ''}_cpu.json"
    write_result(out, "sac_vs_peers", fields)


if __name__ == "__main__":
    main()
