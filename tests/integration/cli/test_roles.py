"""Only the queuemgr_admin role changes queues and quotas (tenants: test_tenant_isolation.py).

Each test creates two login roles of its own on the session's server (roles
are server-wide, so the names are unique per test), one in ``queuemgr_tenant``
and one in ``queuemgr_admin``, and runs the real CLI as each.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from queuemgr.cli.main import main
from tests.integration.cli.conftest import Invoke, no_traceback

pytestmark = pytest.mark.integration

TABLES_GRANTED = sa.text("""
SELECT c.relname,
       has_table_privilege('queuemgr_admin', c.oid, 'INSERT, UPDATE, DELETE, SELECT') AS admin,
       has_table_privilege('queuemgr_tenant', c.oid, 'SELECT') AS tenant_reads
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'alembic_version'
""")


@pytest.fixture
def as_role(admin_engine: Engine, database_url: str) -> Iterator[Callable[[str], Invoke]]:
    """``as_role("queuemgr_tenant")`` -> a CLI invoker logged in as a new member of it."""
    created: list[str] = []

    def make(group: str) -> Invoke:
        name = f"qm_{group.removeprefix('queuemgr_')}_{uuid.uuid4().hex[:8]}"
        password = secrets.token_hex(8)
        with admin_engine.connect() as conn:
            conn.execute(sa.text(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {group}"))
        created.append(name)
        url = make_url(database_url).set(username=name, password=password)
        env = {"QUEUEMGR_DATABASE_URL": url.render_as_string(hide_password=False)}
        runner = CliRunner()

        def invoke(*args: str) -> Result:
            return runner.invoke(main, list(args), env=env)

        return invoke

    yield make
    with admin_engine.connect() as conn:
        for name in created:
            conn.execute(sa.text(f"DROP ROLE IF EXISTS {name}"))


def _quota(engine: Engine) -> object:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT nominal FROM cluster_queue_quotas WHERE cluster_queue = 'team-a'")
        ).scalar_one()


def test_a_tenant_cannot_change_quota_or_read_the_audit(
    cli: Invoke, applied: Path, engine: Engine, as_role: Callable[[str], Invoke]
) -> None:
    tenant = as_role("queuemgr_tenant")
    before = _quota(engine)
    for args in (
        ("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=64"),
        ("cq", "create", "rogue", "--nominal", "h100:nvidia.com/gpu=8"),
        ("cq", "stop", "team-a"),
        ("flavor", "create", "b200", "--label", "gpu=b200"),
    ):
        r = tenant(*args)
        no_traceback(r)
        assert r.exit_code == 1, (args, r.output)
        assert "permission denied" in r.output and "queuemgr_admin" in r.output, r.output
    assert _quota(engine) == before
    audit = tenant("audit")
    assert audit.exit_code == 1 and "permission denied" in audit.output


def test_an_admin_changes_quota_and_the_audit_names_its_role(
    cli: Invoke, applied: Path, engine: Engine, as_role: Callable[[str], Invoke]
) -> None:
    admin = as_role("queuemgr_admin")
    r = admin("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=64")
    assert r.exit_code == 0, r.output
    with engine.connect() as conn:
        role = conn.execute(
            sa.text("SELECT db_role FROM audit_log ORDER BY id DESC LIMIT 1")
        ).scalar_one()
    assert role.startswith("qm_admin_")


def test_every_table_is_granted_to_both_roles(engine: Engine) -> None:
    with engine.connect() as conn:
        rows = conn.execute(TABLES_GRANTED).all()
    assert len(rows) >= 13
    # Tenants read neither the audit log nor the leader's lease (migration 0011).
    private = ("audit_log", "scheduler_lease")
    missing = [
        r.relname for r in rows if not r.admin or (not r.tenant_reads and r.relname not in private)
    ]
    assert missing == []


def test_only_the_scheduler_role_may_write_the_lease(engine: Engine) -> None:
    with engine.connect() as conn:
        writers = {
            role: conn.execute(
                sa.text("SELECT has_table_privilege(:role, 'scheduler_lease', 'UPDATE')"),
                {"role": role},
            ).scalar_one()
            for role in ("queuemgr_scheduler", "queuemgr_admin", "queuemgr_tenant")
        }
    assert writers == {
        "queuemgr_scheduler": True,
        "queuemgr_admin": False,
        "queuemgr_tenant": False,
    }
