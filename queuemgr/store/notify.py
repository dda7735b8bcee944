"""Writes that wake the scheduler: each one NOTIFYs channel ``queuemgr`` in its own transaction.

Why it exists: the service's loop is event-driven. Rather than triggers, the
writers that matter to it (a submission, a finish, a requeue, a quota or node
change) call ``pg_notify`` inside the transaction that makes the change, so
the notification is delivered if and only if the change commits, and only
after it is visible to the woken cycle's snapshot.

Every move of a workload (``store.transitions``), every config write
(``store.config.audit_change``) and every submission (the ``queuemgr_submit``
function) notifies by itself: no caller has to remember to.

What must stay true: a payload is a short event kind (``submitted``,
``finished``, ``evicted``, ``requeued``, ``config``), never data the listener relies on:
notifications may coalesce or be lost while a listener reconnects, so the
loop always reloads the whole snapshot and also runs a periodic safety cycle.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from queuemgr.core.model import WorkloadId

CHANNEL = "queuemgr"


def notify(conn: Connection, event: str) -> None:
    """Queue a notification; Postgres delivers it when (and only if) the transaction commits."""
    conn.execute(text("SELECT pg_notify(:channel, :event)"), {"channel": CHANNEL, "event": event})


# Evicted for want of ready pods: the readiness check requeues them after a backoff.
HELD_REASON = "PodsReadyTimeout"


def evicted_workloads(conn: Connection) -> list[WorkloadId]:
    """Evicted workloads not yet requeued: a new leader stops and requeues them.

    Those evicted with :data:`HELD_REASON` are left out: they wait out a backoff
    first, and whoever evicted them requeues them.
    """
    rows = conn.execute(
        text(
            "SELECT namespace, name FROM workloads WHERE state = 'Evicted'"
            " AND reason <> :held ORDER BY id"
        ),
        {"held": HELD_REASON},
    )
    return [WorkloadId(f"{r.namespace}/{r.name}") for r in rows]
