"""The migrations create exactly the models, and round-trip down and up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from queuemgr.store import migrate
from queuemgr.store.database import create_engine
from queuemgr.store.models import Base

pytestmark = pytest.mark.integration


def _diff(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_server_default": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_head_yields_exactly_the_models(database_url: str) -> None:
    assert _diff(database_url) == []


def test_downgrade_base_then_upgrade_head_round_trips(database_url: str) -> None:
    migrate.downgrade(database_url, "base")
    assert _tables(database_url) == {"alembic_version"}
    migrate.upgrade(database_url, "head")
    assert _diff(database_url) == []
    assert set(Base.metadata.tables) <= _tables(database_url)


def _columns(url: str, schema: str, table: str) -> list[str]:
    engine = create_engine(url)
    try:
        return [c["name"] for c in sa.inspect(engine).get_columns(table, schema=schema)]
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "table", ["workloads", "pod_sets", "placements", "local_queues", "local_queue_usage"]
)
def test_each_tenant_view_has_its_tables_columns(database_url: str, table: str) -> None:
    """A tenant's reads run the scheduler's own queries on these views (migration 0012):
    a column added to a table and not to its view breaks a tenant's ``why``."""
    view = _columns(database_url, "queuemgr_tenant_view", table)
    assert sorted(view) == sorted(_columns(database_url, "public", table))


def test_unknown_revision_is_a_clear_error(database_url: str) -> None:
    with pytest.raises(migrate.MigrationError, match="nope"):
        migrate.upgrade(database_url, "nope")


def test_concurrent_upgrades_serialize(empty_database_url: str) -> None:
    # Replicas starting at once each run `queuemgr db upgrade`: the advisory lock in
    # migrations/env.py makes the others wait, then find nothing left to do.
    # (Processes, as in production: Alembic's command API is not thread-safe.)
    env = {**os.environ, "QUEUEMGR_DATABASE_URL": empty_database_url}
    command = [sys.executable, "-m", "queuemgr", "db", "upgrade"]
    runs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(3)
    ]
    try:
        outputs = [run.communicate(timeout=120)[0].decode() for run in runs]
    finally:
        for run in runs:  # a deadlock must not outlive the test
            run.kill()
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    assert _diff(empty_database_url) == []
