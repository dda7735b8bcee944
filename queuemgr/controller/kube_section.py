"""The ``kubernetes:`` section of the service's configuration (``backend: kubernetes``).

Why it exists: the controller needs to know how to reach the API server
(a kubeconfig, or the pod's service account), which namespaces it manages,
how fast it may talk (QPS and burst, chosen deliberately: the API server is
shared) and how long a gang may take to get all its pods ready. This module
parses and checks that section; :mod:`queuemgr.service.app` builds the
controller from it. docs/operations.md lists the keys; change both together.

What must stay true: it imports no Kubernetes client (a config with a bad
key fails before anything connects); every error names its YAML path;
``QUEUEMGR_KUBECONFIG`` overrides ``kubernetes.kubeconfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from queuemgr.core.names import NameRule
from queuemgr.core.resources import QuantityError, parse_resource_name
from queuemgr.k8s.dra import DeviceClassMapping
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.spec import checks as y
from queuemgr.spec.checks import InputError

KEYS = (
    "kubeconfig",
    "context",
    "managed_namespaces",
    "qps",
    "burst",
    "status_qps",
    "watch_timeout",
    "kind_discovery_interval",
    "stop_timeout",
    "start_concurrency",
    "pods_ready",
    "device_classes",
    "admission_checks",
    "worker_clusters",
    "dispatch",
    "worker_timeout",
    "worker_poll_interval",
)
WORKER_CLUSTER_KEYS = ("name", "kubeconfig", "context")
# Multi-cluster dispatch policies (docs/kubernetes.md, "Multi-cluster dispatch").
FIRST_FIT = "first-fit"
MOST_FREE = "most-free"
DISPATCH_POLICIES = (FIRST_FIT, MOST_FREE)
ADMISSION_CHECK_KEYS = (
    "name",
    "controller",
    "provisioning_class",
    "parameters",
    "backoff",
    "backoff_max",
    "retry_limit",
)
# The admission check controllers queuemgr runs (Kueue's ``spec.controllerName``).
PROVISIONING_REQUEST = "provisioning-request"
CONTROLLERS = (PROVISIONING_REQUEST,)
DEVICE_CLASS_KEYS = ("device_class", "resource", "driver")
PODS_READY_KEYS = ("enabled", "timeout", "backoff", "backoff_max", "requeue_limit")


@dataclass(frozen=True, kw_only=True)
class PodsReadySettings:
    timeout: float = 300.0  # seconds from admission until every pod must be ready
    backoff: float = 60.0  # seconds before the first requeue; doubles each time
    backoff_max: float = 3600.0
    requeue_limit: int | None = None  # None: requeue for ever

    def delay(self, count: int) -> float:
        """Seconds the ``count``-th eviction waits before it queues again."""
        return float(min(self.backoff * 2 ** max(count - 1, 0), self.backoff_max))


@dataclass(frozen=True, kw_only=True)
class AdmissionCheckSettings:
    """One admission check a ClusterQueue may name (``kubernetes.admission_checks``)."""

    name: str
    controller: str = PROVISIONING_REQUEST
    # The ProvisioningRequest's class, e.g. check-capacity.autoscaling.x-k8s.io.
    provisioning_class: str = ""
    parameters: tuple[tuple[str, str], ...] = ()  # the request's spec.parameters
    backoff: float = 60.0  # seconds before the first requeue after a failure; doubles
    backoff_max: float = 3600.0
    # The failed requests after which the check is Rejected (the workload finished);
    # None: it is tried again for ever.
    retry_limit: int | None = None

    def rejects(self, failures: int) -> bool:
        """Whether the ``failures``-th failed request rejects the check for good."""
        return self.retry_limit is not None and failures >= self.retry_limit

    def delay(self, failures: int) -> float:
        """Seconds a workload waits after its ``failures``-th failure before it queues again."""
        return float(min(self.backoff * 2 ** max(failures - 1, 0), self.backoff_max))


@dataclass(frozen=True, kw_only=True)
class WorkerClusterSettings:
    """One worker cluster of multi-cluster dispatch (``kubernetes.worker_clusters``)."""

    name: str
    kubeconfig: Path
    context: str | None = None


@dataclass(frozen=True, kw_only=True)
class KubernetesSettings:
    kubeconfig: Path | None = None  # None: in-cluster (the pod's service account)
    context: str | None = None
    managed_namespaces: str = ""  # a label selector (kubectl -l form); "" manages all
    qps: float = 20.0  # the client's sustained requests per second
    burst: int = 40  # requests it may send at once
    status_qps: float = 5.0  # status write-back's share of qps
    watch_timeout: int = 300  # seconds a watch request lasts before it is renewed
    # How often a job kind whose CRD was not served is looked for again.
    kind_discovery_interval: float = 30.0
    stop_timeout: float = 30.0  # seconds a stop waits for the gang's pods to go
    start_concurrency: int = 8  # admitted gangs started (PATCHed) at once
    pods_ready: PodsReadySettings | None = field(default_factory=PodsReadySettings)
    # DRA: which quota resource each DeviceClass is charged as (empty: claims not read).
    device_classes: tuple[DeviceClassMapping, ...] = ()
    # The admission checks ClusterQueues may name (docs/kubernetes.md, "Admission checks").
    admission_checks: tuple[AdmissionCheckSettings, ...] = ()

    # Multi-cluster dispatch: the worker clusters this manager runs its jobs on (empty: none).
    worker_clusters: tuple[WorkerClusterSettings, ...] = ()
    dispatch: str = FIRST_FIT
    worker_timeout: float = 30.0  # seconds a worker may not answer before it is lost
    worker_poll_interval: float = 2.0  # seconds between reads of a worker's nodes and jobs

    def admission_check(self, name: str) -> AdmissionCheckSettings | None:
        return next((c for c in self.admission_checks if c.name == name), None)


class KubeConfigError(InputError):
    """A ``kubernetes.*`` value is unusable; the message starts with its path."""


def _positive(raw: object, path: str) -> float:
    return y.number(raw, path, positive=True)


def parse_kubernetes(
    raw: object, base: Path, kubeconfig_env: str | None = None
) -> KubernetesSettings:
    """The ``kubernetes`` mapping; relative paths are taken from ``base``."""
    section = y.mapping(raw or {}, "kubernetes", optional=KEYS)
    out: dict[str, object] = {}
    for key, value in section.items():
        path = f"kubernetes.{key}"
        if key == "kubeconfig":
            p = Path(y.string(value, path)).expanduser()
            out[key] = p if p.is_absolute() else base / p
        elif key == "context":
            out[key] = y.string(value, path)
        elif key == "managed_namespaces":
            text = "" if value is None else str(value)
            try:
                LabelSelector.parse(text)
            except ValueError as error:
                raise KubeConfigError(f"{path}: {error}") from None
            out[key] = text
        elif key in (
            "qps",
            "status_qps",
            "stop_timeout",
            "kind_discovery_interval",
            "worker_timeout",
            "worker_poll_interval",
        ):
            out[key] = _positive(value, path)
        elif key in ("burst", "watch_timeout", "start_concurrency"):
            out[key] = y.integer(value, path, minimum=1)
        elif key == "pods_ready":
            out[key] = _pods_ready(value)
        elif key == "device_classes":
            out[key] = _device_classes(value)
        elif key == "admission_checks":
            out[key] = _admission_checks(value)
        elif key == "worker_clusters":
            out[key] = _worker_clusters(value, base)
        elif key == "dispatch":
            policy = y.string(value, path)
            if policy not in DISPATCH_POLICIES:
                raise KubeConfigError(
                    f"{path}: expected one of {', '.join(DISPATCH_POLICIES)}, got {policy!r}"
                )
            out[key] = policy
    if kubeconfig_env:
        out["kubeconfig"] = Path(kubeconfig_env).expanduser()
    settings = KubernetesSettings(**out)  # type: ignore[arg-type]
    if settings.status_qps > settings.qps:
        raise KubeConfigError(
            f"kubernetes.status_qps: at most qps ({settings.qps:g}), got {settings.status_qps:g}"
        )
    return settings


def _pods_ready(raw: object) -> PodsReadySettings | None:
    section = y.mapping(raw or {}, "kubernetes.pods_ready", optional=PODS_READY_KEYS)
    if section.get("enabled") is not None and not y.boolean(
        section["enabled"], "kubernetes.pods_ready.enabled"
    ):
        return None
    out: dict[str, object] = {}
    for key in ("timeout", "backoff", "backoff_max"):
        if key in section:
            out[key] = _positive(section[key], f"kubernetes.pods_ready.{key}")
    if section.get("requeue_limit") is not None:
        out["requeue_limit"] = y.integer(
            section["requeue_limit"], "kubernetes.pods_ready.requeue_limit", minimum=0
        )
    return PodsReadySettings(**out)  # type: ignore[arg-type]


def _device_classes(raw: object) -> tuple[DeviceClassMapping, ...]:
    """``[{device_class, resource, driver?}]``: each class once; one driver's devices
    count as one resource (a node's slices cannot tell two classes of it apart)."""
    out: list[DeviceClassMapping] = []
    seen: dict[str, str] = {}
    drivers: dict[str, tuple[str, str]] = {}
    for i, item in enumerate(y.sequence(raw or [], "kubernetes.device_classes")):
        path = f"kubernetes.device_classes[{i}]"
        entry = y.mapping(item, path, required=("device_class", "resource"), optional=("driver",))
        name = y.name(entry["device_class"], f"{path}.device_class", NameRule.SUBDOMAIN)
        y.unique(seen, name, f"{path}.device_class", "device class")
        try:
            resource = parse_resource_name(entry["resource"], field=f"{path}.resource")
        except QuantityError as error:
            raise KubeConfigError(str(error)) from None
        driver = None
        if entry.get("driver") is not None:
            driver = y.name(entry["driver"], f"{path}.driver", NameRule.SUBDOMAIN)
            first = drivers.setdefault(driver, (resource, path))
            if first[0] != resource:
                raise KubeConfigError(
                    f"{path}.driver: driver {driver!r} is counted as {first[0]} at {first[1]};"
                    f" its devices can be counted as one resource only, got {resource}"
                )
        out.append(DeviceClassMapping(device_class=name, resource=resource, driver=driver))
    return tuple(out)


def _admission_checks(raw: object) -> tuple[AdmissionCheckSettings, ...]:
    """``[{name, controller: provisioning-request, provisioning_class, parameters?,
    backoff?, backoff_max?, retry_limit?}]``: each name once."""
    out: list[AdmissionCheckSettings] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(y.sequence(raw or [], "kubernetes.admission_checks")):
        path = f"kubernetes.admission_checks[{i}]"
        entry = y.mapping(
            item,
            path,
            required=("name", "controller", "provisioning_class"),
            optional=ADMISSION_CHECK_KEYS,
        )
        name = y.name(entry["name"], f"{path}.name")
        y.unique(seen, name, f"{path}.name", "admission check")
        controller = y.string(entry["controller"], f"{path}.controller")
        if controller not in CONTROLLERS:
            raise KubeConfigError(
                f"{path}.controller: expected one of {', '.join(CONTROLLERS)}, got {controller!r}"
            )
        klass = y.name(
            entry["provisioning_class"], f"{path}.provisioning_class", NameRule.SUBDOMAIN
        )
        params_path = f"{path}.parameters"
        params = entry.get("parameters") or {}
        if not isinstance(params, Mapping):
            raise KubeConfigError(f"{params_path}: expected a mapping of strings")
        parameters = tuple(
            sorted(
                (y.string(k, params_path), y.string(v, f"{params_path}.{k}"))
                for k, v in params.items()
            )
        )
        times: dict[str, float] = {}
        for key in ("backoff", "backoff_max"):
            if key in entry:
                times[key] = _positive(entry[key], f"{path}.{key}")
        retry_limit = None
        if entry.get("retry_limit") is not None:
            retry_limit = y.integer(entry["retry_limit"], f"{path}.retry_limit", minimum=1)
        out.append(
            AdmissionCheckSettings(
                name=name,
                controller=controller,
                provisioning_class=klass,
                parameters=parameters,
                retry_limit=retry_limit,
                **times,
            )
        )
    return tuple(out)


def _worker_clusters(raw: object, base: Path) -> tuple[WorkerClusterSettings, ...]:
    """``[{name, kubeconfig, context?}]``: each name once, a DNS label (it prefixes the
    cluster's node names and is the value of their ``queuemgr.io/cluster`` label)."""
    out: list[WorkerClusterSettings] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(y.sequence(raw or [], "kubernetes.worker_clusters")):
        path = f"kubernetes.worker_clusters[{i}]"
        entry = y.mapping(item, path, required=("name", "kubeconfig"), optional=WORKER_CLUSTER_KEYS)
        name = y.name(entry["name"], f"{path}.name")
        y.unique(seen, name, f"{path}.name", "worker cluster")
        p = Path(y.string(entry["kubeconfig"], f"{path}.kubeconfig")).expanduser()
        context = entry.get("context")
        out.append(
            WorkerClusterSettings(
                name=name,
                kubeconfig=p if p.is_absolute() else base / p,
                context=None if context is None else y.string(context, f"{path}.context"),
            )
        )
    return tuple(out)
