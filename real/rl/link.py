"""The actor/learner link over gRPC: transitions actor -> learner, versioned parameters learner -> actor.

Modelled on LeRobot's HIL-SERL ``LearnerService`` (client-streamed transitions, server-streamed parameters,
2 MiB frames under a 4 MiB message cap) with what it leaves out: payloads are safetensors (`real.rl.codec`,
never pickle), both ends prove they know a shared-secret token, and the actor side never blocks its caller.

Authentication. Every call carries a credential derived from the token (``HMAC(token, "robolearn actor")``,
never the token itself), checked by the learner in constant time (UNAUTHENTICATED otherwise). The learner
signs every parameter payload with ``HMAC(token, sha256(payload))``, which the actor checks in constant time
before decoding, and it drops (and counts) what is unsigned or signed with another token. So an impostor
listening on the learner's port learns only the credential, which cannot sign parameters.

Wire format. Two methods of the service ``robolearn.real.Learner``, registered as generic handlers whose
messages are raw bytes (no protobuf, so no generated code and no protobuf runtime version to match):

- ``SendTransitions``: client stream of frames of one "transitions" payload -> JSON ``{"received": n}``.
- ``StreamParameters``: empty request -> server stream of frames of signed "parameters" payloads (the 32-byte
  signature, then the payload); the learner sends its newest parameters on connect and then each newer
  version (a slow actor skips versions, newest only).

`ActorClient` keeps transitions in a bounded queue (oldest dropped and counted when full) that a background
thread ships in batches; a second thread holds the parameter stream. Both reconnect with exponential
backoff, so the learner can be killed and restarted while the actor keeps controlling the robot.
Parameters carry ``(session, version)``: a restarted learner is a new session and is taken at once.

Encryption. The link runs over TLS: the learner serves a certificate and its key (``tls_cert``, ``tls_key``; PEM,
e.g. from ``robolearn tls-cert``, `real.rl.tls`), and the actor trusts that certificate or its CA (``tls_ca``),
checking that it names the host dialled (or ``tls_server_name``). Without TLS an eavesdropper could read the
traffic and replay the credential and old signed parameters; so plaintext needs ``insecure=True`` at each end
(for a trusted network, an SSH tunnel or a VPN), and either end without a certificate and without it raises
`ConfigError` naming the options. The token is checked in both modes: TLS authenticates the learner to the actor,
the token the actor to the learner. A failed handshake (an untrusted certificate, a name it lacks, a plaintext
peer) is counted (``tls_failures``) and logged once as an error saying which, as is a refused token.

Non-finite transitions are refused at both ends (INVALID_ARGUMENT; the actor drops and counts such a batch
instead of retrying it), and the learner never publishes non-finite parameters.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import hmac
import itertools
import json
import logging
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import torch

from real.rl.codec import (
    FINITE_FIELDS,
    MAX_MESSAGE,
    TRANSITION_FIELDS,
    PayloadError,
    Reassembler,
    check_transitions,
    decode,
    encode,
    frames,
)
from real.rl.tls import check_pair, read_pem
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

SERVICE = "robolearn.real.Learner"
TOKEN_HEADER = "x-robolearn-token"  # carries `credential(token)`, never the token
SIGNATURE_SIZE = 32  # bytes of `sign`'s HMAC-SHA256 in front of each parameter payload
_LIMITS = [("grpc.max_send_message_length", MAX_MESSAGE + 4096),
           ("grpc.max_receive_message_length", MAX_MESSAGE + 4096)]  # fmt: skip
SERVER_OPTIONS = _LIMITS + [
    ("grpc.so_reuseport", 0),  # a port already in use is an error, not shared
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
]
CLIENT_OPTIONS = _LIMITS + [
    ("grpc.keepalive_time_ms", 10_000),  # notice a dead learner host (no RST) within ~15 s
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def _check_token(token: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError("the actor/learner link needs a non-empty shared-secret token")
    return token


def server_credentials(tls_cert: str | None, tls_key: str | None, insecure: bool) -> grpc.ServerCredentials | None:
    """The learner's TLS credentials from its PEM certificate and key; None (plaintext) only when ``insecure``.

    Raises `ConfigError` naming the options when neither or only half of them is given, or both are."""
    if tls_cert or tls_key:
        if insecure:
            raise ConfigError("the learner got tls_cert/tls_key and insecure=true: drop one (TLS or plaintext)")
        if not (tls_cert and tls_key):
            raise ConfigError("the learner's TLS needs both tls_cert=<cert.pem> and tls_key=<key.pem>")
        cert, key = read_pem(tls_cert, "tls_cert"), read_pem(tls_key, "tls_key")
        check_pair(cert, key, tls_cert, tls_key)
        return grpc.ssl_server_credentials([(key, cert)])
    if not insecure:
        raise ConfigError("the learner refuses to serve unencrypted: give tls_cert=<cert.pem> tls_key=<key.pem> "
                          "(make them with `robolearn tls-cert out=<dir> host=<learner host>`), or insecure=true "
                          "for plaintext on a trusted network")  # fmt: skip
    return None


def channel_credentials(tls_ca: str | None, insecure: bool) -> grpc.ChannelCredentials | None:
    """The actor's TLS credentials trusting the PEM certificate(s) in ``tls_ca`` (the learner's self-signed
    certificate or its CA); None (plaintext) only when ``insecure``. Raises `ConfigError` naming the options."""
    if tls_ca:
        if insecure:
            raise ConfigError("the actor got tls_ca and insecure=true: drop one (TLS or plaintext)")
        return grpc.ssl_channel_credentials(root_certificates=read_pem(tls_ca, "tls_ca"))
    if not insecure:
        raise ConfigError("the actor refuses to connect unencrypted: give tls_ca=<the learner's certificate or its "
                          "CA, PEM> (from `robolearn tls-cert`), or insecure=true for plaintext on a trusted "
                          "network")  # fmt: skip
    return None


def credential(token: str) -> str:
    """What an actor presents in ``TOKEN_HEADER``: derived from the token, useless for signing parameters."""
    return hmac.new(token.encode(), b"robolearn actor", "sha256").hexdigest()


def sign(token: str, payload: bytes) -> bytes:
    """The 32-byte signature of a parameter payload: ``HMAC-SHA256(token, sha256(payload))``."""
    return hmac.new(token.encode(), hashlib.sha256(payload).digest(), "sha256").digest()


@dataclasses.dataclass
class TransitionBatch:
    """Transitions received from one actor call: tensors as `codec.TRANSITION_FIELDS`, B rows."""

    tensors: dict[str, np.ndarray]
    meta: dict[str, Any]
    size: int
    peer: str


class LearnerServer:
    """The learner's end: collects transition batches, serves the newest parameters.

    Args:
        token: the shared secret actors must present.
        port: TCP port (0: any free one; see `port` after `start`).
        host: interface to listen on ("127.0.0.1" local only, "0.0.0.0" every interface).
        max_pending: received batches waiting for `get_batches` before senders are told to retry later.
        tls_cert, tls_key: PEM files of the certificate the learner presents and its private key (TLS).
        insecure: serve plaintext instead; without it, a server with no certificate raises `ConfigError`.
    """

    def __init__(self, token: str, port: int = 0, host: str = "127.0.0.1", max_pending: int = 256,
                 max_workers: int = 8, *, tls_cert: str | None = None, tls_key: str | None = None,
                 insecure: bool = False) -> None:  # fmt: skip
        self.token = _check_token(token)
        self._tls = server_credentials(tls_cert, tls_key, insecure)
        self.host, self.port = host, port
        self.session = uuid.uuid4().hex[:12]
        self.version = 0  # of the newest published parameters (a restored learner sets it before publishing)
        self.stats = {"batches": 0, "transitions": 0, "rejected": 0, "invalid": 0, "busy": 0}  # via _count
        self.actors: dict[str, dict[str, Any]] = {}  # actor id -> its latest batch metadata
        self._credential = credential(self.token)
        self._stats_lock = threading.Lock()  # stats are counted from many RPC threads
        self._pending: queue.Queue[TransitionBatch] = queue.Queue(maxsize=max_pending)
        self._cond = threading.Condition()
        self._params: tuple[tuple[str, int], bytes] | None = None  # ((session, version), signature + payload)
        self._stopping = False
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers, thread_name_prefix="learner-rpc"),
                                   options=SERVER_OPTIONS)  # fmt: skip
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
            "SendTransitions": grpc.stream_unary_rpc_method_handler(self._send_transitions),
            "StreamParameters": grpc.unary_stream_rpc_method_handler(self._stream_parameters),
        })])  # fmt: skip

    @property
    def address(self) -> str:
        return f"{'127.0.0.1' if self.host in ('0.0.0.0', '::', '[::]') else self.host}:{self.port}"

    def start(self) -> LearnerServer:
        """Listen and serve; raises OSError when the port cannot be bound."""
        address = f"{self.host}:{self.port}"
        try:
            port = (self._server.add_secure_port(address, self._tls) if self._tls is not None
                    else self._server.add_insecure_port(address))  # fmt: skip
        except RuntimeError as e:
            raise OSError(f"cannot listen on {address}: {e}") from None
        if port == 0:
            raise OSError(f"cannot listen on {address} (in use?)")
        self.port = port
        self._server.start()
        log.info("learner listening on %s:%d (%s, session %s)", self.host, port,
                 "TLS" if self.tls else "UNENCRYPTED: insecure=true", self.session)  # fmt: skip
        return self

    @property
    def tls(self) -> bool:
        """Whether the learner serves TLS (else plaintext, as asked with ``insecure``)."""
        return self._tls is not None

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving (open parameter streams end; actors reconnect to whoever listens next)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._server.stop(grace).wait(5.0)

    def __enter__(self) -> LearnerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- for the learner loop ----------------------------------------------------------------------------

    def get_batches(self, timeout: float | None = None, max_batches: int = 1_000_000) -> list[TransitionBatch]:
        """Received batches, oldest first; waits up to ``timeout`` s for the first (None: no wait)."""
        out = []
        try:
            out.append(self._pending.get(timeout=timeout) if timeout else self._pending.get_nowait())
            while len(out) < max_batches:
                out.append(self._pending.get_nowait())
        except queue.Empty:
            pass
        return out

    def publish_parameters(self, tensors: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> int:
        """Make ``tensors`` (e.g. the actor's state_dict) the newest parameters; returns their version.

        Raises `PayloadError` (publishing nothing) if a tensor holds NaN/inf: a diverged learner must not
        reach the robots.
        """
        bad = sorted(name for name, value in tensors.items() if not torch.isfinite(torch.as_tensor(value)).all())
        if bad:
            raise PayloadError(f"refusing to publish non-finite parameters {bad[:5]}")
        with self._cond:
            self.version += 1
            key = (self.session, self.version)
            payload = encode("parameters", tensors, {**(meta or {}), "session": key[0], "version": key[1]})
            self._params = (key, sign(self.token, payload) + payload)
            self._cond.notify_all()
        return key[1]

    # --- RPC handlers (server threads) -------------------------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += n

    def _authorize(self, context: grpc.ServicerContext) -> None:
        given = dict(context.invocation_metadata()).get(TOKEN_HEADER, "")
        if not hmac.compare_digest(str(given).encode(), self._credential.encode()):
            self._count("rejected")
            log.warning("rejected a call from %s: bad or missing token", context.peer())
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad or missing actor/learner token")

    def _send_transitions(self, request_iterator: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        self._authorize(context)
        reassembler, received = Reassembler(), 0
        try:
            for frame in request_iterator:
                payload = reassembler.feed(frame)
                if payload is None:
                    continue
                meta, tensors = decode(payload, "transitions")
                size = check_transitions(tensors)
                self.actors[str(meta.get("actor_id", context.peer()))] = {**meta, "received_at": time.time()}
                try:
                    self._pending.put(TransitionBatch(tensors, meta, size, context.peer()), timeout=2.0)
                except queue.Full:
                    self._count("busy")
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "learner is behind; send again later")
                received += size
                self._count("batches")
                self._count("transitions", size)
        except PayloadError as e:
            self._count("invalid")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return json.dumps({"received": received, "session": self.session}).encode()

    def _stream_parameters(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self._authorize(context)
        sent: tuple[str, int] | None = None
        while True:
            with self._cond:
                while not self._stopping and context.is_active() and (self._params is None or self._params[0] == sent):
                    self._cond.wait(0.25)
                if self._stopping or not context.is_active():
                    return
                sent, payload = self._params
            yield from frames(payload, transfer_id=sent[1])


class _Backoff:
    """Exponential backoff with jitter: initial, 2x, 4x, ... up to maximum seconds."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial, self.maximum, self.delay = initial, maximum, initial

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self.maximum)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.delay = self.initial


class ActorClient:
    """The actor's end: `send_transitions` and `latest_parameters` never block; threads do the network.

    Args:
        address: the learner's ``host:port``.
        token: the shared secret.
        max_queued: transitions kept while the learner is unreachable; beyond, the oldest are dropped.
        max_batch: transitions per call at most.
        backoff: (first, longest) wait in seconds between reconnection attempts.
        tls_ca: PEM file of the certificate(s) to trust: the learner's self-signed certificate, or its CA.
        tls_server_name: the name the learner's certificate must hold when it differs from ``address``'s host
            (gRPC's ``ssl_target_name_override``, e.g. dialling 10.0.0.5 for a certificate made for gpu-box).
        insecure: connect in plaintext instead; without it, a client with no ``tls_ca`` raises `ConfigError`.
    """

    def __init__(self, address: str, token: str, max_queued: int = 20_000, max_batch: int = 1024,
                 actor_id: str | None = None, backoff: tuple[float, float] = (0.1, 5.0),
                 call_timeout: float = 10.0, *, tls_ca: str | None = None, tls_server_name: str | None = None,
                 insecure: bool = False) -> None:  # fmt: skip
        self.address, self.token = address, _check_token(token)
        tls = channel_credentials(tls_ca, insecure)
        if tls_server_name and tls is None:
            raise ConfigError("tls_server_name is a TLS option; it has no use with insecure=true")
        self.max_queued, self.max_batch, self.call_timeout = max_queued, max_batch, call_timeout
        self.actor_id = actor_id or uuid.uuid4().hex[:8]
        self.backoff = backoff
        # transitions queued/sent/dropped (queue full)/invalid (refused by the learner)/nonfinite (never sent);
        # parameters received and bad_signature (unsigned or another token's: not installed); failed calls, of
        # which tls_failures (no TLS session: untrusted certificate, wrong name, or a plaintext peer)
        self.stats = {"queued": 0, "sent": 0, "dropped": 0, "invalid": 0, "nonfinite": 0, "calls": 0, "failures": 0,
                      "tls_failures": 0, "parameters": 0, "bad_signature": 0}  # fmt: skip
        self.tls = tls is not None
        self._server_name = tls_server_name or address.rsplit(":", 1)[0]  # what the certificate must name
        self.last_error: str | None = None
        self._error_lock = threading.Lock()
        self.latest_meta: dict[str, Any] | None = None  # meta of the parameters last returned
        self._metadata = ((TOKEN_HEADER, credential(token)),)
        self._queue: collections.deque[tuple[int, dict[str, np.ndarray]]] = collections.deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._seq = itertools.count(1)
        self._inflight = 0  # transitions in the call being made
        self._newest: tuple[tuple[str, int], dict[str, Any], dict[str, Any]] | None = None
        self._taken: tuple[str, int] | None = None
        self._param_call: Any = None
        if tls is None:
            self._channel = grpc.insecure_channel(address, options=CLIENT_OPTIONS)
        else:
            override = [("grpc.ssl_target_name_override", tls_server_name)] if tls_server_name else []
            self._channel = grpc.secure_channel(address, tls, options=CLIENT_OPTIONS + override)
        self._send = self._channel.stream_unary(f"/{SERVICE}/SendTransitions")
        self._stream = self._channel.unary_stream(f"/{SERVICE}/StreamParameters")
        self._threads = [threading.Thread(target=self._send_loop, name="actor-send", daemon=True),
                         threading.Thread(target=self._param_loop, name="actor-params", daemon=True)]  # fmt: skip
        for thread in self._threads:
            thread.start()

    # --- the control loop's side (never blocks on the network) -------------------------------------------

    def send_transitions(self, batch: Mapping[str, Any]) -> None:
        """Queue a batch (fields of `codec.TRANSITION_FIELDS`, leading dim B) for the learner.

        Rows with NaN/inf in obs, next_obs, actions or rewards are dropped here and counted (``nonfinite``).
        """
        tensors = {k: np.array(batch[k], dtype=dtype) for k, (dtype, _) in TRANSITION_FIELDS.items() if k in batch}
        if all(k in tensors for k in FINITE_FIELDS):
            finite = np.ones(len(tensors["rewards"]), dtype=bool)
            for name in FINITE_FIELDS:
                value = tensors[name]
                finite &= np.isfinite(value).all(axis=tuple(range(1, value.ndim)))
            if not finite.all():
                self.stats["nonfinite"] += int((~finite).sum())
                log.error("dropping %d transitions with NaN/inf values", (~finite).sum())
                tensors = {k: v[finite] for k, v in tensors.items()}
                if not finite.any():
                    return
        size = check_transitions(tensors)
        with self._cond:
            self._queue.append((size, tensors))
            self.stats["queued"] += size
            self._trim()
            self._cond.notify()

    def _trim(self) -> None:
        while self.stats["queued"] > self.max_queued and self._queue:
            size, _ = self._queue.popleft()
            self.stats["queued"] -= size
            self.stats["dropped"] += size

    def latest_parameters(self) -> tuple[int, dict[str, Any]] | None:
        """``(version, state_dict of torch tensors)`` if newer parameters arrived since the last call, else None."""
        with self._cond:
            if self._newest is None or self._newest[0] == self._taken:
                return None
            self._taken, state, self.latest_meta = self._newest
            return self._taken[1], state

    # --- background threads ------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        backoff = _Backoff(*self.backoff)
        while not self._stop.is_set():
            with self._cond:
                if not self._queue:
                    self._cond.wait(0.25)
                    continue
                inflight, count = [], 0
                while self._queue and (not inflight or count + self._queue[0][0] <= self.max_batch):
                    size, tensors = self._queue.popleft()
                    inflight.append((size, tensors))
                    count += size
                self.stats["queued"] -= count
                self._inflight = count
            tensors = {k: np.concatenate([t[k] for _, t in inflight]) for k in inflight[0][1]}
            seq = next(self._seq)
            meta = {"actor_id": self.actor_id, "seq": seq, "dropped": self.stats["dropped"], "sent_ns": time.time_ns()}
            try:
                self._send(frames(encode("transitions", tensors, meta), seq), timeout=self.call_timeout,
                           metadata=self._metadata)  # fmt: skip
                self.stats["sent"] += count
                self.stats["calls"] += 1
                self._inflight = 0
                backoff.reset()
            except grpc.RpcError as e:
                self._failed(e)
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:  # sending it again would fail again: drop it
                    log.error("learner refused %d transitions as invalid (%s): dropped", count, e.details())
                    with self._cond:
                        self.stats["invalid"] += count
                        self._inflight = 0
                    continue
                with self._cond:  # back to the front, in order; the bound still holds
                    self._queue.extendleft(reversed(inflight))
                    self.stats["queued"] += count
                    self._inflight = 0
                    self._trim()
                self._stop.wait(backoff.next() if e.code() != grpc.StatusCode.UNAUTHENTICATED else self.backoff[1])

    def _param_loop(self) -> None:
        backoff = _Backoff(*self.backoff)
        while not self._stop.is_set():
            try:
                call = self._param_call = self._stream(b"", metadata=self._metadata)
                reassembler = Reassembler()
                for frame in call:
                    payload = reassembler.feed(frame)
                    if payload is not None and self._take(payload):
                        self.last_error = None
                        backoff.reset()
                self._param_call = None  # the learner ended the stream (stopping): reconnect
            except grpc.RpcError as e:
                self._param_call = None
                if self._stop.is_set():
                    return
                self._failed(e)
                self._stop.wait(backoff.next() if e.code() != grpc.StatusCode.UNAUTHENTICATED else self.backoff[1])
            except PayloadError as e:
                self._param_call = None
                call.cancel()  # the stream is out of step: start over on a fresh call
                self.last_error = f"bad parameters from the learner: {e}"
                log.error(self.last_error)
                self._stop.wait(backoff.next())

    def _take(self, signed: bytes) -> bool:
        """Install a signed parameter payload as the newest; whether it was accepted (correctly signed)."""
        signature, payload = signed[:SIGNATURE_SIZE], signed[SIGNATURE_SIZE:]
        if not hmac.compare_digest(signature, sign(self.token, payload)):
            self.stats["bad_signature"] += 1
            message = "parameters not signed with our token (an impostor or a misconfigured learner): ignored"
            if message != self.last_error:
                log.error("learner link: %s", message)
            self.last_error = message
            return False
        meta, tensors = decode(payload, "parameters")
        key = (str(meta.get("session")), int(meta.get("version", 0)))
        state = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}
        with self._cond:
            self._newest = (key, state, meta)
            self.stats["parameters"] += 1
        return True

    def _failed(self, error: grpc.RpcError) -> None:
        """Count a failed call and keep (`last_error`) and log what it means; a misconfiguration (token, TLS) is
        logged as an error once per distinct message, a learner that is away at info level."""
        self.stats["failures"] += 1
        code, details = error.code(), str(error.details())
        hint = self._tls_problem(details)
        if hint:
            self.stats["tls_failures"] += 1
        elif code == grpc.StatusCode.UNAUTHENTICATED:
            hint = (f"the learner at {self.address} refused our token: both ends need the same shared secret "
                    "(ROBOLEARN_TOKEN or token_file=)")  # fmt: skip
        message = f"{code.name}: {hint} ({details})" if hint else f"{code.name}: {details}"
        with self._error_lock:  # both threads fail alike: log each message once
            if message != self.last_error:
                (log.error if hint else log.info)("learner link: %s", message)
            self.last_error = message

    def _tls_problem(self, details: str) -> str | None:
        """What a failed connection's ``details`` say about TLS, for a user; None when they say nothing of it."""
        where = f"the learner at {self.address}"
        if "CERTIFICATE_VERIFY_FAILED" in details:
            return (f"TLS handshake failed: the certificate of {where} is not one tls_ca trusts (another learner's "
                    "certificate or another CA?)")  # fmt: skip
        if "Hostname Verification" in details or "No match found for server name" in details:
            name = self._server_name
            return (f"TLS handshake failed: the certificate of {where} does not hold the name {name}; dial a "
                    "name it holds (robolearn tls-cert host=...) or set tls_server_name=<a name it holds>")  # fmt: skip
        if "WRONG_VERSION_NUMBER" in details:
            return (f"TLS handshake failed: {where} answers in plaintext (started with insecure=true?); give it "
                    "tls_cert= and tls_key=, or connect with insecure=true")  # fmt: skip
        if "handshake failed" in details.lower():
            return f"TLS handshake with {where} failed"
        if not self.tls and "failed to connect" in details and "Socket closed" in details:
            # the peer accepted the TCP connection and closed it before HTTP/2 began: a TLS server does that
            return (f"{where} closed the connection at once: it serves TLS (or is no learner), and this "
                    "actor connects in plaintext (insecure=true); give tls_ca=<the learner's certificate>")  # fmt: skip
        return None

    # --- closing -----------------------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` s for the queue to empty; whether it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if not self._queue and not self._inflight:
                    return True
            time.sleep(0.01)
        return False

    def close(self, flush_timeout: float = 0.0) -> None:
        """Stop the threads (after trying to send what is queued for ``flush_timeout`` s) and the channel."""
        if self._stop.is_set():
            return
        if flush_timeout > 0:
            self.flush(flush_timeout)
        self._stop.set()
        call = self._param_call
        if call is not None:
            call.cancel()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(5.0)
        self._channel.close()

    def __enter__(self) -> ActorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_token(token_file: str | None) -> str:
    """The link's shared secret, for both ends: the file ``token_file``, else the ROBOLEARN_TOKEN environment
    variable (never a command-line value, which other users of the machine could read in ``ps``)."""
    token = Path(token_file).read_text().strip() if token_file else os.environ.get("ROBOLEARN_TOKEN", "")
    if not token:
        raise ConfigError("the link needs a shared secret: set ROBOLEARN_TOKEN or token_file=<file>")
    return token
