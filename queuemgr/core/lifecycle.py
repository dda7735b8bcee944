"""A workload's life: the states it passes through and the moves allowed between them.

Why it exists: the simulator, the store and the service all move workloads
between states; one table of legal moves keeps them from disagreeing.

What must stay true: ``Pending -> Admitted -> Finished``,
``Admitted -> Evicted -> Pending``, ``Pending <-> Inadmissible`` and
``Inadmissible -> Admitted`` (a cycle admits it as soon as a change lets it
fit) are the only moves (plus cancelling a workload that has not finished);
the store checks every move it makes against this table; every state
carries a reason, and no workload is ever dropped by a transition. A run's
end names the admission it ends (:class:`RunEnd`), so an end reported late
(by a paused leader, or for a run since evicted) never finishes a later run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from queuemgr.core.model import WorkloadId


class WorkloadState(enum.Enum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    FINISHED = "Finished"
    EVICTED = "Evicted"
    INADMISSIBLE = "Inadmissible"


_ALLOWED: dict[WorkloadState, frozenset[WorkloadState]] = {
    WorkloadState.PENDING: frozenset(
        {WorkloadState.ADMITTED, WorkloadState.INADMISSIBLE, WorkloadState.FINISHED}
    ),
    # A cycle may admit an Inadmissible workload at once, when a change let it fit.
    WorkloadState.INADMISSIBLE: frozenset(
        {WorkloadState.PENDING, WorkloadState.ADMITTED, WorkloadState.FINISHED}
    ),
    WorkloadState.ADMITTED: frozenset({WorkloadState.FINISHED, WorkloadState.EVICTED}),
    WorkloadState.EVICTED: frozenset({WorkloadState.PENDING, WorkloadState.FINISHED}),
    WorkloadState.FINISHED: frozenset(),
}


class IllegalTransition(ValueError):
    pass


# Two admissions of one workload are far further apart than this (an eviction, a
# stop and a requeue lie between them); the store keeps microseconds.
SAME_ADMISSION_S = 0.001


@dataclass(frozen=True, kw_only=True, slots=True)
class RunEnd:
    """A gang's run ended on its own: which workload, and the admission it ran under.

    ``admitted_at`` is that admission's time; None when the reporter cannot tell
    (a Job started before runs were named), which ends whatever admission is current.
    """

    workload: WorkloadId
    admitted_at: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadStatus:
    state: WorkloadState
    reason: str
    message: str = ""
    since: float = 0.0


def initial_status(at: float) -> WorkloadStatus:
    return WorkloadStatus(state=WorkloadState.PENDING, reason="Created", since=at)


def can_move(src: WorkloadState, dst: WorkloadState) -> bool:
    return dst in _ALLOWED[src]


def transition(
    status: WorkloadStatus, to: WorkloadState, *, reason: str, message: str = "", at: float
) -> WorkloadStatus:
    """The next status, or ``IllegalTransition`` naming both states."""
    if not can_move(status.state, to):
        raise IllegalTransition(
            f"workload cannot move from {status.state.value} to {to.value} ({reason})"
        )
    return WorkloadStatus(state=to, reason=reason, message=message, since=at)
