"""Workload moves outside a cycle: finish (or cancel), evict, requeue.

Why it exists: the cluster reports that a gang finished or was evicted, and
an operator cancels; each is one state change of one workload row.

What must stay true: a move is a conditional UPDATE on the states the core's
lifecycle (``queuemgr.core.lifecycle``) allows it to leave, bumping
``version``; a workload in any other state (or missing) raises
:class:`~queuemgr.store.workloads.StateConflict` and nothing is written
(:func:`finish_many`, the loop's batch of finishes, skips it and says which
ones it moved);
leaving Admitted deletes the workload's placements, which are live occupancy.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, text

from queuemgr.core.lifecycle import WorkloadState
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
            },
        ).first()
        if row is None:
            raise StateConflict(f"move to {to.value}", [wid])
        conn.execute(text("DELETE FROM placements WHERE workload_id = :id"), {"id": row.id})


def mark_finished(
    conn: Connection, wid: WorkloadId, *, now: float, reason: str = "Succeeded", message: str = ""
) -> None:
    """Finish (or cancel) a workload that has not finished yet; frees its placements."""
    sources = tuple(s for s in WorkloadState if s is not WorkloadState.FINISHED)
    _move(
        conn,
        wid,
        to=WorkloadState.FINISHED,
        sources=sources,
        reason=reason,
        message=message,
        now=now,
        extra=", finished_at = :now",
    )


def evict(conn: Connection, wid: WorkloadId, *, now: float, reason: str, message: str = "") -> None:
    """Admitted -> Evicted: frees its placements; :func:`requeue` makes it Pending again."""
    _move(
        conn,
        wid,
        to=WorkloadState.EVICTED,
        sources=(WorkloadState.ADMITTED,),
        reason=reason,
        message=message,
        now=now,
    )


def requeue(conn: Connection, wid: WorkloadId, *, now: float) -> None:
    """Evicted -> Pending, once the cluster confirms the gang's pods are gone."""
    _move(
        conn,
        wid,
        to=WorkloadState.PENDING,
        sources=(WorkloadState.EVICTED,),
        reason="Requeued",
        message="",
        now=now,
    )


_FINISH_MANY = text("""
UPDATE workloads AS w
SET state = 'Finished', reason = :reason, message = :message, state_since = :now,
    finished_at = :now, version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[])) AS d(ns, name)
WHERE w.namespace = d.ns AND w.name = d.name AND w.state <> 'Finished'
RETURNING w.id, w.namespace, w.name
""")


def finish_many(
    conn: Connection,
    wids: Sequence[WorkloadId],
    *,
    now: float,
    reason: str = "Succeeded",
    message: str = "",
) -> list[WorkloadId]:
    """:func:`mark_finished` for many workloads in two statements; returns those it finished.

    A workload already finished (or missing) is skipped, not an error: the
    caller learns which ones moved from the result.
    """
    if not wids:
        return []
    names = [wid.partition("/") for wid in wids]
    with atomic(conn):
        rows = conn.execute(
            _FINISH_MANY,
            {
                "reason": reason,
                "message": message,
                "now": codec.timestamp(now),
                "ns": [ns for ns, _, _ in names],
                "names": [name for _, _, name in names],
            },
        ).all()
        conn.execute(
            text("DELETE FROM placements WHERE workload_id = ANY(CAST(:ids AS bigint[]))"),
            {"ids": [r.id for r in rows]},
        )
    return [WorkloadId(f"{r.namespace}/{r.name}") for r in rows]
