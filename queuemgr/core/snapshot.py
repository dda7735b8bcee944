"""What one scheduling cycle sees: configuration, free capacity, usage and the queues.

Why it exists: ``schedule(snapshot, now)`` is a pure function, so everything a
cycle needs is gathered here first, and the cycle never reads anything else.

What must stay true: a snapshot is never mutated after it is built (the cycle
works on copy-on-write overlays); usage and free capacity are exactly what the
admitted workloads' admissions hold; each ClusterQueue's pending list is in
queue order (higher priority, then earlier creation, then namespace/name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from queuemgr.core.claims import Claim
from queuemgr.core.cohort_tree import CohortTreeError, tree_error
from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    LocalQueue,
    Node,
    NodeName,
    Ordering,
    ResourceFlavor,
    Workload,
    WorkloadId,
)
from queuemgr.core.node_topology import FreeIndex, NodeTopology, virtual_nodes
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.queues import PendingQueue
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.resources import ResourceName, Resources
from queuemgr.core.verdicts import Verdict

# usage[cq][flavor][resource]
Usage = Mapping[ClusterQueueName, Mapping[FlavorName, Resources]]


def queue_order_key(w: Workload) -> tuple[int, float, str]:
    """Order within a queue: higher priority, earlier creation, then namespace/name."""
    return w.order_key


@dataclass(frozen=True, kw_only=True, eq=False)
class Config:
    """The admin-owned objects and the nodes. Rebuilt only when one of them changes.

    Compared by identity, so that its derived topologies are computed once.
    """

    flavors: Mapping[FlavorName, ResourceFlavor]
    cohorts: Mapping[CohortName, Cohort]
    cluster_queues: Mapping[ClusterQueueName, ClusterQueue]
    local_queues: Mapping[tuple[str, str], LocalQueue]
    nodes: Mapping[NodeName, Node]

    @staticmethod
    def of(
        *,
        flavors: Iterable[ResourceFlavor],
        cluster_queues: Iterable[ClusterQueue],
        local_queues: Iterable[LocalQueue],
        nodes: Iterable[Node],
        cohorts: Iterable[Cohort] = (),
    ) -> Config:
        cqs = {cq.name: cq for cq in cluster_queues}
        cohort_map = {c.name: c for c in cohorts}
        for cq in cqs.values():
            if cq.cohort is not None and cq.cohort not in cohort_map:
                cohort_map[cq.cohort] = Cohort(name=cq.cohort)
        problem = tree_error({c.name: c.parent for c in cohort_map.values()})
        if problem is not None:
            raise CohortTreeError(problem)
        return Config(
            flavors={f.name: f for f in flavors},
            cohorts=cohort_map,
            cluster_queues=cqs,
            local_queues={lq.key: lq for lq in local_queues},
            nodes={n.name: n for n in sorted(nodes, key=lambda n: n.name)},
        )

    @cached_property
    def quota_topology(self) -> QuotaTopology:
        return QuotaTopology(self.cluster_queues, self.cohorts)

    @cached_property
    def virtual_nodes(self) -> Mapping[NodeName, tuple[FlavorName, Node]]:
        """The nodes autoscaled flavors may still grow by (core.node_topology)."""
        return virtual_nodes(self.flavors, self.nodes)

    @cached_property
    def all_nodes(self) -> Mapping[NodeName, Node]:
        """The nodes and the virtual nodes, by name: what node fit tracks free capacity of."""
        if not self.virtual_nodes:
            return self.nodes
        merged = {**self.nodes, **{name: node for name, (_, node) in self.virtual_nodes.items()}}
        return {name: merged[name] for name in sorted(merged)}

    @cached_property
    def node_topology(self) -> NodeTopology:
        virtual = {name: flavor for name, (flavor, _) in self.virtual_nodes.items()}
        return NodeTopology(self.flavors, self.all_nodes, virtual)

    @cached_property
    def orderings(self) -> dict[ClusterQueueName, tuple[Ordering | None, Ordering | None]]:
        """(own, cohort's) ordering of each ClusterQueue that has either set; the cohort's
        is that of the nearest cohort above it that sets one."""
        out: dict[ClusterQueueName, tuple[Ordering | None, Ordering | None]] = {}
        chains = self.quota_topology.tree.chain
        for name, cq in self.cluster_queues.items():
            # A cohort's ordering holds in its subtree, unless a cohort below sets its own.
            above = chains.get(cq.cohort, ()) if cq.cohort is not None else ()
            inherited = next((o for c in above if (o := self.cohorts[c].ordering)), None)
            pair = (cq.ordering, inherited)
            if pair != (None, None):
                out[name] = pair
        return out

    @cached_property
    def never_fits(self) -> dict[tuple[object, ...], Verdict | None]:
        """Whether a shape can ever fit a queue depends on this config alone: memo it."""
        return {}

    def route(self, w: Workload) -> ClusterQueueName | None:
        lq = self.local_queues.get((w.namespace, w.queue))
        return None if lq is None else lq.cluster_queue

    def queue_for(self, w: Workload) -> ClusterQueueName | None:
        """The ClusterQueue that takes ``w``, or None when none does."""
        name = self.route(w)
        cq = self.cluster_queues.get(name) if name is not None else None
        return name if cq is not None and cq.admits_namespace(w.namespace) else None


class CycleMemo:
    """What one cycle worked out that the next may reuse, under the inputs it came from.

    The incremental cache hands the same memo to every snapshot it makes; whoever
    stores a result here stores with it what it was computed from, and reuses it
    only when that is the same, so a memo never changes a decision (core.eta).
    """

    __slots__ = ("etas", "standings")

    def __init__(self) -> None:
        self.etas: object | None = None
        self.standings: object | None = None


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """One cycle's input, built by :func:`build_snapshot` or by the incremental cache."""

    config: Config
    usage: Usage
    node_free: Mapping[NodeName, Resources]
    admitted: Mapping[WorkloadId, AdmittedWorkload]
    # Pending workloads routed to a ClusterQueue, in queue order.
    pending: Mapping[ClusterQueueName, PendingQueue]
    # Pending workloads no ClusterQueue takes: their LocalQueue is missing,
    # points nowhere, or its ClusterQueue refuses their namespace.
    unroutable: Sequence[Workload] = ()
    # Nodes grouped by free capacity, if the builder keeps it (the cache does);
    # without it the cycle groups the nodes it needs itself.
    node_index: FreeIndex | None = None
    policy: SchedulerPolicy = field(default_factory=SchedulerPolicy)
    # Decayed usage per LocalQueue (core.fairshare), for ``ordering: usage``.
    queue_usage: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # Standing claims of pending preemptors (core.claims), and the evicted workloads
    # whose pods have not stopped yet (they hold no quota here; a claim holds it).
    claims: Mapping[WorkloadId, Claim] = field(default_factory=dict)
    stopping: frozenset[WorkloadId] = frozenset()
    # Results of the previous cycle on the same cache, reused where their inputs held.
    memo: CycleMemo | None = field(default=None, compare=False, repr=False)


MutableUsage = dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]]


def usage_of(admitted: Iterable[AdmittedWorkload]) -> MutableUsage:
    usage: MutableUsage = {}
    for a in admitted:
        per_flavor = usage.setdefault(a.admission.cluster_queue, {})
        vec = per_flavor.setdefault(a.admission.flavor, {})
        for r, v in admitted_requests(a).items():
            vec[r] = vec.get(r, 0) + v
    return usage


def admitted_requests(a: AdmittedWorkload) -> dict[ResourceName, int]:
    """What an admission holds: the placed pods' requests (partial counts included)."""
    return dict(a.held)


def node_free_of(
    nodes: Mapping[NodeName, Node], admitted: Iterable[AdmittedWorkload]
) -> dict[NodeName, dict[ResourceName, int]]:
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    for a in admitted:
        per_pod = {ps.name: ps.node_requests for ps in a.workload.pod_sets}
        for p in a.admission.placements:
            vec = free.get(p.node)
            if vec is None:  # the node is gone; its pods no longer hold capacity here
                continue
            for r, v in per_pod[p.pod_set].items():
                vec[r] = vec.get(r, 0) - v * p.count
    return free


def build_snapshot(
    config: Config, *, admitted: Iterable[AdmittedWorkload], pending: Iterable[Workload]
) -> Snapshot:
    """A snapshot computed from scratch; the cache builds the same one incrementally."""
    admitted_map = {a.workload.id: a for a in admitted}
    queues: dict[ClusterQueueName, list[Workload]] = {}
    unroutable: list[Workload] = []
    for w in pending:
        cq = config.queue_for(w)
        if cq is None:
            unroutable.append(w)
        else:
            queues.setdefault(cq, []).append(w)
    unroutable.sort(key=queue_order_key)
    return Snapshot(
        config=config,
        usage=usage_of(admitted_map.values()),
        node_free=node_free_of(config.all_nodes, admitted_map.values()),
        admitted=admitted_map,
        pending={cq: PendingQueue.of(ws) for cq, ws in queues.items()},
        unroutable=unroutable,
    )
