"""The store's errors: what a caller outside the store catches when the database fails.

Why it exists: SQLAlchemy and psycopg are imported by ``queuemgr.store`` alone,
so their exceptions must not leave it either. Every way out of the store that
runs SQL for a caller (:class:`~queuemgr.store.handle.Database`'s ``write``,
``read`` and ``snapshot``, a held :class:`~queuemgr.store.handle.Session`,
:func:`~queuemgr.store.notify.listen`) turns a driver's exception into a
:class:`StoreError` on its way out, through :func:`translated`.

What must stay true:

- the original exception is the ``__cause__`` (``--debug`` and the logs keep it);
- ``str(error)`` is the original's message, so log lines and ``/readyz`` read as
  they did; ``reason`` is the first line of the server's own message (what the
  CLI prints after ``database error:``); ``kind`` is the original's class name
  (``OperationalError``, ``IntegrityError``, ...);
- a subclass exists for each failure a caller tells apart: a role without the
  privilege (:class:`PermissionDenied`), a value the server refused
  (:class:`InvalidValue`), a database without queuemgr's tables
  or with an older queuemgr's (:class:`SchemaMissing`). Anything else is a plain
  :class:`StoreError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.exc import SQLAlchemyError


class StoreError(RuntimeError):
    """The database failed (or refused) what the store was asked to do."""

    def __init__(self, message: str, *, reason: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.kind = kind or type(self).__name__
        lines = (message if reason is None else reason).strip().splitlines()
        self.reason = lines[0] if lines else self.kind


class PermissionDenied(StoreError):
    """The connection's role may not do this (a missing grant, row security, a namespace)."""


class InvalidValue(StoreError):
    """The server refused a value (the checks of the ``queuemgr_submit`` function)."""


class SchemaMissing(StoreError):
    """A table or column queuemgr needs is missing: the database was never upgraded, or
    not since this queuemgr added it."""


# The server's SQLSTATE classes a caller distinguishes, by psycopg's exception class.
_SPECIFIC: tuple[tuple[type[psycopg.Error], type[StoreError]], ...] = (
    (psycopg.errors.InsufficientPrivilege, PermissionDenied),
    (psycopg.errors.InvalidParameterValue, InvalidValue),
    (psycopg.errors.UndefinedTable, SchemaMissing),
    (psycopg.errors.UndefinedColumn, SchemaMissing),
)


def translate(error: SQLAlchemyError | psycopg.Error) -> StoreError:
    """The store's error for a driver's ``error`` (the caller raises it ``from error``)."""
    driver = getattr(error, "orig", None) if isinstance(error, SQLAlchemyError) else error
    cls = next((ours for theirs, ours in _SPECIFIC if isinstance(driver, theirs)), StoreError)
    return cls(str(error), reason=str(driver or error), kind=type(error).__name__)


@contextmanager
def translated() -> Iterator[None]:
    """Inside this block, a SQLAlchemy or psycopg error leaves as a :class:`StoreError`."""
    try:
        yield
    except (SQLAlchemyError, psycopg.Error) as error:
        raise translate(error) from error
