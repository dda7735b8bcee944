"""Tenant grants: which Postgres roles reach which namespaces (migration 0010).

Why it exists: row-level security and the submit and cancel functions give a
tenant role exactly the namespaces this table grants it, and nothing else
does. Admins change it here, from ``queuemgr grant`` and ``queuemgr revoke``.

What must stay true: every change is audited in the transaction that makes it
(kind ``TenantGrant``, name ``role/namespace``); granting an existing grant or
revoking a missing one writes nothing; a grant names a role that exists, so a
typo does not silently grant nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, select, text
from sqlalchemy.dialects.postgresql import insert

from queuemgr.store.audit import audit_change
from queuemgr.store.models import TenantGrantRow
from queuemgr.store.workloads import atomic

KIND = "TenantGrant"


class NoSuchRole(LookupError):
    """The grant names a role the Postgres server does not have."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Grant:
    role: str
    namespace: str
    granted_by: str
    granted_at: datetime


def role_exists(conn: Connection, role: str) -> bool:
    found = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first()
    return found is not None


def grant(conn: Connection, role: str, namespace: str, *, actor: str) -> bool:
    """Let ``role`` (and its members) read and submit to ``namespace``; False if it could."""
    if not role_exists(conn, role):
        raise NoSuchRole(f"role {role!r} does not exist on this Postgres server")
    with atomic(conn):
        added = conn.execute(
            insert(TenantGrantRow)
            .values(role_name=role, namespace=namespace, granted_by=actor)
            .on_conflict_do_nothing()
            .returning(TenantGrantRow.role_name)
        ).first()
        return added is not None and _audited(conn, role, namespace, actor=actor, added=True)


def revoke(conn: Connection, role: str, namespace: str, *, actor: str) -> bool:
    """Take ``namespace`` from ``role``; False if it had no such grant.

    Its workloads there keep running and queued: revoking reach is not cancelling.
    """
    with atomic(conn):
        gone = conn.execute(
            delete(TenantGrantRow)
            .where(TenantGrantRow.role_name == role, TenantGrantRow.namespace == namespace)
            .returning(TenantGrantRow.role_name)
        ).first()
        return gone is not None and _audited(conn, role, namespace, actor=actor, added=False)


def _audited(conn: Connection, role: str, namespace: str, *, actor: str, added: bool) -> bool:
    doc = {"role": role, "namespace": namespace}
    before, after = (None, doc) if added else (doc, None)
    return audit_change(  # a grant changes no decision: the scheduler sleeps on
        conn,
        actor=actor,
        kind=KIND,
        name=f"{role}/{namespace}",
        before=before,
        after=after,
        wakes=False,
    )


def grants(conn: Connection, role: str | None = None) -> Sequence[Grant]:
    """The grants (a tenant sees only its own roles'), by role then namespace."""
    query = select(TenantGrantRow).order_by(TenantGrantRow.role_name, TenantGrantRow.namespace)
    if role is not None:
        query = query.where(TenantGrantRow.role_name == role)
    return [
        Grant(
            role=r.role_name,
            namespace=r.namespace,
            granted_by=r.granted_by,
            granted_at=r.granted_at,
        )
        for r in conn.execute(query)
    ]
