"""The verdict of one try at one workload: a reason code and the words for it.

Why it exists: every layer of the cycle judges workloads (quota, nodes,
reservations, preemption) and the snapshot caches verdicts per shape, so the
vocabulary sits below all of them; ``reasons`` builds the cycle's statuses from it.

What must stay true: codes are stable (they are metric labels and API).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class PendingReason(enum.Enum):
    QUOTA_EXCEEDED = "QuotaExceeded"
    COHORT_EXHAUSTED = "CohortExhausted"
    NO_NODE_FITS = "NoNodeFits"
    BLOCKED_BY_HEAD = "BlockedByHead"
    INADMISSIBLE = "Inadmissible"
    PREEMPTING = "Preempting"  # victims were evicted; it starts once they have stopped
    WAITING_FOR_RESERVATION = "WaitingForReservation"  # it would delay a reserved gang
    # Preempted before, it would come back as a borrower while in-nominal demand of
    # its cohort waits for that capacity (it would only be reclaimed again).
    NOMINAL_DEMAND_WAITING = "NominalDemandWaiting"
    # It would have to borrow, and its queue's borrowing_max_runtime is shorter than
    # its declared max_runtime (or it declares none): it waits for nominal room.
    BORROWING_RUNTIME_LIMIT = "BorrowingRuntimeLimit"
    # It would have to borrow, and it was preempted REPEAT_VICTIM times: it waits for
    # its ClusterQueue's nominal quota (ClusterQueue.no_loan).
    PREEMPTED_TOO_OFTEN = "PreemptedTooOften"


# The status reason of a preempted workload held out of the queue until its requeue
# time (the requeue backoff). No cycle gives it: such a workload is in no snapshot.
BACKING_OFF = "BackingOff"


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The outcome of trying one workload; shared by every workload of the same shape.

    ``detail`` may be a function: most verdicts of a cycle are never read, so
    the words are only put together when somebody asks for ``message``.
    """

    reason: PendingReason
    detail: str | Callable[[], str]
    eta: float | None = None  # when it is expected to start, if known

    @property
    def message(self) -> str:
        return self.detail if isinstance(self.detail, str) else self.detail()
