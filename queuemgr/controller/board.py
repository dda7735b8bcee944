"""The leader's side of the status board: what it last wrote, and what a cycle changed.

Why it exists: every pending workload's positions and ETA must be readable
(``why``, ``workloads list``) without evaluating a cycle, yet rewriting
100,000 rows per cycle would cost the database more than the cycle itself.
The keeper remembers what the board holds (by workload row id) and hands the
cycle's transaction only the entries that differ and the rows that left the
queue (``store.status_board``). An entry holds the workload's rank in its
queue, not its positions (which readers count), and the class whose ETA,
reason and message it has, not those, unless the cycle judged it on its own: an
admission at the head changes no entry behind it, and a class's ETA, reason or
message that moved is one write. The workloads of a class are handed to the
cycle's status write as :attr:`BoardChange.shared`, whose own rows then hold no
reason or message to rewrite.

What must stay true:

- what the keeper remembers is what the database holds: :meth:`BoardKeeper.diff`
  computes a change without applying it, and :meth:`BoardKeeper.written` applies
  it only once the transaction that wrote it has committed, so a transaction that
  failed leaves both as they were; a new leadership or an unexpected error forgets
  everything (:meth:`BoardKeeper.reset`) and the next cycle reads the board again;
- an ETA at or before the cycle's time is written as 0 ("now"), so an entry
  changes when the workload's place changes, not when the clock moves
  (``core.standings`` hands them so);
- an ETA is kept to the second, rounded up: the runs a cycle admits end, for that
  cycle, at its clock's time plus their limit, and for every later cycle at the
  time read back from their rows, which keep microseconds. To the clock's last
  digit, every ETA behind them would move once, and the whole board be rewritten
  by the cycle after a large admission;
- a queue whose standing is the object the board was last written from is not
  looked at: the cost of a cycle's board follows the queues that changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import ceil

from queuemgr.core.model import ClusterQueueName, WorkloadId
from queuemgr.core.reasons import PendingStatuses
from queuemgr.core.standings import EtaClass, QueueStanding
from queuemgr.core.verdicts import Verdict
from queuemgr.store.handle import Database, Tx
from queuemgr.store.status_board import ClassEntry, ClassKey, Entry, read_board, write_board

_Queue = ClusterQueueName | None
# Per queue: the standing its rows were built from (None: read from the board),
# its rows by workload row id, and the ETA and message of each class its rows refer to.
_Held = dict[_Queue, tuple[QueueStanding | None, dict[int, Entry], dict[EtaClass, ClassEntry]]]


@dataclass(frozen=True, kw_only=True, slots=True)
class BoardChange:
    changed: Mapping[int, Entry]  # by workload row id
    gone: tuple[int, ...]
    classes: Mapping[ClassKey, ClassEntry]  # new, or whose ETA, reason or message moved
    classes_gone: tuple[ClassKey, ...]
    after: _Held  # the whole board once written
    # Of the queues whose standing the board did not hold yet (the others are as
    # written): each pending workload's ETA (0.0: now), by queue, and its verdict.
    etas: Mapping[_Queue, Mapping[WorkloadId, float | None]]
    verdicts: Mapping[WorkloadId, Verdict]
    # Of those, the ones whose reason and message the board keeps with their class:
    # their own rows are not rewritten for them (``store.decisions.persist_decisions``).
    shared: frozenset[WorkloadId]
    queues: frozenset[_Queue]  # every queue with pending workloads


class BoardKeeper:
    def __init__(self) -> None:
        self._held: _Held | None = None  # None: not known, read it first

    def reset(self) -> None:
        self._held = None

    def diff(
        self,
        db: Database,
        statuses: PendingStatuses,
        row_ids: Mapping[WorkloadId, int],
    ) -> BoardChange:
        """The writes that bring the board to ``statuses``; reads the board if not known.

        Called before the cycle's transaction, not in it: at 100,000 pending a new
        leader's first diff is seconds of Python, and a fenced transaction left idle that
        long ends its own session (``store.leadership.fence``). Reading the board in a
        transaction of its own is safe: once elected, this leader is the only writer.
        A queue whose standing is the very object last written (``core.standings``
        carried it) is skipped whole: its rows, verdicts and ETAs are as written.
        """
        held = self._held
        if held is None:
            held = {}
            with db.read() as conn:
                rows_read, classes_read = read_board(conn)
            for stored, entry in rows_read.items():
                at = None if entry[0] is None else ClusterQueueName(entry[0])
                held.setdefault(at, (None, {}, {}))[1][stored] = entry
            for (cq_name, read_class), kept in classes_read.items():
                held.setdefault(ClusterQueueName(cq_name), (None, {}, {}))[2][read_class] = kept
        after: _Held = {}
        changed: dict[int, Entry] = {}
        classes: dict[ClassKey, ClassEntry] = {}
        shared: set[WorkloadId] = set()
        classes_gone: list[ClassKey] = []
        left: list[int] = []
        etas: dict[_Queue, dict[WorkloadId, float | None]] = {}
        verdicts: dict[WorkloadId, Verdict] = {}
        for standing in statuses.by_queue():
            name = standing.cluster_queue
            before = held.get(name)
            if before is not None and before[0] is standing:
                after[name] = before
                continue
            old, old_classes = ({}, {}) if before is None else before[1:]
            rows: dict[int, Entry] = {}
            now_classes: dict[EtaClass, ClassEntry] = {}
            seen = etas[name] = {}
            for wid, cq, _, _, eta, verdict, lq, rank, klass in standing.rows:
                seen[wid] = eta
                verdicts[wid] = verdict
                rid = row_ids.get(wid)
                if rid is None:  # not a stored row (a test's or a racing submission's)
                    continue
                # Ranks, not positions, and a class's ETA kept once for the class: a row
                # behind an admission, or whose class's ETA moved, is as it was.
                due = None if eta is None else float(ceil(eta))  # to the second
                if klass is None:
                    entry = (cq, lq, rank, due, None)
                else:
                    entry = (cq, lq, rank, None, klass)
                    shared.add(wid)
                    if klass not in now_classes:  # the words are put together once a class
                        now_classes[klass] = (due, verdict.reason.value, verdict.message)
                rows[rid] = entry
                if old.get(rid) != entry:
                    changed[rid] = entry
            if name is not None:
                for klass, said in now_classes.items():
                    if old_classes.get(klass) != said:
                        classes[(name, klass)] = said
                classes_gone.extend((name, k) for k in old_classes if k not in now_classes)
            # Carried next time only if every row is on the board.
            carried = standing if len(rows) == len(standing.rows) else None
            after[name] = (carried, rows, now_classes)
            left.extend(rid for rid in old if rid not in rows)
        for name, (_, rows, gone_classes) in held.items():
            if name not in after:
                left.extend(rows)
                if name is not None:
                    classes_gone.extend((name, k) for k in gone_classes)
        # A row that moved to another queue (a new configuration) is changed, not gone.
        gone = tuple(rid for rid in left if rid not in changed)
        return BoardChange(
            changed=changed,
            gone=gone,
            classes=classes,
            classes_gone=tuple(classes_gone),
            after=after,
            etas=etas,
            verdicts=verdicts,
            shared=frozenset(shared),
            queues=frozenset(after),
        )

    def written(self, change: BoardChange) -> None:
        self._held = change.after


def write_change(conn: Tx, change: BoardChange, *, now: float) -> None:
    """Write ``change`` in the caller's transaction (the cycle's own)."""
    write_board(
        conn,
        change.changed,
        change.gone,
        classes=change.classes,
        classes_gone=change.classes_gone,
        now=now,
    )
