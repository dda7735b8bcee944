"""Workload rows: the rules every write of a workload row keeps, and what they share.

Why it exists: a workload row is written by a cycle's decisions (``decisions``)
and by every other move, submissions included (``transitions``); it is read for
a cycle by ``live``. The errors and the transaction helper they share live here.

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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection


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
