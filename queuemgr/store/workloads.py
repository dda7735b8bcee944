"""Workload rows: submit, cancel, and the rules every write of a workload row keeps.

Why it exists: a workload row is written by submissions (here), by a cycle's
decisions (``decisions``) and by moves outside a cycle (``transitions``); it is
read for a cycle by ``live``. The errors and the transaction helper they share
live here.

What must stay true:

- a cycle's decisions are written in ONE transaction: every admission with
  its placements and every changed pending reason, or nothing at all;
- every state change is a conditional UPDATE on the states it may leave
  (``queuemgr.core.lifecycle``) that bumps ``version``. Postgres re-checks the
  condition after waiting for a concurrent writer's row lock, so of two
  writers admitting one workload exactly one wins; the other gets
  :class:`StateConflict` and its whole transaction rolls back;
- placements are live occupancy: written on admission, deleted on finish or
  eviction, so ``placements`` answers "what runs on this node";
- a pending preemptor's claim (``core.claims``) is written in the transaction
  that evicts its victims and cleared in the one that admits it (or ends the
  claim), so a new leader holds exactly the claims the old one committed;
- a queued row whose ``requeue_at`` is after the cycle's ``now`` backs off:
  it is no pending workload of that cycle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from queuemgr.core.model import (
    Workload,
    WorkloadId,
)
from queuemgr.store import codec


class StateConflict(RuntimeError):
    """A workload was not in a state the write expected (e.g. already admitted)."""

    def __init__(self, action: str, workloads: Sequence[str]) -> None:
        shown = ", ".join(sorted(workloads)[:10])
        super().__init__(f"cannot {action}: not in an expected state (or missing): {shown}")
        self.workloads = list(workloads)


class WorkloadExists(RuntimeError):
    pass


@contextmanager
def atomic(conn: Connection) -> Iterator[None]:
    """This block commits whole or not at all (a savepoint inside a caller's transaction)."""
    if conn.in_transaction():
        with conn.begin_nested():
            yield
    else:
        with conn.begin():
            yield


def insert_workload(conn: Connection, w: Workload) -> int:
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


def cancel_workload(conn: Connection, wid: WorkloadId, *, message: str) -> bool:
    """Finish ``wid`` as Cancelled through ``queuemgr_cancel`` (tenants have no UPDATE).

    False when it had already finished. It frees its placements and notifies.
    """
    ns, _, name = wid.partition("/")
    done = conn.execute(
        text("SELECT queuemgr_cancel(:ns, :name, :why)"), {"ns": ns, "name": name, "why": message}
    ).scalar_one()
    return bool(done)
