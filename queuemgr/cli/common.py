"""The database every admin and tenant command opens, and small shared parsers.

Why it exists: each command resolves the database the same way as ``serve``
and ``db`` (``QUEUEMGR_DATABASE_URL``, else the embedded Postgres) and must
release its connections before the process exits. A command holds the store's
:class:`~queuemgr.store.handle.Database` and runs its reads and writes in the
transactions it gives (``db.read()``, ``db.write()``), whose failures are the
store's errors (``cli.errors`` turns them into messages).

What must stay true: a command never migrates the schema (``queuemgr db
upgrade`` does); an unreachable database is a :class:`DatabaseError` (exit 1);
``KEY=VALUE`` arguments are validated before any database is touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import click

from queuemgr.cli.errors import BadInput
from queuemgr.core.resources import ResourceName, parse_quantity, parse_resource_name
from queuemgr.core.values import shown
from queuemgr.store.database import resolve_url
from queuemgr.store.handle import Database

NAMESPACE_ENV = "QUEUEMGR_NAMESPACE"


@contextmanager
def database() -> Iterator[Database]:
    """The command's database, connected once up front and released at the end."""
    db = Database.open(resolve_url())
    try:
        db.check()  # one clear "cannot connect to <url>" instead of a driver error
        yield db
    finally:
        db.dispose()


namespace_option = click.option(
    "-n", "--namespace", default=None, help="Namespace (default: $QUEUEMGR_NAMESPACE or 'default')."
)


def default_namespace(ns: str | None) -> str:
    return ns or os.environ.get(NAMESPACE_ENV) or "default"


def key_values(items: tuple[str, ...], arg: str) -> dict[str, str]:
    """``k=v`` pairs; an item without ``=`` or with an empty key is named in the error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"{arg}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def quantities(items: tuple[str, ...], arg: str) -> dict[ResourceName, int]:
    """``resource=quantity`` pairs in canonical units; errors name ``arg`` and the resource."""
    out: dict[ResourceName, int] = {}
    for key, value in key_values(items, arg).items():
        field = f"{arg} {key if len(key) <= 253 else shown(key)}"  # a resource name is <= 253
        name = parse_resource_name(key, field=field)
        out[name] = parse_quantity(value, resource=name, field=field)
    return out
