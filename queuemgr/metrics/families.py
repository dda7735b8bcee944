"""The metric families: every name, label set, unit and bucket layout, in one registry.

Why it exists: the names are an API (dashboards and alerts query them), so
they are declared in one place, apart from the code that computes values.

What must stay true: names and labels are exactly those of issue 6 and
``docs/observability.md``; help strings state units; no label names a workload.
Each instance owns its own ``CollectorRegistry``, never the global one.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from queuemgr.metrics.shape import SeriesFrame, priority_classes

_Q = ("cluster_queue", "flavor", "resource")
_C = ("cohort", "parent", "flavor", "resource")
_UNITS = "cpu in cores, memory in bytes, other resources (GPUs) as counts"
# Cycles take milliseconds; waits take seconds to days.
_CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_START_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)


class MetricFamilies:
    """Every metric of issue 6, registered in a registry of its own."""

    def __init__(
        self,
        *,
        priority_classes: Mapping[int, str] | None = None,
        version: str | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._priority_classes = _classes(priority_classes)
        r = self.registry
        self.pending = Gauge(
            "queuemgr_pending_workloads",
            "Pending workloads per local queue and pending reason code (cluster_queue is empty "
            "for workloads no ClusterQueue takes)",
            ["cluster_queue", "local_queue", "namespace", "reason"],
            registry=r,
        )
        self.admitted_active = Gauge(
            "queuemgr_admitted_active_workloads",
            "Admitted workloads still running",
            ["cluster_queue"],
            registry=r,
        )
        self.admitted_total = Counter(
            "queuemgr_admitted_workloads", "Workloads admitted", registry=r
        )
        self.evicted_total = Counter(
            "queuemgr_evicted_workloads", "Workloads evicted, by reason", ["reason"], registry=r
        )
        self.preempted_total = Counter(
            "queuemgr_preempted_workloads",
            "Workloads preempted, by the preempting ClusterQueue and the preemption reason",
            ["preemptor_cluster_queue", "reason"],
            registry=r,
        )
        # The same preemptions seen from the victim's side: which queue loses work, and
        # how much. Kept apart from ``preempted_total``, which dashboards and Kueue-style
        # queries read by the preempting queue.
        self.preemptions_total = Counter(
            "queuemgr_preemptions",
            "Evictions decided by scheduling cycles, by the victim's ClusterQueue and the "
            "preemption reason",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.preempted_gpu_seconds = Counter(
            "queuemgr_preempted_gpu_seconds",
            "GPU-seconds of runs thrown away by preemption (each victim's placed GPUs times "
            "the seconds from its admission to the cycle that evicted it), by the victim's "
            "ClusterQueue",
            ["cluster_queue"],
            registry=r,
        )
        self.finished_total = Counter(
            "queuemgr_finished_workloads", "Workloads finished, by result", ["result"], registry=r
        )
        self.nominal = Gauge(
            "queuemgr_cluster_queue_nominal_quota", f"Nominal quota ({_UNITS})", _Q, registry=r
        )
        self.borrowing_limit = Gauge(
            "queuemgr_cluster_queue_borrowing_limit",
            f"Borrowing limit, only where one is set ({_UNITS})",
            _Q,
            registry=r,
        )
        self.lending_limit = Gauge(
            "queuemgr_cluster_queue_lending_limit",
            f"Lending limit, only where one is set ({_UNITS})",
            _Q,
            registry=r,
        )
        self.usage = Gauge(
            "queuemgr_cluster_queue_resource_usage",
            f"Quota held by admitted workloads ({_UNITS})",
            _Q,
            registry=r,
        )
        self.resource_pending = Gauge(
            "queuemgr_cluster_queue_resource_pending",
            f"Requests of pending workloads, on the first flavor that covers them ({_UNITS})",
            _Q,
            registry=r,
        )
        self.share = Gauge(
            "queuemgr_cluster_queue_weighted_share",
            "Weighted dominant share: usage above nominal over the cohort's lendable quota, "
            "divided by the weight; 0 when within nominal, +Inf when a zero weight borrows",
            ["cluster_queue"],
            registry=r,
        )
        # The cohort tree (docs/scheduling.md, hierarchical cohorts): ``cohort`` is the
        # cohort's path from its root ("org/research"), ``parent`` its parent's path
        # (empty at a root), so a dashboard can sum or filter any level.
        self.cluster_queue_info = Gauge(
            "queuemgr_cluster_queue_info",
            "Always 1: the ClusterQueue's place in the cohort tree (cohort is the path from "
            "the root, empty for a queue in no cohort)",
            ["cluster_queue", "cohort"],
            registry=r,
        )
        self.cohort_quota = Gauge(
            "queuemgr_cohort_subtree_quota",
            "Nominal quota of the cohort's whole subtree: its own and every member's and "
            f"descendant's ({_UNITS})",
            _C,
            registry=r,
        )
        self.cohort_usage = Gauge(
            "queuemgr_cohort_resource_usage",
            f"Quota held by admitted workloads of every ClusterQueue under the cohort ({_UNITS})",
            _C,
            registry=r,
        )
        self.cohort_share = Gauge(
            "queuemgr_cohort_weighted_share",
            "Weighted dominant share of a cohort below a root, as its parent compares its "
            "children: use beyond its subtree quota over the root's quota, divided by its weight",
            ["cohort", "parent"],
            registry=r,
        )
        self.node_free = Gauge(
            "queuemgr_node_free",
            f"Free capacity summed over a flavor's schedulable nodes ({_UNITS})",
            ["flavor", "resource"],
            registry=r,
        )
        self.node_largest_free = Gauge(
            "queuemgr_node_largest_free",
            "Largest free amount on any single node of the flavor, a fragmentation gauge "
            f"({_UNITS})",
            ["flavor", "resource"],
            registry=r,
        )
        self.wait = Histogram(
            "queuemgr_admission_wait_time_seconds",
            "Seconds from creation, or from the last eviction, to admission; priority_class is "
            "a configured class name, "
            "or 'other' for a priority no class names",
            ["cluster_queue", "priority_class"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.cycle = Histogram(
            "queuemgr_admission_cycle_duration_seconds",
            "Wall-clock seconds of one scheduling cycle",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        # Where a cycle's time goes, and how long an admitted gang waits for its start:
        # the two figures that say whether the loop or the API path holds admissions back.
        self.cycle_phase = Counter(
            "queuemgr_cycle_phase_seconds",
            "Wall-clock seconds the scheduler loop spent per cycle phase (finish, load, "
            "safety, schedule, commit, apply, observe, heap)",
            ["phase"],
            registry=r,
        )
        self.start_latency = Histogram(
            "queuemgr_admission_start_seconds",
            "Seconds from a gang's admission (its cycle's clock) until the backend accepted "
            "its start (on Kubernetes: the unsuspending patch)",
            buckets=_START_BUCKETS,
            registry=r,
        )
        self.attempts = Counter(
            "queuemgr_admission_attempts",
            "Scheduling cycles: result=success when a cycle admitted at least one workload, "
            "inadmissible otherwise (Kueue's meaning)",
            ["result"],
            registry=r,
        )
        self.eta_error = Histogram(
            "queuemgr_eta_error_seconds",
            "Absolute difference between a workload's predicted and actual start, in seconds",
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            "queuemgr_leader",
            "1 on the replica that holds the lease, else 0",
            ["replica"],
            registry=r,
        )
        self.build_info = Gauge(
            "queuemgr_build_info", "Always 1; the version is the label", ["version"], registry=r
        )
        self.build_info.labels(version=version or _installed_version()).set(1)
        for result in ("success", "inadmissible"):
            self.attempts.labels(result=result)  # exported at 0 before the first cycle
        # ClusterQueues whose preemption series exist (at 0 until a preemption).
        self._preemption_queues: set[str] = set()
        self._frames = {
            g: SeriesFrame(g)
            for g in (
                self.pending, self.admitted_active, self.nominal, self.borrowing_limit,
                self.lending_limit, self.usage, self.resource_pending, self.share,
                self.node_free, self.node_largest_free, self.cluster_queue_info,
                self.cohort_quota, self.cohort_usage, self.cohort_share,
            )
        }  # fmt: skip


_classes = priority_classes  # the constructor's parameter shadows the name


def _installed_version() -> str:
    try:
        return metadata.version("queuemgr")
    except metadata.PackageNotFoundError:
        return "unknown"
