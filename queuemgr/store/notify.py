"""Writes that wake the scheduler: each one NOTIFYs channel ``queuemgr`` in its own transaction.

Why it exists: the service's loop is event-driven. Rather than triggers, the
writers that matter to it (a submission, a finish, a requeue, a quota or node
change) call ``pg_notify`` inside the transaction that makes the change, so
the notification is delivered if and only if the change commits, and only
after it is visible to the woken cycle's snapshot.

Every move of a workload (``store.transitions``), every config write
(``store.config_objects.audit_change``) and every submission (the ``queuemgr_submit``
function) notifies by itself: no caller has to remember to.

The other end is :func:`listen`: a connection of its own that LISTENs on the
channel and hands over each notification as it arrives; the controller's
listener thread only decides what a notification wakes.

What must stay true: a payload is a short event kind (``submitted``,
``finished``, ``evicted``, ``requeued``, ``config``), never data the listener relies on:
notifications may coalesce or be lost while a listener reconnects, so the
loop always reloads the whole snapshot and also runs a periodic safety cycle.
A listening connection is never returned to the pool (it would stay
subscribed); a failure of it is a :class:`~queuemgr.store.errors.StoreError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Connection, text

from queuemgr.core.model import WorkloadId
from queuemgr.store.errors import translated
from queuemgr.store.handle import Database

CHANNEL = "queuemgr"


def notify(conn: Connection, event: str) -> None:
    """Queue a notification; Postgres delivers it when (and only if) the transaction commits."""
    conn.execute(text("SELECT pg_notify(:channel, :event)"), {"channel": CHANNEL, "event": event})


# Evicted for want of ready pods: the readiness check requeues them after a backoff.
HELD_REASON = "PodsReadyTimeout"
# Evicted because an admission check failed its reservation: the check requeues them
# after a backoff (controller/provisioning.py).
CHECK_HELD_REASON = "AdmissionCheckFailed"
# Evicted because the capacity a started gang's admission check provisioned was revoked
# (CapacityRevoked=True): the check stops and requeues them (controller/provisioning.py).
CHECK_REVOKED_REASON = "AdmissionCheckCapacityRevoked"
HELD_REASONS = (HELD_REASON, CHECK_HELD_REASON, CHECK_REVOKED_REASON)


def evicted_workloads(conn: Connection) -> list[WorkloadId]:
    """Evicted workloads not yet requeued: a new leader stops and requeues them.

    Those evicted with one of :data:`HELD_REASONS` are left out: they wait out a backoff
    first, and whoever evicted them requeues them.
    """
    rows = conn.execute(
        text(
            "SELECT namespace, name FROM workloads WHERE state = 'Evicted'"
            " AND reason <> ALL(CAST(:held AS text[])) ORDER BY id"
        ),
        {"held": list(HELD_REASONS)},
    )
    return [WorkloadId(f"{r.namespace}/{r.name}") for r in rows]


class Listening:
    """A connection subscribed to a channel (from :func:`listen`)."""

    def __init__(self, driver: psycopg.Connection[Any]) -> None:
        self._driver = driver

    def notifications(self, timeout: float) -> Iterator[str]:
        """Each payload as it arrives, until ``timeout`` seconds have passed in all.

        The timeout bounds how long a caller that wants to stop waits for this
        to return. A lost connection raises StoreError.
        """
        with translated():
            for notification in self._driver.notifies(timeout=timeout):
                yield notification.payload


@contextmanager
def listen(db: Database, channel: str = CHANNEL) -> Iterator[Listening]:
    """A connection of its own LISTENing on ``channel`` (autocommit), dropped at the end.

    It is subscribed before this yields: whatever commits from then on is heard.
    """
    raw: Any = None
    try:
        with translated():
            raw = db.engine.raw_connection()
            driver: psycopg.Connection[Any] = raw.driver_connection
            driver.autocommit = True
            driver.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        yield Listening(driver)
    finally:
        if raw is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                raw.invalidate()
