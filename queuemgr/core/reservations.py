"""Reservations and backfill: big gangs do not starve behind streams of small jobs.

Why it exists: under BestEffortFIFO a small job that fits always passes a big
gang that does not, so the gang may wait for ever (Kueue, Volcano and YuniKorn
users report it). In the manner of Slurm's EASY backfill, the best-ranked
workloads that cannot start now get a reservation: the earliest time at which
their quota and a whole-gang node set will be free, computed from the running
workloads' expected ends (admission time + ``max_runtime``). Others may start
now only if they do not delay a reservation.

What must stay true: a reservation time is the earliest release time after
which the gang fits quota and nodes, never a guess; a workload that must end
first but has no ``max_runtime`` makes the time unknown, and an unknown
reservation blocks nobody; a backfilled workload either ends (by its
``max_runtime``) before the reservation starts or leaves room for the gang at
that time; this module only plans on copies, never on the cycle's state.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    FlavorName,
    NodeName,
    PodSetPlacement,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import NodePool, NodeTopology
from queuemgr.core.quota import QuotaLedger, QuotaTopology
from queuemgr.core.resources import ResourceName, Resources
from queuemgr.core.snapshot import Snapshot, admitted_requests


@dataclass(frozen=True, kw_only=True, slots=True)
class Reservation:
    workload: WorkloadId
    flavor: FlavorName | None
    start: float | None  # None: unknown
    placements: tuple[PodSetPlacement, ...] = ()
    # Running workloads without max_runtime that must end before it can start.
    unknown_because: tuple[WorkloadId, ...] = ()

    def describe(self) -> str:
        if self.start is not None:
            nodes = sorted({p.node for p in self.placements})
            return f"reserved from t={self.start:g} on {', '.join(nodes)}"
        if self.unknown_because:
            shown = ", ".join(self.unknown_because[:3])
            more = len(self.unknown_because) - 3
            tail = f" and {more} more" if more > 0 else ""
            return f"ETA unknown: {shown}{tail} must end first and declare no max_runtime"
        return "ETA unknown"


class _State:
    """Quota and nodes as they would be at some future time (a private copy).

    Built in bulk: the changes go into plain free-capacity vectors first, and the
    node groups are formed once from those, which is far cheaper than moving
    nodes between groups one change at a time.
    """

    def __init__(
        self,
        quota: QuotaTopology,
        nodes: NodeTopology,
        snapshot: Snapshot,
        changes: Iterable[tuple[AdmittedWorkload, int]] = (),
    ) -> None:
        self.ledger = QuotaLedger(quota, snapshot.usage)
        touched: dict[NodeName, dict[ResourceName, int]] = {}
        for a, sign in changes:
            held = admitted_requests(a)
            self.ledger.add(
                a.admission.cluster_queue,
                a.admission.flavor,
                {r: sign * v for r, v in held.items()},
            )
            per_pod = {ps.name: ps.requests for ps in a.workload.pod_sets}
            for p in a.admission.placements:
                vec = touched.get(p.node)
                if vec is None:
                    vec = touched[p.node] = dict(snapshot.node_free.get(p.node, {}))
                for r, v in per_pod[p.pod_set].items():
                    vec[r] = vec.get(r, 0) - sign * v * p.count
        if touched:
            free: Mapping[NodeName, Resources] = {**snapshot.node_free, **touched}
            self.pool = NodePool(nodes, free, None)
        else:
            self.pool = NodePool(nodes, snapshot.node_free, snapshot.node_index)

    def apply(self, a: AdmittedWorkload, sign: int) -> None:
        held = admitted_requests(a)
        self.ledger.add(
            a.admission.cluster_queue, a.admission.flavor, {r: sign * v for r, v in held.items()}
        )
        if sign > 0:
            self.pool.take(a.admission.placements, a.workload.pod_sets)
        else:
            self.pool.release(a.admission.placements, a.workload.pod_sets)

    def fits(
        self, cq: ClusterQueue, w: Workload, flavor: FlavorName
    ) -> tuple[PodSetPlacement, ...] | None:
        if not self.ledger.check(cq.name, flavor, w.total_requests).fits:
            return None
        return self.pool.place(flavor, w.pod_sets)


def expected_end(a: AdmittedWorkload, now: float) -> float | None:
    """When ``a`` is expected to end: admission + max_runtime, unknown without one.

    A run already past its max_runtime (overrun policy ``extend``) has no known end
    any more, so it counts as unknown rather than as ended.
    """
    limit = a.workload.max_runtime
    if limit is None or a.admitted_at + limit < now:
        return None
    return a.admitted_at + limit


class Planner:
    """Computes reservations against a cycle's snapshot and what the cycle did so far."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._quota = snapshot.config.quota_topology
        self._nodes = snapshot.config.node_topology

    def running(self, evicted: Mapping[WorkloadId, AdmittedWorkload]) -> list[AdmittedWorkload]:
        return [a for wid, a in self._snapshot.admitted.items() if wid not in evicted]

    def state(
        self,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Iterable[AdmittedWorkload],
        released: Iterable[AdmittedWorkload],
    ) -> _State:
        changes = [
            *((a, 1) for a in admitted_now),
            *((a, -1) for a in evicted),
            *((a, -1) for a in released),
        ]
        return _State(self._quota, self._nodes, self._snapshot, changes)

    def reserve(
        self,
        cq: ClusterQueue,
        w: Workload,
        *,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> Reservation:
        running = [*self.running(evicted), *admitted_now]
        ends_at = {a.workload.id: expected_end(a, now) for a in running}
        known = sorted(
            (a for a in running if ends_at[a.workload.id] is not None),
            key=lambda a: (ends_at[a.workload.id] or 0.0, a.workload.id),
        )
        ends = [ends_at[a.workload.id] or 0.0 for a in known]
        best: Reservation | None = None
        for fq in cq.flavors:
            found = self._earliest(cq, w, fq.flavor, known, ends, admitted_now, evicted, now)
            if found is not None and (best is None or (best.start or 0.0) > found[0]):
                best = Reservation(
                    workload=w.id, flavor=fq.flavor, start=found[0], placements=found[1]
                )
        if best is not None:
            return best
        unknown = tuple(sorted(wid for wid, end in ends_at.items() if end is None))
        return Reservation(workload=w.id, flavor=None, start=None, unknown_because=unknown)

    def _earliest(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        known: Sequence[AdmittedWorkload],
        ends: Sequence[float],
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> tuple[float, tuple[PodSetPlacement, ...]] | None:
        """The first release time after which ``w`` fits on ``flavor``, and where."""
        state = self.state(admitted_now, evicted.values(), ())
        # Skip ahead to where the flavor's nodes, summed, could hold the gang at all:
        # a cheap necessary condition, so that few real fit tests are needed.
        nodes = [n for n, f in self._nodes.flavor_of.items() if f == flavor]
        need = w.total_requests
        free = {r: sum(state.pool.free(n).get(r, 0) for n in nodes) for r in need}
        k = 0
        while k < len(known) and any(free[r] < v for r, v in need.items()):
            a = known[k]
            if a.admission.flavor == flavor:
                for r, v in admitted_requests(a).items():
                    if r in free:
                        free[r] += v
            k += 1
        if k:
            k = bisect.bisect_right(ends, ends[k - 1])  # jobs ending together end together
            state = self.state(admitted_now, evicted.values(), known[:k])
        while True:
            placements = state.fits(cq, w, flavor)
            if placements is not None:
                return (max(now, ends[k - 1]) if k else now), placements
            if k >= len(known):
                return None
            nxt = bisect.bisect_right(ends, ends[k])
            for a in known[k:nxt]:
                state.apply(a, -1)
            k = nxt


class Guard:
    """Keeps one known reservation safe while the cycle goes on admitting."""

    def __init__(
        self,
        planner: Planner,
        cq: ClusterQueue,
        w: Workload,
        reservation: Reservation,
        *,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> None:
        assert reservation.start is not None and reservation.flavor is not None
        self.cq, self.w, self.reservation = cq, w, reservation
        start = reservation.start
        running = planner.running(evicted)
        released = [
            a
            for a in [*running, *admitted_now]
            # A run past its limit (overrun policy extend) is still there, as far as is known.
            if (expected_end(a, now) or float("inf")) <= start
        ]
        # The world at the reservation's start, as far as is known now.
        self._at_start = planner.state(admitted_now, evicted.values(), released)

    def allows(self, x: AdmittedWorkload, now: float) -> bool:
        """Would admitting ``x`` now still let the reserved gang start on time?"""
        if self._gone_by_start(x, now) or x.admission.flavor != self.reservation.flavor:
            return True  # it ends first, or shares neither quota nor nodes with the gang
        assert self.reservation.flavor is not None
        self._at_start.apply(x, 1)
        ok = self._at_start.fits(self.cq, self.w, self.reservation.flavor) is not None
        self._at_start.apply(x, -1)
        return ok

    def record(self, x: AdmittedWorkload, now: float) -> None:
        """An admission went ahead: it holds its capacity at the start unless gone by then."""
        if not self._gone_by_start(x, now) and x.admission.flavor == self.reservation.flavor:
            self._at_start.apply(x, 1)

    def _gone_by_start(self, x: AdmittedWorkload, now: float) -> bool:
        limit = x.workload.max_runtime
        start = self.reservation.start
        assert start is not None
        return limit is not None and now + limit <= start
