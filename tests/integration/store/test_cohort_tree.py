"""Cohort trees in the store: parents, own quota, audit, and no cycle ever written."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.cohort_tree import CohortTreeError
from queuemgr.core.model import Cohort, CohortName
from queuemgr.store import admin
from queuemgr.store.cohorts import load_cohorts, upsert_cohort
from queuemgr.store.config_objects import load_config, upsert_cluster_queue, upsert_flavor
from queuemgr.store.status_board import cohort_path, running_beside
from tests.builders import make_cohort
from tests.integration.store.helpers import CQ, H100

pytestmark = pytest.mark.integration

ORG = make_cohort("org", flavor="h100", nominal={"nvidia.com/gpu": 16})
RESEARCH = make_cohort(
    "research",
    "org",
    flavor="h100",
    nominal={"nvidia.com/gpu": 0},
    borrowing_limit={"nvidia.com/gpu": 8},
    lending_limit={"nvidia.com/gpu": 4},
    weight=Fraction(3, 2),
)


def _write(engine: Engine, *cohorts: Cohort) -> None:
    with engine.begin() as conn:
        upsert_flavor(conn, H100, actor="test")
        for c in cohorts:
            upsert_cohort(conn, c, actor="test")


def test_a_tree_round_trips_with_its_own_quota(engine: Engine) -> None:
    _write(engine, ORG, RESEARCH)
    with engine.connect() as conn:
        stored = {c.name: c for c in load_cohorts(conn)}
    assert stored == {ORG.name: ORG, RESEARCH.name: RESEARCH}
    # A queue joining the middle level sees the tree in the loaded config.
    queue = dataclasses.replace(CQ, cohort=RESEARCH.name)
    with engine.begin() as conn:
        upsert_cluster_queue(conn, queue, actor="test")
        config, _ = load_config(conn)
    assert config.quota_topology.tree.path(CohortName("research")) == "org/research"


def test_the_audit_row_holds_the_quota_and_the_parent(engine: Engine) -> None:
    _write(engine, ORG, RESEARCH)
    edited = make_cohort("research", "org", flavor="h100", nominal={"nvidia.com/gpu": 2})
    _write(engine, edited)
    with engine.connect() as conn:
        before, after = conn.execute(
            sa.text(
                "SELECT before, after FROM audit_log WHERE object_name = 'research' "
                "ORDER BY id DESC LIMIT 1"
            )
        ).one()
    assert before["parent"] == "org" and before["weight"] == "3/2"
    assert after["flavors"][0]["nominal"] == {"nvidia.com/gpu": 2}
    assert after["flavors"][0]["borrowing_limit"] == {}
    # Writing the same again changes nothing and writes no row.
    with engine.begin() as conn:
        assert not upsert_cohort(conn, edited, actor="test")


@pytest.mark.parametrize(
    ("cohorts", "message"),
    [
        pytest.param(
            [make_cohort("a", "ghost")], "cohort a: its parent ghost does not exist", id="dangling"
        ),
        pytest.param(
            [make_cohort("a"), make_cohort("b", "a"), make_cohort("a", "b")],
            "cohorts form a cycle: a -> b -> a",
            id="cycle-of-two",
        ),
        pytest.param([make_cohort("a"), make_cohort("a", "a")], "a -> a", id="own-parent"),
    ],
)
def test_a_cycle_or_a_dangling_parent_is_refused_and_nothing_written(
    engine: Engine, cohorts: list[Cohort], message: str
) -> None:
    *first, last = cohorts
    _write(engine, *first)
    with engine.connect() as conn:
        count_before = conn.execute(sa.text("SELECT count(*) FROM audit_log")).scalar_one()
    with pytest.raises(CohortTreeError, match=message), engine.begin() as conn:
        upsert_cohort(conn, last, actor="test")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM audit_log")).scalar_one() == count_before
        parents = dict(conn.execute(sa.text("SELECT name, parent FROM cohorts")).all())
    assert parents == {c.name: c.parent for c in first}


def test_a_parent_or_a_flavor_in_use_is_not_deleted(engine: Engine) -> None:
    _write(engine, ORG, RESEARCH)
    with engine.begin() as conn, pytest.raises(admin.ObjectInUse, match="child cohorts: research"):
        admin.delete_cohort(conn, "org", actor="test")
    with engine.begin() as conn, pytest.raises(admin.ObjectInUse, match="cohorts: org, research"):
        admin.delete_flavor(conn, "h100", actor="test")
    # A leaf with no members goes, and its quota rows with it.
    with engine.begin() as conn:
        assert admin.delete_cohort(conn, "research", actor="test")
        left = conn.execute(sa.text("SELECT cohort FROM cohort_quotas")).scalars().all()
    assert left == ["org"]


def test_why_s_board_queries_follow_the_tree(engine: Engine) -> None:
    _write(engine, ORG, RESEARCH)
    with engine.begin() as conn:
        upsert_cluster_queue(conn, dataclasses.replace(CQ, cohort=RESEARCH.name), actor="test")
        assert cohort_path(conn, CQ.name) == "org/research"
        root, running = running_beside(conn, CQ.name)
    assert root == "org" and running == []
    with engine.begin() as conn:
        upsert_cluster_queue(conn, dataclasses.replace(CQ, cohort=None), actor="test")
        assert cohort_path(conn, CQ.name) is None
