"""Workload moves outside a cycle: finish (or cancel), evict, requeue.

Why it exists: the cluster reports that a gang finished or was evicted, and
an operator cancels; each is one state change of one workload row.

What must stay true: a move is a conditional UPDATE on the states the core's
lifecycle (``queuemgr.core.lifecycle``) allows it to leave, bumping
``version``; a workload in any other state (or missing) raises
:class:`~queuemgr.store.workloads.StateConflict` and nothing is written
(:func:`finish_many`, the loop's batch of finishes, skips it and says which
ones it moved; it finishes only the admission each end names);
leaving Admitted deletes the workload's placements, which are live occupancy;
a preemption counts in ``evictions``, and the requeue that follows it sets
``requeue_at`` (the backoff) in the same UPDATE; a finish or cancel ends a
pending preemptor's claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection, text

from queuemgr.core.lifecycle import SAME_ADMISSION_S, RunEnd, WorkloadState
from queuemgr.core.model import WorkloadId
from queuemgr.store import codec
from queuemgr.store.workloads import StateConflict, atomic


def _move(
    conn: Connection,
    wid: WorkloadId,
    *,
    to: WorkloadState,
    sources: tuple[WorkloadState, ...],
    reason: str,
    message: str,
    now: float,
    extra: str = "",
    params: dict[str, object] | None = None,
) -> None:
    ns, _, name = wid.partition("/")
    with atomic(conn):
        row = conn.execute(
            text(f"""
            UPDATE workloads SET state = CAST(:to AS workload_state), reason = :reason,
                message = :message, state_since = :now, version = version + 1 {extra}
            WHERE namespace = :ns AND name = :name
              AND state = ANY(CAST(:sources AS workload_state[]))
            RETURNING id"""),
            {
                "to": to.value,
                "reason": reason,
                "message": message,
                "now": codec.timestamp(now),
                "ns": ns,
                "name": name,
                "sources": [s.value for s in sources],
                **(params or {}),
            },
        ).first()
        if row is None:
            raise StateConflict(f"move to {to.value}", [wid])
        conn.execute(text("DELETE FROM placements WHERE workload_id = :id"), {"id": row.id})


def mark_finished(
    conn: Connection, wid: WorkloadId, *, now: float, reason: str = "Succeeded", message: str = ""
) -> None:
    """Finish (or cancel) a workload that has not finished yet; frees its placements
    and ends its claim."""
    sources = tuple(s for s in WorkloadState if s is not WorkloadState.FINISHED)
    _move(
        conn,
        wid,
        to=WorkloadState.FINISHED,
        sources=sources,
        reason=reason,
        message=message,
        now=now,
        extra=", finished_at = :now, claim = NULL",
    )


def evict(
    conn: Connection,
    wid: WorkloadId,
    *,
    now: float,
    reason: str,
    message: str = "",
    preempted: bool = True,
) -> None:
    """Admitted -> Evicted: frees its placements; :func:`requeue` makes it Pending again.

    A preemption (by a cycle, or by a lowered quota) counts in ``evictions``,
    which the cycle and the requeue backoff read; an eviction for another
    cause (``preempted=False``: a readiness timeout, with its own backoff) does not.
    """
    _move(
        conn,
        wid,
        to=WorkloadState.EVICTED,
        sources=(WorkloadState.ADMITTED,),
        reason=reason,
        message=message,
        now=now,
        # It waits again from now on: fair sharing reads it (core Workload.queued_at).
        extra=", queued_at = :now" + (", evictions = evictions + 1" if preempted else ""),
    )


def requeue(
    conn: Connection,
    wid: WorkloadId,
    *,
    now: float,
    backoff: Callable[[int], float] | None = None,
) -> float | None:
    """Evicted -> Pending, once the cluster confirms the gang's pods are gone.

    With ``backoff`` (seconds from the workload's eviction count, say
    ``SchedulerPolicy.requeue_delay``), it is not pending for a cycle until
    ``now`` plus that delay; the message says until when. Returns that time,
    None if it may be admitted at once.
    """
    ns, _, name = wid.partition("/")
    with atomic(conn):
        evictions = conn.execute(
            text(
                "SELECT evictions FROM workloads WHERE namespace = :ns AND name = :name"
                " AND state = 'Evicted' FOR UPDATE"
            ),
            {"ns": ns, "name": name},
        ).scalar_one_or_none()
        if evictions is None:
            raise StateConflict(f"move to {WorkloadState.PENDING.value}", [wid])
        delay = 0.0 if backoff is None else backoff(evictions)
        until = now + delay if delay > 0 else None
        message = "" if until is None else backoff_message(evictions, until, delay)
        _move(
            conn,
            wid,
            to=WorkloadState.PENDING,
            sources=(WorkloadState.EVICTED,),
            reason="Requeued",
            message=message,
            now=now,
            extra=", requeue_at = :requeue_at",
            params={"requeue_at": None if until is None else codec.timestamp(until)},
        )
    return until


def backoff_message(evictions: int, until: float, delay: float) -> str:
    times = "once" if evictions == 1 else f"{evictions} times"
    return (
        f"preempted {times}: backs off until {codec.timestamp(until).isoformat()} "
        f"({delay:g}s) before it is tried again"
    )


# A run's end finishes the admission it names, Admitted or being evicted (a gang
# that completed while its stop was on the way did complete), never a requeued or
# later run. The match allows the rounding of a timestamp to microseconds.
_FINISH_MANY = text("""
UPDATE workloads AS w
SET state = 'Finished', reason = :reason, message = :message, state_since = :now,
    finished_at = :now, claim = NULL, version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:admitted AS float8[]))
    AS d(ns, name, admitted)
WHERE w.namespace = d.ns AND w.name = d.name AND w.state IN ('Admitted', 'Evicted')
  AND (d.admitted IS NULL
       OR abs(extract(epoch FROM w.admitted_at) - d.admitted) < :same)
RETURNING w.id, w.namespace, w.name
""")


def finish_many(
    conn: Connection,
    ends: Sequence[RunEnd],
    *,
    now: float,
    reason: str = "Succeeded",
    message: str = "",
) -> list[WorkloadId]:
    """Finish the runs that ``ends`` report, in two statements; returns those it finished.

    A run that is no longer the workload's current one (finished, requeued,
    admitted again, or missing) is skipped, not an error: the caller learns
    which ones moved from the result.
    """
    if not ends:
        return []
    names = [e.workload.partition("/") for e in ends]
    with atomic(conn):
        rows = conn.execute(
            _FINISH_MANY,
            {
                "reason": reason,
                "message": message,
                "now": codec.timestamp(now),
                "ns": [ns for ns, _, _ in names],
                "names": [name for _, _, name in names],
                "admitted": [e.admitted_at for e in ends],
                "same": SAME_ADMISSION_S,
            },
        ).all()
        conn.execute(
            text("DELETE FROM placements WHERE workload_id = ANY(CAST(:ids AS bigint[]))"),
            {"ids": [r.id for r in rows]},
        )
    return [WorkloadId(f"{r.namespace}/{r.name}") for r in rows]
