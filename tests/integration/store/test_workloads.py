"""Workloads through the store: exact round trips, atomic cycles, never admitted twice."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.cycle import schedule
from queuemgr.core.lifecycle import IllegalTransition, RunEnd, WorkloadState
from queuemgr.core.model import Admission, AdmittedWorkload, FlavorName, WorkloadId
from queuemgr.core.resources import ResourceName
from queuemgr.core.verdicts import PendingReason
from queuemgr.store import decisions as store_decisions
from queuemgr.store import workloads as store
from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import (
    _move,
    cancel_workload,
    evict,
    finish_many,
    finish_workload,
    requeue_workload,
    submit_workload,
)
from tests.integration.store.helpers import CQ, MEM, gang, seed_config

pytestmark = pytest.mark.integration
NOW = 1_700_000_100.0


def _states(engine: Engine) -> dict[str, tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT name, state::text, version FROM workloads"))
        return {r.name: (r.state, r.version) for r in rows}


def _placements(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM placements")).scalar_one())


def test_insert_and_load_round_trip_exactly(engine: Engine) -> None:
    huge = dataclasses.replace(
        gang("huge"), max_runtime=3600.25, priority=-3, created_at=1_700_000_000.123456
    )
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
        submit_workload(conn, huge)
    state = load_state(Database(engine))
    assert {w.id: w for w in state.pending} == {w.id: w for w in (gang("a"), huge)}
    loaded = next(w for w in state.pending if w.name == "huge")
    assert loaded.pod_sets == huge.pod_sets
    assert loaded.pod_sets[0].requests[MEM] == 512 * 2**30 > 2**32
    assert type(loaded.pod_sets[0].requests[MEM]) is int


def test_topology_and_min_count_survive_the_store(engine: Engine) -> None:
    base = gang("packed", pods=4)
    ps = dataclasses.replace(base.pod_sets[0], topology_required="rack", min_count=2)
    packed = dataclasses.replace(base, pod_sets=(ps,))
    spread = dataclasses.replace(
        gang("spread"),
        pod_sets=(
            dataclasses.replace(
                ps, topology_required=None, topology_preferred="rack", min_count=None
            ),
        ),
    )
    with engine.begin() as conn:
        submit_workload(conn, packed)
        submit_workload(conn, spread)
    loaded = {w.name: w for w in load_state(Database(engine)).pending}
    assert loaded["packed"].pod_sets == packed.pod_sets
    assert loaded["spread"].pod_sets == spread.pod_sets
    assert loaded["packed"].shape == packed.shape  # schedules exactly as submitted


def test_quota_only_resources_survive_the_store(engine: Engine) -> None:
    device = ResourceName("example.com/gpu")
    base = gang("claims")
    ps = dataclasses.replace(
        base.pod_sets[0],
        requests={**base.pod_sets[0].requests, device: 2},
        quota_only=frozenset({device}),
    )
    claims = dataclasses.replace(base, pod_sets=(ps,))
    with engine.begin() as conn:
        submit_workload(conn, claims)
        submit_workload(conn, gang("plain"))
    loaded = {w.name: w for w in load_state(Database(engine)).pending}
    assert loaded["claims"].pod_sets == claims.pod_sets
    assert loaded["claims"].pod_sets[0].quota_only == {device}
    assert loaded["plain"].pod_sets[0].quota_only == frozenset()


def test_duplicate_workload_is_refused(engine: Engine) -> None:
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
    with pytest.raises(store.WorkloadExists), engine.begin() as conn:
        submit_workload(conn, gang("a"))


def _row_ids(engine: Engine) -> dict[WorkloadId, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, namespace, name FROM workloads")).all()
    return {WorkloadId(f"{ns}/{name}"): i for i, ns, name in rows}


@pytest.mark.parametrize("by_id", [False, True], ids=["by-name", "by-row-id"])
def test_a_cycle_persists_and_reloads_as_the_same_admissions(engine: Engine, by_id: bool) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        for name, pods in (("fits", 2), ("waits", 2)):
            submit_workload(conn, gang(name, pods=pods))
    before = load_state(Database(engine))
    decisions = schedule(before.snapshot(), NOW)
    assert [a.workload.name for a in decisions.admitted] == ["fits"]
    ids = _row_ids(engine) if by_id else None
    with engine.connect() as conn:
        done = store_decisions.persist_decisions(
            conn, decisions, now=NOW, previous=before.statuses, ids=ids
        )
        conn.commit()
    assert done.admitted == 1 and done.statuses_written == 1
    after = load_state(Database(engine))
    assert after.admitted == decisions.admitted
    assert [w.name for w in after.pending] == ["waits"]
    # Nothing changed since: the next cycle writes no status at all.
    again = schedule(after.snapshot(), NOW + 1)
    with engine.begin() as conn:
        assert store_decisions.persist_decisions(
            conn, again, now=NOW + 1, previous=after.statuses
        ) == (store_decisions.Persisted(admitted=0, statuses_written=0))
    assert _states(engine)["waits"][0] == "Pending"


@pytest.mark.parametrize("by_id", [False, True], ids=["by-name", "by-row-id"])
def test_an_admission_of_a_workload_that_left_the_queue_conflicts(
    engine: Engine, by_id: bool
) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
    state = load_state(Database(engine))
    decisions = schedule(state.snapshot(), NOW)
    assert [a.workload.name for a in decisions.admitted] == ["a"]
    ids = _row_ids(engine) if by_id else None
    with engine.begin() as conn:  # cancelled after the snapshot, before the commit
        finish_workload(conn, WorkloadId("team-a/a"), now=NOW, reason="Cancelled")
    with pytest.raises(store.StateConflict, match="team-a/a"), engine.connect() as conn:
        store_decisions.persist_decisions(conn, decisions, now=NOW, ids=ids)
    assert _states(engine)["a"][0] == "Finished" and _placements(engine) == 0


def test_inadmissible_is_stored_as_such(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("too-big", pods=4))  # 32 GPUs > 16 + 8
    state = load_state(Database(engine))
    decisions = schedule(state.snapshot(), NOW)
    assert decisions.pending[WorkloadId("team-a/too-big")].reason is PendingReason.INADMISSIBLE
    with engine.begin() as conn:
        store_decisions.persist_decisions(conn, decisions, now=NOW, previous=state.statuses)
    assert _states(engine)["too-big"][0] == "Inadmissible"
    assert [w.name for w in load_state(Database(engine)).pending] == ["too-big"]  # still judged


def test_decisions_are_all_or_nothing(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
        submit_workload(conn, gang("b", pods=3))
    state = load_state(Database(engine))
    decisions = schedule(state.snapshot(), NOW)
    snapshot_before = _states(engine)

    # An admission of a workload that does not exist, after a real one.
    ghost = AdmittedWorkload(
        workload=gang("ghost"),
        admission=Admission(
            workload=WorkloadId("team-a/ghost"),
            cluster_queue=CQ.name,
            flavor=FlavorName("h100"),
            placements=decisions.admitted[0].admission.placements,
        ),
        admitted_at=NOW,
    )
    bad = dataclasses.replace(decisions, admitted=(*decisions.admitted, ghost))
    with pytest.raises(store.StateConflict, match="ghost"), engine.connect() as conn:
        store_decisions.persist_decisions(conn, bad, now=NOW)
    assert _states(engine) == snapshot_before and _placements(engine) == 0

    # A failure after admissions and placements were written, before the statuses.
    def boom(*args: object, **kwargs: object) -> int:
        raise RuntimeError("injected")

    monkeypatch.setattr(store_decisions, "_write_statuses", boom)
    with pytest.raises(RuntimeError, match="injected"), engine.connect() as conn:
        store_decisions.persist_decisions(conn, decisions, now=NOW)
    assert _states(engine) == snapshot_before and _placements(engine) == 0


def test_a_workload_is_never_admitted_twice(engine: Engine) -> None:
    """Two schedulers decide on the same snapshot; the second commit must fail whole."""
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
    state = load_state(Database(engine))
    decisions = schedule(state.snapshot(), NOW)
    first = engine.connect()
    first.begin()
    store_decisions.persist_decisions(first, decisions, now=NOW)  # holds the row lock, uncommitted
    outcome: list[BaseException | None] = []

    def second() -> None:
        try:
            with engine.connect() as conn:
                store_decisions.persist_decisions(conn, decisions, now=NOW + 1)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=second)
    t.start()
    t.join(0.5)
    assert t.is_alive(), "the second writer must wait for the first one's row lock"
    first.commit()
    first.close()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], store.StateConflict)
    assert _states(engine)["a"] == ("Admitted", 2)
    assert _placements(engine) == 1


def test_finish_evict_requeue_free_placements(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
        submit_workload(conn, gang("b"))
    decisions = schedule(load_state(Database(engine)).snapshot(), NOW)
    with engine.begin() as conn:
        store_decisions.persist_decisions(conn, decisions, now=NOW)
    assert _placements(engine) == 2
    a, b = WorkloadId("team-a/a"), WorkloadId("team-a/b")
    with engine.begin() as conn:
        finish_workload(conn, a, now=NOW + 10)
        evict(conn, b, now=NOW + 10, reason="Preempted")
    assert _placements(engine) == 0
    assert {k: v[0] for k, v in _states(engine).items()} == {"a": "Finished", "b": "Evicted"}
    with pytest.raises(store.StateConflict), engine.begin() as conn:
        finish_workload(conn, a, now=NOW + 11)  # already finished
    with engine.begin() as conn:
        requeue_workload(conn, b, now=NOW + 12)
    state = load_state(Database(engine))
    assert [w.name for w in state.pending] == ["b"] and state.admitted == ()
    assert state.statuses[b][0] is WorkloadState.PENDING


def _heard(listener: sa.Connection) -> list[str]:
    """The payloads delivered to ``listener`` so far (psycopg 3's notifies)."""
    raw = listener.connection.driver_connection
    assert raw is not None
    return [n.payload for n in raw.notifies(timeout=0.5, stop_after=None)]


@pytest.mark.parametrize(
    ("move", "heard"),
    [
        ("finish", ["finished"]),
        ("finish-run", ["finished"]),
        ("evict", ["evicted"]),
        ("evict-then-requeue", ["evicted", "requeued"]),
        ("cancel", ["finished"]),
    ],
    ids=["finish", "finish-run", "evict", "evict-then-requeue", "cancel"],
)
def test_every_move_wakes_the_scheduler_by_itself_and_only_once_committed(
    engine: Engine, move: str, heard: list[str]
) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("a"))
    with engine.begin() as conn:
        store_decisions.persist_decisions(
            conn, schedule(load_state(Database(engine)).snapshot(), NOW), now=NOW
        )
    a = WorkloadId("team-a/a")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as listener:
        listener.execute(sa.text("LISTEN queuemgr"))
        for commit in (False, True):  # rolled back first: nothing may be heard
            conn = engine.connect()
            with conn.begin() as tx:
                if move == "finish":
                    finish_workload(conn, a, now=NOW + 1)
                elif move == "finish-run":
                    ends = [RunEnd(workload=a, admitted_at=NOW)]
                    assert finish_many(conn, ends, now=NOW + 1) == [a]
                elif move == "cancel":
                    assert cancel_workload(conn, a, message="by test")
                else:
                    evict(conn, a, now=NOW + 1, reason="Preempted")
                    if move == "evict-then-requeue":
                        requeue_workload(conn, a, now=NOW + 2)
                if not commit:
                    tx.rollback()
            conn.close()
            assert sorted(set(_heard(listener))) == (sorted(heard) if commit else [])


def test_a_move_the_core_forbids_raises_before_any_sql() -> None:
    """Each move's source states are checked against core.lifecycle's table."""
    with pytest.raises(IllegalTransition, match="from Finished to Pending"):
        _move(
            None,  # type: ignore[arg-type]  # no SQL may run: there is no connection
            WorkloadId("team-a/a"),
            to=WorkloadState.PENDING,
            sources=(WorkloadState.EVICTED, WorkloadState.FINISHED),
            reason="Requeued",
            message="",
            now=NOW,
        )
