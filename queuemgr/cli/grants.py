"""``queuemgr grant|revoke ROLE NAMESPACE`` and ``queuemgr grants``: who reaches which namespace.

Why it exists: with tenants connecting to Postgres themselves, row-level
security gives each tenant role only the namespaces granted to it (migration
0010). Admins manage those grants here; each change is audited.

What must stay true: the arguments are checked before the database is touched
(a role name is a Postgres identifier of at most 63 bytes, a namespace an RFC
1123 label; exit 2 naming the argument); a role that does not exist is an
error (exit 1), not a grant that reaches no one.
"""

from __future__ import annotations

from typing import Any

import click

from queuemgr.cli import flags
from queuemgr.cli.common import database
from queuemgr.cli.errors import BadInput, CliError, handled
from queuemgr.cli.output import emit, output_option, print_table
from queuemgr.store import grants as store
from queuemgr.store.audit import os_actor

ROLE_MAX_BYTES = 63  # Postgres NAMEDATALEN - 1


def _role(raw: str) -> str:
    if not raw or len(raw.encode()) > ROLE_MAX_BYTES or not raw.isprintable():
        shown = raw[:80].encode("unicode_escape").decode()
        raise BadInput(
            f"ROLE: expected a Postgres role name of 1 to {ROLE_MAX_BYTES} printable bytes, "
            f"got {shown!r}"
        )
    return raw


@click.command("grant")
@click.argument("role")
@click.argument("namespace")
@handled
def grant(role: str, namespace: str) -> None:
    """Let database ROLE (and its members) read and submit to NAMESPACE."""
    role, ns = _role(role), flags.check_name(namespace, "NAMESPACE")
    with database() as db, db.write() as conn:
        try:
            added = store.grant(conn, role, ns, actor=os_actor())
        except store.NoSuchRole as exc:
            raise CliError(
                f"{exc}; create it first (CREATE ROLE ... IN ROLE queuemgr_tenant)"
            ) from None
    click.echo(f"role {role} {'granted' if added else 'already had'} namespace {ns}")


@click.command("revoke")
@click.argument("role")
@click.argument("namespace")
@handled
def revoke(role: str, namespace: str) -> None:
    """Take NAMESPACE from database ROLE; its workloads there keep running."""
    role, ns = _role(role), flags.check_name(namespace, "NAMESPACE")
    with database() as db, db.write() as conn:
        if not store.revoke(conn, role, ns, actor=os_actor()):
            raise CliError(f"role {role} has no grant of namespace {ns}")
    click.echo(f"role {role} no longer reaches namespace {ns}")


@click.command("grants")
@click.option("--role", default=None, help="Only this role's grants.")
@output_option
@handled
def grants(role: str | None, output: str) -> None:
    """The namespaces each tenant role reaches (a tenant sees its own)."""
    if role is not None:
        role = _role(role)
    with database() as db, db.read() as conn:
        rows = store.grants(conn, role)
    docs = [
        {
            "role": g.role,
            "namespace": g.namespace,
            "granted_by": g.granted_by,
            "granted_at": g.granted_at.isoformat(),
        }
        for g in rows
    ]
    emit({"grants": docs}, output, _table)


def _table(doc: dict[str, Any]) -> None:
    rows = [(d["role"], d["namespace"], d["granted_by"], d["granted_at"]) for d in doc["grants"]]
    print_table(None, ("ROLE", "NAMESPACE", "GRANTED BY", "GRANTED AT"), rows)
