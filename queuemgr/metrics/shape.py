"""The pure parts of the exporter: units, bounded labels, and per-cycle series frames.

Why it exists: what a metric *means* (which unit, which label value, which
series vanish) is decided here, apart from prometheus_client's registry
plumbing, so it can be read and tested on its own.

What must stay true: every label value produced here comes from a bounded
set (configured names, fixed code lists, or ``Other``/``other``); amounts
leave in base units (cpu cores, memory bytes, counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import Gauge

from queuemgr.core.model import AdmittedWorkload, ClusterQueue, FlavorName, NodeName
from queuemgr.core.resources import CPU, ResourceName, Resources

# Kueue's eviction reasons, plus the simulator's deadline stop.
EVICTION_REASONS = frozenset(
    {
        "Preempted",
        "PodsReadyTimeout",
        "AdmissionCheck",
        "ClusterQueueStopped",
        "LocalQueueStopped",
        "Deactivated",
        "InactiveWorkload",
        "NodeFailures",
        "MaxRuntimeExceeded",
    }
)
# Kueue's preemption reasons.
PREEMPTION_REASONS = frozenset(
    {
        "InClusterQueue",
        "InCohortReclamation",
        "InCohortFairSharing",
        "InCohortReclaimWhileBorrowing",
    }
)
FINISH_RESULTS = frozenset({"Succeeded", "Failed", "MaxRuntimeExceeded"})
OTHER = "Other"

# The priority_class label takes one value per configured class plus "other";
# more classes than this would be a configuration mistake, not a dashboard.
MAX_PRIORITY_CLASSES = 32
OTHER_PRIORITY = "other"
DEFAULT_PRIORITY_CLASSES: Mapping[int, str] = {0: "default"}


def base_units(resource: ResourceName | str, amount: int) -> float:
    """The core's canonical integer in Prometheus base units: cpu millicores -> cores."""
    return amount / 1000 if resource == CPU else float(amount)


def bounded(value: str, allowed: frozenset[str]) -> str:
    """``value`` when it is a known code, else ``Other``: callers cannot grow the label set."""
    return value if value in allowed else OTHER


def priority_classes(classes: Mapping[int, str] | None) -> dict[int, str]:
    """Validate a ``{priority value: class name}`` map (Kubernetes PriorityClasses)."""
    out = dict(DEFAULT_PRIORITY_CLASSES if classes is None else classes)
    if len(out) > MAX_PRIORITY_CLASSES:
        raise ValueError(f"at most {MAX_PRIORITY_CLASSES} priority classes, got {len(out)}")
    return out


def priority_label(priority: int, classes: Mapping[int, str]) -> str:
    """The class named for this exact priority value, else ``other``."""
    return classes.get(priority, OTHER_PRIORITY)


def pending_flavor(cq: ClusterQueue, requests: Resources) -> FlavorName | None:
    """Where pending demand is counted: the first flavor whose quota lists every resource.

    A pending workload has no flavor yet; the cycle tries flavors in the queue's
    order, so the first one that covers the request is where it would go first.
    """
    for fq in cq.flavors:
        if all(v <= 0 or r in fq.nominal for r, v in requests.items()):
            return fq.flavor
    return None


def node_free_after(
    node_free: Mapping[NodeName, Resources],
    admitted: Iterable[AdmittedWorkload],
    released: Iterable[AdmittedWorkload] = (),
) -> Mapping[NodeName, Resources]:
    """Free capacity per node once ``released`` (evicted) give back and ``admitted`` take."""
    changed: dict[NodeName, dict[ResourceName, int]] = {}
    signed = [(a, 1) for a in released] + [(a, -1) for a in admitted]
    for a, sign in signed:
        per_pod = {ps.name: ps.requests for ps in a.workload.pod_sets}
        for p in a.admission.placements:
            vec = changed.get(p.node)
            if vec is None:
                vec = changed[p.node] = dict(node_free.get(p.node, {}))
            for r, v in per_pod[p.pod_set].items():
                vec[r] = vec.get(r, 0) + sign * v * p.count
    if not changed:
        return node_free
    return {**node_free, **changed}


class SeriesFrame:
    """One gauge's values for one cycle; ``commit`` publishes them and drops vanished series.

    Values are accumulated first and written at commit, so a scrape never sees
    a half-summed value, and a series not set this cycle (a deleted queue, a
    drained reason) is removed instead of reporting its last value forever.
    """

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self._values: dict[tuple[str, ...], float] = {}
        # What was published, and each series' child: a gauge with tens of thousands of
        # series is mostly unchanged between cycles, and ``labels`` costs far more than
        # a comparison.
        self._published: dict[tuple[str, ...], tuple[float, Gauge]] = {}

    def set(self, value: float, *labels: str) -> None:
        self._values[labels] = value

    def add(self, value: float, *labels: str) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + value

    def maximum(self, value: float, *labels: str) -> None:
        self._values[labels] = max(self._values.get(labels, value), value)

    def commit(self) -> None:
        published = self._published
        now: dict[tuple[str, ...], tuple[float, Gauge]] = {}
        for labels, value in self._values.items():
            was = published.get(labels)
            if was is not None and was[0] == value:
                now[labels] = was
                continue
            child = (
                was[1]
                if was is not None
                else (self.gauge.labels(*labels) if labels else self.gauge)
            )
            child.set(value)
            now[labels] = (value, child)
        for gone in published.keys() - now.keys():
            self.gauge.remove(*gone)
        self._published = now
        self._values = {}
