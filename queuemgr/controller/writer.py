"""Writing a cycle's decisions while the loop folds them into its mirror of the rows.

Why it exists: committing a busy cycle is mostly the database's work (the
admitting UPDATE and the placements' INSERT cost Postgres about 30 µs a row),
and folding the admissions into the leader's mirror is mostly Python's (about
20 µs a row). One after the other, the loop sat idle through the first: under a
sustained stream it waited on Postgres for about a third of its time. Here the
transaction runs on a thread of its own while the loop folds the admissions in
ahead of the commit, so the two overlap. The fold starts once the status board's
diff is worked out: both are Python, and side by side they would only take turns.

What must stay true:

- nothing of a cycle is applied before its transaction committed: the loop
  gets the decisions back from :meth:`CycleWriter.commit` only then;
- the transaction reads copies of the mirror's row ids and stored statuses,
  taken before the fold, never the maps the fold changes;
- a transaction that failed leaves the mirror as it was before the fold (the
  fold is undone; an undo that fails empties the mirror, which then reads
  everything again) and the board keeper as it was;
- one transaction at a time: a cycle waits for its own before it returns,
  whatever happened to the fold meanwhile.
- the status board's diff is worked out before the transaction opens: a fenced
  transaction that sits idle past ``FENCED_IDLE_TIMEOUT`` ends its own session,
  and a new leader's first diff at 100,000 pending takes seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for

from queuemgr.controller.board import BoardChange, BoardKeeper, write_change
from queuemgr.core.model import WorkloadId
from queuemgr.core.reasons import Decisions
from queuemgr.store.decisions import Persisted, persist_decisions
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderToken, fence
from queuemgr.store.live import Status
from queuemgr.store.mirror import StateMirror
from queuemgr.store.state import StoredState
from queuemgr.store.transitions import evict


class CycleWriter:
    def __init__(self, db: Database, mirror: StateMirror, board: BoardKeeper) -> None:
        self._db = db
        self._mirror = mirror
        self._board = board
        self._pool: ThreadPoolExecutor | None = None

    def commit(
        self, token: LeaderToken, d: Decisions, state: StoredState, now: float
    ) -> tuple[Persisted, BoardChange]:
        """Commit ``d`` in one fenced transaction and fold it into the mirror."""
        mirror = self._mirror
        if not d.admitted:  # nothing worth folding while it is written
            done = self._write(token, d, now, mirror.row_ids(), state.statuses)
            mirror.committed(d, done[0], now=now)
            return done
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="queuemgr-commit")
        # Copies: the fold below changes the mirror's maps while the writer reads them.
        diffed = threading.Event()
        writing = self._pool.submit(
            self._write, token, d, now, dict(mirror.row_ids()), dict(state.statuses), diffed
        )
        try:
            # Once the board's diff (Python, seconds at a new leader's first cycle) is done:
            # the fold then runs while the writer waits on Postgres, not beside the diff,
            # where the two would only take turns.
            diffed.wait()
            mirror.fold_ahead(d.admitted, now=now)
        except BaseException:
            wait_for([writing])  # never two transactions of the loop at once
            raise
        try:
            persisted, board = writing.result()
        except BaseException:
            mirror.undo_ahead()
            raise
        mirror.committed(d, persisted, now=now)
        return persisted, board

    def _write(
        self,
        token: LeaderToken,
        d: Decisions,
        now: float,
        ids: Mapping[WorkloadId, int],
        previous: Mapping[WorkloadId, Status],
        diffed: threading.Event | None = None,
    ) -> tuple[Persisted, BoardChange]:
        # Worked out before the transaction: it may take seconds (a new leader's first).
        try:
            board = self._board.diff(self._db, d.pending, ids)
        finally:
            if diffed is not None:
                diffed.set()
        with self._db.write() as conn:
            fence(conn, token)
            # Where every workload left pending stands, in the same transaction as the
            # admissions that moved them: the board never shows an uncommitted cycle.
            write_change(conn, board, now=now)
            persisted = persist_decisions(
                conn,
                d,
                now=now,
                previous=previous,
                ids=ids,
                verdicts=board.verdicts,
                shared=board.shared,
            )
            for e in d.evicted:
                evict(conn, e.victim.workload.id, now=now, reason="Preempted", message=e.message)
        self._board.written(board)
        return persisted, board

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
