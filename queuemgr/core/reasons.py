"""Why a workload is pending, in a code a machine can act on and words a user can read.

Why it exists: Kueue users cannot tell why a job waits. Every pending
workload leaves each cycle with a reason code, a message with the numbers,
and its position in its LocalQueue and ClusterQueue.

What must stay true: codes are stable (they are metric labels and API); a
message names the resource and the amounts involved.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, FlavorName, WorkloadId
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


@dataclass(frozen=True, kw_only=True)
class Decisions:
    """What one cycle decided. Persisting and applying it happen elsewhere."""

    admitted: tuple[AdmittedWorkload, ...]
    pending: Mapping[WorkloadId, PendingStatus]

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
