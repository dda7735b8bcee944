"""Config objects round-trip exactly, and every change leaves an audit row."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from queuemgr.core.cycle import schedule
from queuemgr.core.model import (
    ClusterQueueName,
    Cohort,
    CohortName,
    LocalQueue,
    NodeName,
    Ordering,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
)
from queuemgr.store import codec
from queuemgr.store.cohorts import upsert_cohort
from queuemgr.store.config_objects import (
    load_config,
    retire_nodes,
    upsert_cluster_queue,
    upsert_cluster_queues,
    upsert_local_queue,
    upsert_local_queues,
    upsert_node,
    upsert_nodes,
)
from queuemgr.store.decisions import persist_decisions
from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import finish_workload, submit_workload
from tests.integration.store.helpers import CQ, GPU, H100, LQ, NODES, gang, seed_config

pytestmark = pytest.mark.integration


def _audit(engine: Engine) -> list[sa.Row[tuple[object, ...]]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT db_role, actor, action, object_kind, object_name, before, after "
                    "FROM audit_log ORDER BY id"
                )
            )
        )


def test_config_round_trips_to_identical_core_objects(engine: Engine) -> None:
    seed_config(engine)
    with engine.connect() as conn:
        config, stopped = load_config(conn)
    assert config.flavors == {H100.name: H100}
    assert config.cluster_queues == {CQ.name: CQ}
    assert config.local_queues == {LQ.key: LQ}
    assert config.nodes == {n.name: n for n in NODES}
    assert set(config.cohorts) == {CQ.cohort}
    assert stopped == frozenset()


def test_orderings_round_trip_and_a_new_member_keeps_its_cohorts_settings(
    engine: Engine,
) -> None:
    seed_config(engine)
    cohort = Cohort(name=CohortName("research"), fair_sharing=True, ordering=Ordering.USAGE)
    other = dataclasses.replace(CQ, name=ClusterQueueName("team-b"), ordering=Ordering.FIFO)
    with engine.begin() as conn:
        assert upsert_cohort(conn, cohort, actor="test")
        # Joining an existing cohort creates nothing and resets nothing.
        assert upsert_cluster_queue(conn, other, actor="test")
    with engine.connect() as conn:
        config, _ = load_config(conn)
    assert config.cohorts[CohortName("research")] == cohort
    assert config.cluster_queues[other.name] == other
    assert config.cluster_queues[CQ.name].ordering is None


def test_every_change_is_audited_with_before_after_and_role(engine: Engine) -> None:
    seed_config(engine, actor="k8s:alice")
    rows = _audit(engine)
    assert [(r.action, r.object_kind) for r in rows] == [
        ("create", "ResourceFlavor"),
        ("create", "Node"),
        ("create", "Node"),
        ("create", "Cohort"),
        ("create", "ClusterQueue"),
        ("create", "LocalQueue"),
    ]
    with engine.connect() as conn:
        role = conn.execute(sa.text("SELECT current_user")).scalar_one()
    assert {r.db_role for r in rows} == {role}
    assert {r.actor for r in rows} == {"k8s:alice"}

    bigger = dataclasses.replace(
        CQ,
        weight=Fraction(3, 2),
        queueing_strategy=QueueingStrategy.STRICT_FIFO,
        namespaces=frozenset({"team-a"}),
        flavors=(dataclasses.replace(CQ.flavors[0], nominal={**CQ.flavors[0].nominal, GPU: 24}),),
    )
    with engine.begin() as conn:
        assert upsert_cluster_queue(conn, bigger, actor="os:bob")
        assert not upsert_cluster_queue(conn, bigger, actor="os:bob")  # no change, no row
        assert not upsert_node(conn, NODES[0], actor="os:bob")
    last = _audit(engine)[-1]
    assert (last.action, last.object_name, last.actor) == ("update", "team-a", "os:bob")
    assert last.before["flavors"][0]["nominal"]["nvidia.com/gpu"] == 16
    assert last.after["flavors"][0]["nominal"]["nvidia.com/gpu"] == 24
    assert last.after["weight"] == "3/2"
    assert len(_audit(engine)) == 7
    with engine.connect() as conn:
        assert load_config(conn)[0].cluster_queues[bigger.name] == bigger


@pytest.mark.parametrize("batch", [1, 3], ids=["one-by-one", "in-one-call"])
def test_many_nodes_upserted_at_once_are_audited_as_one_by_one(engine: Engine, batch: int) -> None:
    # The service seeds a cluster file's nodes, and the Kubernetes sync writes the nodes
    # that changed, in one call: the same rows and the same audit as a call per node.
    seed_config(engine)
    before = len(_audit(engine))
    bigger = dataclasses.replace(NODES[1], allocatable={**NODES[1].allocatable, GPU: 16})
    new = dataclasses.replace(NODES[0], name=NodeName("node-new"), labels={"gpu": "h100", "x": "y"})
    wanted = [NODES[0], bigger, new]  # unchanged, changed, created
    changed: list[str] = []
    with engine.begin() as conn:
        for i in range(0, len(wanted), batch):
            changed += upsert_nodes(conn, wanted[i : i + batch], actor="os:bob")
        assert upsert_nodes(conn, wanted, actor="os:bob") == []  # nothing left to change
    assert changed == ["node-1", "node-new"]
    rows = _audit(engine)[before:]
    assert [(r.action, r.object_name, r.actor) for r in rows] == [
        ("update", "node-1", "os:bob"),
        ("create", "node-new", "os:bob"),
    ]
    assert rows[0].before["allocatable"][GPU] == 8
    assert rows[0].after["allocatable"][GPU] == 16
    with engine.connect() as conn:
        nodes = load_config(conn)[0].nodes
    assert nodes[NodeName("node-1")] == bigger
    assert nodes[NodeName("node-new")] == new
    assert nodes[NODES[0].name] == NODES[0]


def test_bulk_queue_upserts_write_only_what_changed(engine: Engine) -> None:
    seed_config(engine)  # team-a and its LocalQueue
    second = dataclasses.replace(CQ, name=ClusterQueueName("team-b"), cohort=None)
    lq_b = LocalQueue(namespace="team-b", name="default", cluster_queue=second.name)
    before = len(_audit(engine))
    with engine.begin() as conn:
        assert upsert_cluster_queues(conn, [CQ, second], actor="os:bob") == ["team-b"]
        assert upsert_local_queues(conn, [LQ, lq_b], actor="os:bob") == 1
        assert upsert_cluster_queues(conn, [CQ, second], actor="os:bob") == []
        assert upsert_local_queues(conn, [LQ, lq_b], actor="os:bob") == 0
        smaller = dataclasses.replace(
            CQ, flavors=(dataclasses.replace(CQ.flavors[0], nominal={GPU: 8}),)
        )
        assert upsert_cluster_queues(conn, [smaller, second], actor="os:bob") == ["team-a"]
    rows = _audit(engine)[before:]
    assert [(r.action, r.object_kind, r.object_name) for r in rows] == [
        ("create", "ClusterQueue", "team-b"),
        ("create", "LocalQueue", "team-b/default"),
        ("update", "ClusterQueue", "team-a"),
    ]
    with engine.connect() as conn:
        config = load_config(conn)[0]
    assert config.cluster_queues == {CQ.name: smaller, second.name: second}


def test_bulk_queue_upserts_audit_as_one_by_one_does(engine: Engine) -> None:
    """The same queues written in bulk and one by one: the same audit rows (a cohort
    they name created first), and the same stored queues."""
    seed_config(engine)
    made = [
        dataclasses.replace(CQ, name=ClusterQueueName(f"q{i}"), cohort=CohortName(f"c{i % 2}"))
        for i in range(4)
    ]
    lqs = [
        LocalQueue(namespace=f"ns{i}", name="default", cluster_queue=q.name)
        for i, q in enumerate(made)
    ]
    start = len(_audit(engine))
    with engine.begin() as conn:
        assert upsert_cluster_queues(conn, made[:2], actor="os:bob") == ["q0", "q1"]
        for q in made[2:]:
            assert upsert_cluster_queue(conn, q, actor="os:bob")
        assert upsert_local_queues(conn, lqs[:2], actor="os:bob") == 2
        for lq in lqs[2:]:
            assert upsert_local_queue(conn, lq, actor="os:bob")
    rows = _audit(engine)[start:]
    # In bulk, the cohorts the queues name are created first; one by one, they exist.
    assert [(r.action, r.object_kind, r.object_name) for r in rows] == [
        ("create", "Cohort", "c0"),
        ("create", "Cohort", "c1"),
        ("create", "ClusterQueue", "q0"),
        ("create", "ClusterQueue", "q1"),
        ("create", "ClusterQueue", "q2"),
        ("create", "ClusterQueue", "q3"),
        ("create", "LocalQueue", "ns0/default"),
        ("create", "LocalQueue", "ns1/default"),
        ("create", "LocalQueue", "ns2/default"),
        ("create", "LocalQueue", "ns3/default"),
    ]
    by_name = {q.name: q for q in made}
    for r in rows[2:6]:
        assert r.before is None
        assert r.after == json.loads(json.dumps(codec.cluster_queue_json(by_name[r.object_name])))
    assert [r.after for r in rows[6:]] == [
        json.loads(json.dumps(codec.local_queue_json(lq))) for lq in lqs
    ]
    with engine.connect() as conn:
        config = load_config(conn)[0]
    assert {q.name: config.cluster_queues[q.name] for q in made} == {q.name: q for q in made}


def test_preemption_min_runtime_round_trips_and_is_audited(engine: Engine) -> None:
    seed_config(engine)
    protected = dataclasses.replace(
        CQ,
        preemption=PreemptionPolicy(
            reclaim_within_cohort=ReclaimWithinCohort.ANY, min_runtime=1800.5
        ),
    )
    with engine.begin() as conn:
        assert upsert_cluster_queue(conn, protected, actor="os:bob")
        assert not upsert_cluster_queue(conn, protected, actor="os:bob")  # no change, no row
    with engine.connect() as conn:
        loaded = load_config(conn)[0].cluster_queues[CQ.name]
    assert loaded == protected and loaded.preemption.min_runtime == 1800.5
    last = _audit(engine)[-1]
    assert (last.action, last.object_name) == ("update", "team-a")
    assert last.before["preemption_min_runtime"] == 0
    assert last.after["preemption_min_runtime"] == 1800.5
    assert last.after["reclaim_within_cohort"] == "Any"


def test_a_failed_change_leaves_no_audit_row(engine: Engine) -> None:
    seed_config(engine)
    missing_flavor = dataclasses.replace(
        CQ,
        name=ClusterQueueName("team-b"),
        cohort=None,
        flavors=(dataclasses.replace(CQ.flavors[0], flavor="a100"),),
    )
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        upsert_cluster_queue(conn, missing_flavor, actor="os:bob")
    assert len(_audit(engine)) == 6


def test_audit_log_is_append_only(engine: Engine) -> None:
    seed_config(engine)
    for statement in (
        "UPDATE audit_log SET actor = 'x'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ):
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(sa.text(statement))
    assert len(_audit(engine)) == 6


def test_a_stopped_queue_admits_nothing_but_keeps_its_config(engine: Engine) -> None:

    seed_config(engine)
    with engine.begin() as conn:
        upsert_cluster_queue(conn, CQ, actor="os:bob", stopped=True)
        submit_workload(conn, gang("a"))
    state = load_state(Database(engine))
    assert state.stopped == {CQ.name} and CQ.name in state.config.cluster_queues
    assert state.pending == ()


def _node_rows(engine: Engine) -> dict[str, bool]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT name, schedulable FROM nodes"))
        return {r.name: r.schedulable for r in rows}


def test_a_gone_node_is_deleted_once_nothing_runs_on_it_and_held_unschedulable_until_then(
    engine: Engine,
) -> None:
    seed_config(engine)  # node-0 and node-1, 8 GPUs each
    with engine.begin() as conn:
        submit_workload(conn, gang("runs", pods=2))  # one pod on each node
    before = load_state(Database(engine))
    decisions = schedule(before.snapshot(), 1_700_000_100.0)
    placed = {p.node for a in decisions.admitted for p in a.admission.placements}
    assert placed == {"node-0", "node-1"}
    with engine.begin() as conn:
        persist_decisions(conn, decisions, now=1_700_000_100.0, previous=before.statuses)

    # Both nodes go from the cluster; the gang's pods still hold them.
    with engine.begin() as conn:
        assert retire_nodes(conn, {"elsewhere"}, actor="test") == ([], ["node-0", "node-1"])
    assert _node_rows(engine) == {"node-0": False, "node-1": False}
    assert [r.action for r in _audit(engine)[-2:]] == ["update", "update"]
    with engine.begin() as conn:  # again: nothing changes, nothing is audited
        audited = len(_audit(engine))
        assert retire_nodes(conn, set(), actor="test") == ([], ["node-0", "node-1"])
    assert len(_audit(engine)) == audited

    wid = decisions.admitted[0].workload.id
    with engine.begin() as conn:
        finish_workload(conn, wid, now=1_700_000_200.0)
    # node-1 came back meanwhile (the job sync re-upserts it); node-0 did not.
    with engine.begin() as conn:
        assert retire_nodes(conn, {"node-1"}, actor="test") == (["node-0"], [])
    assert _node_rows(engine) == {"node-1": False}
    last = _audit(engine)[-1]
    assert (last.action, last.object_kind, last.object_name) == ("delete", "Node", "node-0")
    assert last.before["allocatable"] and last.after is None
    with engine.connect() as conn:
        assert set(load_config(conn)[0].nodes) == {"node-1"}
