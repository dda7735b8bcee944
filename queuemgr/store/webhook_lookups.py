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

from sqlalchemy import Connection, select

from queuemgr.core.directory import AdmittedView, ClusterQueueView, FlavorCapacity
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.resources import ResourceName
from queuemgr.store import codec
from queuemgr.store.live import read_pod_sets
from queuemgr.store.models import (
    ClusterQueueQuota,
    ClusterQueueRow,
    Flavor,
    LocalQueueRow,
    Node,
    WorkloadRow,
)


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


def cluster_queue_view(conn: Connection, name: str) -> ClusterQueueView | None:
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
    return ClusterQueueView(
        name=name,
        namespaces=None if namespaces[0] is None else frozenset(namespaces[0]),
        flavors=tuple(
            FlavorCapacity(
                flavor=flavor,
                nominal=codec.resources(nominal),
                node_shapes=node_shapes(conn, dict(labels)),
            )
            for flavor, nominal, labels in quotas
        ),
    )


def admitted_view(conn: Connection, namespace: str, name: str) -> AdmittedView | None:
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
    return AdmittedView(
        queue=row.local_queue,
        cluster_queue=row.cluster_queue or "",
        flavor=row.flavor or "",
        pod_sets=read_pod_sets(conn, [row.id]).get(row.id, ()),
    )
