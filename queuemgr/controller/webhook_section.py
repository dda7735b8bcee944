"""The ``webhook:`` section of the service configuration, and its ``QUEUEMGR_WEBHOOK_*`` vars.

Why it exists: every replica of ``queuemgr serve`` can serve the admission
webhook (:mod:`queuemgr.k8s.admission_handler`) beside its scheduler. Where it
listens, where its certificate comes from and which webhook configurations
get its CA are deployment facts, so they live in the configuration file (a
ConfigMap) with per-pod overrides from the environment (the namespace from
the downward API, for example). The keys are listed in docs/operations.md;
change both together.

What must stay true: like the rest of the configuration, each value is
checked before anything starts and a bad one raises
:class:`~queuemgr.service.settings.ConfigError`'s base class with a message
that starts with the YAML key (``webhook.address``) or the variable
(``QUEUEMGR_WEBHOOK_ADDRESS``); the variable wins over the file. An enabled
webhook has exactly one certificate source: ``cert_dir`` (a mounted
``kubernetes.io/tls`` Secret, as cert-manager writes it) or ``self_signed``;
``patch_ca_bundle`` needs a CA to patch (``self_signed``, or a ``ca.crt`` in
``cert_dir``). A disabled webhook's other keys are still checked, but no
file is read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from queuemgr.core.resources import GPU
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.webhook_registration import MUTATING_NAME, VALIDATING_NAME
from queuemgr.spec import checks as y
from queuemgr.spec.checks import InputError

SECTION = "webhook"

# key of the ``webhook:`` section -> environment variable; the environment wins.
WEBHOOK_ENV = {
    "enabled": "QUEUEMGR_WEBHOOK_ENABLED",
    "address": "QUEUEMGR_WEBHOOK_ADDRESS",
    "cert_dir": "QUEUEMGR_WEBHOOK_CERT_DIR",
    "self_signed": "QUEUEMGR_WEBHOOK_SELF_SIGNED",
    "service": "QUEUEMGR_WEBHOOK_SERVICE",
    "namespace": "QUEUEMGR_WEBHOOK_NAMESPACE",
    "dns_names": "QUEUEMGR_WEBHOOK_DNS_NAMES",
    "ip_addresses": "QUEUEMGR_WEBHOOK_IP_ADDRESSES",
    "patch_ca_bundle": "QUEUEMGR_WEBHOOK_PATCH_CA_BUNDLE",
    "mutating_configuration": "QUEUEMGR_WEBHOOK_MUTATING_CONFIGURATION",
    "validating_configuration": "QUEUEMGR_WEBHOOK_VALIDATING_CONFIGURATION",
    "managed_namespaces": "QUEUEMGR_WEBHOOK_MANAGED_NAMESPACES",
    "allow_on_store_outage": "QUEUEMGR_WEBHOOK_ALLOW_ON_STORE_OUTAGE",
    "gpu_resources": "QUEUEMGR_WEBHOOK_GPU_RESOURCES",
}

CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"  # a kubernetes.io/tls Secret

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
# RFC 1123 names: a Service and a namespace are labels, a DNS name is dotted labels.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_LABEL = re.compile(_DNS_LABEL)
_DNS = re.compile(rf"(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*")
# An object name (webhook configurations): a DNS subdomain.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class WebhookConfigError(InputError):
    """A bad ``webhook`` value; the message starts with the key or variable."""


@dataclass(frozen=True, kw_only=True)
class WebhookConfig:
    enabled: bool = False
    host: str = "0.0.0.0"  # the API server calls the pod's IP through the Service
    port: int = 9443
    cert_dir: Path | None = None  # tls.crt, tls.key (and ca.crt) of a mounted TLS Secret
    self_signed: bool = False  # generate a CA and a serving certificate at start
    service: str = "queuemgr-webhook"  # the Service the webhook configurations name
    namespace: str = "queuemgr-system"  # ... and its namespace
    dns_names: tuple[str, ...] = ()  # more subjectAltNames for a self-signed certificate
    ip_addresses: tuple[str, ...] = ()  # ... IP ones, for URL-based webhook configurations
    patch_ca_bundle: bool = False  # write our CA into the two configurations' caBundle
    mutating_configuration: str = MUTATING_NAME
    validating_configuration: str = VALIDATING_NAME
    managed_namespaces: LabelSelector = field(default_factory=LabelSelector)
    allow_on_store_outage: bool = True
    gpu_resources: frozenset[str] = frozenset({GPU})

    @property
    def cert_file(self) -> Path | None:
        return None if self.cert_dir is None else self.cert_dir / CERT_FILE

    @property
    def key_file(self) -> Path | None:
        return None if self.cert_dir is None else self.cert_dir / KEY_FILE

    @property
    def ca_file(self) -> Path | None:
        return None if self.cert_dir is None else self.cert_dir / CA_FILE


def load_webhook_config(
    raw: object, env: Mapping[str, str], base: Path, *, section: str = SECTION
) -> WebhookConfig:
    """The ``webhook`` section (``raw``, None when absent) overridden by ``env``."""
    values: dict[str, tuple[object, str, bool]] = {}  # key -> (value, where, from the env)
    if raw is not None:
        try:
            checked = y.mapping(raw, section, optional=tuple(WEBHOOK_ENV))
        except InputError as exc:
            raise WebhookConfigError(str(exc)) from None
        values = {k: (v, f"{section}.{k}", False) for k, v in checked.items()}
    for key, var in WEBHOOK_ENV.items():
        if env.get(var):
            values[key] = (env[var], var, True)
    out: dict[str, object] = {}
    where: dict[str, str] = {}
    for key, (value, at, from_env) in values.items():
        try:
            out[key] = _value(key, value, at, from_env, base)
        except InputError as exc:
            raise WebhookConfigError(str(exc)) from None
        where[key] = at
    config = _assemble(out)
    _check(config, where, section)
    return config


def _bool(value: object, where: str, from_env: bool) -> bool:
    if from_env and isinstance(value, str):
        if value.strip().lower() in _TRUE:
            return True
        if value.strip().lower() in _FALSE:
            return False
        raise WebhookConfigError(f"{where}: expected true or false, got {value!r}")
    return y.boolean(value, where)


def _names(value: object, where: str, from_env: bool) -> list[str]:
    """A list of strings; from the environment, comma-separated."""
    if from_env and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, str):
        return [value]
    return [y.string(item, y.at(where, i)) for i, item in enumerate(y.sequence(value, where))]


def _value(key: str, value: object, where: str, from_env: bool, base: Path) -> object:
    if key in ("enabled", "self_signed", "patch_ca_bundle", "allow_on_store_outage"):
        return _bool(value, where, from_env)
    if key == "address":
        host, sep, port = y.string(value, where).rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise WebhookConfigError(f"{where}: expected HOST:PORT, got {value!r}")
        return (host.strip("[]"), int(port))
    if key == "cert_dir":
        path = Path(y.string(value, where))
        return path if path.is_absolute() else base / path
    if key in ("service", "namespace"):
        text = y.string(value, where)
        if not _LABEL.fullmatch(text):
            raise WebhookConfigError(f"{where}: expected a DNS label (RFC 1123), got {text!r}")
        return text
    if key in ("mutating_configuration", "validating_configuration"):
        text = y.string(value, where)
        if not _SUBDOMAIN.fullmatch(text):
            raise WebhookConfigError(f"{where}: expected an object name, got {text!r}")
        return text
    if key == "dns_names":
        names = _names(value, where, from_env)
        for name in names:
            if len(name) > 253 or not _DNS.fullmatch(name):
                raise WebhookConfigError(f"{where}: bad DNS name {name!r}")
        return tuple(names)
    if key == "ip_addresses":
        addresses = _names(value, where, from_env)
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise WebhookConfigError(f"{where}: bad IP address {address!r}") from None
        return tuple(addresses)
    if key == "managed_namespaces":
        try:
            if isinstance(value, Mapping):
                y.mapping(value, where, optional=("matchLabels", "matchExpressions"))
                return LabelSelector.from_json(value)
            if value is None or value == "":
                return LabelSelector()
            if not isinstance(value, str):
                raise WebhookConfigError(
                    f"{where}: expected a label selector (`kubectl -l` form or a mapping with"
                    f" matchLabels/matchExpressions), got {value!r}"
                )
            return LabelSelector.parse(value)
        except InputError:
            raise
        except (ValueError, TypeError, AttributeError) as exc:
            raise WebhookConfigError(f"{where}: {exc}") from None
    if key == "gpu_resources":
        names = _names(value, where, from_env)
        if not names:
            raise WebhookConfigError(f"{where}: name at least one GPU resource")
        return frozenset(names)
    raise WebhookConfigError(f"{where}: unknown key")  # unreachable: keys are checked above


def _assemble(values: Mapping[str, object]) -> WebhookConfig:
    kwargs = dict(values)
    address = kwargs.pop("address", None)
    if isinstance(address, tuple):
        kwargs["host"], kwargs["port"] = address
    return WebhookConfig(**kwargs)  # type: ignore[arg-type]


def _check(config: WebhookConfig, where: dict[str, str], section: str) -> None:
    """Cross-key rules; files are read only for an enabled webhook."""

    def named(key: str) -> str:
        return where.get(key, f"{section}.{key}")

    if config.cert_dir is not None and config.self_signed:
        raise WebhookConfigError(
            f"{named('self_signed')}: choose one certificate source, not both"
            f" {named('cert_dir')} and self_signed"
        )
    if not config.enabled:
        return
    if config.cert_dir is None and not config.self_signed:
        raise WebhookConfigError(
            f"{named('cert_dir')}: an enabled webhook needs a certificate: set cert_dir (a"
            " mounted TLS Secret with tls.crt and tls.key) or self_signed: true"
        )
    if config.cert_dir is not None:
        for path in (config.cert_file, config.key_file):
            assert path is not None
            if not path.is_file():
                raise WebhookConfigError(
                    f"{named('cert_dir')}: no {path.name} in {config.cert_dir}"
                )
        if config.patch_ca_bundle and not (config.ca_file and config.ca_file.is_file()):
            raise WebhookConfigError(
                f"{named('patch_ca_bundle')}: there is no CA to patch in: {config.cert_dir} has"
                f" no {CA_FILE} (let cert-manager's CA injector fill in caBundle instead)"
            )


__all__ = ["WEBHOOK_ENV", "WebhookConfig", "WebhookConfigError", "load_webhook_config"]
