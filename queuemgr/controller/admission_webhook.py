"""The admission webhook inside ``queuemgr serve``: server, certificate and trusted CA.

Why it exists: the API server must reach *a* queuemgr replica for every
labelled job it creates, so every replica serves the webhook, the leader and
the standbys alike (the webhook only reads the store). This module puts
together what :mod:`queuemgr.k8s` provides for one replica, from the
``webhook:`` section of the configuration
(:class:`~queuemgr.controller.webhook_section.WebhookConfig`):

- the certificate: a mounted TLS Secret (reloaded when cert-manager rotates
  it) or a CA and serving certificate generated at start;
- the handler over the Postgres-backed queue directory;
- with ``patch_ca_bundle``, a thread that makes the two webhook
  configurations trust this replica's CA (added to the bundle, not put in
  place of the other replicas' CAs), retrying while the API server or the
  configurations are missing, and checking again every minute in case
  another replica's write raced ours or the configurations were re-created.

What must stay true: the webhook needs no leadership and no database to
start serving; ``/readyz`` of the webhook server says not ready until the CA
is trusted (when this replica patches it); :meth:`AdmissionWebhook.stop`
returns once the server and the thread have ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from queuemgr.controller.store_directory import StoreQueueDirectory
from queuemgr.controller.webhook_section import WebhookConfig
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.apiclient import ApiClient, KubernetesUnavailable, load_api_client
from queuemgr.k8s.apiserver import ApiNamespaceLabels, trust_ca
from queuemgr.k8s.certs import (
    CertificateSource,
    FileCertificates,
    StaticCertificates,
    generate,
    service_dns_names,
)
from queuemgr.k8s.rules import WebhookSettings
from queuemgr.k8s.webhook_server import WebhookServer
from queuemgr.store.handle import Database

log = logging.getLogger(__name__)

RECHECK_INTERVAL = 60.0  # seconds between checks that the configurations still trust our CA


def _certificates(config: WebhookConfig) -> tuple[CertificateSource, Callable[[], bytes]]:
    """The certificate source, and how to read the CA to trust (b"" when unknown)."""
    if config.self_signed:
        names = (*service_dns_names(config.service, config.namespace), *config.dns_names)
        certificate = generate(dns_names=names, ip_addresses=config.ip_addresses)
        log.info("webhook: generated a CA and a certificate for %s", ", ".join(names))
        return StaticCertificates(certificate), lambda: certificate.ca_pem
    assert config.cert_file is not None and config.key_file is not None
    ca_file = config.ca_file

    def mounted_ca() -> bytes:
        # Read each time: cert-manager may rotate the CA with the certificate.
        return ca_file.read_bytes() if ca_file is not None and ca_file.is_file() else b""

    return FileCertificates(config.cert_file, config.key_file), mounted_ca


class AdmissionWebhook:
    """One replica's webhook server, and the thread keeping its CA trusted."""

    def __init__(
        self,
        config: WebhookConfig,
        db: Database,
        *,
        api_client: ApiClient | None = None,
        recheck_interval: float = RECHECK_INTERVAL,
    ) -> None:
        self.config = config
        self.recheck_interval = recheck_interval
        self.certificates, self._ca = _certificates(config)
        needs_api = config.patch_ca_bundle or not config.managed_namespaces.empty
        self._own_client = api_client is None and needs_api
        self.api_client = api_client if api_client is not None or not needs_api else None
        if self._own_client:
            self.api_client = load_api_client()
        namespaces = None
        if not config.managed_namespaces.empty and self.api_client is not None:
            namespaces = ApiNamespaceLabels(self.api_client)
        handler = AdmissionHandler(
            StoreQueueDirectory(db),
            WebhookSettings(
                namespace_selector=config.managed_namespaces,
                gpu_resources=frozenset(ResourceName(r) for r in config.gpu_resources),
                allow_on_store_outage=config.allow_on_store_outage,
            ),
            namespaces,
        )
        self.server = WebhookServer(
            handler, self.certificates, host=config.host, port=config.port, ready=self.ready
        )
        self.trusted = threading.Event()  # set once the configurations trust our CA
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def ready(self) -> tuple[bool, str]:
        if self.config.patch_ca_bundle and not self.trusted.is_set():
            return False, "the webhook configurations do not trust this replica's CA yet"
        return True, "serving"

    def start(self) -> None:
        self.server.start()
        log.info("webhook: serving https on %s:%d", *self.address)
        if self.config.patch_ca_bundle:
            self._thread = threading.Thread(
                target=self._keep_trusted, name="queuemgr-webhook-ca", daemon=True
            )
            self._thread.start()

    def trust_once(self) -> int:
        """Add our CA to both configurations now; how many webhooks changed."""
        assert self.api_client is not None
        ca = self._ca()
        if not ca:
            raise ValueError(f"no CA to trust: {self.config.ca_file} is missing or empty")
        changed = trust_ca(
            self.api_client,
            ca,
            mutating=self.config.mutating_configuration,
            validating=self.config.validating_configuration,
        )
        if changed:
            log.info(
                "webhook: %s and %s trust this replica's CA (%d webhook(s) patched)",
                self.config.mutating_configuration,
                self.config.validating_configuration,
                changed,
            )
        return changed

    def _keep_trusted(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                self.trust_once()
            except Exception as error:  # API down, configurations missing, no RBAC: retry
                log.warning(
                    "webhook: cannot patch caBundle of %s/%s (retrying in %.0f s): %s",
                    self.config.mutating_configuration,
                    self.config.validating_configuration,
                    backoff,
                    getattr(error, "reason", None) or error,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.recheck_interval)
                continue
            self.trusted.set()
            backoff = 1.0
            self._stop.wait(self.recheck_interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.server.stop()
        if self._own_client and self.api_client is not None:
            self.api_client.close()  # type: ignore[no-untyped-call]


__all__ = ["AdmissionWebhook", "KubernetesUnavailable", "load_api_client"]
