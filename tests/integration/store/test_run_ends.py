"""A run's end finishes the admission it names, and no other.

The defect it guards: finishes went by name from any state, so an end
reported late (by a leader paused past its lock, or for a run since evicted
and requeued) finished the workload's next run: its quota and placements
were freed while it ran. Each end now names its admission's time.

Every test runs twice: ends found by name, and by row id as the leader's loop
finds them (``finish_many(..., ids=...)``, from its mirror of the live rows).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import WorkloadId
from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import evict, finish_many, requeue_workload, submit_workload
from tests.integration.store.helpers import job, seed_lenders
from tests.integration.store.test_claims import _column, _commit

pytestmark = pytest.mark.integration

NOW = 1_700_000_100.0
X0 = WorkloadId("borrower/x0")
FIRST, SECOND = NOW + 10, NOW + 40  # the two admissions of x0


Finish = Callable[[Engine, float | None, float], list[WorkloadId]]


@pytest.fixture(params=["by-name", "by-row-id"])
def finish(request: pytest.FixtureRequest) -> Finish:
    """Report x0's run that began at ``admitted_at`` as ended at ``now``."""

    def run(engine: Engine, admitted_at: float | None, now: float) -> list[WorkloadId]:
        by_id = request.param == "by-row-id"
        ids = {X0: int(str(_column(engine, X0, "id")))} if by_id else None
        with engine.begin() as conn:
            ends = [RunEnd(workload=X0, admitted_at=admitted_at)]
            return finish_many(conn, ends, now=now, ids=ids)

    return run


def _admit(engine: Engine, now: float) -> None:
    decisions, _ = _commit(engine, load_state(Database(engine), now=now), now)
    assert [a.workload.id for a in decisions.admitted] == [X0]


@pytest.fixture
def requeued(engine: Engine) -> Engine:
    """x0 ran from FIRST, was preempted at NOW + 20 and is pending again."""
    seed_lenders(engine)
    with engine.begin() as conn:
        submit_workload(conn, job("borrower", "x0", NOW))
    _admit(engine, FIRST)
    with engine.begin() as conn:
        evict(conn, X0, now=NOW + 20, reason="Preempted")
        requeue_workload(conn, X0, now=NOW + 21)
    return engine


def test_the_end_of_an_evicted_run_does_not_finish_the_requeued_workload(
    requeued: Engine, finish: Finish
) -> None:
    assert finish(requeued, FIRST, NOW + 30) == []
    assert finish(requeued, None, NOW + 30) == []  # nor does an end naming no admission
    assert _column(requeued, X0, "state::text") == "Pending"


def test_the_end_of_an_earlier_run_does_not_finish_the_current_one(
    requeued: Engine, finish: Finish
) -> None:
    _admit(requeued, SECOND)
    assert finish(requeued, FIRST, NOW + 50) == []
    assert _column(requeued, X0, "state::text") == "Admitted"
    still_placed = load_state(Database(requeued), now=NOW + 50).admitted
    assert still_placed[0].admitted_at == SECOND
    assert finish(requeued, SECOND, NOW + 60) == [X0]
    assert _column(requeued, X0, "state::text") == "Finished"
    assert not load_state(Database(requeued), now=NOW + 60).admitted


def test_an_end_naming_no_admission_finishes_the_current_run(
    requeued: Engine, finish: Finish
) -> None:
    _admit(requeued, SECOND)
    assert finish(requeued, None, NOW + 50) == [X0]


def test_a_run_that_ended_while_its_stop_was_on_the_way_is_finished(
    engine: Engine, finish: Finish
) -> None:
    seed_lenders(engine)
    with engine.begin() as conn:
        submit_workload(conn, job("borrower", "x0", NOW))
    _admit(engine, FIRST)
    with engine.begin() as conn:
        evict(conn, X0, now=NOW + 20, reason="Preempted")
    assert finish(engine, FIRST, NOW + 20.5) == [X0]  # it completed: it is not run again
