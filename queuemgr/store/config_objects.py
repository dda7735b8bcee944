"""Admin-owned objects: upsert flavors, cohorts, queues and nodes; load them as a core Config.

Why it exists: quota changes are what tenants argue about, so every change is
written together with an ``audit_log`` row (who: the database role and the
OS or Kubernetes user; what: the object's JSON before and after; when), in the
same transaction as the change itself.

What must stay true: an upsert that changes nothing writes nothing (node
capacity is re-reported constantly); the row is locked (``FOR UPDATE``) while
its "before" is read, so two concurrent admins produce two consistent audit
rows, never one overwriting the other unseen; :func:`load_config` returns the
exact core objects that were upserted; a node the cluster no longer has is
deleted only once no placement names it (until then it stays, unschedulable,
so the capacity its pods hold is still accounted).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from fractions import Fraction

from sqlalchemy import Connection, delete, select, tuple_

from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    WithinClusterQueue,
)
from queuemgr.core.snapshot import Config
from queuemgr.store import codec
from queuemgr.store.audit import (
    Json,
    Row,
    audit_change,
    audit_changes,
    insert_rows,
    locked_one,
    rows,
)
from queuemgr.store.cohorts import ensure_cohort, load_cohorts
from queuemgr.store.models import (
    ClusterQueueQuota,
    ClusterQueueRow,
    Flavor,
    LocalQueueRow,
    PlacementRow,
)
from queuemgr.store.models import Node as NodeRow
from queuemgr.store.workloads import atomic


def _flavor_of(r: Row) -> ResourceFlavor:
    return ResourceFlavor(
        name=FlavorName(r["name"]),
        node_labels=dict(r["node_labels"]),
        taints=codec.taints_of(r["taints"]),
        tolerations=codec.tolerations_of(r["tolerations"]),
        autoscale=codec.autoscale_of(r["autoscale"]),
    )


def _node_of(r: Row) -> Node:
    return Node(
        name=NodeName(r["name"]),
        labels=dict(r["labels"]),
        allocatable=codec.resources(r["allocatable"]),
        taints=codec.taints_of(r["taints"]),
        schedulable=r["schedulable"],
    )


def upsert_flavor(conn: Connection, f: ResourceFlavor, *, actor: str) -> bool:
    """Create or update a flavor; True when something changed (and was audited)."""
    with atomic(conn):
        old = locked_one(conn, select(Flavor.__table__).where(Flavor.name == f.name))
        before = None if old is None else codec.flavor_json(_flavor_of(old))
        after = codec.flavor_json(f)
        return _write(conn, Flavor, "ResourceFlavor", f.name, before, after, actor=actor)


def upsert_node(conn: Connection, n: Node, *, actor: str) -> bool:
    """Create or update a node; True when something changed (and was audited)."""
    return bool(upsert_nodes(conn, [n], actor=actor))


def upsert_nodes(conn: Connection, nodes: Collection[Node], *, actor: str) -> list[str]:
    """Create or update many nodes in a few statements; the names of those that changed.

    Each change is audited as ``upsert_node`` audits it, and the scheduler is woken
    once. A cluster of 10,000 nodes was upserted node by node at every start of the
    service (a read, a savepoint and two writes each: 20 s of a 32 s start).
    """
    if not nodes:
        return []
    nodes = list({n.name: n for n in nodes}.values())  # one row may change once a statement
    with atomic(conn):
        names = [n.name for n in nodes]
        stored = {
            r["name"]: codec.node_json(_node_of(r))
            for r in rows(conn, select(NodeRow.__table__).where(NodeRow.name.in_(names)))
        }
        changes = [
            (n.name, stored.get(n.name), after)
            for n in nodes
            if (after := codec.node_json(n)) != stored.get(n.name)
        ]
        if not changes:
            return []
        insert_rows(conn, NodeRow, keys=("name",), values=[after for _, _, after in changes])
        audit_changes(conn, actor=actor, kind="Node", changes=changes)
        return [name for name, _, _ in changes]


def retire_nodes(
    conn: Connection, present: Collection[str], *, actor: str
) -> tuple[list[str], list[str]]:
    """Forget the nodes the cluster no longer has, once nothing runs on them.

    A stored node not in ``present`` is deleted (audited) when no placement
    names it; one that still holds placements stays, marked unschedulable, so
    its pods stay accounted until they end and nothing new lands there.
    Returns (deleted, kept).
    """
    deleted: list[str] = []
    kept: list[str] = []
    with atomic(conn):
        # Only the gone rows are read and locked: the others are none of this call's business.
        gone = rows(
            conn,
            select(NodeRow.__table__)
            .where(NodeRow.name.not_in(list(present)))
            .order_by(NodeRow.name)
            .with_for_update(),
        )
        if not gone:
            return deleted, kept
        occupied = set(
            conn.execute(
                select(PlacementRow.node)
                .where(PlacementRow.node.in_([r["name"] for r in gone]))
                .distinct()
            ).scalars()
        )
        for r in gone:
            name, node = r["name"], _node_of(r)
            if name in occupied:
                kept.append(name)
                if node.schedulable:
                    upsert_node(conn, replace(node, schedulable=False), actor=actor)
                continue
            conn.execute(delete(NodeRow).where(NodeRow.name == name))
            before = codec.node_json(node)
            audit_change(conn, actor=actor, kind="Node", name=name, before=before, after=None)
            deleted.append(name)
    return deleted, kept


def _write(
    conn: Connection,
    table: type[Flavor] | type[NodeRow],
    kind: str,
    name: str,
    before: Json | None,
    after: Json,
    *,
    actor: str,
) -> bool:
    """Upsert a row keyed by name when it changed, with its audit row; True if changed."""
    if before != after:
        insert_rows(conn, table, keys=("name",), values=[after])
    return audit_change(conn, actor=actor, kind=kind, name=name, before=before, after=after)


def _cluster_queue_json(conn: Connection, name: str) -> Json | None:
    """One stored ClusterQueue, its row locked (a "before" to audit)."""
    return _cluster_queue_jsons(conn, [name], locked=True).get(name)


def _cluster_queue_jsons(
    conn: Connection, names: Collection[str], *, locked: bool = False
) -> dict[str, Json]:
    """The stored ClusterQueues of ``names`` as ``codec.cluster_queue_json`` writes them;
    with ``locked``, their rows locked until the transaction ends (a "before" to audit)."""
    query = select(ClusterQueueRow.__table__).where(ClusterQueueRow.name.in_(names))
    found = rows(conn, query.with_for_update() if locked else query)
    out: dict[str, Json] = {r["name"]: {**dict(r), "flavors": []} for r in found}
    quotas = rows(
        conn,
        select(ClusterQueueQuota.__table__)
        .where(ClusterQueueQuota.cluster_queue.in_(names))
        .order_by(ClusterQueueQuota.cluster_queue, ClusterQueueQuota.position),
    )
    for q in quotas:
        out[q["cluster_queue"]]["flavors"].append({k: q[k] for k in codec.QUOTA_FIELDS})
    return out


def upsert_cluster_queues(
    conn: Connection, cqs: Collection[ClusterQueue], *, actor: str
) -> list[str]:
    """Create or replace the ClusterQueues that differ from what is stored, with their
    quotas, in a few statements whatever their number (one by one, 1,000 queues took 6 s
    of a service's first start), each written unstopped and audited, a cohort they name
    created first when missing. The names of those that changed."""
    return _upsert_cluster_queues(conn, cqs, actor=actor, stopped=frozenset())


def upsert_cluster_queue(
    conn: Connection, cq: ClusterQueue, *, actor: str, stopped: bool = False
) -> bool:
    """Create or replace a ClusterQueue and its quotas; creates its cohort when missing."""
    held = frozenset({cq.name}) if stopped else frozenset()
    return bool(_upsert_cluster_queues(conn, [cq], actor=actor, stopped=held))


def _upsert_cluster_queues(
    conn: Connection, cqs: Collection[ClusterQueue], *, actor: str, stopped: frozenset[str]
) -> list[str]:
    cqs = list({cq.name: cq for cq in cqs}.values())  # one row may change once a statement
    if not cqs:
        return []
    with atomic(conn):
        stored = _cluster_queue_jsons(conn, [cq.name for cq in cqs], locked=True)
        changes = [
            (cq.name, stored.get(cq.name), after)
            for cq in cqs
            if (after := codec.cluster_queue_json(cq, stopped=cq.name in stopped))
            != stored.get(cq.name)
        ]
        if not changes:
            return []
        changed = {name for name, _, _ in changes}
        for cohort in sorted({cq.cohort for cq in cqs if cq.cohort and cq.name in changed}):
            ensure_cohort(conn, cohort, actor=actor)
        values = [{k: v for k, v in after.items() if k != "flavors"} for _, _, after in changes]
        insert_rows(conn, ClusterQueueRow, keys=("name",), values=values)
        conn.execute(delete(ClusterQueueQuota).where(ClusterQueueQuota.cluster_queue.in_(changed)))
        quotas = [
            {"cluster_queue": name, "position": i, **q}
            for name, _, after in changes
            for i, q in enumerate(after["flavors"])
        ]
        insert_rows(conn, ClusterQueueQuota, quotas)
        audit_changes(conn, actor=actor, kind="ClusterQueue", changes=changes)
        return [name for name, _, _ in changes]


def upsert_local_queues(conn: Connection, lqs: Collection[LocalQueue], *, actor: str) -> int:
    """Create or update the LocalQueues that differ from what is stored, in a few
    statements, each audited; how many changed."""
    by_key = {(lq.namespace, lq.name): lq for lq in lqs}
    if not by_key:
        return 0
    with atomic(conn):
        key = tuple_(LocalQueueRow.namespace, LocalQueueRow.name)
        query = select(LocalQueueRow.__table__).where(key.in_(list(by_key)))
        stored = {(r["namespace"], r["name"]): dict(r) for r in rows(conn, query.with_for_update())}
        changes = [
            (f"{ns}/{name}", stored.get((ns, name)), after)
            for (ns, name), lq in by_key.items()
            if (after := codec.local_queue_json(lq)) != stored.get((ns, name))
        ]
        if not changes:
            return 0
        values = [after for _, _, after in changes]
        insert_rows(conn, LocalQueueRow, keys=("namespace", "name"), values=values)
        audit_changes(conn, actor=actor, kind="LocalQueue", changes=changes)
        return len(changes)


def upsert_local_queue(conn: Connection, lq: LocalQueue, *, actor: str) -> bool:
    return upsert_local_queues(conn, [lq], actor=actor) == 1


def load_config(conn: Connection) -> tuple[Config, frozenset[ClusterQueueName]]:
    """The core Config, and the names of the stopped ClusterQueues.

    A stopped ClusterQueue stays in the Config, so its admitted workloads keep
    holding their quota; the caller withholds its pending workloads.
    """
    quotas: dict[str, list[FlavorQuota]] = {}
    for q in rows(
        conn,
        select(ClusterQueueQuota.__table__).order_by(
            ClusterQueueQuota.cluster_queue, ClusterQueueQuota.position
        ),
    ):
        quotas.setdefault(q["cluster_queue"], []).append(codec.quota_of(q))
    cqs: list[ClusterQueue] = []
    stopped: set[ClusterQueueName] = set()
    for r in rows(conn, select(ClusterQueueRow.__table__).order_by(ClusterQueueRow.name)):
        name = ClusterQueueName(r["name"])
        cqs.append(
            ClusterQueue(
                name=name,
                flavors=tuple(quotas.get(name, ())),
                cohort=None if r["cohort"] is None else CohortName(r["cohort"]),
                weight=Fraction(r["weight"]),
                queueing_strategy=QueueingStrategy(r["queueing_strategy"]),
                namespaces=None if r["namespaces"] is None else frozenset(r["namespaces"]),
                preemption=PreemptionPolicy(
                    within_cluster_queue=WithinClusterQueue(r["within_cluster_queue"]),
                    reclaim_within_cohort=ReclaimWithinCohort(r["reclaim_within_cohort"]),
                    min_runtime=r["preemption_min_runtime"],
                ),
                ordering=codec.ordering_of(r["ordering"]),
                borrowing_max_runtime=r["borrowing_max_runtime"],
                resource_weights=codec.resource_weights_of(r["resource_weights"]),
                admission_checks=tuple(r["admission_checks"]),
            )
        )
        if r["stopped"]:
            stopped.add(name)
    config = Config.of(
        flavors=[_flavor_of(f) for f in rows(conn, select(Flavor.__table__))],
        cohorts=load_cohorts(conn),
        cluster_queues=cqs,
        local_queues=[
            LocalQueue(
                namespace=lq["namespace"],
                name=lq["name"],
                cluster_queue=ClusterQueueName(lq["cluster_queue"]),
            )
            for lq in rows(conn, select(LocalQueueRow.__table__))
        ],
        nodes=[_node_of(n) for n in rows(conn, select(NodeRow.__table__))],
    )
    return config, frozenset(stopped)
