"""The audit trail of admin-owned objects, and the row helpers their writers share.

Why it exists: quota changes are what tenants argue about, so every change of a
flavor, cohort, queue or node is written together with an ``audit_log`` row (who,
what before and after, when) in the same transaction as the change; the writers of
each kind of object (store.config_objects, store.cohorts, store.admin) share this.

What must stay true: a change that changes nothing writes no row and wakes nobody;
a row read to compute "before" is locked (``locked_one``) so two concurrent admins
produce two consistent audit rows.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, Select, insert, text

from queuemgr.store.models import AuditLogRow
from queuemgr.store.notify import notify

Json = dict[str, Any]


def os_actor() -> str:
    """The default actor: the operating-system user running this process."""
    try:
        return f"os:{getpass.getuser()}"
    except (KeyError, OSError):
        return "os:unknown"


def audit_change(
    conn: Connection,
    *,
    actor: str,
    kind: str,
    name: str,
    before: Json | None,
    after: Json | None,
    wakes: bool = True,
) -> bool:
    """Record a change of an object (before and after); False, and nothing written, if none.

    Every change of what the scheduler decides on comes through here, so here is
    where it is woken (``wakes``): on commit, and only if the change commits.
    """
    if before == after:
        return False
    action = "create" if before is None else "delete" if after is None else "update"
    conn.execute(
        insert(AuditLogRow).values(
            actor=actor,
            action=action,
            object_kind=kind,
            object_name=name,
            before=before,
            after=after,
        )
    )
    if wakes:
        notify(conn, "config")
    return True


def audit_changes(
    conn: Connection,
    *,
    actor: str,
    kind: str,
    changes: Sequence[tuple[str, Json | None, Json]],
) -> None:
    """:func:`audit_change` for many created or updated objects of one kind, in one
    statement: (name, before, after) each, every one a real change."""
    if not changes:
        return
    insert_rows(
        conn,
        AuditLogRow,
        [
            {
                "actor": actor,
                "action": "create" if before is None else "update",
                "object_kind": kind,
                "object_name": name,
                "before": before,
                "after": after,
            }
            for name, before, after in changes
        ],
    )
    notify(conn, "config")


def insert_rows(
    conn: Connection, table: Any, values: Sequence[Json], *, keys: Sequence[str] = ()
) -> None:
    """Insert ``values`` (JSON rows of one set of columns) into ``table`` in one statement,
    updating the rows whose ``keys`` exist when keys are given.

    The rows go as one JSON document that Postgres turns into records of the table's own
    row type (``jsonb_populate_recordset``): a multi-row VALUES of 10,000 nodes took
    SQLAlchemy 3 s to build, and a batch of 10,000 statements a second to send. Only the
    columns given are written, so the others keep their defaults.
    """
    if not values:
        return
    name = getattr(table, "__table__", table).name
    quote = conn.dialect.identifier_preparer.quote
    columns = list(values[0])
    listed = ", ".join(quote(c) for c in columns)
    sql = (
        f"INSERT INTO {quote(name)} ({listed}) SELECT {listed}"
        f" FROM jsonb_populate_recordset(NULL::{quote(name)}, CAST(:rows AS jsonb))"
    )
    if keys:
        rest = [c for c in columns if c not in keys]
        sql += f" ON CONFLICT ({', '.join(quote(k) for k in keys)}) DO " + (
            "UPDATE SET " + ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in rest)
            if rest
            else "NOTHING"
        )
    # allow_nan=False: JSON has no infinity, and no field holds one (spec.checks refuses).
    conn.execute(text(sql), {"rows": json.dumps(list(values), allow_nan=False)})


# Rows are read as mappings: a Core connection yields columns, not ORM objects.
Row = RowMapping


def rows(conn: Connection, query: Select[Any]) -> list[Row]:
    return list(conn.execute(query).mappings())


def locked_one(conn: Connection, query: Select[Any]) -> Row | None:
    return conn.execute(query.with_for_update()).mappings().first()
