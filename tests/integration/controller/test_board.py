"""The status board's keeper writes what changed: a class's ETA and message once, not its rows.

The keeper is driven with standings built by hand (one ClusterQueue: a head the
cycle judged on its own, and three workloads that share their class's ETA), and
its changes are written to the real board and read back as ``why`` reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.board import BoardChange, BoardKeeper, write_change
from queuemgr.core.model import ClusterQueueName, WorkloadId
from queuemgr.core.shapes import ShapeId
from queuemgr.core.standings import EtaClass, QueueStanding, Row
from queuemgr.core.verdicts import PendingReason, Verdict
from queuemgr.store.admin import workload_infos
from queuemgr.store.handle import Database
from queuemgr.store.status_board import standing
from tests.integration.store.helpers import seed_config
from tests.integration.store.test_mirror import NOW, _submit

pytestmark = pytest.mark.integration

CQ = ClusterQueueName("team-a")
CLASS: EtaClass = (ShapeId(7), False)
WAITING = Verdict(reason=PendingReason.QUOTA_EXCEEDED, detail="waits")
QUOTA = PendingReason.QUOTA_EXCEEDED.value
NAMES = ("head", "b", "c", "d")


class _Statuses:
    """What the keeper reads of a cycle's statuses: its standings."""

    def __init__(self, standings: Sequence[QueueStanding]) -> None:
        self._standings = list(standings)

    def by_queue(self) -> list[QueueStanding]:
        return self._standings


def _standing(
    names: Sequence[str],
    *,
    head_eta: float,
    class_eta: float,
    said: str = "waits",
    reason: PendingReason = PendingReason.QUOTA_EXCEEDED,
) -> QueueStanding:
    rows: list[Row] = []
    shared = Verdict(reason=reason, detail=said)
    for i, name in enumerate(names):
        wid = WorkloadId(f"team-a/{name}")
        rank = (0, NOW + NAMES.index(name), wid)
        own = i == 0 and name == "head"
        eta, klass = (head_eta, None) if own else (class_eta, CLASS)
        verdict = WAITING if own else shared
        rows.append((wid, CQ, i + 1, i + 1, eta, verdict, ("team-a", "default"), rank, klass))
    return QueueStanding(cluster_queue=CQ, rows=tuple(rows))


def _apply(engine: Engine, keeper: BoardKeeper, st: QueueStanding, ids: Any) -> BoardChange:
    change = keeper.diff(Database(engine), _Statuses([st]), ids)  # type: ignore[arg-type]
    with engine.begin() as conn:
        write_change(conn, change, now=NOW)
    keeper.written(change)
    return change


def _workloads(engine: Engine) -> dict[WorkloadId, int]:
    """The four workloads, submitted, by their row ids."""
    seed_config(engine)
    _submit(engine, *NAMES)
    with engine.connect() as conn:
        return {
            WorkloadId(f"{r.namespace}/{r.name}"): r.id
            for r in conn.execute(sa.text("SELECT id, namespace, name FROM workloads"))
        }


def _read(engine: Engine, name: str) -> tuple[int, float | None] | None:
    with engine.connect() as conn:
        found = standing(conn, "team-a", name)
    return None if found is None else (found.entry.position_in_queue, found.entry.eta)


def test_a_class_eta_that_moved_is_one_write_and_every_row_reads_it(engine: Engine) -> None:
    ids = _workloads(engine)
    keeper = BoardKeeper()
    first = _apply(engine, keeper, _standing(NAMES, head_eta=100.0, class_eta=200.0), ids)
    assert len(first.changed) == 4 and dict(first.classes) == {(CQ, CLASS): (200.0, QUOTA, "waits")}
    assert first.shared == {WorkloadId(f"team-a/{n}") for n in NAMES[1:]}
    assert [_read(engine, n) for n in NAMES] == [(1, 100.0), (2, 200.0), (3, 200.0), (4, 200.0)]

    # Runs ended: the head's own ETA and its class's moved. Two writes, not four.
    moved = _apply(engine, keeper, _standing(NAMES, head_eta=150.0, class_eta=300.0), ids)
    assert set(moved.changed) == {ids[WorkloadId("team-a/head")]} and not moved.gone
    assert dict(moved.classes) == {(CQ, CLASS): (300.0, QUOTA, "waits")}
    assert [_read(engine, n) for n in NAMES] == [(1, 150.0), (2, 300.0), (3, 300.0), (4, 300.0)]

    # The head was admitted: its row goes, and the others' rows stay as written, their
    # positions counted one lower.
    left = _apply(engine, keeper, _standing(NAMES[1:], head_eta=0.0, class_eta=300.0), ids)
    assert not left.changed and not left.classes
    assert left.gone == (ids[WorkloadId("team-a/head")],)
    assert [_read(engine, n) for n in NAMES[1:]] == [(1, 300.0), (2, 300.0), (3, 300.0)]

    # The queue emptied: its rows and its class's ETA are dropped.
    gone = _apply(engine, keeper, QueueStanding(cluster_queue=CQ, rows=()), ids)
    assert len(gone.gone) == 3 and gone.classes_gone == ((CQ, CLASS),)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM pending_classes")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM pending_statuses")).scalar_one() == 0


def test_a_class_message_that_moved_is_one_write(engine: Engine) -> None:
    """The room free changed, and with it the words of the class's verdict: one class
    row is written, no workload's entry."""
    ids = _workloads(engine)
    keeper = BoardKeeper()
    _apply(engine, keeper, _standing(NAMES, head_eta=100.0, class_eta=200.0, said="4 free"), ids)
    moved = _apply(
        engine, keeper, _standing(NAMES, head_eta=100.0, class_eta=200.0, said="3 free"), ids
    )
    assert not moved.changed and not moved.gone
    assert dict(moved.classes) == {(CQ, CLASS): (200.0, QUOTA, "3 free")}
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT message FROM pending_classes")).scalars().all() == [
            "3 free"
        ]


def test_a_class_reason_that_moved_is_one_write(engine: Engine) -> None:
    """The cohort lent the last of its quota: the class's reason is another, written in
    its class row alone, as its message is."""
    ids = _workloads(engine)
    keeper = BoardKeeper()
    _apply(engine, keeper, _standing(NAMES, head_eta=100.0, class_eta=200.0), ids)
    lent = PendingReason.COHORT_EXHAUSTED
    moved = _apply(
        engine, keeper, _standing(NAMES, head_eta=100.0, class_eta=200.0, reason=lent), ids
    )
    assert not moved.changed and not moved.gone
    assert dict(moved.classes) == {(CQ, CLASS): (200.0, lent.value, "waits")}
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT reason FROM pending_classes")).scalars().all() == [
            lent.value
        ]


def test_a_class_row_written_before_it_kept_reasons_shows_the_workloads_own(
    engine: Engine,
) -> None:
    """Migration 0025 adds the class's reason as NULL to the rows already there: readers
    take each workload's own reason (written with them then), until the leader writes
    the class's."""
    ids = _workloads(engine)
    keeper = BoardKeeper()
    _apply(engine, keeper, _standing(NAMES, head_eta=100.0, class_eta=200.0), ids)

    def reasons() -> dict[str, str]:
        with engine.connect() as conn:
            infos = workload_infos(conn, namespace="team-a")
        return {i.row["name"]: i.row["reason"] for i in infos}

    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE pending_classes SET reason = NULL"))
        conn.execute(sa.text("UPDATE workloads SET reason = 'NoNodeFits'"))
    assert set(reasons().values()) == {"NoNodeFits"}
    again = _apply(engine, BoardKeeper(), _standing(NAMES, head_eta=100.0, class_eta=200.0), ids)
    assert dict(again.classes) == {(CQ, CLASS): (200.0, QUOTA, "waits")}
    assert reasons() == {"head": "NoNodeFits"} | {n: QUOTA for n in NAMES[1:]}


def test_a_new_leader_reads_the_class_etas_back(engine: Engine) -> None:
    """A keeper that starts on a written board (a new leader) writes nothing for the
    same standing: the rows' ranks and classes, and the classes' ETAs, read back equal."""
    ids = _workloads(engine)
    _apply(engine, BoardKeeper(), _standing(NAMES, head_eta=100.0, class_eta=200.0), ids)
    again = _apply(engine, BoardKeeper(), _standing(NAMES, head_eta=100.0, class_eta=200.0), ids)
    assert not again.changed and not again.gone and not again.classes and not again.classes_gone
