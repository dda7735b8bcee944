"""One cycle at a time: commit first, then apply; finishes free capacity; applies are retried."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from queuemgr.core.model import WorkloadId
from queuemgr.store.notify import submit_workload
from tests.integration.service.helpers import make_loop, placements, states
from tests.integration.store.helpers import gang, seed_config

pytestmark = pytest.mark.integration


def _submit(engine: Engine, *names: str) -> None:
    with engine.begin() as conn:
        for i, name in enumerate(names):
            submit_workload(conn, gang(name, created_at=1_700_000_000.0 + i))


def test_a_cycle_admits_persists_and_starts_each_gang_once(engine: Engine) -> None:
    seed_config(engine)  # two nodes of 8 GPUs
    _submit(engine, "a", "b", "c")
    loop, elector, backend = make_loop(engine)
    assert elector.step()
    try:
        report = loop.run_once()
        assert report is not None and set(report.admitted) == {"team-a/a", "team-a/b"}
        for _ in range(3):  # later cycles change nothing and re-start nothing
            loop.run_once()
        assert states(engine) == {"a": "Admitted", "b": "Admitted", "c": "Pending"}
        assert placements(engine) == {"a": 1, "b": 1}
        assert dict(backend.start_calls) == {"team-a/a": 1, "team-a/b": 1}
        assert backend.running() == {"team-a/a", "team-a/b"}
    finally:
        elector.stop()


def test_a_finished_gang_frees_capacity_for_the_queued_one(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a", "b", "c")
    loop, elector, backend = make_loop(engine)
    assert elector.step()
    try:
        loop.run_once()
        backend.finish(WorkloadId("team-a/a"))
        report = loop.run_once()
        assert report is not None
        assert report.finished == ("team-a/a",) and report.admitted == ("team-a/c",)
        assert states(engine) == {"a": "Finished", "b": "Admitted", "c": "Admitted"}
        assert placements(engine) == {"b": 1, "c": 1}
        assert backend.start_calls["team-a/c"] == 1
    finally:
        elector.stop()


def test_a_failing_start_is_retried_after_the_commit(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a")
    loop, elector, backend = make_loop(engine)
    backend.fail_starts = 2
    assert elector.step()
    try:
        loop.run_once()
        assert states(engine) == {"a": "Admitted"}
        assert backend.start_calls["team-a/a"] == 3
        assert backend.running() == {"team-a/a"}
    finally:
        elector.stop()


def test_a_standby_does_not_schedule(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a")
    _loop_a, elector_a, _ = make_loop(engine, replica="a")
    loop_b, elector_b, backend_b = make_loop(engine, replica="b")
    try:
        assert elector_a.step()
        assert not elector_b.step()
        assert loop_b.run_once() is None
        assert states(engine) == {"a": "Pending"} and not backend_b.start_calls
    finally:
        elector_a.stop()
        elector_b.stop()
