"""A tenant's read of the whole queue, for ``why``: every live workload, others' as tokens.

Why it exists: row-level security (migration 0010) shows a tenant only its own
namespaces, and a scheduling cycle evaluated on that alone gives a position,
ETA and "fits now" that leave out everyone else. Migration 0012's views, in
schema :data:`SCHEMA` and named like the tables they stand for, show a tenant
every live workload with another namespace's names replaced by keyed tokens.

What must stay true: a read switched with :func:`read_as_tenant` runs the very
queries the scheduler runs (``load_state``), resolved to the views by the
search path of that one transaction (``SET LOCAL``), so it never outlives the
read; only a session that row security actually filters is switched
(:func:`rows_are_filtered`): admins, the scheduler, the owner and superusers
read the tables.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

SCHEMA = "queuemgr_tenant_view"

# Row security filters a session that is neither exempt from it (owner, superuser,
# BYPASSRLS) nor staff, whose policy shows every row.
_FILTERED = text("SELECT row_security_active('public.workloads') AND NOT public.queuemgr_staff()")
_SWITCH = text(f"SET LOCAL search_path = {SCHEMA}, public")


def rows_are_filtered(conn: Connection) -> bool:
    """Whether this session sees only the namespaces granted to it (a tenant's)."""
    return bool(conn.execute(_FILTERED).scalar_one())


def read_as_tenant(conn: Connection) -> None:
    """Make the rest of this transaction read the tenant views instead of the tables."""
    if not conn.in_transaction():
        raise RuntimeError("read_as_tenant needs a transaction: SET LOCAL would not hold")
    conn.execute(_SWITCH)
