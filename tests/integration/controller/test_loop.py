"""One cycle at a time: commit first, then apply; finishes free capacity; applies are retried."""

from __future__ import annotations

import dataclasses
import time

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.loop import SERVICE_POLICY
from queuemgr.controller.testing import FakeClock
from queuemgr.core.model import ClusterQueueName, LocalQueue, WorkloadId
from queuemgr.core.policy import Ordering, OverrunPolicy
from queuemgr.metrics.pacer import GaugePacer
from queuemgr.store import codec
from queuemgr.store.config_objects import upsert_cluster_queue, upsert_local_queue
from queuemgr.store.leadership import NotLeader, holder_pid
from queuemgr.store.transitions import evict, finish_workload, submit_workload
from tests.integration.controller.helpers import make_loop, placements, states, wait_for
from tests.integration.store.helpers import CQ, GPU, gang, job, seed_config, seed_lenders

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


@pytest.mark.parametrize(
    ("concurrency", "fail_starts", "overlap"),
    [
        pytest.param(1, 0, False, id="one-at-a-time"),
        pytest.param(4, 0, True, id="four-at-once"),
        pytest.param(4, 3, True, id="four-at-once-each-failure-retried"),
    ],
)
def test_a_cycles_starts_run_as_concurrently_as_the_backend_allows(
    engine: Engine, concurrency: int, fail_starts: int, overlap: bool
) -> None:
    seed_config(engine)  # two nodes of 8 GPUs: room for eight 2-GPU jobs
    with engine.begin() as conn:
        for i in range(8):
            w = gang(f"j{i}", gpus=2, created_at=1_700_000_000.0 + i)
            small = dataclasses.replace(w.pod_sets[0], requests={GPU: 2})
            submit_workload(conn, dataclasses.replace(w, pod_sets=(small,)))
    loop, elector, backend = make_loop(engine)
    backend.start_concurrency = concurrency
    backend.start_delay = 0.05
    backend.fail_starts = fail_starts
    assert elector.step()
    try:
        report = loop.run_once()
        assert report is not None and len(report.admitted) == 8
        assert backend.running() == {f"team-a/j{i}" for i in range(8)}
        assert sum(backend.start_calls.values()) == 8 + fail_starts
        assert (backend.max_in_flight > 1) is overlap
        assert backend.max_in_flight <= concurrency
    finally:
        loop.stop()
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


def test_decayed_usage_survives_a_failover_and_orders_the_next_leaders_queue(
    engine: Engine,
) -> None:
    # Two LocalQueues feed one ClusterQueue; "default" ran two full-node gangs
    # under the first leader. After a failover the second leader must still
    # know it, so the lighter queue's later gang goes first.
    seed_config(engine)
    with engine.begin() as conn:
        upsert_local_queue(
            conn,
            LocalQueue(namespace="team-a", name="other", cluster_queue=ClusterQueueName("team-a")),
            actor="test:alice",
        )
    policy = dataclasses.replace(SERVICE_POLICY, ordering=Ordering.USAGE, usage_half_life=60.0)
    _submit(engine, "h1", "h2")
    first, elector, _ = make_loop(engine, replica="a", policy=policy)
    assert elector.step()
    try:
        first.run_once()
        assert states(engine) == {"h1": "Admitted", "h2": "Admitted"}
        time.sleep(0.5)
        first.request_safety_cycle()
        first.run_once()
    finally:
        elector.stop()
    with engine.begin() as conn:
        saved = {r.name: r.usage for r in conn.execute(sa.text("SELECT * FROM local_queue_usage"))}
        assert saved["default"] > 0
        for name in ("h1", "h2"):
            finish_workload(conn, WorkloadId(f"team-a/{name}"), now=time.time())
        submit_workload(conn, gang("d1", pods=2, created_at=1_700_000_010.0))
        later = dataclasses.replace(gang("o1", pods=2, created_at=1_700_000_020.0), queue="other")
        submit_workload(conn, later)
    second, elector, _ = make_loop(engine, replica="b", policy=policy)
    assert elector.step()
    try:
        report = second.run_once()
        assert report is not None and report.admitted == ("team-a/o1",)
    finally:
        elector.stop()


def test_a_workload_evicted_outside_a_cycle_is_stopped_and_requeued(engine: Engine) -> None:
    # What `queuemgr quota set --preempt` does: lower the quota and evict, in one transaction.
    seed_config(engine)
    _submit(engine, "a", "b")
    loop, elector, backend = make_loop(engine)
    assert elector.step()
    try:
        loop.run_once()
        assert backend.running() == {"team-a/a", "team-a/b"}
        lowered = dataclasses.replace(
            CQ, flavors=(dataclasses.replace(CQ.flavors[0], nominal={GPU: 8}),)
        )
        with engine.begin() as conn:
            upsert_cluster_queue(conn, lowered, actor="test:admin")
            evict(conn, WorkloadId("team-a/b"), now=time.time(), reason="QuotaLowered")
        loop.request_safety_cycle()
        loop.run_once()
        assert backend.stop_calls["team-a/b"] == 1
        assert backend.running() == {"team-a/a"}
        assert states(engine) == {"a": "Admitted", "b": "Pending"}
        assert placements(engine) == {"a": 1}
    finally:
        elector.stop()


def test_the_eta_error_is_observed_when_a_waiting_gang_starts(engine: Engine) -> None:
    seed_config(engine)  # two 8-GPU nodes
    with engine.begin() as conn:
        for name in ("a", "b"):
            w = dataclasses.replace(gang(name, created_at=1_700_000_000.0), max_runtime=60.0)
            submit_workload(conn, w)
        submit_workload(conn, gang("c", created_at=1_700_000_001.0))
    loop, elector, backend = make_loop(engine)
    registry = loop._metrics.registry
    assert elector.step()
    try:
        loop.run_once()  # a and b run; c is told it starts when one of them ends (~60 s)
        assert registry.get_sample_value("queuemgr_eta_error_seconds_count") == 0
        backend.finish(WorkloadId("team-a/a"))  # well before its declared end
        report = loop.run_once()
        assert report is not None and report.admitted == ("team-a/c",)
        assert registry.get_sample_value("queuemgr_eta_error_seconds_count") == 1
        error = registry.get_sample_value("queuemgr_eta_error_seconds_sum")
        assert error is not None and 55 <= error <= 60  # it started ~60 s early
    finally:
        elector.stop()


# -- stable preemption: claims in the store, requeue backoff --------------------------

T0 = 1_700_001_000.0


def _row(engine: Engine, ns: str, name: str) -> sa.RowMapping:
    with engine.connect() as conn:
        return (
            conn.execute(
                sa.text(
                    "SELECT state::text AS state, reason, message, claim, evictions, requeue_at"
                    " FROM workloads WHERE namespace = :ns AND name = :name"
                ),
                {"ns": ns, "name": name},
            )
            .mappings()
            .one()
        )


def _nodes_of(engine: Engine, name: str) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT p.node FROM placements p JOIN workloads w ON w.id = p.workload_id"
                " WHERE w.name = :name"
            ),
            {"name": name},
        )
        return {r.node for r in rows}


def test_a_leader_deposed_while_it_stops_an_overrun_does_not_finish_it(engine: Engine) -> None:
    """The max-runtime path writes its finish fenced: the lease is lost while the leader
    stops the overrunning gang (paused there, its session ended), so the finish it then
    tries is refused and the row stays Admitted for the successor to judge."""
    seed_config(engine)
    clock = FakeClock(T0)
    with engine.begin() as conn:
        submit_workload(conn, dataclasses.replace(gang("long-1", created_at=T0), max_runtime=60))
    policy = dataclasses.replace(SERVICE_POLICY, overrun_policy=OverrunPolicy.EVICT)
    loop, elector, backend = make_loop(engine, clock=clock, policy=policy, safety_interval=1)
    assert elector.step()
    try:
        loop.run_once()
        assert states(engine)["long-1"] == "Admitted"
        stop = backend.stop

        def paused_in_stop(wid: WorkloadId) -> None:
            with engine.connect() as conn:
                pid = holder_pid(conn)
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                conn.commit()
            # It only signals: until the session has ended the lease is still held, and
            # the fence rightly lets the finish through (the flake this test had).
            assert pid is not None
            wait_for(lambda: _backend_gone(engine, pid), timeout=10)
            stop(wid)

        backend.stop = paused_in_stop  # type: ignore[method-assign]
        clock.advance(3600)
        loop.request_safety_cycle()
        with pytest.raises(NotLeader):
            loop.run_once()
        assert backend.stop_calls["team-a/long-1"] == 1  # it did get that far
        assert states(engine)["long-1"] == "Admitted"
    finally:
        elector.stop()


def test_a_new_leader_stops_the_evicted_before_it_starts_the_admitted(engine: Engine) -> None:
    """What the old leader committed and never applied: b evicted (its pods may still
    run), a admitted. The successor stops b before it starts anything, as a cycle's
    apply does, so nothing starts on room whose evicted pods have not gone. Before,
    adoption started the admitted gangs first (found by bench/chaos.py's strict count)."""
    seed_config(engine)
    _submit(engine, "a", "b")
    first, elector, _ = make_loop(engine, replica="a")
    assert elector.step()
    try:
        first._apply = lambda *args, **kwargs: None  # type: ignore[method-assign]  # dies here
        first.run_once()
    finally:
        elector.stop()
    with engine.begin() as conn:
        evict(conn, WorkloadId("team-a/b"), now=time.time(), reason="QuotaLowered")
    assert states(engine) == {"a": "Admitted", "b": "Evicted"}
    second, elector, backend = make_loop(engine, replica="b")
    assert elector.step()
    try:
        second.run_once()
    finally:
        elector.stop()
    assert backend.calls[:2] == [("stop", "team-a/b"), ("start", "team-a/a")]


def test_a_claim_survives_a_failover_and_its_room_goes_to_its_preemptor(engine: Engine) -> None:
    # The borrower's x0 runs on the only node. Then solo's s (higher priority, first in
    # any cycle's order) and owner's mine queue: s does not fit, mine reclaims the node
    # from x0. The leader commits the eviction and dies before it stops x0. The next
    # leader stops and requeues x0 and must give the freed node to mine, the claimant,
    # not to s, which comes first in the order and fits it as well.
    seed_lenders(engine)
    clock = FakeClock(T0)
    with engine.begin() as conn:
        submit_workload(conn, job("borrower", "x0", T0 - 30))
    first, elector, _ = make_loop(engine, replica="a", clock=clock)
    assert elector.step()
    try:
        first.run_once()
        assert states(engine) == {"x0": "Admitted"}
        with engine.begin() as conn:
            submit_workload(conn, job("solo", "s", T0 - 20, priority=10))
            submit_workload(conn, job("owner", "mine", T0 - 10))
        clock.advance(1)
        first._apply = lambda *args, **kwargs: None  # type: ignore[method-assign]  # dies here
        report = first.run_once()
        assert report is not None and report.evicted == ("borrower/x0",)
    finally:
        elector.stop()
    assert states(engine) == {"x0": "Evicted", "s": "Pending", "mine": "Pending"}
    claim = _row(engine, "owner", "mine")["claim"]
    assert claim["victims"] == ["borrower/x0"] and claim["flavor"] == "h100"
    assert [p["node"] for p in claim["placements"]] == ["node-0"]
    assert _row(engine, "borrower", "x0")["evictions"] == 1

    clock.advance(1)
    second, elector, backend = make_loop(engine, replica="b", clock=clock)
    assert elector.step()
    try:
        report = second.run_once()  # adopts: stops and requeues x0, then the cycle
        assert report is not None and report.admitted == ("owner/mine",)
        for _ in range(2):  # later cycles do not hand the room over either
            clock.advance(1)
            second.run_once()
    finally:
        elector.stop()
    assert states(engine) == {"x0": "Pending", "s": "Pending", "mine": "Admitted"}
    assert _nodes_of(engine, "mine") == {"node-0"}
    assert _row(engine, "owner", "mine")["claim"] is None  # its admission ended it
    assert backend.stop_calls["borrower/x0"] == 1 and backend.start_calls["owner/mine"] == 1


def test_a_victim_is_requeued_with_backoff_and_not_admitted_before_it_ends(
    engine: Engine,
) -> None:
    seed_lenders(engine)
    clock = FakeClock(T0)
    with engine.begin() as conn:
        submit_workload(conn, job("borrower", "x0", T0 - 30))
    loop, elector, backend = make_loop(engine, clock=clock)
    loop._gauges = GaugePacer(cheap_s=float("inf"))  # gauges after every cycle, however slow
    assert elector.step()
    try:
        loop.run_once()
        with engine.begin() as conn:
            submit_workload(conn, job("owner", "mine", T0 - 10))
        report = loop.run_once()  # evicts x0 for mine; stops and requeues x0
        assert report is not None and report.evicted == ("borrower/x0",)
        x0 = _row(engine, "borrower", "x0")
        assert (x0["state"], x0["reason"], x0["evictions"]) == ("Pending", "Requeued", 1)
        # The first eviction's backoff: requeue_backoff_base, from its requeue.
        until = T0 + SERVICE_POLICY.requeue_delay(1)
        assert x0["requeue_at"].timestamp() == pytest.approx(until)
        assert "backs off until" in x0["message"]
        assert codec.timestamp(until).isoformat() in x0["message"]
        report = loop.run_once()
        assert report is not None and report.admitted == ("owner/mine",)

        backend.finish(WorkloadId("owner/mine"))  # the room is free again, x0 fits it
        clock.advance(1)
        report = loop.run_once()
        assert report is not None and report.finished == ("owner/mine",)
        assert report.admitted == () and report.pending == 0  # x0 backs off: not pending
        assert states(engine)["x0"] == "Pending"
        # ... for the cycle; the queue-depth gauge still counts it, as BackingOff.
        depth = {"cluster_queue": "borrower", "local_queue": "default", "namespace": "borrower"}
        gauge = loop._metrics.registry.get_sample_value
        assert gauge("queuemgr_pending_workloads", {**depth, "reason": "BackingOff"}) == 1
        # The loop sleeps until then, not for a whole safety interval.
        assert loop._timeout() == pytest.approx(until - clock.now(), abs=0.01)

        clock.advance(until - clock.now() - 0.5)
        report = loop.run_once()
        assert report is not None and report.admitted == ()
        clock.advance(0.5)
        report = loop.run_once()
        assert report is not None and report.admitted == ("borrower/x0",)
    finally:
        elector.stop()
    x0 = _row(engine, "borrower", "x0")
    assert (x0["state"], x0["evictions"], x0["requeue_at"]) == ("Admitted", 1, None)


# -- every write of a leader is fenced --------------------------------------------------


def test_a_leader_that_lost_its_lock_records_no_finish(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        submit_workload(conn, gang("long-1", created_at=1_700_000_000.0))
    loop, elector, backend = make_loop(engine)
    assert elector.step()
    try:
        loop.run_once()
        assert states(engine)["long-1"] == "Admitted"
        # Its lock session ends while it is paused; a successor may admit long-1 again.
        with engine.connect() as conn:
            pid = holder_pid(conn)
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            conn.commit()
        # pg_terminate_backend only signals: the session ends a moment later. The case
        # under test is a session that has ended, so wait until it has.
        wait_for(lambda: _backend_gone(engine, pid), timeout=10)
        backend.finish(WorkloadId("team-a/long-1"))  # what it saw before the pause
        with pytest.raises(NotLeader):
            loop.run_once()
        assert states(engine)["long-1"] == "Admitted"  # not finished by the stale leader
    finally:
        elector.stop()


def _backend_gone(engine: Engine, pid: int) -> bool:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        ).scalar_one()
    return found == 0
