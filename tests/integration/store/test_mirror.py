"""The leader's mirror reads what load_state reads, while reading only the rows that changed."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import Engine

from queuemgr.core.cycle import schedule
from queuemgr.core.model import WorkloadId
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Snapshot
from queuemgr.store import decisions as store_decisions
from queuemgr.store.config_objects import upsert_cluster_queue
from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from queuemgr.store.repository import load_state
from queuemgr.store.state import StoredState
from queuemgr.store.transitions import (
    evict,
    finish_workload,
    requeue_workload,
    submit_workload,
)
from tests.integration.store.helpers import CQ, gang, seed_config

pytestmark = pytest.mark.integration

NOW = 1_700_000_100.0


def _same(mirrored: StoredState, loaded: StoredState) -> None:
    """Equal as inputs of a cycle (orders of tuples and of placements aside)."""

    def placed(s: StoredState) -> dict[str, object]:
        return {
            a.workload.id: (
                a.workload,
                a.admission.cluster_queue,
                a.admission.flavor,
                sorted((p.pod_set, p.node, p.count) for p in a.admission.placements),
                a.admission.borrowing,
                a.admitted_at,
            )
            for a in s.admitted
        }

    assert sorted(mirrored.pending, key=lambda w: w.id) == sorted(
        loaded.pending, key=lambda w: w.id
    )
    assert placed(mirrored) == placed(loaded)
    assert dict(mirrored.statuses) == dict(loaded.statuses)
    assert mirrored.stopped == loaded.stopped
    assert dict(mirrored.config.cluster_queues) == dict(loaded.config.cluster_queues)

    def used(snapshot: Snapshot) -> dict[object, object]:
        # The cache keeps a queue's usage at zero once its last workload left;
        # build_snapshot has no entry for it. The same usage to a cycle.
        return {
            (cq, flavor): {r: v for r, v in vec.items() if v}
            for cq, flavors in snapshot.usage.items()
            for flavor, vec in flavors.items()
            if any(vec.values())
        }

    ms, ls = mirrored.snapshot(), loaded.snapshot()
    assert used(ms) == used(ls)
    assert ms.node_free == ls.node_free
    assert {cq: [w.id for w in q] for cq, q in ms.pending.items()} == {
        cq: [w.id for w in q] for cq, q in ls.pending.items()
    }
    assert [w.id for w in ms.unroutable] == [w.id for w in ls.unroutable]


def _held(state: StoredState) -> dict[tuple[str, str], dict[ResourceName, int]]:
    """What the admitted workloads hold per LocalQueue, summed afresh."""
    out: dict[tuple[str, str], dict[ResourceName, int]] = {}
    for a in state.admitted:
        vec = out.setdefault((a.workload.namespace, a.workload.queue), {})
        for r, v in a.held.items():
            vec[r] = vec.get(r, 0) + v
    return out


def _submit(engine: Engine, *names: str, pods: int = 1) -> None:
    with engine.begin() as conn:
        for i, name in enumerate(names):
            submit_workload(conn, gang(name, pods=pods, created_at=NOW + i))


def _cycle(engine: Engine, mirror: StateMirror, now: float) -> store_decisions.Persisted:
    state = mirror.refresh(Database(engine))
    decisions = schedule(state.snapshot(), now)
    with engine.begin() as conn:
        done = store_decisions.persist_decisions(conn, decisions, now=now, previous=state.statuses)
    mirror.committed(decisions, done, now=now)
    return done


def test_refresh_equals_a_full_load_and_reads_only_what_changed(engine: Engine) -> None:
    seed_config(engine)  # two nodes of 8 GPUs, a queue of 16 (+8 borrowed)
    mirror = StateMirror()
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    _submit(engine, "a", "b", "c")
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert mirror.rows_read == 3

    done = _cycle(engine, mirror, NOW + 10)  # admits a and b; c waits with a reason
    assert done.admitted == 2 and done.statuses_written == 1
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert mirror.rows_read == 0  # its own writes were folded in, not read back
    held = mirror.held_by_queue()
    assert held == _held(load_state(Database(engine)))
    as_handed_out = {key: dict(vec) for key, vec in held.items()}

    _cycle(engine, mirror, NOW + 11)  # nothing changes: nothing written, nothing read
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert mirror.rows_read == 0

    with engine.begin() as conn:  # the cluster reports a finish: another writer's change
        finish_workload(conn, WorkloadId("team-a/a"), now=NOW + 12)
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert mirror.rows_read == 0  # a finished row leaves; nothing to read
    assert held == as_handed_out  # what was handed out did not change since
    _cycle(engine, mirror, NOW + 13)  # c takes a's place
    state = mirror.refresh(Database(engine))
    _same(state, load_state(Database(engine)))
    assert sorted(a.workload.name for a in state.admitted) == ["b", "c"]
    assert mirror.held_by_queue() == _held(state)
    assert held == as_handed_out  # what was handed out did not change since


def test_a_write_by_someone_else_in_between_is_read_again(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a", "b")
    mirror = StateMirror()
    state = mirror.refresh(Database(engine))
    decisions = schedule(state.snapshot(), NOW + 10)
    with engine.begin() as conn:
        done = store_decisions.persist_decisions(
            conn, decisions, now=NOW + 10, previous=state.statuses
        )
    with engine.begin() as conn:  # after the cycle's commit, before the mirror folds it in
        finish_workload(conn, WorkloadId("team-a/a"), now=NOW + 11, reason="Cancelled")
    mirror.committed(decisions, done, now=NOW + 10)
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert [a.workload.name for a in load_state(Database(engine)).admitted] == ["b"]


def test_evictions_requeues_and_config_changes(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a", "b", "c")
    mirror = StateMirror()
    _cycle(engine, mirror, NOW + 10)
    with engine.begin() as conn:
        evict(conn, WorkloadId("team-a/a"), now=NOW + 11, reason="Preempted")
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    with engine.begin() as conn:
        requeue_workload(conn, WorkloadId("team-a/a"), now=NOW + 12)
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert mirror.rows_read == 1

    with engine.begin() as conn:  # stopping the queue withholds its pending workloads
        upsert_cluster_queue(conn, CQ, actor="test:alice", stopped=True)
    state = mirror.refresh(Database(engine))
    _same(state, load_state(Database(engine)))
    assert state.stopped and not state.pending and state.admitted
    with engine.begin() as conn:  # and a smaller quota is seen at once
        smaller = dataclasses.replace(
            CQ, flavors=(dataclasses.replace(CQ.flavors[0], borrowing_limit={}),)
        )
        upsert_cluster_queue(conn, smaller, actor="test:alice")
    state = mirror.refresh(Database(engine))
    _same(state, load_state(Database(engine)))
    assert state.config.cluster_queues[CQ.name].flavors[0].borrowing_limit == {}


def test_reset_reads_everything_again(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a", "b", "c")
    mirror = StateMirror()
    _cycle(engine, mirror, NOW + 10)
    mirror.reset()
    _same(mirror.refresh(Database(engine)), load_state(Database(engine)))
    assert mirror.rows_read == 3
