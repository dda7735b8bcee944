"""Every move of a workload row outside a cycle's admissions: the one way to change one.

Why it exists: submissions (CLI, webhook, job sync), the cluster's reports (a
gang finished, its pods are gone), the loop's evictions and an operator's
cancel all move workload rows. One module holds them all, in the manner of
procrastinate's ``JobManager``, so that each move is written once, checked
against the core's table of legal moves and wakes the scheduler by itself.
(A cycle's admissions are written with its statuses and claims in one
transaction by ``decisions``.)

What must stay true: a move is a conditional UPDATE on the states it may leave,
and those states are checked against ``queuemgr.core.lifecycle`` (a move the
table forbids raises ``IllegalTransition`` before any SQL runs); it bumps
``version``; a workload in any other state (or missing) raises
:class:`~queuemgr.store.workloads.StateConflict` and nothing is written
(:func:`finish_many`, the loop's batch of finishes, skips it and says which
ones it moved; it finishes only the admission each end names); leaving
Admitted deletes the workload's placements, which are live occupancy; an
eviction sets ``queued_at`` and a preemption counts in ``evictions``; the
requeue that follows sets ``requeue_at`` (the backoff) in the same UPDATE; a
finish or cancel ends a pending preemptor's claim; every move NOTIFYs the
scheduler in its own transaction (``store.notify``), so it is woken if and
only if the move commits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from queuemgr.core.lifecycle import (
    SAME_ADMISSION_S,
    IllegalTransition,
    RunEnd,
    WorkloadState,
    can_move,
)
from queuemgr.core.model import Workload, WorkloadId
from queuemgr.store import codec
from queuemgr.store.arrays import literal
from queuemgr.store.notify import notify
from queuemgr.store.row_keys import both_forms, row_keys
from queuemgr.store.workloads import StateConflict, WorkloadExists, atomic


def legal_sources(to: WorkloadState, sources: Sequence[WorkloadState]) -> list[str]:
    """The states a move leaves, as SQL values, once the core's table allows each of them."""
    for s in sources:
        if not can_move(s, to):
            raise IllegalTransition(f"workload cannot move from {s.value} to {to.value}")
    return [s.value for s in sources]


# -- submit ---------------------------------------------------------------------


def submit_workload(conn: Connection, w: Workload) -> int:
    """Submit ``w`` as Pending; returns its row id. Raises WorkloadExists for a duplicate.

    Through ``queuemgr_submit`` (migration 0010), the one way into the table for
    every submitter: a tenant has no INSERT of its own, and the function checks
    its namespace grant, its LocalQueue and the shape of the pod sets. It
    notifies the scheduler in this transaction.
    """
    try:
        with atomic(conn):
            wid = conn.execute(
                _SUBMIT,
                {
                    "ns": w.namespace,
                    "name": w.name,
                    "queue": w.queue,
                    "priority": w.priority,
                    "created": codec.timestamp(w.created_at),
                    "max_runtime": w.max_runtime,
                    "pod_sets": json.dumps([codec.pod_set(ps) for ps in w.pod_sets]),
                },
            ).scalar_one()
    except IntegrityError as exc:
        raise WorkloadExists(f"workload {w.id} already exists") from exc
    return int(wid)


_SUBMIT = text(
    "SELECT queuemgr_submit(:ns, :name, :queue, :priority, :created, :max_runtime,"
    " CAST(:pod_sets AS jsonb))"
)


def submit_many(conn: Connection, workloads: Sequence[Workload]) -> list[WorkloadId]:
    """Submit each of ``workloads`` as Pending, in one transaction.

    Returns the ones inserted; one whose name is taken is skipped (each insert
    is its own savepoint), so a batch never fails for a duplicate.
    """
    done: list[WorkloadId] = []
    with atomic(conn):
        for w in workloads:
            try:
                submit_workload(conn, w)
            except WorkloadExists:
                continue
            done.append(w.id)
    return done


def resubmit_workload(conn: Connection, w: Workload) -> int:
    """Submit ``w`` whose name a *finished* workload holds: that one is renamed ``name~id``.

    Raises ``LookupError`` when no finished workload holds the name (a live
    workload is never replaced).
    """
    with atomic(conn):
        old = conn.execute(
            text(
                "SELECT id FROM workloads WHERE namespace = :ns AND name = :name"
                " AND state = 'Finished' FOR UPDATE"
            ),
            {"ns": w.namespace, "name": w.name},
        ).first()
        if old is None:
            raise LookupError(f"{w.id}: no finished workload of that name to replace")
        conn.execute(
            text("UPDATE workloads SET name = name || '~' || id::text WHERE id = :id"),
            {"id": old.id},
        )
        return submit_workload(conn, w)


def cancel_workload(conn: Connection, wid: WorkloadId, *, message: str) -> bool:
    """Finish ``wid`` as Cancelled through ``queuemgr_cancel`` (tenants have no UPDATE).

    False when it had already finished. It frees its placements and notifies.
    """
    ns, _, name = wid.partition("/")
    done = conn.execute(
        text("SELECT queuemgr_cancel(:ns, :name, :why)"), {"ns": ns, "name": name, "why": message}
    ).scalar_one()
    return bool(done)


# -- moves of a row ---------------------------------------------------------------


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
    states = legal_sources(to, sources)
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
                "sources": states,
                **(params or {}),
            },
        ).first()
        if row is None:
            raise StateConflict(f"move to {to.value}", [wid])
        conn.execute(text("DELETE FROM placements WHERE workload_id = :id"), {"id": row.id})
        notify(conn, _EVENTS[to])


# What each move tells the scheduler (store.notify: a kind, never data).
_EVENTS = {
    WorkloadState.FINISHED: "finished",
    WorkloadState.EVICTED: "evicted",
    WorkloadState.PENDING: "requeued",
}


def finish_workload(
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


def requeue_workload(
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
_FINISH_MANY = """
UPDATE workloads AS w
SET state = 'Finished', reason = :reason, message = :message, state_since = :now,
    finished_at = :now, claim = NULL, version = w.version + 1
FROM unnest({key}, CAST(:admitted AS float8[])) AS d({key_names}, admitted)
WHERE {match}
  AND w.state = ANY(CAST(:sources AS workload_state[]))
  AND (d.admitted IS NULL
       OR abs(extract(epoch FROM w.admitted_at) - d.admitted) < :same)
RETURNING w.id, w.namespace, w.name
"""
# By row id when the caller knows them, else by name (``store.row_keys``).
_FINISH_BY_NAME, _FINISH_BY_ID = both_forms(_FINISH_MANY)


# A run's end finishes a workload Admitted, or being evicted (its stop was on the way).
_RUNNING = legal_sources(WorkloadState.FINISHED, (WorkloadState.ADMITTED, WorkloadState.EVICTED))


def finish_many(
    conn: Connection,
    ends: Sequence[RunEnd],
    *,
    now: float,
    reason: str = "Succeeded",
    message: str = "",
    ids: Mapping[WorkloadId, int] | None = None,
) -> list[WorkloadId]:
    """Finish the runs that ``ends`` report, in two statements; returns those it finished.

    A run that is no longer the workload's current one (finished, requeued,
    admitted again, or missing) is skipped, not an error: the caller learns
    which ones moved from the result. ``ids`` (workload -> row id, when the
    caller knows every one) finds the rows by primary key.
    """
    if not ends:
        return []
    params: dict[str, object] = {
        "reason": reason,
        "message": message,
        "now": codec.timestamp(now),
        "admitted": literal([e.admitted_at for e in ends]),
        "same": SAME_ADMISSION_S,
        "sources": _RUNNING,
    }
    by_id, keys = row_keys([e.workload for e in ends], ids)
    with atomic(conn):
        rows = conn.execute(_FINISH_BY_ID if by_id else _FINISH_BY_NAME, params | keys).all()
        conn.execute(
            text("DELETE FROM placements WHERE workload_id = ANY(CAST(:ids AS bigint[]))"),
            {"ids": literal([rid for rid, _, _ in rows])},
        )
        if rows:
            notify(conn, "finished")
    return [WorkloadId(f"{ns}/{name}") for _, ns, name in rows]
