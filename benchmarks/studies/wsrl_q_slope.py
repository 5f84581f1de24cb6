"""Why WSRL's online actor collapses at the o2o-cpu budget: the pre-trained critic's slope in the action.

From a finished `robolearn finetune algo=wsrl` run (its offline checkpoint and its online phase's settings):

1. control: 200 actor updates against the frozen pre-trained critic (the actor should stay where offline training
   left it, its entropy near the target);
2. the pre-trained policy fills an empty buffer (`warmup` env steps, sampled actions, as WSRL's warm-up), then
   the online critic learns from it alone (WSRL's TD update: no conservative term, no offline data) while the
   actor is held; every few steps: |dQ/da| (the slope of min_i Q_i at the policy's actions), Q at the buffer's
   actions and at uniform random actions;
3. then actor updates against that critic, as the online phase interleaves them.

If (1) holds and (2) shows the slope falling while Q at unseen actions rises to the data's, the online critic
unlearns the conservative pessimism the actor was balanced against, and the entropy term takes over.

    python benchmarks/studies/wsrl_q_slope.py run=benchmarks/results/o2o_cpu/runs/wsrl__point-maze-umaze-diverse__seed0

The learner's settings are the run's own (its online phase's `SACConfig` from online/config.yaml).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch
from omegaconf import MISSING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the repo root, for `benchmarks`
from benchmarks.common import machine_info, settings  # noqa: E402


@dataclasses.dataclass
class Settings:
    """The run probed and the probe's lengths (`key=value` on the command line)."""

    run: str = MISSING              # a finished `robolearn finetune algo=wsrl` run folder (offline/ and online/)
    warmup: int = 1000              # env steps of the pre-trained policy (8 envs)
    critic_steps: int = 800
    actor_steps: int = 200
    seed: int = 0
    out: str | None = None          # JSON path (null: <run>/q_slope.json)


def main() -> None:
    from robolearn.algos.online.sac import SAC, SACConfig
    from robolearn.checkpoints.warm_start import warm_start
    from robolearn.config import make_env

    args = settings(Settings, __doc__)
    torch.manual_seed(args.seed)
    run = Path(args.run)
    online = json.loads((run / "online" / "config.yaml").read_text())
    fields = {f.name for f in dataclasses.fields(SACConfig)}
    saved = {k: tuple(v) if isinstance(v, list) else v for k, v in online["algo"].items() if k in fields}
    cfg = SACConfig(**{**saved, "compile": False})
    held = dataclasses.replace(cfg, actor_every=10**9)  # the same learner, its actor never stepped by update
    env = make_env({**online["env"], "num_envs": 8}, args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    def learner(c: SACConfig) -> SAC:
        sac = SAC.for_env(env, c)
        warm_start(sac, run / "offline")
        return sac

    # the warm-up buffer: the pre-trained policy's sampled actions
    sac = learner(held)
    obs, columns = env.reset(), {k: [] for k in ("obs", "actions", "rewards", "next", "discount")}
    for _ in range(max(1, args.warmup // env.num_envs)):
        actions = sac.act(obs, generator=gen)
        nxt, rewards, dones, extras = env.step(actions)
        after = nxt["policy"].clone()
        ended = dones.bool()
        after[ended] = extras["final_obs"]["policy"][ended]  # the true next state of an episode that just ended
        for key, value in (("obs", obs["policy"]), ("actions", actions), ("rewards", rewards), ("next", after),
                           ("discount", cfg.gamma * (~extras["terminated"]).float())):
            columns[key].append(value)
        obs = nxt
    data = {k: torch.cat(v) for k, v in columns.items()}

    def batch() -> dict:
        i = torch.randint(0, len(data["obs"]), (cfg.batch_size,), generator=gen)
        return {"obs": {"policy": data["obs"][i]}, "actions": data["actions"][i], "rewards": data["rewards"][i],
                "next_obs": {"policy": data["next"][i]}, "discount": data["discount"][i]}

    def probe(sac: SAC, phase: str, step: int) -> dict:
        b = batch()
        o = b["obs"]["policy"]
        actions, logp = sac.actor.sample(o, generator=gen)
        actions = actions.detach().requires_grad_(True)
        slope = torch.autograd.grad(sac.critic(o, actions).min(0).values.sum(), actions)[0].norm(dim=-1).mean()
        with torch.no_grad():
            uniform = torch.rand(o.shape[0], env.num_actions, generator=gen) * 2 - 1
            row = {"phase": phase, "step": step, "dq_da": float(slope),
                   "q_data_actions": float(sac.critic(o, b["actions"]).min(0).values.mean()),
                   "q_uniform_actions": float(sac.critic(o, uniform).min(0).values.mean()),
                   "entropy": float(-logp.detach().mean()), "alpha": float(sac.alpha)}
        print(json.dumps(row))
        return row

    rows = []
    control = learner(cfg)  # (1) actor updates on the frozen pre-trained critic
    for step in range(args.actor_steps + 1):
        if step % 50 == 0:
            rows.append(probe(control, "actor on frozen pre-trained critic", step))
        control.update_actor(batch(), gen)
    rows.append(probe(sac, "critic on warm-up data", 0))  # (2) the online critic alone
    for step in range(1, args.critic_steps + 1):
        sac.update(batch(), gen)
        if step in (25, 50, 100, 200, 400, 800) or step == args.critic_steps:
            rows.append(probe(sac, "critic on warm-up data", step))
    for step in range(1, args.actor_steps + 1):  # (3) then the actor
        sac.update_actor(batch(), gen)
        if step % 50 == 0:
            rows.append(probe(sac, "then actor", step))
    out = Path(args.out) if args.out else run / "q_slope.json"
    out.write_text(json.dumps({"machine": machine_info(), "run": str(run), "task": online["env"]["name"],
                               "warmup_transitions": len(data["obs"]),
                               "warmup_reward_mean": float(data["rewards"].mean()), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
