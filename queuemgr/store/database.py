"""Which database queuemgr talks to, and the engine it talks through.

Why it exists: one rule decides the database for the CLI, the service and the
tools: ``QUEUEMGR_DATABASE_URL`` when set (any Postgres 14 or newer), else the
embedded Postgres whose data lives under the user's data directory
(``platformdirs.user_data_dir("queuemgr")``), reused across runs.

What must stay true: every engine speaks psycopg 3 (``postgresql+psycopg``),
whatever spelling of the URL the user gave; a URL that cannot be used raises
:class:`DatabaseError` with a message fit for the user, never a bare driver
exception (:class:`DatabaseError` is a
:class:`~queuemgr.store.errors.StoreError`, like every database failure the
store reports). Engines are made here, for :class:`queuemgr.store.handle.Database`;
a URL shown to the user has its password hidden (:func:`redact_url`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError

from queuemgr.store.embedded import EmbeddedPostgresError, embedded_url
from queuemgr.store.errors import StoreError, translated

URL_ENV = "QUEUEMGR_DATABASE_URL"
DATA_DIR_ENV = "QUEUEMGR_DATA_DIR"


class DatabaseError(StoreError):
    """The database cannot be reached or used; the message is for the user."""


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the embedded Postgres keeps its data (``QUEUEMGR_DATA_DIR`` overrides)."""
    env = os.environ if env is None else env
    override = env.get(DATA_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir("queuemgr"))


def normalize_url(url: str) -> str:
    """The URL with the psycopg 3 driver; ``postgres://`` and ``postgresql://`` both work."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise DatabaseError(f"bad database URL {redact_url(url)!r}") from None
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    else:
        raise DatabaseError(
            f"unsupported database URL {redact_url(url)!r}: "
            "queuemgr needs Postgres (postgresql://...)"
        )
    return parsed.render_as_string(hide_password=False)


def redact_url(url: str) -> str:
    """``url`` with its password hidden, fit for a message."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable>"


def resolve_url(env: Mapping[str, str] | None = None) -> str:
    """``QUEUEMGR_DATABASE_URL``, or the embedded server's URL (starting it if needed)."""
    env = os.environ if env is None else env
    url = env.get(URL_ENV)
    if url:
        return normalize_url(url)
    try:
        return embedded_url(data_dir(env))
    except EmbeddedPostgresError as exc:
        raise DatabaseError(f"cannot start the embedded Postgres: {exc}") from None


def create_engine(url: str, **kwargs: object) -> Engine:
    """An engine for ``url``; connections are checked before use (the server may restart)."""
    return sa.create_engine(normalize_url(url), pool_pre_ping=True, **kwargs)


def database_name(url: str) -> str | None:
    """The name of the database ``url`` points at (None when it names none)."""
    return make_url(url).database or None


def check_connection(engine: Engine) -> None:
    """Connect once, turning a driver error into a :class:`DatabaseError` that names the URL."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError as exc:
        url = engine.url.render_as_string(hide_password=True)
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise DatabaseError(
            f"cannot connect to {url}: {reason[0] if reason else type(exc).__name__}"
        ) from None


def recreate_database(url: str) -> None:
    """Drop ``url``'s database, ending every session on it, and create it again, empty.

    Connects to ``template1`` of the same server (a database cannot be dropped
    from inside itself). Everything in the database is lost: for the demo
    server's own database alone.
    """
    name = database_name(url)
    if name is None:
        raise DatabaseError(f"the database URL names no database: {redact_url(url)}")
    template1 = make_url(normalize_url(url)).set(database="template1")
    admin = create_engine(
        template1.render_as_string(hide_password=False), isolation_level="AUTOCOMMIT"
    )
    try:
        check_connection(admin)
        quoted = '"' + name.replace('"', '""') + '"'
        with translated(), admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"))
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
    finally:
        admin.dispose()
