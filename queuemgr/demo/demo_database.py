"""The demo's own database: where ``queuemgr demo`` writes, and the promise that it is empty.

Why it exists: the demo must never mix its burst with real data, and must leave
what it wrote for the CLI to explore afterwards. :func:`prepare_database`
chooses the database, checks or recreates it and migrates it; the run itself
(:mod:`queuemgr.demo.run`) only receives the resulting :class:`DemoDatabase`.

Which database:

- ``QUEUEMGR_DATABASE_URL`` when set: it must be a clean slate (no tables but
  an empty queuemgr schema), else :class:`DemoError` and nothing is written;
- else an embedded Postgres in its own data directory, ``<data dir>/demo``
  (``QUEUEMGR_DATA_DIR`` moves the data dir), whose ``postgres`` database is
  dropped and recreated at every start. The user's own embedded database is
  never touched, and after the demo ``QUEUEMGR_DATA_DIR=<data dir>/demo
  queuemgr ...`` explores it: the CLI starts that server again by itself.

Either way the demo migrates the database itself (``alembic upgrade head``),
the one command that does.

What must stay true: a database named by the user is only ever migrated when
it was empty, and only the demo server's own database is ever dropped; URLs in
messages have their password hidden.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from queuemgr.store import migrate
from queuemgr.store.database import (
    DATA_DIR_ENV,
    URL_ENV,
    data_dir,
    database_name,
    normalize_url,
    recreate_database,
    redact_url,
    resolve_url,
)
from queuemgr.store.handle import Database
from queuemgr.store.readouts import occupancy

DEMO_DIR = "demo"  # under the embedded Postgres's data directory


class DemoError(RuntimeError):
    """The demo cannot run as asked; the message is for the user."""


@dataclass(frozen=True, kw_only=True)
class DemoDatabase:
    url: str
    # How the CLI finds this database: (variable, value); None when the user's own
    # QUEUEMGR_DATABASE_URL already points at it.
    explore: tuple[str, str] | None
    description: str


def prepare_database(env: Mapping[str, str] | None = None) -> DemoDatabase:
    """A migrated, empty database for the demo (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get(URL_ENV):
        url = normalize_url(env[URL_ENV])
        db = Database.open(url)
        try:
            db.check()
            with db.read() as conn:
                held = occupancy(conn)
        finally:
            db.dispose()
        if not held.empty:
            what = []
            if held.tables_with_rows:
                what.append(f"queuemgr rows in {', '.join(held.tables_with_rows)}")
            if held.foreign_tables:
                what.append(f"other tables: {', '.join(held.foreign_tables)}")
            raise DemoError(
                f"{URL_ENV}: database {database_name(url)!r} is not empty "
                f"({'; '.join(what)}); the demo writes only to an empty database, so it never "
                f"mixes with real data: point {URL_ENV} at a new database, or unset it to use "
                f"the embedded Postgres's demo directory"
            )
        migrate.upgrade(url)
        return DemoDatabase(url=url, explore=None, description=redact_url(url))
    directory = data_dir(env) / DEMO_DIR
    url = resolve_url({DATA_DIR_ENV: str(directory)})  # starts the server, as the CLI will
    _recreate(url)
    migrate.upgrade(url)
    return DemoDatabase(
        url=url,
        explore=(DATA_DIR_ENV, str(directory)),
        description=f"embedded Postgres in {directory} (recreated for this run)",
    )


def _recreate(url: str) -> None:
    """Drop and recreate ``url``'s database (the demo server's own), from template1."""
    if database_name(url) is None:
        raise DemoError(f"the demo database URL names no database: {redact_url(url)}")
    recreate_database(url)
