"""Cohorts in the store: the tree of who lends to whom, and each cohort's own quota.

Why it exists: a cohort row names its parent (``cohorts.parent``) and its own quota
lives in ``cohort_quotas``; writing both, audited, and never leaving a tree the
scheduler cannot use is this module's job (store.config_objects writes the rest).

What must stay true: the stored parents always form a forest. A write that would
make a cycle, or name a parent that does not exist, is refused with
``CohortTreeError`` naming the path, before anything is written; concurrent writers
of parents are serialised (a table lock), so two admins cannot close a cycle
between them. An upsert that changes nothing writes nothing; the audit row holds
the cohort's whole JSON (``codec.cohort_json``), its quota included.
"""

from __future__ import annotations

from fractions import Fraction

from sqlalchemy import Connection, delete, insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert

from queuemgr.core.cohort_tree import CohortTreeError, tree_error
from queuemgr.core.model import Cohort, CohortName, FlavorQuota
from queuemgr.store import codec
from queuemgr.store.audit import Json, audit_change, locked_one, rows
from queuemgr.store.models import CohortQuota, CohortRow
from queuemgr.store.workloads import atomic

__all__ = ["CohortTreeError", "ensure_cohort", "load_cohorts", "upsert_cohort"]


def _stored_json(conn: Connection, name: str) -> Json | None:
    """The stored cohort as ``codec.cohort_json`` writes it; its row is locked."""
    row = locked_one(conn, select(CohortRow.__table__).where(CohortRow.name == name))
    if row is None:
        return None
    quotas = rows(
        conn,
        select(CohortQuota.__table__)
        .where(CohortQuota.cohort == name)
        .order_by(CohortQuota.position),
    )
    flavors = [{k: q[k] for k in codec.QUOTA_FIELDS} for q in quotas]
    return {**dict(row), "flavors": flavors}


def _check_tree(conn: Connection, c: Cohort) -> None:
    """Refuse ``c`` if, with its parent, the stored cohorts would not form a forest."""
    if c.parent is None:
        return  # a root closes no cycle, and names no parent
    conn.execute(text("LOCK TABLE cohorts IN SHARE ROW EXCLUSIVE MODE"))
    parents: dict[CohortName, CohortName | None] = {
        CohortName(r["name"]): r["parent"]
        for r in conn.execute(select(CohortRow.name, CohortRow.parent)).mappings()
    }
    parents[c.name] = c.parent
    problem = tree_error(parents)
    if problem is not None:
        raise CohortTreeError(problem)


def upsert_cohort(conn: Connection, c: Cohort, *, actor: str) -> bool:
    """Create or update a cohort and its own quota; True (and an audit row) when
    something changed. Refused (``CohortTreeError``) if its parent would make a cycle
    or does not exist."""
    after = codec.cohort_json(c)
    with atomic(conn):
        _check_tree(conn, c)
        before = _stored_json(conn, c.name)
        if before == after:
            return False
        row = {k: v for k, v in after.items() if k != "flavors"}
        settings = {k: v for k, v in row.items() if k != "name"}
        conn.execute(
            pg_insert(CohortRow)
            .values(row)
            .on_conflict_do_update(index_elements=[CohortRow.name], set_=settings)
        )
        conn.execute(delete(CohortQuota).where(CohortQuota.cohort == c.name))
        if after["flavors"]:
            conn.execute(
                insert(CohortQuota),
                [{"cohort": c.name, "position": i, **q} for i, q in enumerate(after["flavors"])],
            )
        return audit_change(
            conn, actor=actor, kind="Cohort", name=c.name, before=before, after=after
        )


def ensure_cohort(conn: Connection, name: str, *, actor: str) -> bool:
    """Create a cohort with default settings when missing; an existing one keeps its own."""
    with atomic(conn):
        created = conn.execute(
            pg_insert(CohortRow)
            .values(name=name)
            .on_conflict_do_nothing(index_elements=[CohortRow.name])
            .returning(CohortRow.name)
        ).first()
        if created is None:
            return False
        after = codec.cohort_json(Cohort(name=CohortName(name)))
        return audit_change(conn, actor=actor, kind="Cohort", name=name, before=None, after=after)


def load_cohorts(conn: Connection) -> list[Cohort]:
    """Every stored cohort as the core's ``Cohort``, its own quota in position order."""
    quotas: dict[str, list[FlavorQuota]] = {}
    for q in rows(
        conn, select(CohortQuota.__table__).order_by(CohortQuota.cohort, CohortQuota.position)
    ):
        quotas.setdefault(q["cohort"], []).append(codec.quota_of(q))
    return [
        Cohort(
            name=CohortName(c["name"]),
            fair_sharing=c["fair_sharing"],
            ordering=codec.ordering_of(c["ordering"]),
            parent=None if c["parent"] is None else CohortName(c["parent"]),
            flavors=tuple(quotas.get(c["name"], ())),
            weight=Fraction(c["weight"]),
        )
        for c in rows(conn, select(CohortRow.__table__).order_by(CohortRow.name))
    ]
