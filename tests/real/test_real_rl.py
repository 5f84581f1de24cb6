"""real.rl: payload codec, the gRPC actor/learner link, TLS, the actor's transitions, the learner killed and restarted.

Servers listen on 127.0.0.1 on free ports; every wait is bounded. The link tests run plaintext (insecure=True) unless
they are about TLS, whose certificates `robolearn tls-cert` makes in the test's tmp dir. The kill test runs
`robolearn learner` over TLS as a subprocess, kills it with SIGKILL and restarts it on the same port while an actor
loop keeps its rate. The learner's own tests (replay lanes, offline data, resume, its command) are in
tests/real/test_real_learner.py.
"""

import dataclasses
import ipaddress
import json
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import wait_until

from real.rl.actor import Actor
from real.rl.codec import CHUNK, PayloadError, Reassembler, check_transitions, decode, encode, frames
from real.rl.link import TOKEN_HEADER, ActorClient, LearnerServer
from robolearn.checkpoints.policy import build_policy
from robolearn.commands.cli import main, run
from robolearn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def sac_policy(obs_dim: int, num_actions: int, hidden: tuple[int, ...]):
    """A sampling SAC actor as the real-world actor acts with (`robolearn.checkpoints.policy`)."""
    sac = {"actor_hidden": list(hidden), "activation": "relu", "actor_layer_norm": False}
    return build_policy({"obs_dim": obs_dim, "num_actions": num_actions, "sac": sac}, mode="sample")


def cmd_actor(args: list[str]) -> int:
    """`robolearn actor ...` as the CLI runs it, with the shared secret in the environment."""
    os.environ["ROBOLEARN_TOKEN"] = "t"
    return run("actor", args)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(n: int, start: float = 0.0, obs_dim: int = 3, num_actions: int = 2) -> dict[str, np.ndarray]:
    """n transitions whose obs[:, 0] counts start, start+1, ..."""
    obs = np.zeros((n, obs_dim), np.float32)
    obs[:, 0] = start + np.arange(n)
    return {"obs": obs, "next_obs": obs + 1, "actions": np.full((n, num_actions), 0.5, np.float32),
            "rewards": np.ones(n, np.float32), "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
            "interventions": np.zeros(n, bool), "policy_versions": np.zeros(n, np.int64)}  # fmt: skip


@pytest.fixture
def server():
    made = []

    def make(token="s3cret", port=0, **kwargs):
        kwargs.setdefault("insecure", "tls_cert" not in kwargs)  # plaintext unless the test is about TLS
        made.append(LearnerServer(token, port, **kwargs).start())
        return made[-1]

    yield make
    for s in made:
        s.stop(0)


@pytest.fixture
def client():
    made = []

    def make(address, token="s3cret", **kwargs):
        kwargs.setdefault("insecure", "tls_ca" not in kwargs)
        made.append(ActorClient(address, token, backoff=(0.05, 0.3), **kwargs))
        return made[-1]

    yield make
    for c in made:
        c.close()


# --- codec -----------------------------------------------------------------------------------------------


def test_codec_round_trip_and_framing():
    tensors = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": np.array([True, False]),
               "big": np.random.default_rng(0).standard_normal(700_000).astype(np.float32)}  # fmt: skip
    payload = encode("parameters", tensors, {"version": 3, "policy": {"obs_dim": 2}})
    meta, back = decode(payload, "parameters")
    assert meta == {"kind": "parameters", "version": 3, "policy": {"obs_dim": 2}}
    assert np.array_equal(back["w"], tensors["w"].numpy()) and back["b"].dtype == bool
    assert np.array_equal(back["big"], tensors["big"])
    pieces = list(frames(payload, transfer_id=9))
    assert len(pieces) == 2 and all(len(p) <= CHUNK + 28 for p in pieces)
    reassembler = Reassembler()
    assert reassembler.feed(pieces[0]) is None and reassembler.feed(pieces[1]) == payload
    assert Reassembler().feed(next(frames(b"", 1))) == b""

    with pytest.raises(PayloadError, match="expected a transitions payload"):
        decode(payload, "transitions")
    for junk in (b"", b"\x00" * 16, pickle.dumps({"w": [1, 2]}), b"\xff" * 8 + b"{}"):
        with pytest.raises(PayloadError, match="not a robolearn payload"):
            decode(junk)
    with pytest.raises(PayloadError, match="bad magic"):
        Reassembler().feed(b"XXXX" + pieces[0][4:])
    with pytest.raises(PayloadError, match="out of order"):
        Reassembler().feed(pieces[1])
    with pytest.raises(PayloadError, match="out of range"):
        Reassembler(max_payload=1000).feed(pieces[0])
    with pytest.raises(PayloadError, match="out of range"):  # more frames than 10 bytes can need: a memory bomb
        Reassembler().feed(struct.pack("<4sQIIQ", b"RLF1", 1, 0, 1000, 10) + b"x")
    good = batch(4)
    assert check_transitions(good) == 4
    with pytest.raises(PayloadError, match="lacks"):
        check_transitions({k: v for k, v in good.items() if k != "rewards"})
    with pytest.raises(PayloadError, match="'actions' must be"):
        check_transitions({**good, "actions": good["actions"][:3]})
    with pytest.raises(PayloadError, match="'terminated' must be"):
        check_transitions({**good, "terminated": good["terminated"].astype(np.float32)})
    for name, value in (("rewards", np.array([1, 1, np.nan, 1], np.float32)), ("next_obs", good["obs"] + np.inf)):
        with pytest.raises(PayloadError, match=f"'{name}' has NaN/inf values"):
            check_transitions({**good, name: value})


# --- the link --------------------------------------------------------------------------------------------


def test_bad_token_rejected(server, client):
    srv = server(token="right-token")
    srv.publish_parameters({"w": np.zeros(2)})
    wrong = client(srv.address, token="wrong-token")
    wrong.send_transitions(batch(3))
    assert wait_until(lambda: wrong.last_error is not None and srv.stats["rejected"] >= 2)
    assert wrong.last_error.startswith("UNAUTHENTICATED")
    time.sleep(0.2)
    assert srv.get_batches() == [] and wrong.latest_parameters() is None and wrong.stats["sent"] == 0
    with pytest.raises(ValueError, match="non-empty"):
        LearnerServer("")


def test_transitions_and_newest_parameters_flow(server, client):
    srv = server()
    actor = client(srv.address, actor_id="car-1")
    for k in range(10):
        actor.send_transitions(batch(5, start=5 * k))
    received = []
    assert wait_until(lambda: received.extend(srv.get_batches(timeout=0.05)) or sum(b.size for b in received) == 50)
    obs = np.concatenate([b.tensors["obs"][:, 0] for b in received])
    assert np.array_equal(obs, np.arange(50))  # all of them, in order
    assert received[0].meta["actor_id"] == "car-1" and srv.actors["car-1"]["dropped"] == 0
    assert wait_until(lambda: srv.stats["transitions"] == 50 and actor.stats["sent"] == 50)
    assert actor.stats["queued"] == 0 and actor.flush(1.0)

    assert srv.publish_parameters({"w": torch.ones(3)}, {"policy": {"obs_dim": 3}}) == 1
    assert wait_until(lambda: actor.stats["parameters"] >= 1)
    version, state = actor.latest_parameters()
    assert version == 1 and torch.equal(state["w"], torch.ones(3)) and actor.latest_meta["policy"] == {"obs_dim": 3}
    assert actor.latest_parameters() is None  # nothing newer yet
    for v in range(2, 7):  # a burst: the actor ends up with the newest, intermediate versions may be skipped
        srv.publish_parameters({"w": torch.full((3,), float(v))})
    assert wait_until(lambda: actor._newest is not None and actor._newest[0][1] == 6)
    version, state = actor.latest_parameters()
    assert version == 6 and torch.equal(state["w"], torch.full((3,), 6.0))
    assert actor.stats["parameters"] <= 6


def test_bounded_queue_never_blocks(server, client):
    port = free_port()
    actor = client(f"127.0.0.1:{port}", max_queued=100)  # nobody listens yet
    durations = []
    for k in range(50):
        start = time.perf_counter()
        actor.send_transitions(batch(10, start=10 * k))
        durations.append(time.perf_counter() - start)
        time.sleep(0.002)
    assert max(durations) < 0.5 and np.median(durations) < 2e-3  # never waits on the network
    # a batch may be in flight (failing) right now: its transitions are counted once the call returned
    assert wait_until(lambda: actor.stats["dropped"] == 400 and actor.stats["queued"] == 100)
    assert wait_until(lambda: (actor.last_error or "").startswith("UNAVAILABLE"))
    srv = server(port=port)  # the learner comes up: the newest 100 transitions arrive
    received = []
    assert wait_until(lambda: received.extend(srv.get_batches(timeout=0.05)) or sum(b.size for b in received) == 100)
    obs = np.concatenate([b.tensors["obs"][:, 0] for b in received])
    assert np.array_equal(obs, np.arange(400, 500)) and received[-1].meta["dropped"] == 400


def test_nonfinite_transitions_never_reach_the_learner(server, client):
    srv = server()
    actor = client(srv.address, max_batch=3)
    poisoned = batch(3, start=100)
    poisoned["rewards"][1] = np.nan  # what an older actor would send: the learner refuses it
    with actor._cond:
        actor._queue.append((3, poisoned))
        actor.stats["queued"] += 3
    mixed = batch(4)
    mixed["rewards"][1], mixed["obs"][2, 1] = np.nan, np.inf
    actor.send_transitions(mixed)  # dropped here, row by row
    actor.send_transitions({**batch(2), "actions": np.full((2, 2), np.nan, np.float32)})  # nothing left to send
    assert actor.stats["nonfinite"] == 4
    received = []
    assert wait_until(lambda: received.extend(srv.get_batches(timeout=0.05)) or srv.stats["transitions"] == 2)
    assert wait_until(lambda: actor.stats["invalid"] == 3 and actor.flush(0.01))  # dropped, not sent forever
    assert srv.stats["invalid"] == 1 and actor.stats["sent"] == 2 and actor.last_error.startswith("INVALID_ARG")
    assert np.concatenate([b.tensors["obs"][:, 0] for b in received]).tolist() == [0, 3]


def test_parameters_from_an_impostor_are_never_installed(server, client):
    """Something else listens on the learner's port: it learns no secret and cannot get parameters installed."""
    impostor, presented = server(token="impostor"), []
    impostor._authorize = lambda context: presented.append(dict(context.invocation_metadata())[TOKEN_HEADER])
    impostor.publish_parameters({"w": torch.ones(2)})  # signed with its own token
    actor = client(impostor.address)  # token "s3cret"
    assert wait_until(lambda: actor.stats["bad_signature"] >= 1)
    assert presented and "s3cret" not in presented  # the actor never sends the token itself
    impostor.token = presented[0]  # what it captured does not sign either
    impostor.publish_parameters({"w": torch.full((2,), 2.0)})
    assert wait_until(lambda: actor.stats["bad_signature"] >= 2)
    with impostor._cond:  # unsigned, as before signing existed
        impostor._params = (("x", 9), encode("parameters", {"w": np.ones(2)}, {"session": "x", "version": 9}))
        impostor._cond.notify_all()
    assert wait_until(lambda: actor.stats["bad_signature"] >= 3)
    assert actor.latest_parameters() is None and actor.stats["parameters"] == 0
    assert "not signed with our token" in actor.last_error


# --- TLS -------------------------------------------------------------------------------------------------


@pytest.fixture
def certs(tmp_path):
    """Pairs made by `robolearn tls-cert`: the learner's (for gpu-box and 10.0.0.5 too) and another's."""
    made = {}
    for name, host in (("learner", "gpu-box,10.0.0.5"), ("other", "elsewhere")):
        assert main(["tls-cert", f"out={tmp_path / name}", f"host={host}"]) == 0
        made[name] = {"crt": str(tmp_path / name / "learner.crt"), "key": str(tmp_path / name / "learner.key")}
    return made


def test_tls_cert_command_and_the_refusal_of_plaintext(certs, tmp_path, capsys):
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(Path(certs["learner"]["crt"]).read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["gpu-box", "localhost"]  # gRPC checks the SAN, not the CN
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(a) for a in ("10.0.0.5", "127.0.0.1")]
    assert os.stat(certs["learner"]["key"]).st_mode & 0o077 == 0  # the key is the owner's only
    assert main(["tls-cert", f"out={tmp_path / 'local'}"]) == 0  # default names: localhost and 127.0.0.1 only
    out = capsys.readouterr().out
    assert f"tls_cert={tmp_path / 'local/learner.crt'} tls_key={tmp_path / 'local/learner.key'}" in out
    local = x509.load_pem_x509_certificate((tmp_path / "local/learner.crt").read_bytes())
    names = local.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(n.value) for n in names] == ["localhost", "127.0.0.1"]
    assert main(["tls-cert", f"out={tmp_path / 'learner'}"]) == 2  # never overwrites a pair unasked
    assert "force=true" in capsys.readouterr().err
    assert main(["tls-cert"]) == 2 and "out=" in capsys.readouterr().err

    # no certificate and no explicit insecure=true: refused at construction, naming the options
    with pytest.raises(ConfigError, match=r"refuses to serve unencrypted: give tls_cert=.*tls_key=.*insecure=true"):
        LearnerServer("t")
    with pytest.raises(ConfigError, match=r"refuses to connect unencrypted: give tls_ca=.*insecure=true"):
        ActorClient("127.0.0.1:1", "t")
    learner, other = certs["learner"], certs["other"]
    for kwargs, message in (({"tls_cert": learner["crt"]}, "needs both"),
                            ({"tls_cert": learner["crt"], "tls_key": other["key"]}, "is not the private key of"),
                            ({"tls_cert": learner["key"], "tls_key": learner["key"]}, "holds no usable certificate"),
                            ({"tls_cert": learner["crt"], "tls_key": learner["key"], "insecure": True}, "drop one"),
                            ({"tls_cert": str(tmp_path / "no.crt"), "tls_key": learner["key"]}, "cannot read"),
                            ):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            LearnerServer("t", **kwargs)
    for kwargs, message in (({"tls_ca": learner["crt"], "insecure": True}, "drop one"),
                            ({"tls_ca": learner["key"][:-4] + ".nope"}, "cannot read"),
                            ({"insecure": True, "tls_server_name": "gpu-box"}, "TLS option")):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            ActorClient("127.0.0.1:1", "t", **kwargs)


def test_transitions_and_parameters_over_tls(server, client, certs):
    """Over TLS as in plaintext; the certificate must name the host dialled, or `tls_server_name` says which."""
    ca = certs["learner"]["crt"]
    srv = server(tls_cert=ca, tls_key=certs["learner"]["key"])
    assert srv.tls
    srv.publish_parameters({"w": torch.ones(3)})
    actors = [client(srv.address, tls_ca=ca), client(f"localhost:{srv.port}", tls_ca=ca),
              client(srv.address, tls_ca=ca, tls_server_name="gpu-box")]  # a name the certificate holds  # fmt: skip
    for k, actor in enumerate(actors):
        actor.send_transitions(batch(4, start=4 * k))
    assert wait_until(lambda: srv.stats["transitions"] == 12 and all(a.stats["parameters"] == 1 for a in actors))
    assert all(a.tls and a.latest_parameters()[0] == 1 and a.stats["tls_failures"] == 0 for a in actors)
    assert sum(b.size for b in srv.get_batches()) == 12


@pytest.mark.parametrize("case", ["untrusted certificate", "name not in the certificate", "plaintext actor",
                                  "plaintext learner", "wrong token"])  # fmt: skip
def test_refused_with_a_clear_error(case, server, client, certs, caplog):
    """Every misconfiguration is refused (nothing delivered, nothing installed) and said once, as an error that
    names the learner's address and what to change; never a silent retry loop."""
    learner, other = certs["learner"], certs["other"]
    srv = server(**({"insecure": True} if case == "plaintext learner" else
                    {"tls_cert": learner["crt"], "tls_key": learner["key"]}))  # fmt: skip
    srv.publish_parameters({"w": torch.ones(2)})
    actor = client(srv.address, token="wrong" if case == "wrong token" else "s3cret", **{
        "untrusted certificate": {"tls_ca": other["crt"]},  # trusts another learner's certificate
        "name not in the certificate": {"tls_ca": learner["crt"], "tls_server_name": "elsewhere"},
        "plaintext actor": {"insecure": True},
        "plaintext learner": {"tls_ca": learner["crt"]},
        "wrong token": {"tls_ca": learner["crt"]},
    }[case])  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="real.rl.link"):
        actor.send_transitions(batch(3))
        assert wait_until(lambda: actor.stats["failures"] >= 3)  # both threads, retried
    expected = {
        "untrusted certificate": "TLS handshake failed: the certificate of the learner at {} is not one tls_ca trusts",
        "name not in the certificate": "TLS handshake failed: the certificate of the learner at {} does not hold the "
                                       "name elsewhere; dial a name it holds",
        "plaintext actor": "the learner at {} closed the connection at once: it serves TLS (or is no learner), and "
                           "this actor connects in plaintext (insecure=true); give tls_ca=",
        "plaintext learner": "TLS handshake failed: the learner at {} answers in plaintext",
        "wrong token": "the learner at {} refused our token: both ends need the same shared secret",
    }[case].format(srv.address)  # fmt: skip
    code = "UNAUTHENTICATED" if case == "wrong token" else "UNAVAILABLE"
    assert actor.last_error.startswith(f"{code}: {expected}"), actor.last_error
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and expected in r.getMessage()]
    assert len(said) == 1, said  # once, however often it is retried
    assert actor.stats["tls_failures"] == (0 if case == "wrong token" else actor.stats["failures"])
    assert srv.stats["rejected"] >= (1 if case == "wrong token" else 0)
    time.sleep(0.2)
    assert srv.get_batches() == [] and actor.stats["sent"] == 0 and actor.latest_parameters() is None


# --- actor -----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class FakeTick:
    mode: str
    obs: np.ndarray
    command: np.ndarray
    policy_version: int = 0
    intervention: bool = False
    status: dict = dataclasses.field(default_factory=dict)

    @property
    def safety(self):
        return self

    @property
    def action(self):
        return self.command


class FakeClient:
    def __init__(self):
        self.batches, self.params = [], None

    def send_transitions(self, b):
        check_transitions(b)
        self.batches.append(b)

    def latest_parameters(self):
        params, self.params = self.params, None
        return params


def test_actor_turns_ticks_into_transitions():
    client, swapped = FakeClient(), []
    done_at = {4: "terminated"}

    def reward_fn(prev, tick):
        return float(tick.obs[0]), done_at.get(int(tick.obs[0]))

    actor = Actor(client, reward_fn, lambda v, s: swapped.append(v), batch_size=2)
    modes = ["policy"] * 5 + ["policy", "teleop", "policy", "recovery", "recovery"] + ["policy"] * 3 + ["stale"]
    for i, mode in enumerate(modes):
        obs = np.array([i, 0.0]) if mode != "stale" else np.array([np.nan, 0.0])
        actor.on_tick(FakeTick(mode, obs, np.array([i / 10]), policy_version=i // 3, intervention=mode == "teleop"))
    client.params = (7, {"w": torch.zeros(1)})
    actor.on_tick(FakeTick("policy", np.array([20.0, 0]), np.zeros(1)))
    flat = {k: np.concatenate([b[k] for b in client.batches]) for k in client.batches[0]}
    # episode 1: ticks 0..4, terminated at 4; episode 2: 5..8, cut by recovery at 8; episode 3: 10..12, stale at 13
    assert np.array_equal(flat["obs"][:, 0], [0, 1, 2, 3, 5, 6, 7, 10, 11])
    assert np.array_equal(flat["next_obs"][:, 0], [1, 2, 3, 4, 6, 7, 8, 11, 12])
    assert np.array_equal(flat["rewards"], [1, 2, 3, 4, 6, 7, 8, 11, 12])
    assert np.array_equal(flat["terminated"], [0, 0, 0, 1, 0, 0, 0, 0, 0])
    assert np.array_equal(flat["truncated"], [0, 0, 0, 0, 0, 0, 1, 0, 1])
    assert np.array_equal(flat["interventions"], [0, 0, 0, 0, 0, 1, 0, 0, 0])
    assert np.allclose(flat["actions"][:, 0], flat["obs"][:, 0] / 10)  # the command that went out
    assert np.array_equal(flat["policy_versions"], [0, 0, 0, 1, 1, 2, 2, 3, 3])
    assert swapped == [7] and actor.stats["episodes"] == 3 and actor.stats["transitions"] == 9


def test_actor_drops_a_step_with_a_nonfinite_reward():
    client = FakeClient()
    rewards = iter([1.0, np.nan, 2.0])
    actor = Actor(client, lambda prev, tick: next(rewards), lambda v, s: None, batch_size=100)
    for i in range(5):
        actor.on_tick(FakeTick("policy", np.array([i, 0.0]), np.array([0.1])))
    actor.end()
    flat = {k: np.concatenate([b[k] for b in client.batches]) for k in client.batches[0]}
    # step 1 -> 2 has no usable reward: dropped, step 0 -> 1 ends its episode; the next one starts at tick 3
    assert flat["obs"][:, 0].tolist() == [0, 3] and flat["next_obs"][:, 0].tolist() == [1, 4]
    assert flat["rewards"].tolist() == [1, 2] and flat["truncated"].all()
    assert actor.stats["nonfinite"] == 1 and actor.stats["episodes"] == 2


# --- the learner killed and restarted --------------------------------------------------------------------


class PointMass:
    """A 1-D point mass the scripted actor loop drives: obs [x, v], reward -x^2, episodes of 40 ticks."""

    def __init__(self) -> None:
        self.x, self.v, self.t = 1.0, 0.0, 0

    def step(self, a: float) -> None:
        self.v = 0.9 * self.v + 0.1 * a
        self.x += 0.1 * self.v
        self.t += 1

    def obs(self) -> np.ndarray:
        return np.array([self.x, self.v], np.float32)


def start_learner(run_dir: Path, port: int, log: Path, tls: dict[str, str]) -> subprocess.Popen:
    args = [sys.executable, "-m", "robolearn", "learner", f"run_dir={run_dir}", f"port={port}", "publish_s=0.3",
            "checkpoint_s=0.5", "algo.learning_starts=64", "algo.batch_size=32", "algo.buffer_size=5000",
            "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", f"tls_cert={tls['crt']}",
            f"tls_key={tls['key']}"]  # fmt: skip
    env = {**os.environ, "ROBOLEARN_TOKEN": "kill-test", "OMP_NUM_THREADS": "1"}
    with open(log, "a") as out:  # a file, not a pipe: a full pipe would stall the learner
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_learner_killed_and_restarted_while_actor_keeps_its_rate(tmp_path, certs):
    """Over TLS: the actor reconnects to the restarted learner (a new TLS session) by itself."""
    port, run_dir, log = free_port(), tmp_path / "learner", tmp_path / "learner.log"
    learner = start_learner(run_dir, port, log, certs["learner"])
    client = ActorClient(f"127.0.0.1:{port}", "kill-test", backoff=(0.05, 0.5), tls_ca=certs["learner"]["crt"])
    env, policy = PointMass(), sac_policy(2, 1, (32, 32))
    versions: list[tuple[float, int]] = []

    def swap(version, state):
        policy.load_state_dict(state)
        versions.append((time.monotonic(), version))

    actor = Actor(client, lambda prev, tick: (-float(tick.obs[0]) ** 2, "truncated" if env.t % 40 == 0 else None),
                  swap, batch_size=8)  # fmt: skip
    stop, ticks = threading.Event(), []  # (start, compute seconds)

    def control_loop(period: float = 0.02) -> None:
        deadline = time.monotonic()
        while not stop.is_set():
            start = time.monotonic()
            obs = env.obs()
            with torch.inference_mode():
                command = policy({"policy": torch.as_tensor(obs)[None]})[0].numpy()
            env.step(float(command[0]))
            actor.on_tick(FakeTick("policy", obs, command, policy_version=versions[-1][1] if versions else 0))
            if env.t % 40 == 0:
                env.__init__()
            ticks.append((start, time.monotonic() - start))
            deadline += period
            time.sleep(max(0.0, deadline - time.monotonic()))

    loop = threading.Thread(target=control_loop, daemon=True)
    loop.start()
    try:
        # the first learner: parameters arrive and get swapped in, a checkpoint is written
        assert wait_until(lambda: versions and (run_dir / "checkpoints/latest").is_dir() and versions[-1][1] >= 3,
                          60), log.read_text()[-3000:]  # fmt: skip
        learner.send_signal(signal.SIGKILL)
        learner.wait(10)
        killed_at, version_before = time.monotonic(), versions[-1][1]
        time.sleep(1.0)  # the actor keeps acting on its last parameters; transitions queue up
        assert not client.stats["dropped"] and client.stats["queued"] > 0 and client.last_error.startswith("UNAVAILA")
        # same port, a new TLS server; it resumes from the checkpoint, so versions go on
        learner = start_learner(run_dir, port, log, certs["learner"])
        assert wait_until(lambda: versions[-1][1] > version_before + 1, 60), log.read_text()[-3000:]
        assert wait_until(lambda: client.stats["queued"] == 0, 10)  # the backlog was delivered
    finally:
        stop.set()
        loop.join(5)
        client.close()
        learner.send_signal(signal.SIGTERM)
        try:
            learner.wait(20)
        except subprocess.TimeoutExpired:
            learner.kill()
    outage = [c for s, c in ticks if s > killed_at]
    assert len(outage) > 40  # the loop kept running through the outage and the restart
    periods = np.diff([s for s, _ in ticks])
    assert np.median(periods) == pytest.approx(0.02, abs=0.004)
    assert max(c for _, c in ticks) < 0.25  # no tick ever waited on the network (compute only, loaded CI box)
    assert actor.stats["swap_errors"] == 0 and client.stats["dropped"] == 0 and client.stats["tls_failures"] == 0
    assert "(TLS)" in log.read_text()  # `learner on 127.0.0.1:<port> (TLS), ...`, twice
    final = json.loads((run_dir / "checkpoints/latest/trainer.json").read_text())  # saved on SIGTERM
    assert final["version"] >= versions[-1][1] and 0 < final["transitions"] <= client.stats["sent"]


# --- on the PolicyRunner ---------------------------------------------------------------------------------


def test_actor_on_the_policy_runner_ships_what_the_recorder_records(tmp_path, server):
    from real import msgs
    from real.bag2dataset import bag_to_episodes
    from real.deploy import compose_deploy
    from real.recorder import Recorder
    from real.rl.actor import run_actor
    from real.transport.memory import MemoryBus, MemoryTransport
    from robolearn.data.episodes import to_transitions

    srv = server()
    policy = sac_policy(10, 2, (32, 32))
    meta = {"policy": {"obs_dim": 10, "num_actions": 2,
                       "sac": {"actor_hidden": [32, 32], "activation": "relu", "actor_layer_norm": False}}}
    srv.publish_parameters({k: v for k, v in policy.state_dict().items()}, meta)
    bus = MemoryBus()
    robot, mine = MemoryTransport(bus), MemoryTransport(bus)
    odom, imu = robot.publisher("/odom", msgs.ODOMETRY, "sensor_data"), robot.publisher("/imu", msgs.IMU, "sensor_data")
    stop = threading.Event()

    def drive() -> None:  # a car rolling forward at 1 m/s, sensors at 100 Hz
        x = 0.0
        while not stop.wait(0.01):
            x += 0.01
            odom.publish(msgs.odometry_from_array([x, 0, 0, 0, 0, 0, 1, 1.0, 0, 0, 0, 0, 0.1]))
            imu.publish(msgs.imu_from_array([0, 0, 0, 1, 0, 0, 0.1, 0.2, 0, 9.81]))

    cfg = compose_deploy("rc_car", ["rate_hz=25", "stats=null"])
    client = ActorClient(srv.address, "s3cret", backoff=(0.05, 0.3), insecure=True)
    threading.Thread(target=drive, daemon=True).start()
    steps = iter(range(10_000))

    def reward_fn(prev, tick):  # episodes of 10 steps, the 2nd ends terminated, the others truncated
        k = next(steps)
        if k == 5:  # v2 once the actor runs on v1 (a timer could publish it before the actor even connected)
            policy.actor.net.net[0].weight.data += 0.01
            srv.publish_parameters(dict(policy.state_dict()), meta)
        return float(k), ("terminated" if k == 19 else "truncated") if k % 10 == 9 else None

    try:
        with Recorder(mine, tmp_path / "bag", [("/odom", msgs.ODOMETRY, "sensor_data")]) as recorder:
            actor = run_actor(cfg, mine, client, reward_fn, batch_size=4, wait_s=5, duration=2.0, recorder=recorder)
        assert client.flush(5.0)
    finally:
        stop.set()
        client.close()
    received = [b for b in srv.get_batches(timeout=1.0)]
    got = {k: np.concatenate([b.tensors[k] for b in received]) for k in received[0].tensors}
    assert actor.stats["transitions"] == len(got["rewards"]) >= 30 and actor.stats["swaps"] >= 1
    assert set(got["policy_versions"]) == {1, 2}  # the learner's versions, swapped in between ticks
    assert got["terminated"].sum() == 1 and np.array_equal(np.flatnonzero(got["terminated"]), [19])
    assert np.abs(got["actions"]).max() <= 1.0 and got["truncated"][-1]  # the run's end cuts its last episode
    # the bag, converted at the control ticks, holds exactly the transitions the learner received
    flat = to_transitions(bag_to_episodes(tmp_path / "bag"))
    for key in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated", "interventions"):
        assert np.array_equal(flat[key], got[key]), key

    with pytest.raises(ConfigError, match="needs learner"):
        cmd_actor(["robot=rc_car"])
    with pytest.raises(ConfigError, match="no default reward"):
        cmd_actor([f"learner={srv.address}", "robot=arm"])
    with pytest.raises(ConfigError, match="cannot import"):
        cmd_actor([f"learner={srv.address}", "reward=nowhere:nothing"])


def test_actor_command_over_tls(server, certs, capsys):
    """`robolearn actor ... tls_ca=` acts with the policy a TLS learner publishes; without tls_ca it refuses to
    start unless insecure=true."""
    srv = server(token="t", tls_cert=certs["learner"]["crt"], tls_key=certs["learner"]["key"])
    policy = sac_policy(10, 2, (32, 32))  # rc_car: 10 observations, 2 actions
    sac = {"actor_hidden": [32, 32], "activation": "relu", "actor_layer_norm": False}
    srv.publish_parameters(dict(policy.state_dict()), {"policy": {"obs_dim": 10, "num_actions": 2, "sac": sac}})
    common = [f"learner=localhost:{srv.port}", "robot=rc_car", "transport=memory", "duration=0.5", "wait_s=10"]
    assert cmd_actor([*common, f"tls_ca={certs['learner']['crt']}"]) == 0
    out = capsys.readouterr().out
    assert "'parameters': 1" in out and "'tls_failures': 0" in out, out
    with pytest.raises(ConfigError, match="refuses to connect unencrypted"):
        cmd_actor(common)


def test_actor_names_itself_stably(monkeypatch):
    """A restarted robot keeps its replay lane at the learner: its id is <hostname>/<robot> unless given."""
    import socket

    seen = []

    def client(address, token, actor_id=None, **_):
        seen.append(actor_id)
        raise SystemExit  # stop once the link would be made

    monkeypatch.setattr("real.rl.link.ActorClient", client)
    for args in (["learner=127.0.0.1:1"], ["learner=127.0.0.1:1", "actor_id=car-7"]):
        with pytest.raises(SystemExit):
            cmd_actor(args)
    assert seen == [f"{socket.gethostname()}/rc_car", "car-7"]
