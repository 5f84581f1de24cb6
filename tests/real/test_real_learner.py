"""real.rl.learner: one replay lane per actor, offline data mixed in, resume, the `robolearn learner` command.

Most tests feed the learner through `FakeServer` (no network, no threads, so runs are reproducible); one goes
through a real `LearnerServer` and `ActorClient`. The kill-and-restart test of the learner process lives in
tests/real/test_real_rl.py.
"""

import dataclasses
import json

import numpy as np
import pytest
import torch
from conftest import wait_until

from real.rl.codec import PayloadError
from real.rl.learner import IDLE_S, ActorLanes, Learner, LearnerConfig, sac_recipe
from real.rl.link import ActorClient, LearnerServer, TransitionBatch
from robolearn.checkpoints.policy import build_policy
from robolearn.commands.cli import main
from robolearn.config import compose
from robolearn.core.buffers import ReplayBuffer
from robolearn.data.episodes import Episode, save_episodes
from robolearn.errors import CheckpointError, ConfigError

SMALL = ["algo.actor_hidden=[16]", "algo.critic_hidden=[16]", "algo.batch_size=16", "algo.learning_starts=40",
         "algo.buffer_size=2000"]  # fmt: skip


def learner_config(run_dir, *overrides: str) -> LearnerConfig:
    """A LearnerConfig as `robolearn learner run_dir=... <overrides>` composes it (configs/learner.yaml)."""
    return LearnerConfig(**compose("learner", [f"run_dir={run_dir}", *SMALL, *overrides], LearnerConfig))


def steps(n: int, start: int = 0, actor: int = 0, obs_dim: int = 3, done_every: int = 0) -> dict[str, np.ndarray]:
    """n consecutive transitions of one actor: obs = [t, actor, 0], next_obs = [t + 1, actor, 0]."""
    t = np.arange(start, start + n, dtype=np.float32)
    obs = np.zeros((n, obs_dim), np.float32)
    obs[:, 0], obs[:, 1] = t, actor
    next_obs = obs.copy()
    next_obs[:, 0] += 1
    truncated = (t + 1) % done_every == 0 if done_every else np.zeros(n, bool)
    return {"obs": obs, "next_obs": next_obs, "actions": np.full((n, 2), 0.5, np.float32),
            "rewards": np.ones(n, np.float32), "terminated": np.zeros(n, bool), "truncated": truncated,
            "interventions": np.zeros(n, bool), "policy_versions": np.zeros(n, np.int64)}  # fmt: skip


def tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in batch.items()}


class FakeServer:
    """A `LearnerServer` stand-in: batches are handed over by `send`, publications recorded."""

    def __init__(self) -> None:
        self.version, self.pending, self.published = 0, [], []

    def send(self, actor: str, batch: dict[str, np.ndarray]) -> None:
        self.pending.append(TransitionBatch(batch, {"actor_id": actor}, len(batch["rewards"]), "ipv4:127.0.0.1:1"))

    def get_batches(self, timeout=None):
        out, self.pending = self.pending, []
        return out

    def publish_parameters(self, tensors, meta=None) -> int:
        self.version += 1
        self.published.append((self.version, dict(meta or {})))
        return self.version


# --- replay lanes ----------------------------------------------------------------------------------------


def test_extend_stores_what_add_stores():
    """`ReplayBuffer.extend` of T steps equals T calls of `add`, across the ring's wrap and beyond its size."""
    rng = torch.Generator().manual_seed(0)
    one, many = (ReplayBuffer(10, 2, {"policy": 3}, 2, n_step=3) for _ in range(2))
    for t in (4, 9, 13):
        data = {"obs": torch.randn(t, 2, 3, generator=rng), "next_obs": torch.randn(t, 2, 3, generator=rng),
                "actions": torch.randn(t, 2, 2, generator=rng), "rewards": torch.randn(t, 2, generator=rng),
                "terminated": torch.rand(t, 2, generator=rng) < 0.2, "truncated": torch.rand(t, 2, generator=rng) < 0.2}
        for i in range(t):
            one.add({"policy": data["obs"][i]}, data["actions"][i], data["rewards"][i], {"policy": data["next_obs"][i]},
                    data["terminated"][i], data["truncated"][i])  # fmt: skip
        many.extend({"policy": data["obs"]}, data["actions"], data["rewards"], {"policy": data["next_obs"]},
                    data["terminated"], data["truncated"])  # fmt: skip
        (a, meta_a), (b, meta_b) = one.state_dict(), many.state_dict()
        assert meta_a == meta_b and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ConfigError, match="actions of shape"):
        zeros = torch.zeros(2, 1)
        many.extend({"policy": torch.zeros(2, 1, 3)}, torch.zeros(2, 1, 2), zeros, {"policy": torch.zeros(2, 1, 3)},
                    zeros, zeros)  # fmt: skip


def test_n_step_returns_never_cross_from_one_actor_into_another():
    """Two robots' batches arrive interleaved: every 3-step return stays on the robot its first step came from."""
    lanes = ActorLanes(4000, 2, 3, 2, n_step=3, gamma=0.5)
    single = ReplayBuffer(4000, 1, {"policy": 3}, 2, n_step=3, gamma=0.5)  # what one lane for everyone does
    for k in range(20):
        for actor in (0, 1):
            batch = tensors(steps(5, start=5 * k, actor=actor, done_every=40))
            assert lanes.add(f"car-{actor}", batch)
            single.extend({"policy": batch["obs"][:, None]}, batch["actions"][:, None], batch["rewards"][:, None],
                          {"policy": batch["next_obs"][:, None]}, batch["terminated"][:, None],
                          batch["truncated"][:, None])  # fmt: skip
    assert len(lanes) == 200 and lanes.actors == ["car-0", "car-1"] and lanes.cuts == 0
    gen = torch.Generator().manual_seed(0)
    got = lanes.sample(4096, gen)
    obs, next_obs = got["obs"]["policy"], got["next_obs"]["policy"]
    assert torch.equal(next_obs[:, 1], obs[:, 1]) and set(obs[:, 1].tolist()) == {0.0, 1.0}  # same robot
    k = next_obs[:, 0] - obs[:, 0]  # steps summed: 3, fewer at an episode's end or a lane's newest step
    ends = (obs[:, 0] // 40 + 1) * 40
    assert torch.equal(k, torch.minimum(torch.full_like(k, 3), torch.minimum(ends, torch.tensor(100.0)) - obs[:, 0]))
    assert torch.allclose(got["rewards"], 2 - 0.5 ** (k - 1)) and torch.allclose(got["discount"], 0.5**k)
    share = obs[:, 1].mean().item()
    assert 0.45 < share < 0.55  # uniform over all transitions: the two robots sent as many
    crossed = single.sample(4096, gen)  # the hazard the lanes remove
    assert (crossed["next_obs"]["policy"][:, 1] != crossed["obs"]["policy"][:, 1]).any()


def test_a_gap_in_a_robots_stream_ends_the_n_step_return_before_it():
    lanes = ActorLanes(1000, 1, 3, 2, n_step=3)
    lanes.add("car", tensors(steps(5, start=0)))
    lanes.add("car", tensors(steps(5, start=10)))  # 5..9 lost (dropped by the actor, or a learner restart)
    holed = steps(5, start=15)
    lanes.add("car", tensors({k: np.delete(v, 2, axis=0) for k, v in holed.items()}))  # step 17 dropped (NaN)
    lanes.add("car", tensors(steps(2, start=20)))  # continues: no cut
    lane = lanes.lanes[0]
    dones = lane.dones[: lane.filled, 0]
    assert dones.nonzero().flatten().tolist() == [4, 11] and lanes.cuts == 2  # at steps 4 and 16
    assert not lane.terminated.any()  # cut as truncations: the value of the state after still bootstraps

    tensors_, meta = lanes.state_dict()
    restored = ActorLanes(1000, 3, 3, 2, n_step=3)  # the saved layout wins over the new max_actors
    restored.load_state_dict(tensors_, json.loads(json.dumps(meta)))
    assert restored.max_actors == 1 and restored.actors == ["car"] and len(restored) == len(lanes)
    restored.add("car", tensors(steps(3, start=22)))  # the robot goes on where the checkpoint ended: no cut
    restored.add("car", tensors(steps(3, start=30)))  # 25..29 were lost with a killed learner: cut
    assert restored.lanes[0].dones[: restored.lanes[0].filled, 0].nonzero().flatten().tolist() == [4, 11, 18]


def test_lanes_up_to_max_actors_then_refused_or_taken_over_when_idle(caplog):
    now = [0.0]
    lanes = ActorLanes(1000, 2, 3, 2)
    lanes.clock = lambda: now[0]
    assert lanes.add("a", tensors(steps(4))) and lanes.add("b", tensors(steps(4, actor=1)))
    assert lanes.lane_capacity == 500
    assert not lanes.add("c", tensors(steps(4, actor=2))) and not lanes.add("c", tensors(steps(3, actor=2)))
    assert lanes.refused == {"c": 7} and "all max_actors=2 replay lanes are in use" in caplog.text
    assert caplog.text.count("actor c refused") == 1  # said once, counted always
    now[0] = IDLE_S / 2
    lanes.add("b", tensors(steps(4, start=4, actor=1)))
    now[0] = IDLE_S + 1  # "a" silent for longer than IDLE_S: a restarted robot under a new id takes its lane
    assert lanes.add("c", tensors(steps(4, actor=2)))
    assert lanes.actors == ["c", "b"] and "takes over replay lane 0 of actor a" in caplog.text
    lane = lanes.lanes[0]
    assert lane.dones[3, 0] and lanes.cuts == 1  # a's last step ends before c's first
    with pytest.raises(ConfigError, match="max_actors"):
        ActorLanes(1000, 0, 3, 2)


# --- the learner -----------------------------------------------------------------------------------------


def test_learner_schedule_publication_and_eager_build(tmp_path):
    server = FakeServer()
    learner = Learner(server, learner_config(tmp_path, "algo.utd_ratio=2", "publish_s=0"))
    assert learner.sac is None and learner.step() == {}  # sizes unknown until the first batch
    for k in range(6):
        server.send("car", steps(10, start=10 * k))
    stats = learner.step()
    # 60 transitions, learning starts after 40: UTD 2 on the batches past it (batches of 10: 20 of them)
    assert learner.transitions == 60 and learner.updates == 40 and "critic_loss" in stats
    assert server.version == 2 and server.published[-1][1]["updates"] == 40  # at build, then when changed
    assert learner.step() == {} and server.version == 2  # nothing new: no new version
    policy = build_policy(server.published[-1][1]["policy"], mode="sample")
    policy.load_actor_state({f"actor.{k}": v for k, v in learner.sac.actor.state_dict().items()})

    eager = FakeServer()
    Learner(eager, learner_config(tmp_path / "eager", "obs_dim=3", "num_actions=2"))
    assert eager.version == 1  # a policy before any data

    capped = Learner(FakeServer(), learner_config(tmp_path / "capped", "max_updates_per_step=8"))
    for k in range(6):
        capped.server.send("car", steps(10, start=10 * k))
    capped.step()
    assert capped.updates == 8 and capped.off_policy.update_debt == 12  # the rest stays owed
    with pytest.raises(ConfigError, match="SAC recipes"):
        Learner(FakeServer(), learner_config(tmp_path / "td3", "algo=td3"))
    with pytest.raises(ConfigError, match="together"):
        Learner(FakeServer(), learner_config(tmp_path / "half", "obs_dim=3"))


def test_serl_with_offline_data_samples_half_and_half(tmp_path):
    rng = np.random.default_rng(0)
    demos = [Episode(np.c_[rng.normal(size=(21, 2)), np.full(21, -7.0)].astype(np.float32),
                     rng.uniform(-1, 1, (20, 2)), np.ones(20), np.zeros(20, bool), np.r_[np.zeros(19, bool), True])
             for _ in range(5)]  # fmt: skip  (obs[:, 2] = -7 marks the offline data)
    save_episodes(tmp_path / "demos", demos)
    server = FakeServer()
    learner = Learner(server, learner_config(tmp_path / "run", "algo=serl", f"offline_data={tmp_path / 'demos'}",
                                             "algo.num_critics=2", "algo.utd_ratio=1"))  # fmt: skip
    assert learner.sac is not None and server.version == 1  # sized by the offline data, published at once
    assert learner.sac_cfg.offline_ratio == 0.5 and len(learner.off_policy.offline) == 100
    batches = []
    update = learner.sac.update
    learner.sac.update = lambda batch, gen: batches.append(batch) or update(batch, gen)
    for k in range(5):
        server.send("car", steps(10, start=10 * k))
    learner.step()
    assert len(batches) == 10  # 50 transitions, 10 of them after learning_starts=40, UTD 1
    offline = torch.stack([b["obs"]["policy"][:, 2] == -7 for b in batches])
    assert offline.shape == (10, 16) and offline.sum(1).tolist() == [8] * 10  # 50/50, every batch

    with pytest.raises(ConfigError, match=r"policy observations of shape \(3,\); the learner's are \(4,\)"):
        Learner(FakeServer(), learner_config(tmp_path / "bad", f"offline_data={tmp_path / 'demos'}",
                                             "obs_dim=4", "num_actions=2"))  # fmt: skip


def test_resumed_learner_continues_as_if_never_stopped(tmp_path):
    """Networks, optimizers, lanes, update debt and RNGs come back: the same data then gives the same networks."""
    data = [(f"car-{k % 2}", steps(10, start=10 * (k // 2), actor=k % 2)) for k in range(12)]
    cfg = ["algo.n_step=3", "algo.utd_ratio=0.5", "max_actors=2"]
    server = FakeServer()
    full = Learner(server, learner_config(tmp_path / "full", *cfg))
    for actor, batch in data:
        server.send(actor, batch)
        full.step()

    first_server = FakeServer()
    first = Learner(first_server, learner_config(tmp_path / "split", *cfg))
    for actor, batch in data[:7]:
        first_server.send(actor, batch)
        first.step()
    first.save()
    saved_version = first_server.version
    resumed_server = FakeServer()
    resumed = Learner(resumed_server, learner_config(tmp_path / "split", *cfg, "max_actors=3", "algo=serl"))
    assert resumed.transitions == 70 and resumed.updates == first.updates and len(resumed.buffer) == 70
    assert resumed.buffer.actors == ["car-0", "car-1"] and resumed.buffer.max_actors == 2  # the checkpoint's
    assert resumed.sac_cfg == first.sac_cfg  # the checkpoint's SAC settings, not algo=serl
    assert resumed_server.version == saved_version + 1  # versions continue (published on resume)
    for actor, batch in data[7:]:
        resumed_server.send(actor, batch)
        resumed.step()
    assert resumed.updates == full.updates == 40 and first.updates == 15
    for (name, a), b in zip(full.sac.model_state().items(), resumed.sac.model_state().values(), strict=True):
        assert torch.equal(a, b), name
    trainer = json.loads((tmp_path / "split/checkpoints/latest/trainer.json").read_text())
    assert trainer["buffer"]["actors"] == ["car-0", "car-1"] and trainer["transitions"] == 70
    not_sac = tmp_path / "ppo/checkpoints/latest"
    not_sac.mkdir(parents=True)
    (not_sac / "config.json").write_text(json.dumps({"policy": {"obs_dim": 3}, "run": {}}))
    (not_sac / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError):
        Learner(FakeServer(), learner_config(tmp_path / "ppo"))


def test_learner_over_the_link(tmp_path):
    """Two actors over gRPC: each gets a lane by its actor id; the published parameters fit the acting policy."""
    with LearnerServer("s3cret", insecure=True) as server:  # plaintext; TLS is tested in test_real_rl.py
        learner = Learner(server, learner_config(tmp_path, "publish_s=0.1", "max_actors=2"))
        clients = [ActorClient(server.address, "s3cret", actor_id=f"car-{i}", backoff=(0.05, 0.3), insecure=True)
                   for i in range(2)]  # fmt: skip
        try:
            for k in range(5):
                for i, client in enumerate(clients):
                    client.send_transitions(steps(10, start=10 * k, actor=i))
            assert wait_until(lambda: learner.step(timeout=0.02) is not None and learner.transitions == 100, 20)
            assert wait_until(lambda: learner.step() is not None and learner.off_policy.update_debt < 1, 20)
            assert learner.updates >= 60  # UTD 1 after 40 (more when a batch the actor merged straddles 40)
            assert sorted(learner.buffer.actors) == ["car-0", "car-1"] and learner.buffer.cuts == 0
            assert wait_until(lambda: clients[0].stats["parameters"] >= 1)
            version, state = clients[0].latest_parameters()
            policy = build_policy(clients[0].latest_meta["policy"], mode="sample")
            policy.load_actor_state(state)  # the published names and shapes fit the acting policy (strict)
        finally:
            for client in clients:
                client.close()
        with torch.no_grad():  # diverged networks are never published
            next(learner.sac.actor.parameters()).fill_(float("nan"))
        before = server.version
        assert learner.publish() is None and server.version == before
        with pytest.raises(PayloadError, match="non-finite parameters"):
            server.publish_parameters({"w": torch.tensor([1.0, float("inf")])})


# --- the command -----------------------------------------------------------------------------------------


def test_learner_command_options(tmp_path, monkeypatch, capsys):
    assert main(["learner", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("run_dir:", "max_actors: 1", "publish_s: 2.0", "token_file:", "offline_data:", "utd_ratio:",
                   "tls_cert:", "tls_key:", "insecure: false"):  # fmt: skip
        assert option in out, option
    assert main(["learner", "run_dir=x", "bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().err
    assert main(["learner", "run_dir=x", "max_actors=many"]) == 2
    assert "max_actors" in capsys.readouterr().err

    cfg = learner_config(tmp_path, "algo=serl", "algo.utd_ratio=4")
    sac = sac_recipe(cfg.algo)
    assert sac.utd_ratio == 4.0 and sac.offline_ratio == 0.5 and sac.num_critics == 10 and cfg.algo["recipe"] == "serl"
    assert main(["learner", "run_dir=x", "algo.offline_data=demos"]) == 2  # renamed: the message names offline_data=
    assert "`offline_data`" in capsys.readouterr().err
    assert cfg.env == {"num_envs": 8}  # the preset's, unused
    assert dataclasses.asdict(LearnerConfig())["max_actors"] == 1

    monkeypatch.delenv("ROBOLEARN_TOKEN", raising=False)
    assert main(["learner", f"run_dir={tmp_path}"]) == 2
    assert "shared secret" in capsys.readouterr().err
    (tmp_path / "token").write_text("from-file\n")
    assert LearnerConfig(token_file=str(tmp_path / "token")).read_token() == "from-file"
    monkeypatch.setenv("ROBOLEARN_TOKEN", "from-env")
    assert LearnerConfig().read_token() == "from-env"
    for algo in ("td3", "ppo"):
        assert main(["learner", f"run_dir={tmp_path}", f"algo={algo}"]) == 2
        assert "SAC recipes" in capsys.readouterr().err
    # a default config (no certificate) does not serve plaintext unless insecure=true says so; nothing is written
    assert main(["learner", f"run_dir={tmp_path / 'plain'}"]) == 2
    err = capsys.readouterr().err
    assert "refuses to serve unencrypted" in err and "tls_cert=" in err and "insecure=true" in err
    assert not (tmp_path / "plain").exists()
