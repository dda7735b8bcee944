"""What the webhook asks of the API server: patch our CA in, and read namespace labels.

Why it exists: with self-generated certificates, the API server must be told
which CA to trust: :func:`patch_ca_bundle` writes it into every webhook of
our two configurations (the service does this at start, after generating the
certificate). And the webhook checks the managed-namespace selector itself
(:class:`ApiNamespaceLabels`), in case a configuration was applied without
its ``namespaceSelector``.

Several replicas with self-generated certificates each have their own CA;
:func:`trust_ca` adds a replica's CA to the bundle instead of replacing it,
so every replica behind the Service is trusted at once.

What must stay true: :func:`patch_ca_bundle` changes only ``caBundle``, with
a JSON Patch that tests each webhook's name at its index first (a concurrent
edit that reorders the webhooks makes the patch fail instead of writing the
wrong entry), and writes nothing when the bundle is already in place;
:func:`trust_ca` writes nothing when every webhook already trusts the CA,
puts it first, and keeps at most ``keep`` CAs: expired and unreadable ones
are dropped, and the oldest additions fall off the end;
:class:`ApiNamespaceLabels` never raises: a namespace it cannot read counts
as managed (a labelled job is then suspended, never let through).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.patch import Operation, pointer
from queuemgr.k8s.webhook_registration import MUTATING_NAME, VALIDATING_NAME

log = logging.getLogger(__name__)


def _bundle_ops(webhooks: list[Any], bundle: str) -> list[dict[str, Any]]:
    ops: list[Operation] = []
    for i, webhook in enumerate(webhooks):
        if getattr(webhook.client_config, "ca_bundle", None) == bundle:
            continue
        ops.append(Operation(op="test", path=pointer(("webhooks", i, "name")), value=webhook.name))
        ops.append(
            Operation(
                op="add", path=pointer(("webhooks", i, "clientConfig", "caBundle")), value=bundle
            )
        )
    return [o.as_json() for o in ops]


def patch_ca_bundle(
    api_client: client.ApiClient,
    ca_pem: bytes,
    *,
    mutating: str = MUTATING_NAME,
    validating: str = VALIDATING_NAME,
) -> int:
    """Put ``ca_pem`` into every webhook of both configurations; returns how many changed."""
    api = client.AdmissionregistrationV1Api(api_client)
    bundle = base64.b64encode(ca_pem).decode("ascii")
    changed = 0
    current = api.read_mutating_webhook_configuration(mutating)
    ops = _bundle_ops(list(current.webhooks or []), bundle)
    if ops:
        api.patch_mutating_webhook_configuration(mutating, ops)
        changed += len(ops) // 2
    current_v = api.read_validating_webhook_configuration(validating)
    ops = _bundle_ops(list(current_v.webhooks or []), bundle)
    if ops:
        api.patch_validating_webhook_configuration(validating, ops)
        changed += len(ops) // 2
    log.info("caBundle patched into %d webhook(s)", changed)
    return changed


def _certificates(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, skipping what does not parse."""
    found: list[x509.Certificate] = []
    marker = b"-----END CERTIFICATE-----"
    for chunk in pem.split(marker):
        if b"-----BEGIN CERTIFICATE-----" not in chunk:
            continue
        try:
            found.append(x509.load_pem_x509_certificate(chunk.strip() + b"\n" + marker + b"\n"))
        except ValueError:
            log.warning("caBundle: skipping a certificate that does not parse")
    return found


def _print(cert: x509.Certificate) -> bytes:
    return cert.fingerprint(hashes.SHA256())


def _bundles(webhooks: Iterable[Any]) -> list[bytes]:
    out = []
    for webhook in webhooks:
        raw = getattr(webhook.client_config, "ca_bundle", None) or ""
        try:
            out.append(base64.b64decode(raw))
        except (binascii.Error, ValueError):
            out.append(b"")
    return out


def trust_ca(
    api_client: client.ApiClient,
    ca_pem: bytes,
    *,
    mutating: str = MUTATING_NAME,
    validating: str = VALIDATING_NAME,
    keep: int = 8,
    now: dt.datetime | None = None,
) -> int:
    """Make every webhook of both configurations trust ``ca_pem`` too; returns how many changed.

    The new bundle is ``ca_pem`` followed by the other CAs already there that
    are still valid, at most ``keep`` in all. Nothing is written when every
    webhook trusts ``ca_pem`` already.
    """
    ours = _certificates(ca_pem)
    if not ours:
        raise ValueError("trust_ca: ca_pem holds no certificate")
    api = client.AdmissionregistrationV1Api(api_client)
    webhooks: list[Any] = list(api.read_mutating_webhook_configuration(mutating).webhooks or [])
    webhooks += list(api.read_validating_webhook_configuration(validating).webhooks or [])
    bundles = [_certificates(pem) for pem in _bundles(webhooks)]
    mine = {_print(c) for c in ours}
    if all(mine <= {_print(c) for c in bundle} for bundle in bundles):
        return 0
    moment = now or dt.datetime.now(dt.UTC)
    chosen, seen = list(ours), set(mine)
    for bundle in bundles:
        for cert in bundle:
            stamp = _print(cert)
            if stamp in seen or cert.not_valid_after_utc <= moment:
                continue
            seen.add(stamp)
            chosen.append(cert)
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chosen[: max(keep, 1)])
    return patch_ca_bundle(api_client, pem, mutating=mutating, validating=validating)


class ApiNamespaceLabels:
    """Namespace labels from the API server, cached for ``ttl`` seconds."""

    def __init__(self, api_client: client.ApiClient, *, ttl: float = 30.0) -> None:
        self._api = client.CoreV1Api(api_client)
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(namespace)
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        try:
            found = self._api.read_namespace(namespace)
            labels = dict(found.metadata.labels or {}) if found.metadata else {}
        except ApiException as error:
            if error.status != 404:
                log.warning("cannot read namespace %s: %s", namespace, error.reason)
                return None
            labels = {}
        except Exception as error:  # connection errors of any client version
            log.warning("cannot read namespace %s: %s", namespace, error)
            return None
        with self._lock:
            self._cache[namespace] = (now, labels)
        return labels
