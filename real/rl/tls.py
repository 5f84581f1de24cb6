"""A key + self-signed certificate for the learner's TLS (``robolearn tls-cert``), and reading PEM files.

    robolearn tls-cert out=certs host=gpu-box            # certs/learner.crt + certs/learner.key (mode 600)
    robolearn learner ... tls_cert=certs/learner.crt tls_key=certs/learner.key      # on the GPU box
    robolearn actor learner=gpu-box:50051 ... tls_ca=certs/learner.crt               # on the robot (the .crt only)

The certificate is its own CA: the actor trusts exactly it (``tls_ca=``), no public CA is involved. gRPC
checks the name the actor dials against the certificate's subjectAltName (the CN alone is not accepted), so the
certificate lists every name in ``host=`` (comma-separated DNS names or IP addresses) plus localhost and
127.0.0.1. An actor that dials a name the certificate lacks can say which name to expect with
``tls_server_name=``. Keys are ECDSA P-256, made with the ``cryptography`` package; the equivalent OpenSSL
line is in docs/real-robots.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
from pathlib import Path

from robolearn.errors import ConfigError

CERT_NAME, KEY_NAME = "learner.crt", "learner.key"
DEFAULT_NAMES = ("localhost", "127.0.0.1")


def read_pem(path: str | Path, what: str) -> bytes:
    """The bytes of PEM file ``path``; a `ConfigError` naming ``what`` (e.g. "tls_cert") when it is unusable."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as e:
        raise ConfigError(f"{what}={path}: cannot read it ({e.strerror})") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{what}={path} is not a PEM file (no -----BEGIN line)")
    return data


def check_pair(cert_pem: bytes, key_pem: bytes, cert_path: str | Path, key_path: str | Path) -> None:
    """Raise `ConfigError` unless ``key_pem`` is the private key of ``cert_pem`` and the certificate is valid now
    (gRPC itself only says that it cannot listen). Skipped where ``cryptography`` is not installed."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        return
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise ConfigError(f"tls_cert={cert_path} holds no usable certificate: {e}") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:  # TypeError: an encrypted key (gRPC cannot take a passphrase)
        raise ConfigError(f"tls_key={key_path} holds no usable unencrypted private key: {e}") from None
    raw = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*raw) != cert.public_key().public_bytes(*raw):
        raise ConfigError(f"tls_key={key_path} is not the private key of tls_cert={cert_path}")
    now = datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise ConfigError(f"tls_cert={cert_path} is valid from {cert.not_valid_before_utc:%Y-%m-%d} to "
                          f"{cert.not_valid_after_utc:%Y-%m-%d} only; make a new one (robolearn tls-cert)")  # fmt: skip


def make_certificate(out: str | Path, hosts: list[str] | tuple[str, ...] = (), days: int = 825,
                     force: bool = False) -> tuple[Path, Path]:  # fmt: skip
    """Write ``out/learner.crt`` and ``out/learner.key`` (owner-only): an ECDSA P-256 key and a self-signed
    certificate valid for ``days`` whose subjectAltName holds ``hosts`` plus localhost and 127.0.0.1.

    Returns (certificate, key). Refuses to overwrite an existing pair unless ``force``.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as e:  # a dependency of robolearn; an environment without it can use OpenSSL instead
        raise ConfigError(f"tls-cert needs the cryptography package ({e}); or see docs/real-robots.md for the "
                          "openssl line") from None  # fmt: skip
    names = list(dict.fromkeys([h.strip() for h in hosts if h.strip()] + list(DEFAULT_NAMES)))
    san: list[x509.GeneralName] = []
    for name in names:
        try:
            san.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            san.append(x509.DNSName(name))
    out = Path(out).expanduser()
    cert_path, key_path = out / CERT_NAME, out / KEY_NAME
    if not force and (cert_path.exists() or key_path.exists()):
        raise ConfigError(f"{cert_path} or {key_path} exists; give force=true to replace them")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "robolearn learner")])  # fmt: skip
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a robot whose clock runs behind
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)  # its own trust anchor
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    key_path.unlink(missing_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others, not even briefly
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


@dataclasses.dataclass
class TLSCertConfig:
    """`robolearn tls-cert`: a key + self-signed certificate for the learner's TLS (copy the .crt to the robots)."""

    out: str | None = None  # required: the folder for learner.crt and learner.key
    host: str = ""  # the learner's names or IPs as the actors dial them, comma-separated (+ localhost)
    days: int = 825  # validity
    force: bool = False  # replace an existing pair


def cmd_tls_cert(cfg: TLSCertConfig) -> int:
    """Write a key and a self-signed certificate for `robolearn learner tls_cert= tls_key=` and the actors'
    ``tls_ca=``; its subjectAltName lists ``host=`` (comma-separated names or IPs) plus localhost and 127.0.0.1."""
    if not cfg.out:
        raise ConfigError("tls-cert needs out=<folder> (and host=<the learner's name or IP, as actors dial it>)")
    cert, key = make_certificate(cfg.out, cfg.host.split(","), cfg.days, cfg.force)
    print(f"wrote {cert} (copy it to each robot) and {key} (keep it on the learner's machine only)\n"
          f"  robolearn learner ... tls_cert={cert} tls_key={key}\n"
          f"  robolearn actor learner=<host>:<port> ... tls_ca={cert}")  # fmt: skip
    return 0
