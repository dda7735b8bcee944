"""The service's configuration: a YAML file (``--config``) overridden by ``QUEUEMGR_*`` vars.

Why it exists: ``queuemgr serve`` must start from a file an operator keeps in
version control, with secrets and per-replica values (the database URL, the
replica name) from the environment. The keys and variables are listed in
docs/operations.md; change both together.

What must stay true: every value is checked before anything starts, and a bad
one raises :class:`ConfigError` naming the YAML key or the environment
variable (the CLI exits 2 with it); unknown keys are errors, never ignored.
The service always admits a preemptor only after its victims stopped, and
waits for the real pods to stop (``victim_stop_delay``, the simulator's
stand-in for that wait, must stay 0).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from queuemgr.controller.kube_section import KubernetesSettings, parse_kubernetes
from queuemgr.controller.webhook_section import WebhookConfig, load_webhook_config
from queuemgr.core.names import NameRule
from queuemgr.core.policy import PreemptorAdmission, SchedulerPolicy
from queuemgr.spec import checks as y
from queuemgr.spec.checks import InputError
from queuemgr.spec.knobs import KNOBS, parse_policy

BACKENDS = ("simulated", "kubernetes")

# YAML key -> environment variable; the environment wins.
ENV = {
    "database_url": "QUEUEMGR_DATABASE_URL",
    "backend": "QUEUEMGR_BACKEND",
    "cluster_file": "QUEUEMGR_CLUSTER_FILE",
    "default_runtime": "QUEUEMGR_DEFAULT_RUNTIME",
    "cycle_interval": "QUEUEMGR_CYCLE_INTERVAL",
    "http_address": "QUEUEMGR_HTTP_ADDRESS",
    "replica": "QUEUEMGR_REPLICA",
}


KUBECONFIG_ENV = "QUEUEMGR_KUBECONFIG"  # overrides kubernetes.kubeconfig


class ConfigError(InputError):
    """A configuration value is unusable; the message starts with the key or variable."""


def _default_replica() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    database_url: str | None = None  # None: the embedded Postgres
    backend: str = "simulated"
    cluster_file: Path | None = None
    default_runtime: float = 60.0  # seconds a simulated gang without max_runtime runs
    cycle_interval: float = 5.0  # seconds between safety cycles
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    replica: str = field(default_factory=_default_replica)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    policy: SchedulerPolicy = field(default_factory=SchedulerPolicy)
    webhook: WebhookConfig = field(default_factory=WebhookConfig)  # the `webhook:` section


def load_config(path: Path | None, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """The file's values (when given), then the environment's; ConfigError on a bad one."""
    env = os.environ if env is None else env
    raw: dict[str, object] = {}
    base = Path.cwd()
    if path is not None:
        try:
            loaded = y.read_yaml(path, "configuration", ConfigError)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        try:
            raw = y.mapping(loaded or {}, "", optional=(*ENV, "scheduler", "webhook", "kubernetes"))
        except InputError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        base = path.parent
    webhook_raw = raw.pop("webhook", None)
    kubernetes_raw = raw.pop("kubernetes", None)
    values: dict[str, tuple[object, str]] = {k: (v, k) for k, v in raw.items()}
    for key, var in ENV.items():
        if env.get(var):
            values[key] = (env[var], var)
    config = _build(values, base)
    try:  # its own keys and QUEUEMGR_WEBHOOK_* variables (controller/webhook_section.py)
        webhook = load_webhook_config(webhook_raw, env, base)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    try:  # its own keys and QUEUEMGR_KUBECONFIG (controller/kube_section.py)
        kubernetes = parse_kubernetes(kubernetes_raw, base, env.get(KUBECONFIG_ENV) or None)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    return dataclasses.replace(config, webhook=webhook, kubernetes=kubernetes)


def _build(values: Mapping[str, tuple[object, str]], base: Path) -> ServiceConfig:
    cfg = ServiceConfig()
    out: dict[str, object] = {}
    for key, (value, where) in values.items():
        try:
            out.update(_field(key, value, where, base))
        except InputError as exc:
            raise ConfigError(str(exc)) from None
    return dataclasses.replace(cfg, **out)  # type: ignore[arg-type]


def _number(value: object, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    return y.number(value, where, positive=True)


def _field(key: str, value: object, where: str, base: Path) -> dict[str, object]:
    if key == "database_url":
        return {key: y.string(value, where)}
    if key == "backend":
        if value not in BACKENDS:
            raise ConfigError(f"{where}: expected one of {list(BACKENDS)}, got {value!r}")
        return {key: value}
    if key == "cluster_file":
        p = Path(y.string(value, where))
        return {key: p if p.is_absolute() else base / p}
    if key in ("default_runtime", "cycle_interval"):
        return {key: _number(value, where)}
    if key == "http_address":
        host, sep, port = y.string(value, where).rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"{where}: expected HOST:PORT, got {value!r}")
        return {"http_host": host.strip("[]"), "http_port": int(port)}
    if key == "replica":
        return {key: y.name(value, where, NameRule.SUBDOMAIN)}
    if key == "scheduler":
        knobs = y.mapping(value or {}, "scheduler", optional=KNOBS)
        after = PreemptorAdmission.AFTER_VICTIMS_STOP.value
        if knobs.setdefault("preemptor_admission", after) != after:
            raise ConfigError(
                f"scheduler.preemptor_admission: the service needs {after!r} (a preemptor "
                f"starts only once its victims stopped), got {knobs['preemptor_admission']!r}"
            )
        policy = parse_policy(knobs, "scheduler")
        if policy.victim_stop_delay:
            raise ConfigError(
                f"scheduler.victim_stop_delay: only the simulator models how long victims "
                f"take to stop; the service waits for their pods, so it must be 0, "
                f"got {knobs['victim_stop_delay']!r}"
            )
        return {"policy": policy}
    raise ConfigError(f"{where}: unknown key")  # unreachable: keys are checked above
