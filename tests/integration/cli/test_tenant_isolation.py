"""Two tenants and an admin, each a real Postgres login role: who may do what, by CLI and by SQL.

Tenant A is granted namespace team-a and tenant B team-b (``queuemgr grant``).
Each CLI verb and the equivalent raw SQL is run as each of them, and the
matrix says allowed or refused. Before migration 0010 a tenant could read
every namespace, submit and cancel in any, UPDATE any workload column,
admit itself and DELETE every placement: each row below that is refused
here was allowed then.
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.service.app import Service
from queuemgr.service.settings import ServiceConfig
from queuemgr.store.database import DatabaseError
from queuemgr.store.leadership import NAMESPACE
from tests.integration.cli.conftest import Login, dsn, no_traceback
from tests.integration.controller.helpers import make_loop

pytestmark = pytest.mark.integration


def _state(engine: Engine, name: str) -> tuple[str, int, int]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT state::text, priority,"
                " (SELECT count(*) FROM placements p WHERE p.workload_id = w.id)"
                " FROM workloads w WHERE name = :n"
            ),
            {"n": name},
        ).one()
    return (row[0], row[1], row[2])


# (id, actor, CLI arguments, allowed, what the output must hold)
CLI_MATRIX = [
    ("own-list", "a", ("list", "-n", "team-a"), True, "a-job"),
    ("own-status", "a", ("status", "a-job", "-n", "team-a"), True, "a-job"),
    ("own-why", "a", ("why", "a-job", "-n", "team-a"), True, "a-job"),
    ("other-status", "a", ("status", "b-job", "-n", "team-b"), False, "not found"),
    ("other-why", "a", ("why", "b-job", "-n", "team-b"), False, "not found"),
    ("other-cancel", "a", ("cancel", "b-job", "-n", "team-b"), False, "not found"),
    (
        "other-submit",
        "a",
        ("submit", "-q", "default", "-n", "team-b", "--name", "x", "--", "x"),
        False,
        "not found",
    ),
    (
        "quota",
        "a",
        ("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=64"),
        False,
        "permission denied",
    ),
    (
        "cq-create",
        "b",
        ("cq", "create", "rogue", "--nominal", "h100:nvidia.com/gpu=8"),
        False,
        "permission denied",
    ),
    ("grant-self", "a", ("grant", "{a}", "team-b"), False, "permission denied"),
    ("audit", "b", ("audit",), False, "permission denied"),
    ("own-grants", "a", ("grants",), True, "team-a"),
    ("admin-status", "admin", ("status", "b-job", "-n", "team-b"), True, "b-job"),
    ("admin-grant", "admin", ("grant", "{a}", "team-b"), True, "granted"),
    ("admin-audit", "admin", ("audit", "--object", "grant"), True, "TenantGrant"),
    (
        "admin-quota",
        "admin",
        ("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=64"),
        True,
        "",
    ),
]


@pytest.mark.parametrize(
    ("actor", "args", "allowed", "shows"),
    [pytest.param(*row[1:], id=row[0]) for row in CLI_MATRIX],
)
def test_cli_verbs_as_each_role(
    logins: dict[str, Login],
    actor: str,
    args: tuple[str, ...],
    allowed: bool,
    shows: str,
) -> None:
    args = tuple(a.format(a=logins["a"].role) for a in args)
    r = logins[actor].cli(*args)
    no_traceback(r)
    assert (r.exit_code == 0) is allowed, r.output
    assert shows in r.output, r.output


def test_a_tenant_lists_only_its_namespaces(logins: dict[str, Login]) -> None:
    for key, mine in (("a", "a-job"), ("b", "b-job")):
        r = logins[key].cli("list", "-A", "-o", "json")
        assert r.exit_code == 0, r.output
        names = {w["name"] for w in json.loads(r.output)["workloads"]}
        assert names == {mine}, (key, names)


def test_a_tenant_submits_and_cancels_in_its_own_namespace(
    logins: dict[str, Login], engine: Engine
) -> None:
    a = logins["a"].cli
    r = a("submit", "-q", "default", "-n", "team-a", "--name", "mine", "--gpus", "2", "--", "x")
    assert r.exit_code == 0, r.output
    assert _state(engine, "mine") == ("Pending", 0, 0)
    r = a("cancel", "mine", "-n", "team-a")
    assert r.exit_code == 0 and "cancelled" in r.output, r.output
    assert _state(engine, "mine")[0] == "Finished"
    r = logins["admin"].cli("revoke", logins["a"].role, "team-a")
    assert r.exit_code == 0, r.output
    r = a("status", "a-job", "-n", "team-a")
    assert r.exit_code == 1 and "not found" in r.output, r.output


SUBMIT = "SELECT queuemgr_submit(%s, %s, 'default', 0, now(), NULL, %s::jsonb)"
ONE_GPU = json.dumps([{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}])
NEGATIVE = json.dumps([{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": -64}}])
HUGE = json.dumps([{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 10**30}}])

# (id, SQL, parameters, the error it must raise, or None when allowed)
Denied = type[psycopg.Error]
SQL_MATRIX: list[tuple[str, str, tuple[object, ...], Denied | None]] = [
    (
        "update-priority",
        "UPDATE workloads SET priority = 2147483647",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    (
        "admit-self",
        "UPDATE workloads SET state = 'Admitted', cluster_queue = 'team-a'",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    (
        "insert-workload",
        "INSERT INTO workloads (namespace, name, local_queue, created_at)"
        " VALUES ('team-b', 'sneak', 'default', now())",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    (
        "insert-placement",
        "INSERT INTO placements SELECT id, 'main', 'h100-1', 8 FROM workloads",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    ("delete-placements", "DELETE FROM placements", (), psycopg.errors.InsufficientPrivilege),
    ("delete-workloads", "DELETE FROM workloads", (), psycopg.errors.InsufficientPrivilege),
    (
        "grant-self",
        "INSERT INTO tenant_grants VALUES (current_user, 'team-b', 'me', now())",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    ("submit-other", SUBMIT, ("team-b", "sneak", ONE_GPU), psycopg.errors.InsufficientPrivilege),
    (
        "cancel-other",
        "SELECT queuemgr_cancel('team-b', 'b-job', 'x')",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    ("submit-negative", SUBMIT, ("team-a", "neg", NEGATIVE), psycopg.errors.InvalidParameterValue),
    ("submit-huge", SUBMIT, ("team-a", "huge", HUGE), psycopg.errors.InvalidParameterValue),
    (
        "submit-bad-name",
        SUBMIT,
        ("team-a", "Bad Name", ONE_GPU),
        psycopg.errors.InvalidParameterValue,
    ),
    (
        "lock-lease",
        "SELECT epoch FROM scheduler_lease FOR KEY SHARE",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    (
        "take-lease",
        "UPDATE scheduler_lease SET holder_pid = pg_backend_pid(), epoch = epoch + 1",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    (
        "lock-lease-table",
        "LOCK TABLE scheduler_lease IN ACCESS EXCLUSIVE MODE",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    (
        "read-token-key",
        "SELECT key FROM queuemgr_tenant_view.secret",
        (),
        psycopg.errors.InsufficientPrivilege,
    ),
    ("submit-own", SUBMIT, ("team-a", "fine", ONE_GPU), None),
    ("cancel-own", "SELECT queuemgr_cancel('team-a', 'a-job', 'x')", (), None),
]


@pytest.mark.parametrize(
    ("sql", "params", "denied"), [pytest.param(*row[1:], id=row[0]) for row in SQL_MATRIX]
)
def test_raw_sql_as_a_tenant(
    logins: dict[str, Login],
    engine: Engine,
    sql: str,
    params: tuple[object, ...],
    denied: Denied | None,
) -> None:
    before = {n: _state(engine, n) for n in ("a-job", "b-job")}
    with psycopg.connect(dsn(logins["a"].url)) as conn:
        if denied is None:
            conn.execute(sql, params)
            conn.commit()
            return
        with pytest.raises(denied):
            conn.execute(sql, params)
    assert {n: _state(engine, n) for n in ("a-job", "b-job")} == before


def test_raw_sql_reads_only_granted_rows(logins: dict[str, Login]) -> None:
    with psycopg.connect(dsn(logins["a"].url)) as conn:
        seen = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            for table in ("workloads", "pod_sets", "placements", "local_queues", "tenant_grants")
        }
        namespaces = {r[0] for r in conn.execute("SELECT namespace FROM workloads")}
    assert namespaces == {"team-a"}
    # a-job and its one pod set; b-job's placement is not visible; one queue, one grant.
    assert seen == {
        "workloads": (1,),
        "pod_sets": (1,),
        "placements": (0,),
        "local_queues": (1,),
        "tenant_grants": (1,),
    }


def test_a_tenant_cannot_date_a_submission_back(logins: dict[str, Login], engine: Engine) -> None:
    with psycopg.connect(dsn(logins["a"].url)) as conn:
        conn.execute(
            "SELECT queuemgr_submit('team-a', 'early', 'default', 0, '2000-01-01', NULL,"
            " %s::jsonb)",
            (ONE_GPU,),
        )
        conn.commit()
    with engine.connect() as conn:
        age = conn.execute(
            sa.text(
                "SELECT extract(epoch FROM now() - created_at) FROM workloads WHERE name = 'early'"
            )
        ).scalar_one()
    assert abs(float(age)) < 60


def test_every_function_is_closed_to_public(engine: Engine) -> None:
    with engine.connect() as conn:
        open_ = conn.execute(
            sa.text(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = 'public' AND p.proname LIKE 'queuemgr_%'"
                " AND has_function_privilege('public', p.oid, 'EXECUTE')"
            )
        ).all()
    assert open_ == []


def test_a_tenant_cannot_hold_or_stall_leadership(logins: dict[str, Login], engine: Engine) -> None:
    """A tenant holding every advisory key the scheduler ever used, the old leader and fence
    keys among them, in a session and in an open transaction: a replica still wins the
    election at once and admits (before the lease row, it stayed in standby)."""
    with psycopg.connect(dsn(logins["a"].url)) as tenant:
        for key in range(1, 4):
            tenant.execute("SELECT pg_advisory_lock(%s, %s)", (NAMESPACE, key))
        tenant.execute("BEGIN")
        for key in range(1, 4):
            tenant.execute("SELECT pg_advisory_xact_lock(%s, %s)", (NAMESPACE, key))
        loop, elector, _ = make_loop(engine)
        outcome: list[object] = []

        def lead_and_admit() -> None:
            outcome.append(elector.step() and loop.run_once())

        try:
            worker = threading.Thread(target=lead_and_admit, daemon=True)
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), "admission stalled behind the tenant's locks"
            assert outcome and outcome[0], "the replica did not win the election"
            assert _state(engine, "a-job")[0] == "Admitted"
        finally:
            elector.stop()


def test_serve_runs_as_the_scheduler_role_and_refuses_a_tenant(
    logins: dict[str, Login], engine: Engine
) -> None:
    with pytest.raises(DatabaseError, match="queuemgr_scheduler") as refused:
        Service(ServiceConfig(database_url=logins["a"].url))
    assert logins["a"].role in str(refused.value)
    scheduler = sa.create_engine(logins["sched"].url)
    try:
        loop, elector, _ = make_loop(scheduler)
        try:
            assert elector.step()
            loop.run_once()  # a whole cycle's writes, with the scheduler role's privileges
        finally:
            elector.stop()
    finally:
        scheduler.dispose()
    assert _state(engine, "a-job")[0] == "Admitted"
