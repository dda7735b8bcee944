"""Why a workload is pending, in a code a machine can act on and words a user can read.

Why it exists: Kueue users cannot tell why a job waits. Every pending
workload leaves each cycle with a reason code, a message with the numbers,
and its position in its LocalQueue and ClusterQueue.

What must stay true: codes are stable (they are metric labels and API); a
message names the resource and the amounts involved.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import FitFailure
from queuemgr.core.queues import PendingQueue, Rank
from queuemgr.core.shapes import ShapeId

if TYPE_CHECKING:
    from queuemgr.core.claims import Claim
    from queuemgr.core.reservations import Reservation
from queuemgr.core.resources import ResourceName, format_quantity
from queuemgr.core.standings import QueueStanding, StandingsMemo, standings
from queuemgr.core.verdicts import PendingReason, Verdict


class PreemptionReason(enum.Enum):
    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


@dataclass(frozen=True, kw_only=True, slots=True)
class Eviction:
    """An admitted gang the cycle takes back, whole, and why."""

    victim: AdmittedWorkload
    preemptor: WorkloadId
    preemptor_cluster_queue: ClusterQueueName
    reason: PreemptionReason

    @property
    def message(self) -> str:
        return f"Preempted by {self.preemptor} ({self.reason.value})"


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingStatus:
    workload: WorkloadId
    cluster_queue: ClusterQueueName | None
    reason: PendingReason
    message: str
    position_in_local_queue: int  # 1-based, among the workloads still pending
    position_in_cluster_queue: int
    # Expected start: a reservation's start, else the earliest time the running
    # workloads' declared ends would make room for it (a lower bound: it ignores
    # the workloads ahead of it). None when unknown or when it can never fit.
    eta: float | None = None

    @classmethod
    def judged(
        cls,
        workload: WorkloadId,
        cluster_queue: ClusterQueueName | None,
        verdict: Verdict,
        positions: tuple[int, int],
        eta: float | None,
    ) -> PendingStatus:
        """A status from ``verdict``, at ``positions`` (in its LocalQueue, its ClusterQueue)."""
        return cls(
            workload=workload,
            cluster_queue=cluster_queue,
            reason=verdict.reason,
            message=verdict.message,
            position_in_local_queue=positions[0],
            position_in_cluster_queue=positions[1],
            eta=eta,
        )


class PendingStatuses(Mapping[WorkloadId, PendingStatus]):
    """Every workload left pending, with its verdict and positions.

    Lazy: a cycle decides per shape, so the verdict of a workload that was
    never a head is its shape's (or its blocked queue's), looked up when asked;
    positions are counted on first use. Building all of them is O(pending),
    which a cycle itself never pays.
    """

    def __init__(
        self,
        *,
        queues: Mapping[ClusterQueueName, PendingQueue],
        unroutable: Sequence[Workload],
        verdicts: Mapping[WorkloadId, Verdict],
        shape_verdicts: Mapping[tuple[ClusterQueueName, ShapeId], Verdict],
        blocked: Mapping[ClusterQueueName, Verdict],
        admitted: frozenset[WorkloadId],
        rank: Rank | None = None,
        ranks: Mapping[ClusterQueueName, Rank] | None = None,
        eta_for: Callable[[Workload, ClusterQueueName], float | None] | None = None,
        cluster_queues: Mapping[ClusterQueueName, ClusterQueue] | None = None,
        memo: StandingsMemo | None = None,
        now: float = 0.0,
    ) -> None:
        self._eta_for = eta_for
        self._cluster_queues = cluster_queues or {}
        self._memo = memo if cluster_queues is not None else None
        self._now = now
        self._standings: list[QueueStanding] | None = None
        self._rank = rank
        self._ranks = ranks or {}  # per ClusterQueue, where it differs from ``rank``
        self._queues = queues
        self._unroutable = unroutable
        self._verdicts = verdicts
        self._shape_verdicts = shape_verdicts
        self._blocked = blocked
        self._admitted = admitted
        self._index: dict[WorkloadId, tuple[Workload, ClusterQueueName | None, int, int]] | None
        self._index = None
        self._where: (
            tuple[dict[WorkloadId, Workload], dict[WorkloadId, ClusterQueueName]] | None
        ) = None

    def _resolve(self, w: Workload, cq: ClusterQueueName | None) -> Verdict:
        known = self._verdicts.get(w.id)
        if known is not None or cq is None:
            assert known is not None
            return known
        shared = self._shape_verdicts.get((cq, w.shape))
        if shared is not None and shared.reason is PendingReason.INADMISSIBLE:
            return shared
        blocked = self._blocked.get(cq)
        if blocked is not None:
            return blocked
        assert shared is not None, f"{w.id} was never judged"
        return shared

    def eta_of(self, w: Workload, cq: ClusterQueueName) -> float | None:
        """The ``eta`` of pending ``w`` routed to ``cq``, without counting positions."""
        return self._eta(w, cq, self._resolve(w, cq))

    def verdict(self, wid: WorkloadId) -> Verdict:
        return self._resolve(*self._find(wid))

    def verdict_in(self, w: Workload, cq: ClusterQueueName | None) -> Verdict:
        """The verdict of pending ``w``, which the caller found in ``cq``'s queue (None:
        unroutable): a walk of the queues need not look each one up by id."""
        return self._resolve(w, cq)

    def eta_by_id(self, wid: WorkloadId) -> float | None:
        """The ``eta`` of pending ``wid``, without counting positions."""
        w, cq = self._find(wid)
        return self._eta(w, cq, self._resolve(w, cq))

    def __contains__(self, wid: object) -> bool:
        return wid in (self._index if self._index is not None else self._locate()[0])

    def _find(self, wid: WorkloadId) -> tuple[Workload, ClusterQueueName | None]:
        if self._index is not None:
            w, cq, _, _ = self._index[wid]
            return w, cq
        where, cq_of = self._locate()
        return where[wid], cq_of.get(wid)

    def _locate(self) -> tuple[dict[WorkloadId, Workload], dict[WorkloadId, ClusterQueueName]]:
        """Each pending workload and its queue, without ranking: for verdict lookups.

        Counting positions merges and ranks every queue; a cycle that only
        writes the verdicts of a few new workloads must not pay that. Two flat
        maps of existing objects, not a tuple per workload: at 100,000 pending,
        allocating those tuples costs ten times the walk in garbage collection.
        """
        if self._where is None:
            where: dict[WorkloadId, Workload] = {}
            cq_of: dict[WorkloadId, ClusterQueueName] = {}
            admitted = self._admitted
            for name, queue in self._queues.items():
                for run in queue.runs.values():
                    for w in run:
                        if w.id not in admitted:
                            where[w.id] = w
                            cq_of[w.id] = name
            for w in self._unroutable:
                where[w.id] = w
            self._where = (where, cq_of)
        return self._where

    def _count(self) -> dict[WorkloadId, tuple[Workload, ClusterQueueName | None, int, int]]:
        if self._index is None:
            out: dict[WorkloadId, tuple[Workload, ClusterQueueName | None, int, int]] = {}
            lq_pos: dict[tuple[str, str], int] = {}
            for name in sorted(self._queues):
                cq_pos = 0
                for w in self._queues[name].ranked(self._ranks.get(name, self._rank)):
                    if w.id in self._admitted:
                        continue
                    cq_pos += 1
                    lq = (w.namespace, w.queue)
                    lq_pos[lq] = n = lq_pos.get(lq, 0) + 1
                    out[w.id] = (w, name, n, cq_pos)
            for w in self._unroutable:
                lq = (w.namespace, w.queue)
                lq_pos[lq] = n = lq_pos.get(lq, 0) + 1
                out[w.id] = (w, None, n, 0)
            self._index = out
        return self._index

    def inadmissible(self) -> list[WorkloadId]:
        """The Inadmissible ones, found without counting every position."""
        out = [wid for wid, v in self._verdicts.items() if v.reason is PendingReason.INADMISSIBLE]
        seen = set(out)
        for (cq, shape), v in self._shape_verdicts.items():
            if v.reason is not PendingReason.INADMISSIBLE:
                continue
            queue = self._queues.get(cq)
            for key, run in queue.runs.items() if queue is not None else ():
                if key[2] != shape:
                    continue
                for w in run:
                    if w.id not in seen:
                        seen.add(w.id)
                        out.append(w.id)
        return out

    def __getitem__(self, wid: WorkloadId) -> PendingStatus:
        w, cq, lq_pos, cq_pos = self._count()[wid]
        verdict = self._resolve(w, cq)
        return PendingStatus.judged(wid, cq, verdict, (lq_pos, cq_pos), self._eta(w, cq, verdict))

    def by_queue(self) -> list[QueueStanding]:
        """Every pending workload's row, one standing per ClusterQueue (``core.standings``).

        What ``self[wid]`` holds, without a status object per workload, an ETA
        due now as 0.0: the service writes all of them every cycle (its status
        board, and each workload's reason and message from the verdict). With
        the snapshot's memo, a queue whose inputs did not change since the
        previous cycle gets that cycle's standing, the same object.
        """
        if self._standings is None:
            self._standings = standings(
                queues=self._queues,
                unroutable=self._unroutable,
                cluster_queues=self._cluster_queues,
                verdicts=self._verdicts,
                shape_verdicts=self._shape_verdicts,
                blocked=self._blocked,
                admitted=self._admitted,
                ranks=self._all_ranks(),
                resolve=self._resolve,
                eta=self._eta,
                eta_for=self._eta_for,
                memo=self._memo,
                now=self._now,
            )
        return self._standings

    def _all_ranks(self) -> Mapping[ClusterQueueName, Rank]:
        if self._rank is None:
            return self._ranks
        return {name: self._ranks.get(name, self._rank) for name in self._queues}

    def _eta(self, w: Workload, cq: ClusterQueueName | None, verdict: Verdict) -> float | None:
        if verdict.eta is not None or cq is None or self._eta_for is None:
            return verdict.eta
        if verdict.reason is PendingReason.INADMISSIBLE:
            return None
        return self._eta_for(w, cq)

    def __iter__(self) -> Iterator[WorkloadId]:
        return iter(self._count())

    def __len__(self) -> int:
        return len(self._count())


@dataclass(frozen=True, kw_only=True)
class Decisions:
    """What one cycle decided. Persisting and applying it happen elsewhere."""

    admitted: tuple[AdmittedWorkload, ...]
    pending: PendingStatuses
    evicted: tuple[Eviction, ...] = ()
    # Reservations made this cycle (see core.reservations), best-ranked first.
    reservations: tuple[Reservation, ...] = ()
    # Claims made this cycle (core.claims), and the workloads whose claim ended
    # without an admission (an admission ends its own claim).
    claims: tuple[Claim, ...] = ()
    released_claims: tuple[WorkloadId, ...] = ()
    # Admissions and evictions in the order the cycle decided them.
    log: tuple[AdmittedWorkload | Eviction, ...] = ()

    def admitted_ids(self) -> set[WorkloadId]:
        return {a.workload.id for a in self.admitted}

    @property
    def inadmissible(self) -> list[WorkloadId]:
        return self.pending.inadmissible()


def describe_fit_failure(flavor: FlavorName, f: FitFailure) -> str:
    if f.topology is not None:
        return f.describe_topology(flavor)

    def vec(v: Mapping[ResourceName, int]) -> str:
        return (
            ", ".join(f"{format_quantity(r, q)} {r}" for r, q in sorted(v.items()) if q)
            or "nothing"
        )

    return (
        f"needs {f.needed} pods of {{{vec(f.per_pod)}}} on {flavor} for pod set {f.pod_set!r}; "
        f"free nodes hold {min(f.placeable, f.needed)} such pods "
        f"(largest free node: {vec(f.largest_free)})"
    )


def blocked_by_head(head: WorkloadId) -> Verdict:
    return Verdict(
        reason=PendingReason.BLOCKED_BY_HEAD,
        detail=f"StrictFIFO: waiting behind the queue's head {head}",
    )
