"""A ClusterQueue's admission checks round-trip and are audited; each check's state per
workload belongs to one admission (migration 0021)."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store import codec
from queuemgr.store.admission_checks import CheckState, check_states, reserve, set_state
from queuemgr.store.config_objects import load_config, upsert_cluster_queue
from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from queuemgr.store.transitions import submit_workload
from tests.integration.store.helpers import CQ, gang, seed_config

pytestmark = pytest.mark.integration

CHECKED = dataclasses.replace(CQ, admission_checks=("provisioning-request", "other"))
WID = "team-a/g"
T0 = 1_700_000_100.25


def test_checks_round_trip_in_order_and_are_audited(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        assert upsert_cluster_queue(conn, CHECKED, actor="os:bob")
        assert not upsert_cluster_queue(conn, CHECKED, actor="os:bob")  # no change, no row
    with engine.connect() as conn:
        loaded = load_config(conn)[0].cluster_queues[CQ.name]
        last = conn.execute(
            sa.text("SELECT action, before, after FROM audit_log ORDER BY id DESC")
        ).first()
    assert loaded == CHECKED
    assert last is not None
    assert last.action == "update"
    assert last.before["admission_checks"] == []
    assert last.after["admission_checks"] == ["provisioning-request", "other"]


def test_a_queue_written_without_the_column_checks_nothing(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO cluster_queues (name) VALUES ('bare')"))
    with engine.connect() as conn:
        cqs = load_config(conn)[0].cluster_queues
    assert all(cq.admission_checks == () for cq in cqs.values())


def test_the_mirror_sees_a_change_of_checks(engine: Engine) -> None:
    seed_config(engine)
    mirror = StateMirror()
    assert mirror.refresh(Database(engine)).config.cluster_queues[CQ.name].admission_checks == ()
    with engine.begin() as conn:
        upsert_cluster_queue(conn, CHECKED, actor="test")
    state = mirror.refresh(Database(engine))
    assert state.config.cluster_queues[CQ.name].admission_checks == CHECKED.admission_checks


def _admit(engine: Engine, at: float) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE workloads SET state = 'Admitted', admitted_at = :at,"
                " cluster_queue = 'team-a', flavor = 'h100' WHERE namespace = 'team-a'"
            ),
            {"at": codec.timestamp(at)},
        )


def test_states_belong_to_one_admission(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        upsert_cluster_queue(conn, CHECKED, actor="test")
        submit_workload(conn, gang("g"))
    _admit(engine, T0)
    checks = ["provisioning-request"]
    with engine.begin() as conn:
        first = reserve(conn, WID, checks, admitted_at=T0, now=T0 + 1)
        again = reserve(conn, WID, checks, admitted_at=T0 + 0.0004, now=T0 + 2)  # same one
    assert first == again
    state = first["provisioning-request"]
    assert (state.state, state.attempt, state.failures) == (CheckState.PENDING, 1, 0)
    assert state.of_admission(T0) and not state.of_admission(T0 + 1)
    with engine.begin() as conn:
        assert set_state(
            conn,
            WID,
            "provisioning-request",
            CheckState.RETRY,
            message="Failed=True: out of stock",
            now=T0 + 3,
            admitted_at=T0,
            failed=True,
        )
        # A verdict on another admission changes nothing.
        assert not set_state(
            conn,
            WID,
            "provisioning-request",
            CheckState.READY,
            message="",
            now=T0 + 3,
            admitted_at=T0 + 60,
        )
        found = check_states(conn, [WID])[WID]["provisioning-request"]
    assert (found.state, found.message, found.failures) == (
        CheckState.RETRY,
        "Failed=True: out of stock",
        1,
    )
    assert found.updated_at == pytest.approx(T0 + 3)
    _admit(engine, T0 + 100)  # admitted again after its requeue
    with engine.begin() as conn:
        renewed = reserve(conn, WID, checks, admitted_at=T0 + 100, now=T0 + 101)
        assert check_states(conn) == {WID: renewed}  # every unfinished workload's
    state = renewed["provisioning-request"]
    assert (state.state, state.message, state.attempt, state.failures) == (
        CheckState.PENDING,
        "",
        2,
        1,
    )


def test_a_deleted_workload_takes_its_states(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        upsert_cluster_queue(conn, CHECKED, actor="test")
        submit_workload(conn, gang("g"))
    _admit(engine, T0)
    with engine.begin() as conn:
        reserve(conn, WID, ["provisioning-request", "other"], admitted_at=T0, now=T0)
        conn.execute(sa.text("DELETE FROM workloads"))
        left = conn.execute(sa.text("SELECT count(*) FROM admission_check_states")).scalar()
    assert left == 0
