"""The handle on a database that everything above the store holds: transactions, not engines.

Why it exists: SQLAlchemy and psycopg belong to ``queuemgr.store``. The CLI,
the demo, the service and the controller hold a :class:`Database` and ask it
for a transaction, pass what it yields (a :data:`Tx`) straight to the store's
functions, and catch the store's errors (:mod:`queuemgr.store.errors`), never
the driver's. They never see an engine, a connection's methods or an
isolation level.

What must stay true:

- :meth:`Database.write` is ONE transaction: committed when the block ends,
  rolled back when it raises; :meth:`Database.read` is one transaction too,
  always rolled back, so nothing a reader runs is kept; :meth:`Database.snapshot`
  is a REPEATABLE READ transaction, for reads that must agree with each other;
- a SQLAlchemy or psycopg error leaving any of them, or a :class:`Session`, is
  a :class:`~queuemgr.store.errors.StoreError` with the original as its cause,
  whether raised by a statement of the block or by the commit at its end;
- a :class:`Session` keeps one connection (one server backend) across calls,
  in autocommit, for what is tied to a backend: the leader's lease is held
  for it. It is never returned to the pool, which would hand the backend, and
  the lease, to another caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeAlias

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from queuemgr.store.database import check_connection, create_engine
from queuemgr.store.errors import translated

Tx: TypeAlias = Connection
"""What :class:`Database` yields; the store's functions run their SQL on it.

Outside the store it is opaque: pass it on, never call its methods."""


class Database:
    """One database, through a pool of connections (the engine, which the store keeps)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine  # the store's own; callers use write/read/snapshot/session

    @classmethod
    def open(cls, url: str) -> Database:
        """A handle on ``url`` (any spelling of a Postgres URL); it connects when first used."""
        return cls(create_engine(url))

    @property
    def url(self) -> str:
        """The URL, with its password hidden (for messages)."""
        return self.engine.url.render_as_string(hide_password=True)

    def check(self) -> None:
        """Connect once; :class:`~queuemgr.store.database.DatabaseError` naming the URL if not."""
        check_connection(self.engine)

    @contextmanager
    def write(self) -> Iterator[Tx]:
        """One transaction, committed at the end of the block (rolled back if it raises)."""
        with translated(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """One transaction for reading, rolled back at the end of the block whatever happened."""
        with translated(), self.engine.connect() as conn:
            conn.begin()  # closing the connection rolls it back
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """One REPEATABLE READ transaction: every read of the block sees the same moment."""
        with translated():
            connection = self.engine.connect().execution_options(isolation_level="REPEATABLE READ")
            with connection as conn, conn.begin():
                yield conn

    def session(self) -> Session:
        """A connection of its own, kept open until :meth:`Session.close` (see :class:`Session`)."""
        return Session(self.engine)

    def dispose(self) -> None:
        """Close every pooled connection (the handle stays usable: it reconnects on demand)."""
        self.engine.dispose()


class Session:
    """One server backend held across calls, in autocommit (each statement commits alone)."""

    def __init__(self, engine: Engine) -> None:
        with translated():
            self._conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def use(self) -> Iterator[Tx]:
        """The held connection, for a few store calls; their errors leave as StoreError."""
        with translated():
            yield self._conn

    def close(self) -> None:
        """Drop the connection, never back to the pool; a broken one is dropped quietly."""
        with contextlib.suppress(SQLAlchemyError):
            self._conn.invalidate()
            self._conn.close()
