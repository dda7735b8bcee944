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
    PodSetPlacement,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import NodePool, NodeTopology
from queuemgr.core.quota import QuotaLedger, QuotaTopology
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
    """Quota and nodes as they would be at some future time (a private copy)."""

    def __init__(self, quota: QuotaTopology, nodes: NodeTopology, snapshot: Snapshot) -> None:
        self.ledger = QuotaLedger(quota, snapshot.usage)
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
        state = _State(self._quota, self._nodes, self._snapshot)
        for a in admitted_now:
            state.apply(a, 1)
        for a in evicted:
            state.apply(a, -1)
        for a in released:
            state.apply(a, -1)
        return state

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
            flavor = fq.flavor
            # Fit is monotone in what has ended: search the fewest releases that suffice.
            lo, hi = 0, len(known)
            if self.state(admitted_now, evicted.values(), known).fits(cq, w, flavor) is None:
                continue
            while lo < hi:
                mid = (lo + hi) // 2
                state = self.state(admitted_now, evicted.values(), known[:mid])
                if state.fits(cq, w, flavor) is None:
                    lo = mid + 1
                else:
                    hi = mid
            # Jobs ending at the same instant end together.
            k = lo if lo == 0 else bisect.bisect_right(ends, ends[lo - 1])
            placements = self.state(admitted_now, evicted.values(), known[:k]).fits(cq, w, flavor)
            assert placements is not None
            start = max(now, ends[k - 1]) if k else now
            if best is None or (best.start is not None and start < best.start):
                best = Reservation(workload=w.id, flavor=flavor, start=start, placements=placements)
        if best is not None:
            return best
        unknown = tuple(sorted(wid for wid, end in ends_at.items() if end is None))
        return Reservation(workload=w.id, flavor=None, start=None, unknown_because=unknown)


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
