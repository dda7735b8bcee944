"""Where every pending workload stands, one ClusterQueue at a time, carried across cycles.

Why it exists: the service writes each pending workload's verdict, positions and
ETA every cycle (the status board). Building those rows for a 100,000-deep
backlog each cycle is O(pending) even when almost nothing moved. A
ClusterQueue's rows are a function of a few inputs:

- its queue (the cache hands the same ``PendingQueue`` object until one of its
  workloads comes or goes);
- which of its workloads this cycle admitted;
- the verdicts the cycle gave its shapes and the heads it tried, and whether it
  is blocked (StrictFIFO);
- the ETA of each (shape, may borrow) class it holds (``Etas.start`` is keyed so).

When they are all what they were in the previous cycle, its rows are that
cycle's rows: the very same :class:`QueueStanding` object, so a consumer that
wrote it may skip it (``controller.board``). Only a queue whose object lasted
a cycle is compared at all (its inputs are worked out from then on), so a
queue that changes every cycle costs no more than its rows. What is then left per cycle is a
look at each queue's verdicts and classes, and the rows of the queues that
changed: the cost follows what changed, not the backlog.

What must stay true:

- a carried standing equals the one built afresh (``tests/unit/core/test_standings.py``
  drives random cycles both ways);
- an ETA at or before the cycle's time is held as 0.0, "now": a row does not
  change because the clock moved, and that is what the board stores;
- a queue ranked by something that moves with time (``ordering: usage``) is
  never carried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queuemgr.core.model import ClusterQueue, ClusterQueueName, Workload, WorkloadId
from queuemgr.core.queues import PendingQueue, Rank
from queuemgr.core.shapes import ShapeId
from queuemgr.core.verdicts import PendingReason, Verdict

if TYPE_CHECKING:
    from queuemgr.core.snapshot import CycleMemo

# Where a row sorts in its ClusterQueue, for a board that counts positions when read:
# the queue order's key (``Workload.order_key``), which a workload keeps while it
# waits, when the queue is in queue order; its position otherwise (a queue ranked by
# usage, the unroutable ones), which moves as those ahead leave.
RowRank = int | tuple[int, float, str]
EtaClass = tuple[ShapeId, bool]  # (shape, may borrow): what an ETA is keyed by
# (workload, its ClusterQueue, position in LocalQueue, in ClusterQueue, ETA, verdict,
# its (namespace, LocalQueue), its rank, and the class whose ETA it has: (shape, may
# borrow), or None when the cycle judged it on its own). A deep queue's rows share a
# handful of class ETAs, which move together as runs end: a board keeps those apart.
Row = tuple[
    WorkloadId,
    ClusterQueueName | None,
    int,
    int,
    float | None,
    Verdict,
    tuple[str, str],
    RowRank,
    EtaClass | None,
]
_Said = tuple[str, str, float | None]  # a verdict as it reads: reason, message, eta


@dataclass(frozen=True, slots=True)
class QueueStanding:
    """One ClusterQueue's pending workloads in its order (None: the unroutable ones)."""

    cluster_queue: ClusterQueueName | None
    rows: tuple[Row, ...]


def said(v: Verdict) -> _Said:
    # A verdict's detail may be a function, new each cycle: compare what it says.
    return (v.reason.value, v.message, v.eta)


def as_of(eta: float | None, now: float) -> float | None:
    """An ETA as the board holds it: 0.0 when it is due at or before ``now``."""
    return 0.0 if eta is not None and eta <= now else eta


@dataclass(frozen=True, slots=True)
class _Members:
    """What a queue object holds, worked out once per object (they never change)."""

    ids: Mapping[WorkloadId, Workload]
    shapes: tuple[ShapeId, ...]
    classes: tuple[tuple[EtaClass, Workload], ...]  # one workload standing for each class


def _members(cq: ClusterQueue, queue: PendingQueue) -> _Members:
    ids: dict[WorkloadId, Workload] = {}
    classes: dict[EtaClass, Workload] = {}
    for run in queue.runs.values():
        for w in run:
            ids[w.id] = w
            classes.setdefault((w.shape, cq.may_borrow(w)), w)
    return _Members(
        ids=ids,
        shapes=tuple(sorted({shape for shape, _ in classes})),
        classes=tuple(sorted(classes.items(), key=lambda kv: kv[0])),
    )


def carried(memo: CycleMemo | None, config: object) -> StandingsMemo | None:
    """The standings memo of ``memo`` (a new one for a new configuration)."""
    if memo is None:
        return None
    held = memo.standings
    if not isinstance(held, StandingsMemo) or held.config is not config:
        held = memo.standings = StandingsMemo(config)
    return held


class StandingsMemo:
    """The previous cycle's standings and what they came from (``Snapshot.memo``)."""

    __slots__ = ("blocks", "config", "members", "queue_of")

    def __init__(self, config: object) -> None:
        self.config = config
        # A queue's members are worked out once its object has lasted a cycle: a queue
        # that changes every cycle (a busy one) could never be carried, so it never
        # pays for them. None: the object is new this cycle.
        self.members: dict[ClusterQueueName, tuple[PendingQueue, _Members | None]] = {}
        self.queue_of: dict[WorkloadId, ClusterQueueName] = {}  # members' queues
        # The last standing of each queue whose members are held, with the inputs it came
        # from. A new queue object has none: its standing is built and this one dropped.
        self.blocks: dict[ClusterQueueName, tuple[object, QueueStanding]] = {}

    def refresh(
        self,
        queues: Mapping[ClusterQueueName, PendingQueue],
        config: Mapping[ClusterQueueName, ClusterQueue],
    ) -> dict[ClusterQueueName, _Members]:
        """The members of each queue whose object the previous cycle saw too."""
        out: dict[ClusterQueueName, _Members] = {}
        for name, queue in queues.items():
            held = self.members.get(name)
            if held is not None and held[0] is queue:
                members = held[1]
                if members is None:
                    members = _members(config[name], queue)
                    self.members[name] = (queue, members)
                    for wid in members.ids:
                        self.queue_of[wid] = name
                out[name] = members
                continue
            if held is not None:
                self._forget(held[1])
            self.members[name] = (queue, None)
        for name in [n for n in self.members if n not in queues]:
            self._forget(self.members.pop(name)[1])
            self.blocks.pop(name, None)
        return out

    def _forget(self, members: _Members | None) -> None:
        for wid in members.ids if members is not None else ():
            self.queue_of.pop(wid, None)


def standings(
    *,
    queues: Mapping[ClusterQueueName, PendingQueue],
    unroutable: Sequence[Workload],
    cluster_queues: Mapping[ClusterQueueName, ClusterQueue],
    verdicts: Mapping[WorkloadId, Verdict],
    shape_verdicts: Mapping[tuple[ClusterQueueName, ShapeId], Verdict],
    blocked: Mapping[ClusterQueueName, Verdict],
    admitted: frozenset[WorkloadId],
    ranks: Mapping[ClusterQueueName, Rank],
    resolve: Callable[[Workload, ClusterQueueName | None], Verdict],
    eta: Callable[[Workload, ClusterQueueName | None, Verdict], float | None],
    eta_for: Callable[[Workload, ClusterQueueName], float | None] | None,
    memo: StandingsMemo | None,
    now: float,
) -> list[QueueStanding]:
    """Every queue's standing in name order, then the unroutable workloads'.

    ``resolve`` and ``eta`` are the statuses' own per-workload answers, so a
    fresh row is what a lookup gives; ``eta_for`` is the cycle's ETA of a
    workload's class, which ``eta`` asks unless the verdict settles it. With
    ``memo``, a queue whose inputs are those of the previous cycle gets that
    cycle's standing back.
    """
    members = memo.refresh(queues, cluster_queues) if memo is not None else {}
    judged: dict[ClusterQueueName, list[WorkloadId]] = {}
    taken: dict[ClusterQueueName, list[WorkloadId]] = {}
    if memo is not None:
        for wids, into in ((verdicts, judged), (admitted, taken)):
            for wid in wids:
                at = memo.queue_of.get(wid)
                if at is not None:
                    into.setdefault(at, []).append(wid)
    out: list[QueueStanding] = []
    for name in sorted(queues):
        queue = queues[name]
        key: object | None = None
        here = members.get(name)
        if memo is not None and here is not None and name not in ranks:
            key = _inputs(
                name,
                here,
                judged.get(name, ()),
                taken.get(name, ()),
                verdicts=verdicts,
                shape_verdicts=shape_verdicts,
                blocked=blocked,
                eta=eta,
                eta_for=eta_for,
                now=now,
            )
            held = memo.blocks.get(name)
            if held is not None and held[0] == key:
                out.append(held[1])
                continue
        rank = ranks.get(name)
        rows = _rows(
            name,
            rank is None,
            queue.ranked(rank),
            admitted,
            verdicts,
            cluster_queues[name].may_borrow,
            resolve,
            eta,
            now,
        )
        standing = QueueStanding(cluster_queue=name, rows=rows)
        if memo is not None:
            if key is None:
                memo.blocks.pop(name, None)
            else:
                memo.blocks[name] = (key, standing)
        out.append(standing)
    if unroutable:
        rows = _rows(None, False, unroutable, frozenset(), verdicts, None, resolve, eta, now)
        out.append(QueueStanding(cluster_queue=None, rows=rows))
    return out


def _inputs(
    name: ClusterQueueName,
    members: _Members,
    judged: Iterable[WorkloadId],
    taken: Iterable[WorkloadId],
    *,
    verdicts: Mapping[WorkloadId, Verdict],
    shape_verdicts: Mapping[tuple[ClusterQueueName, ShapeId], Verdict],
    blocked: Mapping[ClusterQueueName, Verdict],
    eta: Callable[[Workload, ClusterQueueName | None, Verdict], float | None],
    eta_for: Callable[[Workload, ClusterQueueName], float | None] | None,
    now: float,
) -> object:
    """What ``name``'s rows are made from, as a value to compare with the last cycle's."""
    shapes = tuple(
        None if v is None else said(v)
        for v in (shape_verdicts.get((name, shape)) for shape in members.shapes)
    )
    # The heads the cycle tried, each with its own verdict and the ETA that gives.
    heads = tuple(
        sorted(
            (wid, said(verdicts[wid]), as_of(eta(members.ids[wid], name, verdicts[wid]), now))
            for wid in judged
        )
    )
    stop = blocked.get(name)
    # The ETA each class would be given by its shape's verdict; an Inadmissible
    # shape is given none (a head of it that is not is among ``heads``).
    etas: list[float | None] = []
    for (shape, _), w in members.classes:
        shared = shape_verdicts.get((name, shape))
        if eta_for is None or (shared is not None and shared.reason is PendingReason.INADMISSIBLE):
            etas.append(None)
        else:
            etas.append(as_of(eta_for(w, name), now))
    return (shapes, heads, None if stop is None else said(stop), tuple(sorted(taken)), tuple(etas))


def _rows(
    name: ClusterQueueName | None,
    in_queue_order: bool,
    ranked: Iterable[Workload],
    admitted: frozenset[WorkloadId],
    judged: Mapping[WorkloadId, Verdict],
    may_borrow: Callable[[Workload], bool] | None,
    resolve: Callable[[Workload, ClusterQueueName | None], Verdict],
    eta: Callable[[Workload, ClusterQueueName | None, Verdict], float | None],
    now: float,
) -> tuple[Row, ...]:
    rows: list[Row] = []
    lq_pos: dict[tuple[str, str], int] = {}
    cq_pos = 0
    # A workload the cycle did not try itself has its shape's verdict and its class's
    # ETA: worked out once per (shape, may borrow), not once per workload.
    shared: dict[tuple[ShapeId, bool], tuple[Verdict, float | None]] = {}
    for w in ranked:
        if w.id in admitted:
            continue
        if name is not None:
            cq_pos += 1
        lq = (w.namespace, w.queue)
        lq_pos[lq] = n = lq_pos.get(lq, 0) + 1
        key: EtaClass | None = None
        if may_borrow is None or w.id in judged:
            verdict = resolve(w, name)
            at = as_of(eta(w, name, verdict), now)
        else:
            key = (w.shape, may_borrow(w))
            hit = shared.get(key)
            if hit is None:
                verdict = resolve(w, name)
                hit = shared[key] = (verdict, as_of(eta(w, name, verdict), now))
            verdict, at = hit
        rank: RowRank = w.order_key if in_queue_order else len(rows) + 1
        rows.append((w.id, name, n, cq_pos, at, verdict, lq, rank, key))
    return tuple(rows)
