"""Stable preemption in the store: claims, eviction counts and requeue backoff.

A cycle's claims are written with its evictions and cleared by the admission
(or the end of the claim); the snapshot a cycle schedules carries them, with
the evicted workloads as ``stopping``, and leaves out what still backs off.
The leader's mirror and ``load_state`` must agree on all of it.
"""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.cycle import schedule
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import WorkloadId
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.reasons import Decisions
from queuemgr.core.verdicts import PendingReason
from queuemgr.store import decisions as store_decisions
from queuemgr.store import workloads as store
from queuemgr.store.config_objects import upsert_node
from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from queuemgr.store.repository import load_state
from queuemgr.store.state import StoredState
from queuemgr.store.transitions import (
    evict,
    finish_many,
    finish_workload,
    requeue_workload,
    submit_workload,
)
from tests.integration.store.helpers import NODES, job, seed_lenders
from tests.integration.store.test_mirror import _same

pytestmark = pytest.mark.integration

NOW = 1_700_000_100.0
POLICY = SchedulerPolicy()  # backoff 60 s, doubling, at most an hour
X0, MINE = WorkloadId("borrower/x0"), WorkloadId("owner/mine")


def _submit(engine: Engine, *jobs: tuple[str, str]) -> None:
    with engine.begin() as conn:
        for i, (ns, name) in enumerate(jobs):
            submit_workload(conn, job(ns, name, NOW + i))


def _commit(
    engine: Engine, state: StoredState, now: float
) -> tuple[Decisions, store_decisions.Persisted]:
    """What the loop commits: the decisions and the evictions, in one transaction."""
    decisions = schedule(state.snapshot(), now)
    with engine.begin() as conn:
        done = store_decisions.persist_decisions(conn, decisions, now=now, previous=state.statuses)
        for e in decisions.evicted:
            evict(conn, e.victim.workload.id, now=now, reason="Preempted", message=e.message)
    return decisions, done


def _column(engine: Engine, wid: str, column: str) -> object:
    ns, _, name = wid.partition("/")
    with engine.connect() as conn:
        return conn.execute(
            sa.text(f"SELECT {column} FROM workloads WHERE namespace = :ns AND name = :name"),
            {"ns": ns, "name": name},
        ).scalar_one()


def _preempted(engine: Engine) -> Decisions:
    """x0 borrows the only node; owner's mine then reclaims it: x0 evicted, mine claims."""
    seed_lenders(engine)
    _submit(engine, ("borrower", "x0"))
    _commit(engine, load_state(Database(engine), now=NOW + 10), NOW + 10)
    _submit(engine, ("owner", "mine"))
    decisions, done = _commit(engine, load_state(Database(engine), now=NOW + 11), NOW + 11)
    assert [e.victim.workload.id for e in decisions.evicted] == [X0]
    assert [c.workload.id for c in decisions.claims] == [MINE] and done.claims_written == 1
    return decisions


def test_a_claim_is_stored_with_the_eviction_and_loaded_into_the_snapshot(
    engine: Engine,
) -> None:
    decisions = _preempted(engine)
    made = decisions.claims[0]
    assert _column(engine, X0, "evictions") == 1
    assert _column(engine, X0, "state::text") == "Evicted"
    stored = _column(engine, MINE, "claim")
    assert stored == {
        "cluster_queue": "owner",
        "flavor": "h100",
        "placements": [{"pod_set": "workers", "node": "node-0", "count": 1}],
        "borrowing": False,
        "victims": ["borrower/x0"],
        "made_at": "2023-11-14T22:15:11+00:00",
    }
    state = load_state(Database(engine), now=NOW + 12)
    assert state.stopping == {X0}
    claim = state.claims[MINE]
    assert (claim.admission, claim.victims, claim.made_at) == (
        made.admission,
        made.victims,
        made.made_at,
    )
    snapshot = state.snapshot()
    pending = next(w for w in state.pending if w.id == MINE)
    assert snapshot.claims[MINE].workload is pending  # the object the cycle sees pending
    assert snapshot.stopping == {X0}
    # While x0 may still run, the cycle holds the room and waits.
    again = schedule(snapshot, NOW + 12)
    assert not again.admitted and not again.evicted
    assert again.pending.verdict(MINE).reason is PendingReason.PREEMPTING


def test_the_admission_on_the_claim_clears_it_and_a_requeue_backs_off(engine: Engine) -> None:
    _preempted(engine)
    with engine.begin() as conn:
        until = requeue_workload(conn, X0, now=NOW + 20, backoff=POLICY.requeue_delay)
    assert until == NOW + 80
    assert _column(engine, X0, "requeue_at").timestamp() == NOW + 80  # type: ignore[attr-defined]
    message = _column(engine, X0, "message")
    assert message == (
        "preempted once: backs off until 2023-11-14T22:16:20+00:00 (60s) before it is tried again"
    )
    state = load_state(Database(engine), now=NOW + 21)
    assert state.backing_off == {X0: NOW + 80} and not state.stopping
    assert [w.id for w in state.pending] == [MINE]
    decisions, done = _commit(engine, state, NOW + 21)
    assert [a.workload.id for a in decisions.admitted] == [MINE]
    assert decisions.admitted[0].admission == state.claims[MINE].admission
    assert _column(engine, MINE, "claim") is None
    assert done.claims_written == 0  # the admission cleared it, in the same UPDATE

    with engine.begin() as conn:  # the room is free again: x0 still waits out its backoff
        finish_many(conn, [RunEnd(workload=MINE, admitted_at=None)], now=NOW + 30)
    assert [w.id for w in load_state(Database(engine), now=NOW + 79.9).pending] == []
    state = load_state(Database(engine), now=NOW + 80)
    assert [w.id for w in state.pending] == [X0] and not state.backing_off
    decisions, _ = _commit(engine, state, NOW + 80)
    assert [a.workload.id for a in decisions.admitted] == [X0]
    assert decisions.admitted[0].workload.evictions == 1
    assert _column(engine, X0, "requeue_at") is None


def test_the_backoff_doubles_with_each_preemption_and_other_evictions_do_not_count(
    engine: Engine,
) -> None:
    seed_lenders(engine)
    _submit(engine, ("borrower", "x0"))
    now = NOW + 10
    for n, preempted in ((1, True), (1, False), (2, True), (3, True)):
        _commit(engine, load_state(Database(engine), now=now), now)  # admits x0 again
        with engine.begin() as conn:
            evict(conn, X0, now=now, reason="Preempted", preempted=preempted)
            until = requeue_workload(conn, X0, now=now, backoff=POLICY.requeue_delay)
        assert _column(engine, X0, "evictions") == n
        assert until == now + POLICY.requeue_delay(n) == now + 60 * 2 ** (n - 1)
        now = until
    _commit(engine, load_state(Database(engine), now=now), now)
    with engine.begin() as conn:  # a requeue without backoff (readiness): pending at once
        evict(conn, X0, now=now, reason="PodsReadyTimeout", preempted=False)
        assert requeue_workload(conn, X0, now=now) is None
    assert _column(engine, X0, "requeue_at") is None
    assert _column(engine, X0, "message") == ""
    assert load_state(Database(engine), now=now).pending[0].evictions == 3


def test_a_claim_whose_room_is_gone_is_released(engine: Engine) -> None:
    _preempted(engine)
    with engine.begin() as conn:  # the node is drained before x0 has even stopped
        upsert_node(conn, dataclasses.replace(NODES[0], schedulable=False), actor="test")
    decisions, done = _commit(engine, load_state(Database(engine), now=NOW + 12), NOW + 12)
    assert decisions.released_claims == (MINE,) and not decisions.claims
    assert done.claims_written == 1
    assert _column(engine, MINE, "claim") is None
    assert MINE not in load_state(Database(engine), now=NOW + 13).claims


def test_cancelling_a_claimant_ends_its_claim(engine: Engine) -> None:
    _preempted(engine)
    with engine.begin() as conn:
        finish_workload(conn, MINE, now=NOW + 12, reason="Cancelled")
    assert _column(engine, MINE, "claim") is None
    assert not load_state(Database(engine), now=NOW + 13).claims


def test_a_claim_for_a_preemptor_gone_meanwhile_rolls_the_cycle_back(engine: Engine) -> None:
    seed_lenders(engine)
    _submit(engine, ("borrower", "x0"))
    _commit(engine, load_state(Database(engine), now=NOW + 10), NOW + 10)
    _submit(engine, ("owner", "mine"), ("solo", "s"))
    state = load_state(Database(engine), now=NOW + 11)
    decisions = schedule(state.snapshot(), NOW + 11)
    assert decisions.claims
    with engine.begin() as conn:  # cancelled between the snapshot and the commit
        finish_workload(conn, MINE, now=NOW + 11, reason="Cancelled")
    before = _column(engine, "solo/s", "version")
    with engine.begin() as conn, pytest.raises(store.StateConflict, match="owner/mine"):
        store_decisions.persist_decisions(conn, decisions, now=NOW + 11, previous=state.statuses)
    assert _column(engine, "solo/s", "version") == before  # its new reason rolled back too


def test_the_mirror_agrees_with_load_state_through_claims_and_backoff(engine: Engine) -> None:
    seed_lenders(engine)
    _submit(engine, ("borrower", "x0"))
    mirror = StateMirror()

    def cycle(now: float) -> Decisions:
        state = mirror.refresh(Database(engine), now=now)
        _same(state, load_state(Database(engine), now=now))
        decisions, done = _commit(engine, state, now)
        mirror.committed(decisions, done, now=now)
        return decisions

    def same(now: float) -> StoredState:
        state = mirror.refresh(Database(engine), now=now)
        loaded = load_state(Database(engine), now=now)
        _same(state, loaded)
        assert dict(state.claims) == dict(loaded.claims)
        assert state.stopping == loaded.stopping
        assert dict(state.backing_off) == dict(loaded.backing_off)
        ms = state.snapshot()
        assert ms.claims == loaded.snapshot().claims and ms.stopping == loaded.stopping
        for wid, claim in ms.claims.items():
            assert any(w is claim.workload for q in ms.pending.values() for w in q), wid
        return state

    cycle(NOW + 10)
    _submit(engine, ("owner", "mine"))
    assert cycle(NOW + 11).claims
    state = same(NOW + 11)
    assert set(state.claims) == {MINE} and state.stopping == {X0}
    assert not cycle(NOW + 12).admitted  # x0 still stopping: mine waits on its claim
    with engine.begin() as conn:
        requeue_workload(conn, X0, now=NOW + 13, backoff=POLICY.requeue_delay)
    state = same(NOW + 13)
    assert state.backing_off == {X0: NOW + 73} and not state.stopping
    assert [a.workload.id for a in cycle(NOW + 14).admitted] == [MINE]
    assert not same(NOW + 14).claims
    with engine.begin() as conn:
        finish_workload(conn, MINE, now=NOW + 15)
    assert not same(NOW + 72.5).pending  # still backing off
    state = same(NOW + 73)  # due: pending from this refresh on, no row read again
    assert [w.id for w in state.pending] == [X0] and mirror.rows_read == 0
    assert state.pending[0].evictions == 1
    assert [a.workload.id for a in cycle(NOW + 73).admitted] == [X0]
    same(NOW + 74)


def test_an_eviction_sets_when_the_workload_waits_from_and_every_reader_sees_it(
    engine: Engine,
) -> None:
    """Fair sharing takes only runs admitted since a preemptor started waiting
    (core.victim_rules.fair_victim): a victim starts waiting at its eviction, not at its
    creation, which it keeps for its place in the queue."""
    seed_lenders(engine)
    _submit(engine, ("borrower", "x0"))
    mirror = StateMirror()
    now = NOW + 10
    _commit(engine, load_state(Database(engine), now=now), now)
    admitted = mirror.refresh(Database(engine), now=now).admitted  # the mirror knows x0 from here
    assert [a.workload.queued_at for a in admitted] == [None]
    created = admitted[0].workload.created_at
    assert admitted[0].workload.queued_since == created
    # The second is no preemption (a readiness timeout): the count stays, the time moves.
    for evicted_at, preempted in ((now + 5, True), (now + 500, False)):
        with engine.begin() as conn:
            evict(conn, X0, now=evicted_at, reason="Preempted", preempted=preempted)
            requeue_workload(conn, X0, now=evicted_at)
        for state in (
            load_state(Database(engine), now=evicted_at),
            mirror.refresh(Database(engine), now=evicted_at),
        ):
            (w,) = state.pending
            assert (w.queued_at, w.queued_since, w.created_at) == (
                evicted_at,
                evicted_at,
                created,
            )
        _commit(engine, load_state(Database(engine), now=evicted_at), evicted_at)
