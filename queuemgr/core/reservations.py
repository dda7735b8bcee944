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
    Admission,
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSet,
    PodSetPlacement,
    Workload,
    WorkloadId,
)
from queuemgr.core.node_topology import NodeTopology
from queuemgr.core.placement import NodePool
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.resources import ResourceName, Resources, format_moment
from queuemgr.core.snapshot import Snapshot, admitted_requests
from queuemgr.core.timeline import PodCounter, Timeline, node_deltas


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
            return f"reserved from {format_moment(self.start)} on {', '.join(nodes)}"
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
        changes = list(changes)
        # Summed per queue and flavor first: the ledger's pool use depends only on the
        # final usage, so one addition per queue and flavor ends where many would.
        quota_delta: dict[tuple[ClusterQueueName, FlavorName], dict[ResourceName, int]] = {}
        for a, sign in changes:
            key = (a.admission.cluster_queue, a.admission.flavor)
            delta = quota_delta.get(key)
            if delta is None:
                delta = quota_delta[key] = {}
            for r, v in a.held.items():  # what admitted_requests(a) gives
                delta[r] = delta.get(r, 0) + sign * v
        for (cq, flavor), delta in quota_delta.items():
            self.ledger.add(cq, flavor, delta)
        node_free = snapshot.node_free
        touched: dict[NodeName, dict[ResourceName, int]] = {}
        for node, moved in node_deltas(changes).items():
            vec = touched[node] = dict(node_free.get(node, {}))
            for r, v in moved.items():
                vec[r] = vec.get(r, 0) + v
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
        if not self.ledger.check_for(cq, flavor, w).fits:
            return None
        return self.pool.place(flavor, w.pod_sets)


class Planner:
    """Computes reservations against a cycle's snapshot and what the cycle did so far.

    The running workloads sorted by expected end are worked out once per cycle (and
    per set of evictions and admissions so far), not once per reservation or ETA.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._quota = snapshot.config.quota_topology
        self._nodes = snapshot.config.node_topology
        self._base: tuple[tuple[float, frozenset[WorkloadId]], Timeline] | None = None
        self._merged: tuple[Sequence[AdmittedWorkload], int, Timeline] | None = None

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

    def timeline(
        self,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> Timeline:
        """The running workloads (admissions of this cycle included) by expected end."""
        key = (now, frozenset(evicted))
        if self._base is None or self._base[0] != key:
            self._base = (key, Timeline.of(self._snapshot.admitted.values(), evicted, now))
            self._merged = None
        # A cycle only appends to its admissions, so their count tells what is new.
        merged = self._merged
        if merged is None or merged[0] is not admitted_now or merged[1] != len(admitted_now):
            line = self._base[1].plus(admitted_now, now)
            self._merged = merged = (admitted_now, len(admitted_now), line)
        return merged[2]

    def reserve(
        self,
        cq: ClusterQueue,
        w: Workload,
        *,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> Reservation:
        line = self.timeline(admitted_now, evicted, now)
        best: Reservation | None = None
        for fq in cq.flavors:
            found = self._earliest(cq, w, fq.flavor, line, admitted_now, evicted, now)
            if found is not None and (best is None or (best.start or 0.0) > found[0]):
                best = Reservation(
                    workload=w.id, flavor=fq.flavor, start=found[0], placements=found[1]
                )
        if best is not None:
            return best
        return Reservation(workload=w.id, flavor=None, start=None, unknown_because=line.unknown)

    def _earliest(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        line: Timeline,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> tuple[float, tuple[PodSetPlacement, ...]] | None:
        """The first release time after which ``w`` fits on ``flavor``, and where.

        A one-pod-set gang fits exactly when its quota does and the eligible nodes
        hold its pods in sum (the placer fills them greedily), so the release times
        are walked with a watch on the quota and a running count of those pods; the
        placement itself is computed once, at the time found. Other gangs are tried
        with a full placement at each release time.
        """
        known, ends = line.known, line.ends
        counter = PodCounter.of(self._snapshot, flavor, w.pod_sets)
        if counter is None:
            state = self.state(admitted_now, evicted.values(), ())
            return self._earliest_by_placing(cq, w, flavor, line, state, now)
        # The quota side as a few integers (QuotaWatch), followed release by release.
        quota = QuotaLedger(self._quota, self._snapshot.usage).watch(cq, flavor, w)
        if not quota.covered:
            return None  # the flavor lists no quota for a requested resource: never fits
        for a, sign in (*((a, 1) for a in admitted_now), *((a, -1) for a in evicted.values())):
            quota.change(a.admission.cluster_queue, a.admission.flavor, a.held, sign)
        counter.change(admitted_now, 1)
        counter.change(evicted.values(), -1)
        # Both only get easier as runs end: releases lower usage (the queue's own, or the
        # pool's use by its peers) and free node capacity. So the first release time at
        # which both fit is the first one, from the quota's on, at which the nodes do:
        # the quota is walked alone first, and the nodes catch up in one step.
        k = 0
        while not quota.fits():
            if k >= len(known):
                return None
            nxt = bisect.bisect_right(ends, ends[k])
            for a in known[k:nxt]:
                quota.change(a.admission.cluster_queue, a.admission.flavor, a.held, -1)
            k = nxt
        counter.change(known[:k], -1)
        while True:
            if counter.enough():
                placements = counter.placement()
                assert placements is not None, "the pod count and the placement disagree"
                return (max(now, ends[k - 1]) if k else now), placements
            if k >= len(known):
                return None
            nxt = bisect.bisect_right(ends, ends[k])
            counter.change(known[k:nxt], -1)
            k = nxt

    def _earliest_by_placing(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        line: Timeline,
        state: _State,
        now: float,
    ) -> tuple[float, tuple[PodSetPlacement, ...]] | None:
        known, ends = line.known, line.ends
        k = 0
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
    """Keeps one known reservation safe while the cycle goes on admitting.

    It keeps a witness: a placement of the reserved gang that is valid in the world
    at the reservation's start. An admission on other nodes leaves the witness
    valid, so for a one-pod-set gang (whose placer finds a placement whenever one
    exists) only the quota needs checking; otherwise the gang is placed again.
    """

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
        self._flavor: FlavorName = reservation.flavor
        # Released by the start: known ends up to it. A run past its limit (overrun
        # policy extend) has an unknown end: it is still there, as far as is known.
        line = planner.timeline(admitted_now, evicted, now)
        released = line.known[: bisect.bisect_right(line.ends, reservation.start)]
        # The world at the reservation's start, as far as is known now.
        self._at_start = planner.state(admitted_now, evicted.values(), released)
        self._witness: tuple[PodSetPlacement, ...] | None = None
        if len(w.pod_sets) == 1 and self._holds(reservation.placements):
            self._witness = reservation.placements
        self._witness_nodes = frozenset(p.node for p in self._witness or ())

    def allows(self, x: AdmittedWorkload, now: float) -> bool:
        """Would admitting ``x`` now still let the reserved gang start on time?"""
        if self._gone_by_start(x, now) or x.admission.flavor != self._flavor:
            return True  # it ends first, or shares neither quota nor nodes with the gang
        ledger = self._at_start.ledger
        held = admitted_requests(x)
        ledger.add(x.admission.cluster_queue, x.admission.flavor, held)
        quota = ledger.check_for(self.cq, self._flavor, self.w).fits
        ledger.add(x.admission.cluster_queue, x.admission.flavor, {r: -v for r, v in held.items()})
        if not quota:
            return False
        if self._witness is not None and self._witness_nodes.isdisjoint(x.admission.pods_per_node):
            return True
        pool = self._at_start.pool
        pool.take(x.admission.placements, x.workload.pod_sets)
        placed = pool.place(self._flavor, self.w.pod_sets)
        pool.release(x.admission.placements, x.workload.pod_sets)
        if placed is not None and len(self.w.pod_sets) == 1:
            # Valid with x there, so valid without it: a witness that avoids x's nodes.
            self._witness, self._witness_nodes = placed, frozenset(p.node for p in placed)
        return placed is not None

    def record(self, x: AdmittedWorkload, now: float) -> None:
        """An admission went ahead: it holds its capacity at the start unless gone by then."""
        if self._gone_by_start(x, now) or x.admission.flavor != self._flavor:
            return
        self._at_start.apply(x, 1)
        if self._witness is None or self._witness_nodes.isdisjoint(x.admission.pods_per_node):
            return
        if not self._holds(self._witness):
            placed = self._at_start.pool.place(self._flavor, self.w.pod_sets)
            self._witness = placed
            self._witness_nodes = frozenset(p.node for p in placed or ())

    def as_admitted(self) -> AdmittedWorkload:
        """The reserved gang as if admitted at its start on its reserved nodes."""
        assert self.reservation.start is not None
        admission = Admission(
            workload=self.w.id,
            cluster_queue=self.cq.name,
            flavor=self._flavor,
            placements=self.reservation.placements,
        )
        return AdmittedWorkload(
            workload=self.w, admission=admission, admitted_at=self.reservation.start
        )

    def reserved(self) -> tuple[tuple[PodSetPlacement, ...], tuple[PodSet, ...]]:
        """Where the gang is expected to run at the start, and its pod sets."""
        return (self._witness or self.reservation.placements), self.w.pod_sets

    def _holds(self, placements: tuple[PodSetPlacement, ...]) -> bool:
        """Whether the world at the start has room for the gang on these placements."""
        per_pod = {ps.name: ps.node_requests for ps in self.w.pod_sets}
        need: dict[NodeName, dict[ResourceName, int]] = {}
        for p in placements:
            vec = need.setdefault(p.node, {})
            for r, v in per_pod[p.pod_set].items():
                vec[r] = vec.get(r, 0) + v * p.count
        pool = self._at_start.pool
        return all(
            pool.free(node).get(r, 0) >= v for node, vec in need.items() for r, v in vec.items()
        )

    def _gone_by_start(self, x: AdmittedWorkload, now: float) -> bool:
        limit = x.workload.max_runtime
        start = self.reservation.start
        assert start is not None
        return limit is not None and now + limit <= start
