"""Small read-only lookups for the admission webhook: queues, their flavors' nodes, admissions.

Why it exists: the webhook judges one job at a time and must answer within
the API server's timeout, so it reads exactly what it needs, by primary key
or index, instead of loading the whole configuration like a scheduling
cycle does.

What must stay true: these functions only read; a node counts for a flavor
when its labels contain all of the flavor's (``labels @> flavor_labels``, the
core's ``ResourceFlavor.selects``) and it is schedulable; node shapes are
distinct allocatable vectors, exact integers as stored; an admitted workload
is one whose row is in state ``Admitted`` now.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import PodSet
from queuemgr.core.resources import ResourceName
from queuemgr.store import codec
from queuemgr.store.models import (
    ClusterQueueQuota,
    ClusterQueueRow,
    Flavor,
    LocalQueueRow,
    Node,
    PodSetRow,
    WorkloadRow,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class FlavorRecord:
    flavor: str
    nominal: dict[ResourceName, int]
    node_shapes: tuple[dict[ResourceName, int], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterQueueRecord:
    name: str
    namespaces: frozenset[str] | None
    flavors: tuple[FlavorRecord, ...]  # in the queue's flavor order


@dataclass(frozen=True, kw_only=True, slots=True)
class AdmittedRecord:
    local_queue: str
    cluster_queue: str
    flavor: str
    pod_sets: tuple[PodSet, ...]


def local_queue_target(conn: Connection, namespace: str, name: str) -> str | None:
    """The ClusterQueue that LocalQueue ``namespace/name`` feeds, if the LocalQueue exists."""
    return conn.execute(
        select(LocalQueueRow.cluster_queue).where(
            LocalQueueRow.namespace == namespace, LocalQueueRow.name == name
        )
    ).scalar_one_or_none()


def local_queue_names(conn: Connection, namespace: str) -> list[str]:
    rows = conn.execute(
        select(LocalQueueRow.name)
        .where(LocalQueueRow.namespace == namespace)
        .order_by(LocalQueueRow.name)
    )
    return list(rows.scalars())


def node_shapes(conn: Connection, labels: dict[str, str]) -> tuple[dict[ResourceName, int], ...]:
    """Distinct allocatable vectors of the schedulable nodes carrying ``labels``."""
    rows = conn.execute(
        select(Node.allocatable).where(Node.schedulable, Node.labels.contains(labels)).distinct()
    )
    return tuple(
        sorted((codec.resources(r) for r in rows.scalars()), key=lambda v: sorted(v.items()))
    )


def cluster_queue_record(conn: Connection, name: str) -> ClusterQueueRecord | None:
    namespaces = conn.execute(
        select(ClusterQueueRow.namespaces).where(ClusterQueueRow.name == name)
    ).one_or_none()
    if namespaces is None:
        return None
    quotas = conn.execute(
        select(ClusterQueueQuota.flavor, ClusterQueueQuota.nominal, Flavor.node_labels)
        .join(Flavor, Flavor.name == ClusterQueueQuota.flavor)
        .where(ClusterQueueQuota.cluster_queue == name)
        .order_by(ClusterQueueQuota.position)
    ).all()
    return ClusterQueueRecord(
        name=name,
        namespaces=None if namespaces[0] is None else frozenset(namespaces[0]),
        flavors=tuple(
            FlavorRecord(
                flavor=flavor,
                nominal=codec.resources(nominal),
                node_shapes=node_shapes(conn, dict(labels)),
            )
            for flavor, nominal, labels in quotas
        ),
    )


def admitted_record(conn: Connection, namespace: str, name: str) -> AdmittedRecord | None:
    row = conn.execute(
        select(
            WorkloadRow.id, WorkloadRow.local_queue, WorkloadRow.cluster_queue, WorkloadRow.flavor
        ).where(
            WorkloadRow.namespace == namespace,
            WorkloadRow.name == name,
            WorkloadRow.state == WorkloadState.ADMITTED,
        )
    ).one_or_none()
    if row is None:
        return None
    pod_sets = conn.execute(
        select(PodSetRow.__table__)
        .where(PodSetRow.workload_id == row.id)
        .order_by(PodSetRow.position)
    ).mappings()
    return AdmittedRecord(
        local_queue=row.local_queue,
        cluster_queue=row.cluster_queue or "",
        flavor=row.flavor or "",
        pod_sets=tuple(
            PodSet(
                name=p["name"],
                count=p["count"],
                requests=codec.resources(p["requests"]),
                node_selector=dict(p["node_selector"]),
                tolerations=codec.tolerations_of(p["tolerations"]),
                topology_required=p["topology_required"],
                topology_preferred=p["topology_preferred"],
                min_count=p["min_count"],
            )
            for p in pod_sets
        ),
    )
