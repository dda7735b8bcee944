"""One cycle's backfill: who gets a reservation, what may start meanwhile, and ETAs.

Why it exists: the cycle (core.cycle) decides admissions; this keeps the
reservation side of those decisions in one place: the workloads that get a
reservation (those of the ``largest_reservations`` largest pending ones that
cannot start when the cycle begins, then up to ``reservation_depth`` blocked
ones in the cycle's order), the guards that refuse an admission that would
delay one, a placement that goes around the reserved capacity when the best
fit would not, and the ETA of every other pending workload.

What must stay true: the plans (core.reservations) work on copies and never
change the cycle's quota ledger; the node pool is only borrowed for the length
of one placement and left as it was; the same snapshot gives the same
reservations (every memo here is keyed on what its answer depends on); a
reserved workload is never held back by its own reservation, and once it is
admitted its reservation protects nothing any more.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial

from queuemgr.core.eta import Etas
from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    PodSetPlacement,
    QueueingStrategy,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import NodePool
from queuemgr.core.reasons import Eviction
from queuemgr.core.reservations import Guard, Planner, Reservation
from queuemgr.core.shapes import ShapeId
from queuemgr.core.snapshot import Snapshot
from queuemgr.core.verdicts import PendingReason, Verdict

# (queue, flavor, shape, max_runtime): what decides whether a guard holds a job back;
# the flavor None for a preemption refused for a reservation's sake (core.admitter).
HeldKey = tuple[ClusterQueueName, FlavorName | None, ShapeId, float | None]


class Backfill:
    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.now = now
        self.planner = Planner(snapshot)
        self.guards: list[Guard] = []
        self.reservations: dict[WorkloadId, Reservation] = {}
        self._etas: tuple[tuple[int, int, int], Etas] | None = None
        self._held_back: dict[HeldKey, tuple[tuple[int, int], Verdict]] = {}
        self._largest = 0  # reservations made before the cycle admitted anything

    # -- guards -----------------------------------------------------------------
    def held_back(self, key: HeldKey, version: int) -> Verdict | None:
        """The verdict of the same shape and limit, if nothing changed since it was held back.

        ``version`` is the cycle's ledger version: nothing was admitted in between, so
        the job would be placed where that one was, and held back the same way.
        """
        held = self._held_back.get(key)
        if held is not None and held[0] == (version, len(self.guards)):
            return held[1]
        return None

    def remember(self, key: HeldKey, version: int, verdict: Verdict) -> None:
        self._held_back[key] = ((version, len(self.guards)), verdict)

    def check(self, admitted: AdmittedWorkload) -> Verdict | None:
        """None if no reservation is delayed by ``admitted`` (then it is recorded)."""
        refused = self.delays(admitted)
        if refused is None:
            self.record(admitted)
        return refused

    def delays(self, admitted: AdmittedWorkload) -> Verdict | None:
        """Why ``admitted`` would delay a reservation, or None; records nothing."""
        wid = admitted.workload.id
        for guard in self.guards:
            # A reserved workload starting now, at or before its start, delays nobody's
            # plan that counted it, and its own reservation is what it is there for.
            if guard.w.id != wid and not guard.allows(admitted, self.now):
                return Verdict(
                    reason=PendingReason.WAITING_FOR_RESERVATION,
                    detail=partial(_would_delay, guard),
                    eta=guard.reservation.start,
                )
        return None

    def record(self, admitted: AdmittedWorkload) -> None:
        """An admission (or a hold) went ahead: every plan now counts it."""
        wid = admitted.workload.id
        # Its own guard goes: the capacity it protected is now taken by the admission.
        self.guards = [g for g in self.guards if g.w.id != wid]
        for guard in self.guards:
            guard.record(admitted, self.now)

    @contextmanager
    def held(self, pool: NodePool, flavor: FlavorName | None = None) -> Iterator[None]:
        """Within the block, ``pool`` has no room on the capacity the reserved gangs need
        (those on ``flavor``, or all).

        It leaves ``pool`` as it found it, whatever the block took or released there.
        """
        held = [
            g.reserved() for g in self.guards if flavor is None or g.reservation.flavor == flavor
        ]
        for placements, pod_sets in held:
            pool.take(placements, pod_sets)
        try:
            yield
        finally:
            for placements, pod_sets in reversed(held):
                pool.release(placements, pod_sets)

    def around(
        self, pool: NodePool, flavor: FlavorName, w: Workload
    ) -> tuple[PodSetPlacement, ...] | None:
        """A placement of ``w`` that leaves the reserved gangs' node capacity alone."""
        with self.held(pool, flavor):
            return pool.place(flavor, w.pod_sets)

    # -- reservations and ETAs ----------------------------------------------------
    def reserve(
        self,
        cq: ClusterQueue,
        w: Workload,
        verdict: Verdict,
        admitted: Sequence[AdmittedWorkload],
        evictions: Sequence[Eviction],
    ) -> Verdict:
        """Give the best-ranked blocked workloads a reservation, up to the policy's depth."""
        made = self.reservations.get(w.id)
        if made is None:
            if len(self.reservations) - self._largest >= self.snapshot.policy.reservation_depth:
                return verdict
            made = self._reserve(cq, w, admitted, evictions)
        return _reserved(verdict, made)

    def reserve_largest(
        self,
        cq: ClusterQueue,
        w: Workload,
        verdict: Verdict,
        admitted: Sequence[AdmittedWorkload],
        evictions: Sequence[Eviction],
    ) -> Verdict:
        """Reserve for one of the largest pending workloads, outside the depth's count."""
        self._largest += 1
        return _reserved(verdict, self._reserve(cq, w, admitted, evictions))

    def _reserve(
        self,
        cq: ClusterQueue,
        w: Workload,
        admitted: Sequence[AdmittedWorkload],
        evictions: Sequence[Eviction],
    ) -> Reservation:
        evicted = {e.victim.workload.id: e.victim for e in evictions}
        # Later reservations plan around the earlier ones: each reserved gang counts as
        # running on its reserved nodes until its start + max_runtime.
        planned = [*admitted, *(g.as_admitted() for g in self.guards)]
        reservation = self.planner.reserve(
            cq, w, admitted_now=planned, evicted=evicted, now=self.now
        )
        self.reservations[w.id] = reservation
        if reservation.start is not None:
            self.guards.append(
                Guard(
                    self.planner,
                    cq,
                    w,
                    reservation,
                    admitted_now=planned,
                    evicted=evicted,
                    now=self.now,
                )
            )
        return reservation

    def eta(
        self,
        w: Workload,
        cq_name: ClusterQueueName,
        admitted: Sequence[AdmittedWorkload],
        evictions: Sequence[Eviction],
    ) -> float | None:
        """When the running workloads' declared ends first leave room for ``w``'s shape.

        Asked lazily, when someone reads a status; each side of the answer is worked
        out once per cycle where it is shared (core.eta).
        """
        # A cycle only appends to its admissions and evictions: their counts tell.
        key = (id(admitted), len(admitted), len(evictions))
        if self._etas is None or self._etas[0] != key:
            evicted = {e.victim.workload.id: e.victim for e in evictions}
            self._etas = (key, Etas(self.planner, self.snapshot, admitted, evicted, self.now))
        return self._etas[1].start(self.snapshot.config.cluster_queues[cq_name], w)


def largest_pending(
    snapshot: Snapshot,
    cluster_queues: Mapping[ClusterQueueName, ClusterQueue],
    strict_heads: Mapping[ClusterQueueName, Workload],
    never_fits: Callable[[ClusterQueue, Workload], bool],
    count: int,
) -> list[tuple[ClusterQueue, Workload]]:
    """The ``count`` pending workloads asking for the most GPUs, ties in queue order.

    Only a StrictFIFO queue's head (in the cycle's order, ``strict_heads``) may
    start, so only it is a candidate there; a workload that could never be
    admitted is none, nor is one asking for fewer GPUs than the policy's
    ``largest_min_gpus``. The queues' runs (one shape each, in queue order) are
    merged, so this costs one step per shape and pick.
    """
    out: list[tuple[ClusterQueue, Workload]] = []
    if count <= 0:
        return out
    smallest = snapshot.policy.largest_min_gpus
    runs: list[Sequence[Workload]] = []
    heap: list[tuple[int, tuple[int, float, str], int, int]] = []
    names: list[ClusterQueueName] = []
    for name in sorted(snapshot.pending):
        cq = cluster_queues.get(name)
        queue = snapshot.pending[name]
        if cq is None or not len(queue):
            continue
        if cq.queueing_strategy is QueueingStrategy.STRICT_FIFO:
            head = strict_heads.get(name)
            candidates: list[Sequence[Workload]] = [(head,)] if head is not None else []
        else:
            candidates = [run for run in queue.runs.values() if run]
        for run in candidates:
            if run[0].gpus < smallest:
                continue  # nor is the rest of the run: one shape
            heap.append((-run[0].gpus, run[0].order_key, len(runs), 0))
            runs.append(run)
            names.append(name)
    heapq.heapify(heap)
    while heap and len(out) < count:
        _gpus, _order, i, pos = heapq.heappop(heap)
        run, cq = runs[i], cluster_queues[names[i]]
        if not never_fits(cq, run[pos]):
            out.append((cq, run[pos]))
        elif cq.may_borrow(run[pos]):
            continue  # nor will the rest of its run: the same shape in the same queue
        # (else one of its shape that may borrow, by its runtime or past, may fit)
        if pos + 1 < len(run):
            nxt = run[pos + 1]
            heapq.heappush(heap, (-nxt.gpus, nxt.order_key, i, pos + 1))
    return out


def _would_delay(guard: Guard) -> str:
    return f"would delay {guard.w.id}, {guard.reservation.describe()}"


def _reserved(verdict: Verdict, made: Reservation) -> Verdict:
    """``verdict`` with the reservation made for it: its message and its ETA."""
    return Verdict(
        reason=verdict.reason,
        detail=f"{verdict.message}; {made.describe()}",
        eta=made.start,
    )
