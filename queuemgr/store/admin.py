"""Admin deletes (with audit rows) and the read queries of the command line.

Why it exists: ``config`` upserts objects; the CLI also deletes them
(``--prune``, ``cq delete``), records a quota-lowering policy, and reads
workloads and the audit log. Those live here so ``config`` stays about the
cycle's view of the configuration.

What must stay true: a delete writes its ``audit_log`` row (the object's JSON
before, ``after`` NULL) in the same transaction as the delete; deleting
something still referenced (a flavor with quotas, a cohort with members or
child cohorts) raises :class:`ObjectInUse` before anything is written; every
value reaches SQL as a bound parameter, never through string formatting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, literal_column, select

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.store import codec
from queuemgr.store.audit import audit_change, locked_one
from queuemgr.store.config_objects import _cluster_queue_json, _flavor_of
from queuemgr.store.models import (
    AuditLogRow,
    ClusterQueueQuota,
    ClusterQueueRow,
    CohortQuota,
    CohortRow,
    Flavor,
    LocalQueueRow,
    PlacementRow,
    PodSetRow,
    WorkloadRow,
)
from queuemgr.store.status_board import class_word
from queuemgr.store.workloads import atomic

Json = dict[str, Any]


class ObjectInUse(RuntimeError):
    """The object is still referenced; the message says by what."""


def delete_flavor(conn: Connection, name: str, *, actor: str) -> bool:
    with atomic(conn):
        users = (
            conn.execute(
                select(ClusterQueueQuota.cluster_queue).where(ClusterQueueQuota.flavor == name)
            )
            .scalars()
            .all()
        )
        if users:
            raise ObjectInUse(
                f"flavor {name!r} still has quota in cluster queues: {', '.join(sorted(users))}"
            )
        holders = (
            conn.execute(select(CohortQuota.cohort).where(CohortQuota.flavor == name))
            .scalars()
            .all()
        )
        if holders:
            raise ObjectInUse(
                f"flavor {name!r} still has quota in cohorts: {', '.join(sorted(holders))}"
            )
        old = locked_one(conn, select(Flavor.__table__).where(Flavor.name == name))
        if old is None:
            return False
        conn.execute(delete(Flavor).where(Flavor.name == name))
        before = codec.flavor_json(_flavor_of(old))
        return audit_change(
            conn, actor=actor, kind="ResourceFlavor", name=name, before=before, after=None
        )


def delete_cohort(conn: Connection, name: str, *, actor: str) -> bool:
    with atomic(conn):
        members = (
            conn.execute(select(ClusterQueueRow.name).where(ClusterQueueRow.cohort == name))
            .scalars()
            .all()
        )
        if members:
            raise ObjectInUse(
                f"cohort {name!r} still has member cluster queues: {', '.join(sorted(members))}"
            )
        children = (
            conn.execute(select(CohortRow.name).where(CohortRow.parent == name)).scalars().all()
        )
        if children:
            raise ObjectInUse(
                f"cohort {name!r} still has child cohorts: {', '.join(sorted(children))}"
            )
        gone = conn.execute(
            delete(CohortRow).where(CohortRow.name == name).returning(CohortRow.name)
        ).first()
        if gone is None:
            return False
        return audit_change(
            conn, actor=actor, kind="Cohort", name=name, before={"name": name}, after=None
        )


def delete_cluster_queue(conn: Connection, name: str, *, actor: str) -> bool:
    """Delete a ClusterQueue (its quotas cascade); refused while it has admitted workloads."""
    with atomic(conn):
        before = _cluster_queue_json(conn, name)  # locks the row
        if before is None:
            return False
        running = admitted_names(conn, name)
        if running:
            shown = ", ".join(running[:5]) + (" ..." if len(running) > 5 else "")
            raise ObjectInUse(
                f"cluster queue {name!r} still has {len(running)} admitted workloads ({shown}); "
                "stop it and let them finish, or cancel them, first"
            )
        conn.execute(delete(ClusterQueueRow).where(ClusterQueueRow.name == name))
        return audit_change(
            conn, actor=actor, kind="ClusterQueue", name=name, before=before, after=None
        )


def delete_local_queue(conn: Connection, namespace: str, name: str, *, actor: str) -> bool:
    with atomic(conn):
        old = (
            conn.execute(
                delete(LocalQueueRow)
                .where(LocalQueueRow.namespace == namespace, LocalQueueRow.name == name)
                .returning(LocalQueueRow.__table__)
            )
            .mappings()
            .first()
        )
        if old is None:
            return False
        return audit_change(
            conn,
            actor=actor,
            kind="LocalQueue",
            name=f"{namespace}/{name}",
            before=dict(old),
            after=None,
        )


def record(conn: Connection, *, actor: str, action: str, kind: str, name: str, after: Json) -> None:
    """An audit row that is not an object's before/after, e.g. a quota-lowering policy."""
    conn.execute(
        insert(AuditLogRow).values(
            actor=actor, action=action, object_kind=kind, object_name=name, before=None, after=after
        )
    )


def admitted_names(conn: Connection, cluster_queue: str) -> list[str]:
    rows = conn.execute(
        select(WorkloadRow.namespace, WorkloadRow.name)
        .where(
            WorkloadRow.cluster_queue == cluster_queue,
            WorkloadRow.state == WorkloadState.ADMITTED,
        )
        .order_by(WorkloadRow.admitted_at, WorkloadRow.id)
    )
    return [f"{r.namespace}/{r.name}" for r in rows]


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    id: int
    at: datetime
    db_role: str
    actor: str
    action: str
    kind: str
    name: str
    before: Json | None
    after: Json | None


def audit_entries(
    conn: Connection,
    *,
    since: datetime | None = None,
    kind: str | None = None,
    name: str | None = None,
    limit: int = 200,
) -> list[AuditEntry]:
    """Newest first; filtered by time and object (served by ``ix_audit_log_object``)."""
    q = select(AuditLogRow.__table__).order_by(AuditLogRow.at.desc(), AuditLogRow.id.desc())
    if since is not None:
        q = q.where(AuditLogRow.at >= since)
    if kind is not None:
        q = q.where(AuditLogRow.object_kind == kind)
    if name is not None:
        q = q.where(AuditLogRow.object_name == name)
    return [
        AuditEntry(
            id=r["id"],
            at=r["at"],
            db_role=r["db_role"],
            actor=r["actor"],
            action=r["action"],
            kind=r["object_kind"],
            name=r["object_name"],
            before=r["before"],
            after=r["after"],
        )
        for r in conn.execute(q.limit(limit)).mappings()
    ]


@dataclass(frozen=True, kw_only=True)
class WorkloadInfo:
    """A workload row as the CLI shows it, whatever its state."""

    row: Json
    pod_sets: list[Json]
    placements: list[Json]


def _words() -> list[Any]:
    """A workload's reason and message as readers show them: its class's, from the status
    board, when the leader keeps them there, else its own (``status_board.class_word``)."""
    table = WorkloadRow.__tablename__
    return [literal_column(class_word(c, table)).label(c) for c in ("reason", "message")]


def workload_infos(
    conn: Connection,
    *,
    namespace: str | None = None,
    name: str | None = None,
    queue: str | None = None,
    include_finished: bool = False,
) -> list[WorkloadInfo]:
    own = [col for col in WorkloadRow.__table__.c if col.name not in ("reason", "message")]
    q = select(*own, *_words()).order_by(WorkloadRow.namespace, WorkloadRow.created_at)
    if namespace is not None:
        q = q.where(WorkloadRow.namespace == namespace)
    if name is not None:
        q = q.where(WorkloadRow.name == name)
    if queue is not None:
        q = q.where(WorkloadRow.local_queue == queue)
    if not include_finished:
        q = q.where(WorkloadRow.state != WorkloadState.FINISHED)
    rows = [dict(r) for r in conn.execute(q).mappings()]
    ids = [r["id"] for r in rows]
    pod_sets: dict[int, list[Json]] = {}
    placements: dict[int, list[Json]] = {}
    if ids:
        for ps in conn.execute(
            select(PodSetRow.__table__)
            .where(PodSetRow.workload_id.in_(ids))
            .order_by(PodSetRow.workload_id, PodSetRow.position)
        ).mappings():
            pod_sets.setdefault(ps["workload_id"], []).append(dict(ps))
        for p in conn.execute(
            select(PlacementRow.__table__)
            .where(PlacementRow.workload_id.in_(ids))
            .order_by(PlacementRow.workload_id, PlacementRow.pod_set, PlacementRow.node)
        ).mappings():
            placements.setdefault(p["workload_id"], []).append(dict(p))
    return [
        WorkloadInfo(
            row=r, pod_sets=pod_sets.get(r["id"], []), placements=placements.get(r["id"], [])
        )
        for r in rows
    ]


def local_queue_names(conn: Connection, namespace: str | None = None) -> Sequence[tuple[str, str]]:
    q = select(LocalQueueRow.namespace, LocalQueueRow.name)
    if namespace is not None:
        q = q.where(LocalQueueRow.namespace == namespace)
    return [(r.namespace, r.name) for r in conn.execute(q)]
