"""The leader's side of the status board: what it last wrote, and what a cycle changed.

Why it exists: every pending workload's positions and ETA must be readable
(``why``, ``workloads list``) without evaluating a cycle, yet rewriting
100,000 rows per cycle would cost the database more than the cycle itself.
The keeper remembers what the board holds (by workload row id) and hands the
cycle's transaction only the entries that differ and the rows that left the
queue (``store.status_board``).

What must stay true:

- what the keeper remembers is what the database holds: :meth:`BoardKeeper.diff`
  computes a change without applying it, and :meth:`BoardKeeper.written` applies
  it only once the transaction that wrote it has committed, so a transaction that
  failed leaves both as they were; a new leadership or an unexpected error forgets
  everything (:meth:`BoardKeeper.reset`) and the next cycle reads the board again;
- an ETA at or before the cycle's time is written as 0 ("now"), so an entry
  changes when the workload's place changes, not when the clock moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from queuemgr.core.model import WorkloadId
from queuemgr.core.reasons import PendingStatuses
from queuemgr.core.verdicts import Verdict
from queuemgr.store.handle import Tx
from queuemgr.store.status_board import BoardEntry, read_board

_Entry = tuple[str | None, int, int, float | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class BoardChange:
    changed: Mapping[int, BoardEntry]  # by workload row id
    gone: tuple[int, ...]
    after: dict[int, _Entry]  # the whole board once written
    etas: Mapping[WorkloadId, float | None]  # every pending workload's, as computed
    verdicts: Mapping[WorkloadId, Verdict]  # every pending workload's, resolved once


class BoardKeeper:
    def __init__(self) -> None:
        self._held: dict[int, _Entry] | None = None  # None: not known, read it first

    def reset(self) -> None:
        self._held = None

    def diff(
        self,
        conn: Tx,
        statuses: PendingStatuses,
        row_ids: Mapping[WorkloadId, int],
        *,
        now: float,
    ) -> BoardChange:
        """The writes that bring the board to ``statuses``; reads the board if not known."""
        held = self._held
        if held is None:
            held = {
                rid: (e.cluster_queue, e.position_in_local_queue, e.position_in_queue, e.eta)
                for rid, e in read_board(conn).items()
            }
        after: dict[int, _Entry] = {}
        changed: dict[int, BoardEntry] = {}
        etas: dict[WorkloadId, float | None] = {}
        verdicts: dict[WorkloadId, Verdict] = {}
        for wid, cq, lq_pos, cq_pos, eta, verdict in statuses.standings():
            etas[wid] = eta
            verdicts[wid] = verdict
            rid = row_ids.get(wid)
            if rid is None:  # not a stored row (a test's or a racing submission's)
                continue
            if eta is not None and eta <= now:
                eta = 0.0
            entry = (cq, lq_pos, cq_pos, eta)
            after[rid] = entry
            if held.get(rid) != entry:
                changed[rid] = BoardEntry(
                    cluster_queue=cq,
                    position_in_local_queue=lq_pos,
                    position_in_queue=cq_pos,
                    eta=eta,
                )
        gone = tuple(rid for rid in held if rid not in after)
        return BoardChange(changed=changed, gone=gone, after=after, etas=etas, verdicts=verdicts)

    def written(self, change: BoardChange) -> None:
        self._held = change.after
