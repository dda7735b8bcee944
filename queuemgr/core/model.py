"""The domain vocabulary: flavors, nodes, queues, cohorts and workloads.

Why it exists: every layer (simulator, store, Kubernetes adapter, CLI) speaks
in these value objects, so they carry no behaviour that needs I/O.

What must stay true: value objects are frozen and keyword-only; identities are
``NewType`` strings; quantities are exact integers (see ``resources``); a
workload is one gang, so anything that admits it admits every pod set.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from fractions import Fraction
from functools import cached_property
from typing import NewType

from queuemgr.core.loans import REPEAT_VICTIM, NoLoan
from queuemgr.core.resources import ResourceName, Resources
from queuemgr.core.shapes import ShapeId, shape_id
from queuemgr.core.weights import ResourceWeight, weights_problem

FlavorName = NewType("FlavorName", str)
NodeName = NewType("NodeName", str)
CohortName = NewType("CohortName", str)
ClusterQueueName = NewType("ClusterQueueName", str)
WorkloadId = NewType("WorkloadId", str)  # "namespace/name"


class QueueingStrategy(enum.Enum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class WithinClusterQueue(enum.Enum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(enum.Enum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class Ordering(enum.Enum):
    """How a queue orders its pending workloads (docs/scheduling.md, usage-aware fair share)."""

    FIFO = "fifo"  # priority, then creation
    USAGE = "usage"  # LocalQueues with less decayed usage first


class TaintEffect(enum.Enum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, kw_only=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True, kw_only=True, slots=True)
class Toleration:
    """Kubernetes toleration; an empty key with ``Exists`` tolerates everything."""

    key: str = ""
    operator: str = "Equal"  # "Equal" or "Exists"
    value: str = ""
    effect: TaintEffect | None = None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if self.operator == "Exists":
            return self.key == "" or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeTemplate:
    """The nodes an autoscaler adds to a flavor: what each can hold, and its labels
    (the flavor's ``node_labels`` are added)."""

    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class FlavorAutoscale:
    """A flavor whose nodes may grow to ``max_nodes``: node fit may plan, for a
    ClusterQueue with an admission check (which provisions them), on up to
    ``max_nodes`` minus the flavor's existing nodes *virtual* nodes of ``node``."""

    max_nodes: int
    node: NodeTemplate

    def __post_init__(self) -> None:
        # Each missing node is a virtual node in every cycle's snapshot: bounded memory.
        if not 1 <= self.max_nodes <= MAX_AUTOSCALE_NODES:
            raise ValueError(
                f"autoscale max_nodes must be in [1, {MAX_AUTOSCALE_NODES}], got {self.max_nodes}"
            )


MAX_AUTOSCALE_NODES = 10_000  # a flavor's nodes, real and to be added


@dataclass(frozen=True, kw_only=True, slots=True)
class ResourceFlavor:
    name: FlavorName
    node_labels: Mapping[str, str] = field(default_factory=dict)
    # Taints every node of the flavor counts as having (Kueue's nodeTaints).
    taints: tuple[Taint, ...] = ()
    # Added to the pods admitted on this flavor (Kueue's tolerations): node fit takes a
    # pod set placed here as tolerating its own tolerations and these.
    tolerations: tuple[Toleration, ...] = ()
    # Nodes that do not exist yet (core.node_topology.virtual_nodes); None: none.
    autoscale: FlavorAutoscale | None = None

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.node_labels.items())

    # Pickled as a list of its fields; state saved before a field existed (a simulator
    # checkpoint) loads with that field's default.
    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in _FLAVOR_FIELDS]

    def __setstate__(self, state: Sequence[object]) -> None:
        _set_fields(self, "a flavor", _FLAVOR_FIELDS, _FLAVOR_DEFAULTS, state)


def _set_fields(
    obj: object,
    what: str,
    names: Sequence[str],
    defaults: Mapping[str, object],
    state: Sequence[object],
) -> None:
    """Restore a frozen value pickled as a list of its fields; state saved before a
    field existed (a simulator checkpoint) loads with that field's default."""
    if len(state) > len(names):
        raise ValueError(f"{what} has {len(names)} fields, not {len(state)}")
    for name, value in zip(names, state, strict=False):
        object.__setattr__(obj, name, value)
    for name in names[len(state) :]:  # saved before the field existed
        object.__setattr__(obj, name, defaults[name])


_FLAVOR_FIELDS = tuple(f.name for f in fields(ResourceFlavor))
_FLAVOR_DEFAULTS: dict[str, object] = {"tolerations": (), "autoscale": None}


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    name: NodeName
    labels: Mapping[str, str]
    allocatable: Resources
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class FlavorQuota:
    """A budget on one flavor (a ClusterQueue's, or a Cohort's own); an absent limit
    means "no limit set"."""

    flavor: FlavorName
    nominal: Resources
    borrowing_limit: Resources = field(default_factory=dict)
    lending_limit: Resources = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Cohort:
    name: CohortName
    # Borrowing queues may preempt each other's borrowed workloads to even out
    # their dominant shares (docs/scheduling.md, fair-sharing preemption). Set on a
    # cohort of a tree, it holds in that cohort's whole subtree.
    fair_sharing: bool = False
    # Order among the cohort's borrowers, and the default within its queues;
    # None: the scheduler's global ``ordering``.
    ordering: Ordering | None = None
    # Hierarchical cohorts (docs/scheduling.md): the cohort this one lends to and
    # borrows from, to any depth; None: a root.
    parent: CohortName | None = None
    # Quota the cohort holds itself, beside its members', with borrowing and lending
    # limits toward its parent (limits of a root mean nothing: it has no parent).
    flavors: tuple[FlavorQuota, ...] = ()
    # Its weight among its parent's children in dominant-resource fair sharing.
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, kw_only=True, slots=True)
class PreemptionPolicy:
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    # Seconds a workload of this queue runs before reclaim or fair sharing may take
    # it (KAI Scheduler's minimum runtime); priority preemption within its own queue
    # ignores it. 0, the default: no protection, Kueue's behaviour (docs/scheduling.md).
    min_runtime: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterQueue:
    name: ClusterQueueName
    flavors: tuple[FlavorQuota, ...]
    cohort: CohortName | None = None
    weight: Fraction = Fraction(1)
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    namespaces: frozenset[str] | None = None  # None: any namespace
    preemption: PreemptionPolicy = PreemptionPolicy()
    # Order within this queue; None: its cohort's ordering, else the global one.
    ordering: Ordering | None = None
    # Seconds: a workload of this queue borrows only if it declares a max_runtime of
    # at most this, so lent capacity comes home within a bounded time and reclaim
    # never throws away days of a borrower's work. None, the default: any workload
    # borrows, Kueue's behaviour (docs/scheduling.md says why it is not the default).
    borrowing_max_runtime: float | None = None
    # In this queue's dominant share only (fair sharing, never quota): a resource
    # counted in another's units, e.g. a MIG slice as 1/7 of a GPU (core.weights).
    # Empty, the default: every resource is a dimension of its own.
    resource_weights: tuple[ResourceWeight, ...] = ()
    # Admission checks (Kueue's two-phase admission): a workload that fits is
    # admitted here as a reservation (its quota and placement held) and its job
    # starts once every named check says Ready. The checks are the controller's
    # (docs/kubernetes.md); the core only carries the names, so a queue decides
    # the same with or without them. Empty, the default: started at admission.
    admission_checks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.admission_checks)) != len(self.admission_checks):
            raise ValueError(f"cluster queue {self.name}: admission_checks: a check listed twice")
        problem = weights_problem(self.resource_weights)
        if problem is not None:
            i, why = problem
            raise ValueError(f"cluster queue {self.name}: resource_weights[{i}]: {why}")

    def quota(self, flavor: FlavorName) -> FlavorQuota | None:
        for fq in self.flavors:
            if fq.flavor == flavor:
                return fq
        return None

    def admits_namespace(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def no_loan(self, w: Workload) -> NoLoan | None:
        """Why ``w`` may not go beyond this queue's nominal quota, or None if it may.

        The one rule for every path that asks (quota checks, the victim search,
        reservations, ETAs), so a workload is never planned a loan it could not take.
        A repeat victim borrows no more: a loan can be reclaimed at any time, and the
        workload taken most often is the likeliest to be taken again. It waits for its
        own queue's nominal quota instead, unless no flavor's nominal quota could ever
        hold it: then borrowing is its only way in.
        """
        limit = self.borrowing_max_runtime
        if limit is not None and (w.max_runtime is None or w.max_runtime > limit):
            return NoLoan.RUNTIME
        if w.evictions >= REPEAT_VICTIM and self.nominal_holds(w):
            return NoLoan.REPEAT_VICTIM
        return None

    def may_borrow(self, w: Workload) -> bool:
        """Whether ``w`` may go beyond this queue's nominal quota (``no_loan``)."""
        return self.no_loan(w) is None

    def nominal_holds(self, w: Workload, flavor: FlavorName | None = None) -> bool:
        """Whether the nominal quota on ``flavor`` (on any flavor, if None) could hold
        all of ``w``: every requested resource listed, and no more than listed."""
        request = w.total_requests
        return any(
            all(r in fq.nominal and v <= fq.nominal[r] for r, v in request.items() if v > 0)
            for fq in self.flavors
            if flavor is None or fq.flavor == flavor
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: ClusterQueueName

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True, kw_only=True, slots=True)
class PodSet:
    name: str
    count: int
    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # Topology (docs/scheduling.md): all pods on nodes sharing one value of this label key,
    # or as few such values as possible. At most one of the two is set.
    topology_required: str | None = None
    topology_preferred: str | None = None
    # Partial admission: when ``count`` pods do not fit, the most that fit, at least this.
    min_count: int | None = None
    # Resources charged against quota but not placed on nodes: devices no node reports
    # (DRA claims before their driver publishes ResourceSlices). Node fit leaves them out.
    quota_only: frozenset[ResourceName] = frozenset()
    # Derived once: the per-pod requests node fit places (``requests`` less ``quota_only``).
    node_requests: Resources = field(init=False, repr=False, compare=False)
    # Derived once: this pod set's part of its gang's shape (Workload.shape). The store
    # and the trace loader share one PodSet object among the workloads of a template,
    # so thousands of workloads of one shape sort these vectors once, not each.
    shape_part: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.topology_required is not None and self.topology_preferred is not None:
            raise ValueError(f"pod set {self.name!r}: topology is required or preferred, not both")
        if self.min_count is not None and not 1 <= self.min_count <= self.count:
            raise ValueError(f"pod set {self.name!r}: min_count must be in [1, count]")
        self._derive()

    def _derive(self) -> None:
        node = (
            {r: v for r, v in self.requests.items() if r not in self.quota_only}
            if self.quota_only
            else self.requests
        )
        object.__setattr__(self, "node_requests", node)
        object.__setattr__(self, "shape_part", self._shape_part())

    def _shape_part(self) -> tuple[object, ...]:
        return (
            self.count,
            tuple(sorted(self.requests.items())),
            tuple(sorted(self.node_selector.items())),
            self.tolerations,
            self.topology_required,
            self.topology_preferred,
            self.min_count,
            tuple(sorted(self.quota_only)),
        )

    # Pickled as its given fields only (as before shape_part existed), so state saved by
    # one version of this class loads in another; the derived part is made again.
    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in _POD_SET_FIELDS]

    def __setstate__(self, state: Sequence[object]) -> None:
        _set_fields(self, "a pod set", _POD_SET_FIELDS, _POD_SET_DEFAULTS, state)
        self._derive()

    @property
    def topology(self) -> str | None:
        """The label key the pod set asks to be packed by, required or preferred."""
        return self.topology_required or self.topology_preferred


_POD_SET_FIELDS = tuple(f.name for f in fields(PodSet) if f.init)
_POD_SET_DEFAULTS: dict[str, object] = {"quota_only": frozenset()}

# A priority is a PriorityClass value: a 32-bit integer in Kubernetes and in the store.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """One gang: all pods of all pod sets are admitted together or not at all."""

    namespace: str
    name: str
    queue: str  # the LocalQueue's name in ``namespace``
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created_at: float = 0.0  # seconds; the simulator's or the store's clock
    max_runtime: float | None = None  # seconds, the user's declared limit
    # Times it was preempted: such a workload does not come back as a borrower while
    # in-nominal demand of its cohort waits (core.cycle, pass 2).
    evictions: int = 0
    # When it last entered the queue, if an eviction put it back (None: ``created_at``).
    # A preemptor may take by fair sharing only runs admitted since then (core.preemption).
    queued_at: float | None = None

    # Derived once at construction: the cycle reads them for every workload.
    id: WorkloadId = field(init=False, repr=False, compare=False)
    total_requests: Mapping[ResourceName, int] = field(init=False, repr=False, compare=False)
    # What quota and placement see of the gang: equal shapes fit or fail together.
    shape: ShapeId = field(init=False, repr=False, compare=False)
    # Queue order: higher priority, earlier creation, then namespace/name.
    order_key: tuple[int, float, str] = field(init=False, repr=False, compare=False)
    # The pod set that may be admitted with fewer pods (min_count < count), if any.
    partial_pod_set: PodSet | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        total: dict[ResourceName, int] = {}
        partial: list[PodSet] = []
        for ps in self.pod_sets:
            for r, v in ps.requests.items():
                total[r] = total.get(r, 0) + v * ps.count
            if ps.min_count is not None:
                partial.append(ps)
        if len(partial) > 1:
            raise ValueError(f"{self.namespace}/{self.name}: only one pod set may set min_count")
        shape = shape_id(tuple([ps.shape_part for ps in self.pod_sets]))
        object.__setattr__(self, "id", WorkloadId(f"{self.namespace}/{self.name}"))
        object.__setattr__(self, "total_requests", total)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "order_key", (-self.priority, self.created_at, self.id))
        shrinks = partial and partial[0].min_count != partial[0].count
        object.__setattr__(self, "partial_pod_set", partial[0] if shrinks else None)

    @property
    def gpus(self) -> int:
        return self.total_requests.get(ResourceName("nvidia.com/gpu"), 0)

    @property
    def queued_since(self) -> float:
        """When it started its current wait: its creation, or its last eviction."""
        return self.created_at if self.queued_at is None else self.queued_at


@dataclass(frozen=True, kw_only=True, slots=True)
class PodSetPlacement:
    pod_set: str
    node: NodeName
    count: int


@dataclass(frozen=True, kw_only=True)
class Admission:
    """Where a gang runs: one flavor, a node for every pod, and the quota it takes."""

    workload: WorkloadId
    cluster_queue: ClusterQueueName
    flavor: FlavorName
    placements: tuple[PodSetPlacement, ...]
    borrowing: bool = False

    @cached_property
    def pods_per_node(self) -> dict[NodeName, int]:
        out: dict[NodeName, int] = {}
        for p in self.placements:
            out[p.node] = out.get(p.node, 0) + p.count
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class AdmittedWorkload:
    """An admitted gang as the scheduler sees it: the workload, where it runs, since when."""

    workload: Workload
    admission: Admission
    admitted_at: float
    # What the placed pods hold (partial counts included), derived once: quota, fair
    # shares and the victim search read it for every admitted gang in every cycle.
    held: Mapping[ResourceName, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        per_pod = {ps.name: ps.requests for ps in self.workload.pod_sets}
        held: dict[ResourceName, int] = {}
        for p in self.admission.placements:
            requests = per_pod.get(p.pod_set)
            if requests is None:
                raise ValueError(
                    f"{self.workload.id}: placement names pod set {p.pod_set!r}, "
                    "which the workload does not have"
                )
            for r, v in requests.items():
                held[r] = held.get(r, 0) + v * p.count
        object.__setattr__(self, "held", held)

    @property
    def pods(self) -> dict[str, int]:
        """Pods placed per pod set: a pod set's ``count``, or less under partial admission."""
        out: dict[str, int] = {}
        for p in self.admission.placements:
            out[p.pod_set] = out.get(p.pod_set, 0) + p.count
        return out

    @property
    def partial(self) -> bool:
        """Whether some pod set got fewer pods than its ``count`` (partial admission)."""
        pods = self.pods
        return any(pods.get(ps.name, 0) < ps.count for ps in self.workload.pod_sets)
