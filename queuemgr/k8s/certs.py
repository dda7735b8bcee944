"""The webhook's TLS certificates: from a mounted Secret, or made here with our own CA.

Why it exists: the API server calls admission webhooks over HTTPS only and
checks the serving certificate against the ``caBundle`` of the webhook
configuration. Two ways to get one:

- **cert-manager (or any tool writing a ``kubernetes.io/tls`` Secret)**: the
  Secret is mounted; :class:`FileCertificates` reads ``tls.crt``/``tls.key``
  and reloads them when the files change (rotation), and cert-manager's CA
  injector fills in the ``caBundle``;
- **self-generated**: :func:`generate` makes a CA and a serving certificate
  for the Service's DNS names (see :func:`service_dns_names`) and any IP
  addresses; the service then patches the CA into the webhook configurations
  (:func:`queuemgr.k8s.apiserver.patch_ca_bundle`).

What must stay true: serving certificates carry their names as
subjectAltNames (Go's TLS ignores the common name), are signed by a CA that
can sign nothing but leaves (``pathlen:0``) and allow server authentication
only; private keys are never written where others can read them (a private
temporary directory, removed as soon as OpenSSL has read them); an
``ssl.SSLContext`` speaks TLS 1.2 or newer.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingCertificate:
    cert_pem: bytes  # the serving certificate (a chain may follow it)
    key_pem: bytes
    ca_pem: bytes  # what the webhook configurations' caBundle must hold; b"" if unknown


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a Service is called by in the cluster (the API server uses ``.svc``)."""
    base = f"{service}.{namespace}"
    return (service, base, f"{base}.svc", f"{base}.svc.cluster.local")


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate(
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    days: int = 365,
    now: dt.datetime | None = None,
) -> ServingCertificate:
    """A new CA and a serving certificate it signed, valid for ``days`` from ``now``."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(minutes=5)  # clock skew
    end = start + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "queuemgr webhook CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    common = dns_names[0] if dns_names else ip_addresses[0]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_key_pem(key),
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
    )


def load_files(cert_file: Path, key_file: Path, ca_file: Path | None = None) -> ServingCertificate:
    """A certificate from files: a mounted TLS Secret's ``tls.crt``, ``tls.key``, ``ca.crt``."""
    ca = ca_file.read_bytes() if ca_file is not None and ca_file.exists() else b""
    return ServingCertificate(
        cert_pem=cert_file.read_bytes(), key_pem=key_file.read_bytes(), ca_pem=ca
    )


def server_context(certificate: ServingCertificate) -> ssl.SSLContext:
    """A TLS 1.2+ server context serving ``certificate``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # OpenSSL reads keys from files only: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="queuemgr-tls-") as private:
        cert_path, key_path = Path(private, "tls.crt"), Path(private, "tls.key")
        cert_path.write_bytes(certificate.cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(certificate.key_pem)
        context.load_cert_chain(cert_path, key_path)
    return context


class CertificateSource(Protocol):
    def context(self) -> ssl.SSLContext:
        """The context for the next connection (it may change when certificates rotate)."""
        ...


class StaticCertificates:
    """One certificate for the server's life (self-generated ones)."""

    def __init__(self, certificate: ServingCertificate) -> None:
        self.certificate = certificate
        self._context = server_context(certificate)

    def context(self) -> ssl.SSLContext:
        return self._context


class FileCertificates:
    """Certificates from files, reloaded when they change (cert-manager rotates them).

    A half-written pair (the kubelet swaps a Secret's files with a symlink, but
    other tools may not) fails to load; the previous context is kept until the
    next check.
    """

    def __init__(self, cert_file: Path, key_file: Path, *, check_every: float = 10.0) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.check_every = check_every
        self._lock = threading.Lock()
        self._stamp = self._mtimes()
        self._context = server_context(load_files(cert_file, key_file))
        self._checked = time.monotonic()
        self.reloads = 0

    def _mtimes(self) -> tuple[int, int]:
        return (self.cert_file.stat().st_mtime_ns, self.key_file.stat().st_mtime_ns)

    def context(self) -> ssl.SSLContext:
        with self._lock:
            if time.monotonic() - self._checked >= self.check_every:
                self._checked = time.monotonic()
                try:
                    stamp = self._mtimes()
                    if stamp != self._stamp:
                        self._context = server_context(load_files(self.cert_file, self.key_file))
                        self._stamp = stamp
                        self.reloads += 1
                except (OSError, ssl.SSLError):
                    pass  # keep serving the previous pair; retried at the next check
            return self._context
