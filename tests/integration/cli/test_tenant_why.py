"""A tenant's ``why`` counts every namespace's workloads and names none of another's.

Row-level security shows a tenant its own namespaces only, and a cycle
evaluated on that alone told a tenant its job "fits now" while another
tenant's earlier gang was about to take the room. ``why`` now reads migration
0012's views (``store.tenant_view``): every live workload, other namespaces'
under keyed tokens. Before that, the first test failed: the tenant's answer
was "Admissible" at position 0 and the admin's was position 2, behind b-first.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store.tenant_view import rows_are_filtered
from tests.integration.cli.conftest import Invoke, Login, dsn

pytestmark = pytest.mark.integration

TOKEN = re.compile(r"^hidden-[0-9a-f]{12}/w-[0-9a-f]{12}$")


def _ok(r: Any) -> Any:
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture
def shared(logins: dict[str, Login], cli: Invoke) -> dict[str, Login]:
    """team-a gets a LocalQueue on team-b's ClusterQueue, where team-b queued first.

    b-job (1 GPU) runs; b-first (2 x 8 GPUs, borrowing) fits the cohort's free
    room now; a-second (8 GPUs), submitted after it, then finds 6 GPUs left.
    """
    _ok(cli("lq", "create", "shared", "-n", "team-a", "-c", "team-b"))
    _ok(cli("submit", "-q", "default", "-n", "team-b", "--name", "b-first",
            "--gpus", "8", "--pods", "2", "--", "x"))  # fmt: skip
    _ok(logins["a"].cli("submit", "-q", "shared", "-n", "team-a", "--name", "a-second",
                        "--gpus", "8", "--", "x"))  # fmt: skip
    return logins


def _why(login: Login, name: str) -> dict[str, Any]:
    r = _ok(login.cli("why", name, "-n", "team-a", "-o", "json"))
    doc: dict[str, Any] = json.loads(r.output)
    return doc


def test_a_tenants_position_counts_other_namespaces_without_naming_them(
    shared: dict[str, Login],
) -> None:
    tenant, admin = _why(shared["a"], "a-second"), _why(shared["admin"], "a-second")
    assert admin["reason"] != "Admissible"
    assert "team-b/b-first" in {a["workload"] for a in admin["ahead"]}
    for key in ("reason", "position_in_local_queue", "position_in_cluster_queue", "ahead_count"):
        assert tenant[key] == admin[key], key
    assert [a["position"] for a in tenant["ahead"]] == [a["position"] for a in admin["ahead"]]
    for mine, theirs in zip(tenant["ahead"], admin["ahead"], strict=True):
        if theirs["workload"].startswith("team-a/"):
            assert mine["workload"] == theirs["workload"]
        else:
            assert TOKEN.match(mine["workload"]), mine
            assert mine["gpus"] == theirs["gpus"]
    # The ClusterQueue is named team-b too: it is cluster-scoped, and may show.
    text = json.dumps(tenant)
    assert "team-b/" not in text and "b-first" not in text and "b-job" not in text


def test_the_table_output_names_no_other_tenant(shared: dict[str, Login]) -> None:
    out = _ok(shared["a"].cli("why", "a-second", "-n", "team-a")).output
    assert "Ahead of it" in out and "hidden-" in out
    assert "team-b/" not in out and "b-first" not in out


def test_the_views_hide_names_and_finished_history(
    shared: dict[str, Login], engine: Engine
) -> None:
    with engine.begin() as conn:  # b-job's run ends: another tenant's history
        conn.execute(sa.text("UPDATE workloads SET state = 'Finished' WHERE name = 'b-job'"))
    with psycopg.connect(dsn(shared["a"].url)) as conn:
        rows = conn.execute(
            "SELECT namespace, name, local_queue FROM queuemgr_tenant_view.workloads"
        ).fetchall()
        queues = conn.execute(
            "SELECT namespace, name, cluster_queue FROM queuemgr_tenant_view.local_queues"
        ).fetchall()
    mine = {(ns, n) for ns, n, _ in rows if ns == "team-a"}
    theirs = [(ns, n, q) for ns, n, q in rows if ns != "team-a"]
    assert mine == {("team-a", "a-job"), ("team-a", "a-second")}
    assert len(theirs) == 1  # b-first; b-job finished and is gone from the view
    ns, name, queue = theirs[0]
    assert TOKEN.match(f"{ns}/{name}") and queue.startswith("q-")
    # The hidden workload's LocalQueue is there under the same token, so it routes.
    assert (ns, queue, "team-b") in set(queues)


@pytest.mark.parametrize(
    ("who", "filtered"), [("a", True), ("b", True), ("admin", False), ("sched", False)]
)
def test_only_a_tenant_session_reads_the_views(
    logins: dict[str, Login], who: str, filtered: bool
) -> None:
    engine = sa.create_engine(logins[who].url)
    try:
        with engine.connect() as conn:
            assert rows_are_filtered(conn) is filtered
    finally:
        engine.dispose()
