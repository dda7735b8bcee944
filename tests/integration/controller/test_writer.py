"""A cycle's commit and its fold into the mirror overlap, and a failed commit is undone.

The writer runs the cycle's transaction on its own thread while the loop folds
the admissions into its mirror ahead of the commit. Whatever the outcome, the
mirror must then read exactly what a fresh load reads.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.board import BoardChange, BoardKeeper
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.loop import SERVICE_POLICY
from queuemgr.controller.writer import CycleWriter
from queuemgr.core.cycle import schedule
from queuemgr.core.model import WorkloadId
from queuemgr.core.reasons import Decisions
from queuemgr.metrics import SchedulerMetrics
from queuemgr.store import leadership
from queuemgr.store.decisions import Persisted
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderToken
from queuemgr.store.mirror import StateMirror
from queuemgr.store.repository import load_state
from queuemgr.store.state import StoredState
from queuemgr.store.transitions import finish_workload
from queuemgr.store.workloads import StateConflict
from tests.integration.controller.helpers import states
from tests.integration.store.helpers import seed_config
from tests.integration.store.test_mirror import NOW, _same, _submit

pytestmark = pytest.mark.integration


@pytest.fixture
def token(engine: Engine) -> Iterator[LeaderToken]:
    elector = LeaderElector(Database(engine), replica="a", metrics=SchedulerMetrics())
    assert elector.step() and elector.token is not None
    try:
        yield elector.token
    finally:
        elector.stop()


def _cycle(engine: Engine) -> tuple[StateMirror, CycleWriter, StoredState, Decisions]:
    seed_config(engine)
    _submit(engine, "a", "b")
    mirror = StateMirror()
    state = mirror.refresh(Database(engine), now=NOW + 10)
    snapshot = dataclasses.replace(state.snapshot(), policy=SERVICE_POLICY)
    decisions = schedule(snapshot, NOW + 10)
    assert sorted(a.workload.name for a in decisions.admitted) == ["a", "b"]
    return mirror, CycleWriter(Database(engine), mirror, BoardKeeper()), state, decisions


def _commit(
    writer: CycleWriter, token: LeaderToken, decisions: Decisions, state: StoredState
) -> Persisted:
    """The cycle committed, and the writer's thread shut down whatever happened."""
    try:
        return writer.commit(token, decisions, state, NOW + 10)[0]
    finally:
        writer.shutdown()


def test_a_committed_cycle_is_folded_in_without_reading_it_again(
    engine: Engine, token: LeaderToken
) -> None:
    mirror, writer, state, decisions = _cycle(engine)
    assert _commit(writer, token, decisions, state).admitted == 2
    again = mirror.refresh(Database(engine), now=NOW + 11)
    assert mirror.rows_read == 0  # both admissions were folded in, at their new versions
    _same(again, load_state(Database(engine), now=NOW + 11))


def test_a_failed_commit_leaves_the_mirror_as_it_read_the_rows(
    engine: Engine, token: LeaderToken
) -> None:
    """a is cancelled before the commit (so the admissions roll back) and b is written
    once by someone else: b's stored version is then the one its folded admission
    would have had. Unless the fold is undone, the mirror keeps b admitted."""
    mirror, writer, state, decisions = _cycle(engine)
    with engine.begin() as conn:
        finish_workload(conn, WorkloadId("team-a/a"), now=NOW + 10, reason="Cancelled")
        conn.execute(
            sa.text(
                "UPDATE workloads SET message = 'seen by an admin', version = version + 1 "
                "WHERE name = 'b'"
            )
        )
    try:
        with pytest.raises(StateConflict, match="team-a/a"):
            writer.commit(token, decisions, state, NOW + 10)
    finally:
        writer.shutdown()
    assert states(engine) == {"a": "Finished", "b": "Pending"}
    _same(
        mirror.refresh(Database(engine), now=NOW + 11), load_state(Database(engine), now=NOW + 11)
    )


def test_a_fold_that_fails_still_waits_for_its_transaction(
    engine: Engine, token: LeaderToken, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror, writer, state, decisions = _cycle(engine)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(mirror, "fold_ahead", broken)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            writer.commit(token, decisions, state, NOW + 10)
        # Returned only once the transaction was done: committed, nothing in flight.
        assert states(engine) == {"a": "Admitted", "b": "Admitted"}
    finally:
        writer.shutdown()
    mirror.reset()
    _same(
        mirror.refresh(Database(engine), now=NOW + 11), load_state(Database(engine), now=NOW + 11)
    )


def test_a_slow_board_diff_does_not_idle_the_fenced_transaction(
    engine: Engine, token: LeaderToken, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new leader's first board diff at 100,000 pending is seconds of Python. A fenced
    transaction left idle past its limit ends its own session, so the diff must run
    before the transaction opens: here it outlasts a limit cut to 0.3 s, and the cycle
    still commits."""
    monkeypatch.setattr(leadership, "_IDLE", "300ms")
    slow = BoardKeeper.diff

    def diff(self: BoardKeeper, *args: Any, **kwargs: Any) -> BoardChange:
        time.sleep(0.6)
        return slow(self, *args, **kwargs)

    monkeypatch.setattr(BoardKeeper, "diff", diff)
    _, writer, state, decisions = _cycle(engine)
    assert _commit(writer, token, decisions, state).admitted == 2
    assert states(engine) == {"a": "Admitted", "b": "Admitted"}
