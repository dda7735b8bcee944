"""Fluent builders for core objects, and a small ``World`` that runs one cycle.

Quantities are given the way a user writes them (``cpu="500m"``, ``gpu=8``)
and parsed with the core's own parser. Keyword resource names are short
aliases: ``gpu`` -> ``nvidia.com/gpu``; ``cpu``, ``memory`` and ``pods`` are
themselves. Nodes belong to a flavor through the label ``flavor=<name>``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from queuemgr.core.claims import Claim
from queuemgr.core.cycle import schedule
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    PodSet,
    PodSetPlacement,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    Taint,
    Toleration,
    WithinClusterQueue,
    Workload,
    WorkloadId,
)
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.reasons import Decisions, PendingStatus
from queuemgr.core.resources import GPU, ResourceName, parse_quantity
from queuemgr.core.snapshot import Config, Snapshot, admitted_requests, build_snapshot
from queuemgr.core.verdicts import PendingReason

FLAVOR_LABEL = "flavor"
_ALIASES = {"gpu": GPU}

Quantity = int | float | str


def resources(**amounts: Quantity) -> dict[ResourceName, int]:
    """``resources(gpu=8, cpu="500m")`` -> ``{nvidia.com/gpu: 8, cpu: 500}``."""
    out: dict[ResourceName, int] = {}
    for key, value in amounts.items():
        name = _ALIASES.get(key, ResourceName(key))
        out[name] = parse_quantity(value, resource=name, field=f"test.{name}")
    return out


# -- workloads -----------------------------------------------------------------


class WorkloadBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._ns = "default"
        self._queue = "default"
        self._priority = 0
        self._created = 0.0
        self._max_runtime: float | None = None
        self._count = 1
        self._requests: dict[str, Quantity] = {}
        self._selector: dict[str, str] = {}
        self._tolerations: list[Toleration] = []
        self._pod_sets: list[PodSet] = []
        self._topology: tuple[str | None, str | None] = (None, None)  # required, preferred
        self._min_count: int | None = None

    def ns(self, namespace: str) -> WorkloadBuilder:
        self._ns = namespace
        return self

    def queue(self, name: str) -> WorkloadBuilder:
        self._queue = name
        return self

    def priority(self, value: int) -> WorkloadBuilder:
        self._priority = value
        return self

    def at(self, created_at: float) -> WorkloadBuilder:
        self._created = created_at
        return self

    def max_runtime(self, seconds: float | None) -> WorkloadBuilder:
        self._max_runtime = seconds
        return self

    def gang(self, pods: int) -> WorkloadBuilder:
        """The default pod set ("main") has ``pods`` pods."""
        self._count = pods
        return self

    def gpus(self, per_pod: int) -> WorkloadBuilder:
        self._requests["gpu"] = per_pod
        return self

    def cpu(self, per_pod: Quantity) -> WorkloadBuilder:
        self._requests["cpu"] = per_pod
        return self

    def memory(self, per_pod: Quantity) -> WorkloadBuilder:
        self._requests["memory"] = per_pod
        return self

    def selector(self, labels: Mapping[str, str]) -> WorkloadBuilder:
        self._selector.update(labels)
        return self

    def tolerate(self, key: str = "", value: str = "", operator: str = "") -> WorkloadBuilder:
        """Tolerate a taint ``key=value`` (``Exists`` when no value is given)."""
        op = operator or ("Equal" if value else "Exists")
        self._tolerations.append(Toleration(key=key, operator=op, value=value))
        return self

    def topology(
        self, *, required: str | None = None, preferred: str | None = None
    ) -> WorkloadBuilder:
        """Pack the default pod set (and explicit ones added after) by this label key."""
        self._topology = (required, preferred)
        return self

    def min_count(self, pods: int | None) -> WorkloadBuilder:
        """Partial admission for the default pod set (or the next explicit one)."""
        self._min_count = pods
        return self

    def pod_set(self, name: str, count: int, **requests: Quantity) -> WorkloadBuilder:
        """An explicit pod set; when any is given, the default "main" one is not added."""
        self._pod_sets.append(
            PodSet(
                name=name,
                count=count,
                requests=resources(**requests),
                node_selector=dict(self._selector),
                tolerations=tuple(self._tolerations),
                min_count=self._min_count,
                topology_required=self._topology[0],
                topology_preferred=self._topology[1],
            )
        )
        self._min_count = None
        return self

    def build(self) -> Workload:
        pod_sets = tuple(self._pod_sets) or (
            PodSet(
                name="main",
                count=self._count,
                requests=resources(**self._requests),
                node_selector=dict(self._selector),
                tolerations=tuple(self._tolerations),
                min_count=self._min_count,
                topology_required=self._topology[0],
                topology_preferred=self._topology[1],
            ),
        )
        return Workload(
            namespace=self._ns,
            name=self._name,
            queue=self._queue,
            pod_sets=pod_sets,
            priority=self._priority,
            created_at=self._created,
            max_runtime=self._max_runtime,
        )


def make_workload(name: str) -> WorkloadBuilder:
    return WorkloadBuilder(name)


def make_admitted(
    w: Workload,
    cq: str,
    flavor: str,
    placements: Mapping[str, int],
    *,
    pod_set: str | None = None,
    at: float = 0.0,
) -> AdmittedWorkload:
    """An admission placing ``placements[node]`` pods of one pod set (the first by default)."""
    ps = pod_set or w.pod_sets[0].name
    return AdmittedWorkload(
        workload=w,
        admission=Admission(
            workload=w.id,
            cluster_queue=ClusterQueueName(cq),
            flavor=FlavorName(flavor),
            placements=tuple(
                PodSetPlacement(pod_set=ps, node=NodeName(n), count=c)
                for n, c in placements.items()
            ),
        ),
        admitted_at=at,
    )


# -- cluster queues --------------------------------------------------------------


@dataclass
class _QuotaDraft:
    flavor: str | None = None
    nominal: dict[str, Quantity] = field(default_factory=dict)
    borrowing: dict[str, Quantity] = field(default_factory=dict)
    lending: dict[str, Quantity] = field(default_factory=dict)


class ClusterQueueBuilder:
    """Quota calls fill the current flavor block; ``flavor(name)`` names it or opens a new one.

    So both ``.flavor("h100").nominal(gpu=8)`` and ``.nominal(gpu=8).flavor("h100")``
    give one h100 block; an unnamed block is called ``default``.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._cohort: str | None = None
        self._weight = Fraction(1)
        self._strategy = QueueingStrategy.BEST_EFFORT_FIFO
        self._namespaces: frozenset[str] | None = None
        self._blocks: list[_QuotaDraft] = [_QuotaDraft()]
        self._preemption = PreemptionPolicy()
        self._borrowing_max_runtime: float | None = None

    def cohort(self, name: str | None) -> ClusterQueueBuilder:
        self._cohort = name
        return self

    def flavor(self, name: str) -> ClusterQueueBuilder:
        if self._blocks[-1].flavor is None:
            self._blocks[-1].flavor = name
        else:
            self._blocks.append(_QuotaDraft(flavor=name))
        return self

    def nominal(self, **amounts: Quantity) -> ClusterQueueBuilder:
        self._blocks[-1].nominal.update(amounts)
        return self

    def borrowing_limit(self, **amounts: Quantity) -> ClusterQueueBuilder:
        self._blocks[-1].borrowing.update(amounts)
        return self

    def lending_limit(self, **amounts: Quantity) -> ClusterQueueBuilder:
        self._blocks[-1].lending.update(amounts)
        return self

    def borrowing_max_runtime(self, seconds: float | None) -> ClusterQueueBuilder:
        self._borrowing_max_runtime = seconds
        return self

    def weight(self, value: int | Fraction) -> ClusterQueueBuilder:
        self._weight = Fraction(value)
        return self

    def strict(self, on: bool = True) -> ClusterQueueBuilder:
        self._strategy = QueueingStrategy.STRICT_FIFO if on else QueueingStrategy.BEST_EFFORT_FIFO
        return self

    def namespaces(self, *names: str) -> ClusterQueueBuilder:
        self._namespaces = frozenset(names)
        return self

    def preempt(
        self, *, within: str = "Never", reclaim: str = "Never", min_runtime: float = 0.0
    ) -> ClusterQueueBuilder:
        self._preemption = PreemptionPolicy(
            within_cluster_queue=WithinClusterQueue(within),
            reclaim_within_cohort=ReclaimWithinCohort(reclaim),
            min_runtime=min_runtime,
        )
        return self

    def build(self) -> ClusterQueue:
        return ClusterQueue(
            name=ClusterQueueName(self._name),
            flavors=tuple(
                FlavorQuota(
                    flavor=FlavorName(b.flavor or "default"),
                    nominal=resources(**b.nominal),
                    borrowing_limit=resources(**b.borrowing),
                    lending_limit=resources(**b.lending),
                )
                for b in self._blocks
            ),
            cohort=CohortName(self._cohort) if self._cohort is not None else None,
            weight=self._weight,
            queueing_strategy=self._strategy,
            namespaces=self._namespaces,
            preemption=self._preemption,
            borrowing_max_runtime=self._borrowing_max_runtime,
        )


def make_cq(name: str) -> ClusterQueueBuilder:
    return ClusterQueueBuilder(name)


# -- nodes and flavors ----------------------------------------------------------


def make_nodes(
    prefix: str,
    count: int,
    *,
    flavor: str = "default",
    gpu: int = 8,
    cpu: Quantity = "96",
    memory: Quantity | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
) -> list[Node]:
    """``count`` identical nodes named ``<prefix>-<i>`` carrying ``flavor=<flavor>``."""
    amounts: dict[str, Quantity] = {"gpu": gpu, "cpu": cpu}
    if memory is not None:
        amounts["memory"] = memory
    return [
        Node(
            name=NodeName(f"{prefix}-{i}"),
            labels={FLAVOR_LABEL: flavor, **(labels or {})},
            allocatable=resources(**amounts),
            taints=tuple(taints),
        )
        for i in range(count)
    ]


def make_flavor(
    name: str, *, taints: Iterable[Taint] = (), tolerations: Iterable[Toleration] = ()
) -> ResourceFlavor:
    return ResourceFlavor(
        name=FlavorName(name),
        node_labels={FLAVOR_LABEL: name},
        taints=tuple(taints),
        tolerations=tuple(tolerations),
    )


# -- a world that runs one cycle --------------------------------------------------


class World:
    """Flavors, queues, nodes and workloads; ``run()`` schedules one cycle.

    Every ClusterQueue ``q`` gets a LocalQueue ``q/default`` (namespace named after
    the queue) unless a LocalQueue pointing at ``q`` is given. Flavors named by
    queues or nodes are created with :func:`make_flavor` unless given.
    """

    def __init__(self) -> None:
        self.flavors: dict[str, ResourceFlavor] = {}
        self.cqs: list[ClusterQueue] = []
        self.lqs: list[LocalQueue] = []
        self.nodes: list[Node] = []
        self.pending: list[Workload] = []
        self.admitted: list[AdmittedWorkload] = []
        self.policy = SchedulerPolicy()
        self.cohorts: list[Cohort] = []
        self.claims: dict[WorkloadId, Claim] = {}
        self.stopping: frozenset[WorkloadId] = frozenset()
        self._config: Config | None = None
        # Mark runs borrowing as their admission would have (with_loans); a test that
        # sets the marks itself, for runs admitted around ones since finished, turns it off.
        self.derive_loans = True

    def flavor(self, f: ResourceFlavor) -> World:
        self.flavors[f.name] = f
        return self

    def cohort(self, *cohorts: Cohort) -> World:
        self.cohorts.extend(cohorts)
        return self

    def cq(self, *queues: ClusterQueue | ClusterQueueBuilder) -> World:
        for q in queues:
            self.cqs.append(q.build() if isinstance(q, ClusterQueueBuilder) else q)
        return self

    def lq(self, namespace: str, name: str, cq: str) -> World:
        self.lqs.append(
            LocalQueue(namespace=namespace, name=name, cluster_queue=ClusterQueueName(cq))
        )
        return self

    def node(self, *nodes: Node | Iterable[Node]) -> World:
        for n in nodes:
            self.nodes.extend([n] if isinstance(n, Node) else n)
        return self

    def submit(self, *workloads: Workload | WorkloadBuilder) -> World:
        for w in workloads:
            self.pending.append(w.build() if isinstance(w, WorkloadBuilder) else w)
        return self

    def running(self, *admitted: AdmittedWorkload) -> World:
        self.admitted.extend(admitted)
        return self

    def config(self) -> Config:
        if self._config is None:
            flavors = dict(self.flavors)
            names: set[str] = {fq.flavor for q in self.cqs for fq in q.flavors}
            names |= {fq.flavor for c in self.cohorts for fq in c.flavors}
            names |= {n.labels[FLAVOR_LABEL] for n in self.nodes if FLAVOR_LABEL in n.labels}
            for name in sorted(names - set(flavors)):
                flavors[name] = make_flavor(name)
            lqs = list(self.lqs)
            covered = {lq.cluster_queue for lq in lqs}
            for q in self.cqs:
                if q.name not in covered:
                    lqs.append(LocalQueue(namespace=q.name, name="default", cluster_queue=q.name))
            self._config = Config.of(
                flavors=flavors.values(),
                cluster_queues=self.cqs,
                local_queues=lqs,
                nodes=self.nodes,
                cohorts=self.cohorts,
            )
        return self._config

    def snapshot(self) -> Snapshot:
        admitted = with_loans(self.config(), self.admitted) if self.derive_loans else self.admitted
        snap = build_snapshot(self.config(), admitted=admitted, pending=self.pending)
        pending = {w.id: w for w in self.pending}
        claims = {
            wid: dataclasses.replace(c, workload=pending[wid])
            for wid, c in self.claims.items()
            if wid in pending
        }
        return dataclasses.replace(snap, policy=self.policy, claims=claims, stopping=self.stopping)

    def run(self, now: float = 0.0) -> Result:
        snap = self.snapshot()
        return Result(world=self, snapshot=snap, decisions=schedule(snap, now))


def random_borrower(rng: random.Random, i: int, at: float) -> Workload:
    """A borrower of the starvation properties: a gang of 1-2 pods of 1-8 GPUs, priority
    0-5, in namespace b1 or b2 (queues of nominal 0), created at ``at``."""
    return (
        make_workload(f"b{i:03d}")
        .ns(rng.choice(["b1", "b2"]))
        .gang(rng.randint(1, 2))
        .gpus(rng.choice([1, 2, 4, 8]))
        .priority(rng.randint(0, 5))
        .at(at)
        .build()
    )


def make_cohort(
    name: str,
    parent: str | None = None,
    *,
    flavor: str = "default",
    nominal: dict[str, Quantity] | None = None,
    borrowing_limit: dict[str, Quantity] | None = None,
    lending_limit: dict[str, Quantity] | None = None,
    weight: int | Fraction = 1,
    fair: bool = False,
) -> Cohort:
    """A cohort of a tree: its parent, and quota of its own on one flavor if any is given."""
    own = (nominal, borrowing_limit, lending_limit)
    flavors = (
        (
            FlavorQuota(
                flavor=FlavorName(flavor),
                nominal=resources(**(nominal or {})),
                borrowing_limit=resources(**(borrowing_limit or {})),
                lending_limit=resources(**(lending_limit or {})),
            ),
        )
        if any(x is not None for x in own)
        else ()
    )
    return Cohort(
        name=CohortName(name),
        parent=CohortName(parent) if parent is not None else None,
        flavors=flavors,
        weight=Fraction(weight),
        fair_sharing=fair,
    )


def two_flavor_world() -> World:
    """Three h100 and two a100 nodes; x and y share a cohort on h100, y also holds a100
    quota, and z holds a100 quota alone: the incremental cache's and standings' world."""
    world = World().node(make_nodes("h", 3, flavor="h100"), make_nodes("a", 2, flavor="a100"))
    return world.cq(
        make_cq("x").cohort("c").flavor("h100").nominal(gpu=8, cpu=64),
        make_cq("y")
        .cohort("c")
        .flavor("h100")
        .nominal(gpu=8, cpu=64)
        .flavor("a100")
        .nominal(gpu=16, cpu=64),
        make_cq("z").flavor("a100").nominal(gpu=4, cpu=32),
    )


def lending_cohort(*, lender: int, a: int, b: int, fair: bool, nodes: int) -> World:
    """An idle lender and queues a and b, nominal GPUs as given (12 CPUs a GPU), in
    cohort c (with fair sharing or not), on ``nodes`` 8-GPU nodes n-0, n-1..."""
    world = World().cq(
        *(
            make_cq(name).cohort("c").nominal(gpu=gpus, cpu=str(12 * gpus))
            for name, gpus in (("lender", lender), ("a", a), ("b", b))
        )
    )
    world.cohorts = [Cohort(name=CohortName("c"), fair_sharing=fair)]
    return world.node(make_nodes("n", nodes))


def with_loans(config: Config, admitted: Iterable[AdmittedWorkload]) -> list[AdmittedWorkload]:
    """``admitted`` with each run marked borrowing as its admission would have marked it.

    The runs of each queue and flavor are replayed in admission order: a run borrows
    if the queue's usage with it exceeds the nominal quota of any resource. A run
    already marked borrowing stays so; the scheduler trusts the mark it recorded.
    """
    out: list[AdmittedWorkload] = []
    used: dict[tuple[str, str], dict[ResourceName, int]] = {}
    for a in sorted(admitted, key=lambda a: (a.admitted_at, a.workload.id)):
        cq = config.cluster_queues.get(a.admission.cluster_queue)
        quota = None
        if cq is not None:
            quota = next((fq for fq in cq.flavors if fq.flavor == a.admission.flavor), None)
        usage = used.setdefault((a.admission.cluster_queue, a.admission.flavor), {})
        for r, v in a.held.items():
            usage[r] = usage.get(r, 0) + v
        over = quota is not None and any(v > quota.nominal.get(r, 0) for r, v in usage.items())
        if over and not a.admission.borrowing:
            a = dataclasses.replace(a, admission=dataclasses.replace(a.admission, borrowing=True))
        out.append(a)
    return out


@dataclass
class Result:
    world: World
    snapshot: Snapshot
    decisions: Decisions

    def admitted_ids(self) -> set[str]:
        return set(self.decisions.admitted_ids())

    def evicted_ids(self) -> set[str]:
        return {e.victim.workload.id for e in self.decisions.evicted}

    def admission(self, wid: str) -> Admission:
        for a in self.decisions.admitted:
            if a.workload.id == wid:
                return a.admission
        raise KeyError(
            f"{wid} was not admitted; status: {self.decisions.pending.get(WorkloadId(wid))}"
        )

    def order(self) -> list[str]:
        """Ids in the order this cycle admitted them."""
        return [a.workload.id for a in self.decisions.admitted]

    def gpus_by_cq(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.decisions.admitted:
            cq = a.admission.cluster_queue
            out[cq] = out.get(cq, 0) + admitted_requests(a).get(GPU, 0)
        return out

    def count_by_cq(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.decisions.admitted:
            out[a.admission.cluster_queue] = out.get(a.admission.cluster_queue, 0) + 1
        return out

    def status(self, wid: str) -> PendingStatus:
        return self.decisions.pending[WorkloadId(wid)]

    def reason(self, wid: str) -> PendingReason | None:
        """The pending reason, or None when the workload was admitted."""
        if wid in self.admitted_ids():
            return None
        return self.status(wid).reason

    def message(self, wid: str) -> str:
        return self.status(wid).message

    def admitted_once_victims_stop(self, now: float = 0.0) -> set[str]:
        """Admitted now, or (``after_victims_stop``) on the claim in the cycle after."""
        ids = self.admitted_ids()
        if self.decisions.claims:
            ids |= self.next().run(now).admitted_ids()
        return ids

    def next(
        self,
        *submit: Workload | WorkloadBuilder,
        finished: Iterable[str] = (),
        stopping: Iterable[str] = (),
    ) -> World:
        """The world after this cycle: admissions applied, ``finished`` gone, more submitted.

        Victims are gone and pending again (one eviction more), unless named in
        ``stopping`` (still stopping: held by their preemptor's claim, not pending).
        Standing claims carry over.
        """
        done = set(finished)
        nxt = World()
        nxt.cohorts, nxt.policy = self.world.cohorts, self.world.policy
        nxt.flavors, nxt.cqs, nxt.lqs, nxt.nodes = (
            self.world.flavors,
            self.world.cqs,
            self.world.lqs,
            self.world.nodes,
        )
        nxt._config = self.world.config()
        ids = self.admitted_ids()
        victims = {e.victim.workload.id: e.victim.workload for e in self.decisions.evicted}
        nxt.admitted = [
            a
            for a in [*self.snapshot.admitted.values(), *self.decisions.admitted]
            if a.workload.id not in done and a.workload.id not in victims
        ]
        nxt.pending = [w for w in self.world.pending if w.id not in ids and w.id not in done]
        still = {WorkloadId(v) for v in stopping}
        nxt.stopping = frozenset(still)
        nxt.pending += [
            dataclasses.replace(w, evictions=w.evictions + 1)
            for wid, w in victims.items()
            if wid not in still and wid not in done
        ]
        released = set(self.decisions.released_claims) | ids | done
        claims = {**self.world.claims, **{c.workload.id: c for c in self.decisions.claims}}
        nxt.claims = {wid: c for wid, c in claims.items() if wid not in released}
        return nxt.submit(*submit)
