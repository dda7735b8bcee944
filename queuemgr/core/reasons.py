"""Why a workload is pending, in a code a machine can act on and words a user can read.

Why it exists: Kueue users cannot tell why a job waits. Every pending
workload leaves each cycle with a reason code, a message with the numbers,
and its position in its LocalQueue and ClusterQueue.

What must stay true: codes are stable (they are metric labels and API); a
message names the resource and the amounts involved.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import FitFailure
from queuemgr.core.resources import ResourceName, format_quantity


class PendingReason(enum.Enum):
    QUOTA_EXCEEDED = "QuotaExceeded"
    COHORT_EXHAUSTED = "CohortExhausted"
    NO_NODE_FITS = "NoNodeFits"
    BLOCKED_BY_HEAD = "BlockedByHead"
    INADMISSIBLE = "Inadmissible"


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The outcome of trying one workload; shared by every workload of the same shape."""

    reason: PendingReason
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingStatus:
    workload: WorkloadId
    cluster_queue: ClusterQueueName | None
    reason: PendingReason
    message: str
    position_in_local_queue: int  # 1-based, among the workloads still pending
    position_in_cluster_queue: int


class PendingStatuses(Mapping[WorkloadId, PendingStatus]):
    """Every workload left pending, with its verdict and positions.

    Built lazily: a cycle over 100,000 pending workloads hands out shared
    verdicts, and positions are counted only when somebody asks.
    """

    def __init__(
        self,
        queues: Mapping[ClusterQueueName, Sequence[Workload]],
        unroutable: Sequence[Workload],
        verdicts: Mapping[WorkloadId, Verdict],
    ) -> None:
        self._queues = queues
        self._unroutable = unroutable
        self._verdicts = verdicts
        self._positions: dict[WorkloadId, tuple[ClusterQueueName | None, int, int]] | None = None

    def verdict(self, wid: WorkloadId) -> Verdict | None:
        return self._verdicts.get(wid)

    def _count(self) -> dict[WorkloadId, tuple[ClusterQueueName | None, int, int]]:
        if self._positions is None:
            out: dict[WorkloadId, tuple[ClusterQueueName | None, int, int]] = {}
            lq_pos: dict[tuple[str, str], int] = {}
            verdicts = self._verdicts
            for name in sorted(self._queues):
                cq_pos = 0
                for w in self._queues[name]:
                    if w.id not in verdicts:  # admitted this cycle
                        continue
                    cq_pos += 1
                    lq = (w.namespace, w.queue)
                    lq_pos[lq] = n = lq_pos.get(lq, 0) + 1
                    out[w.id] = (name, n, cq_pos)
            for w in self._unroutable:
                lq = (w.namespace, w.queue)
                lq_pos[lq] = n = lq_pos.get(lq, 0) + 1
                out[w.id] = (None, n, 0)
            self._positions = out
        return self._positions

    def __getitem__(self, wid: WorkloadId) -> PendingStatus:
        verdict = self._verdicts[wid]
        cq, lq_pos, cq_pos = self._count()[wid]
        return PendingStatus(
            workload=wid,
            cluster_queue=cq,
            reason=verdict.reason,
            message=verdict.message,
            position_in_local_queue=lq_pos,
            position_in_cluster_queue=cq_pos,
        )

    def __iter__(self) -> Iterator[WorkloadId]:
        return iter(self._count())

    def __len__(self) -> int:
        return len(self._verdicts)


@dataclass(frozen=True, kw_only=True)
class Decisions:
    """What one cycle decided. Persisting and applying it happen elsewhere."""

    admitted: tuple[AdmittedWorkload, ...]
    pending: PendingStatuses
    # Workloads found Inadmissible this cycle (cheap to read without ``pending``).
    inadmissible: tuple[WorkloadId, ...] = ()

    def admitted_ids(self) -> set[WorkloadId]:
        return {a.workload.id for a in self.admitted}


def describe_fit_failure(flavor: FlavorName, f: FitFailure) -> str:
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
        message=f"StrictFIFO: waiting behind the queue's head {head}",
    )
