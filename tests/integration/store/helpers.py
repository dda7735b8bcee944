"""A small cluster and workloads for the store tests, written through the store itself."""

from __future__ import annotations

import dataclasses

from sqlalchemy import Engine

from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    PodSet,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceFlavor,
    Taint,
    TaintEffect,
    Toleration,
    Workload,
)
from queuemgr.core.resources import ResourceName
from queuemgr.store.config_objects import (
    upsert_cluster_queue,
    upsert_flavor,
    upsert_local_queue,
    upsert_node,
)

GPU = ResourceName("nvidia.com/gpu")
CPU = ResourceName("cpu")
MEM = ResourceName("memory")
TI = 2**40
GI = 2**30

H100 = ResourceFlavor(
    name=FlavorName("h100"),
    node_labels={"gpu": "h100"},
    taints=(Taint(key="gpu", value="h100", effect=TaintEffect.NO_SCHEDULE),),
)
CQ = ClusterQueue(
    name=ClusterQueueName("team-a"),
    cohort=CohortName("research"),
    flavors=(
        FlavorQuota(
            flavor=FlavorName("h100"),
            nominal={GPU: 16, CPU: 192_000, MEM: 2 * TI},
            borrowing_limit={GPU: 8},
        ),
    ),
)
LQ = LocalQueue(namespace="team-a", name="default", cluster_queue=ClusterQueueName("team-a"))
NODES = tuple(
    Node(
        name=NodeName(f"node-{i}"),
        labels={"gpu": "h100"},
        allocatable={GPU: 8, CPU: 96_000, MEM: TI},
        taints=H100.taints,
    )
    for i in range(2)
)


def seed_config(engine: Engine, actor: str = "test:alice") -> None:
    with engine.begin() as conn:
        upsert_flavor(conn, H100, actor=actor)
        for n in NODES:
            upsert_node(conn, n, actor=actor)
        upsert_cluster_queue(conn, CQ, actor=actor)
        upsert_local_queue(conn, LQ, actor=actor)


def gang(
    name: str, *, pods: int = 1, gpus: int = 8, created_at: float = 1_700_000_000.5
) -> Workload:
    return Workload(
        namespace="team-a",
        name=name,
        queue="default",
        priority=0,
        created_at=created_at,
        pod_sets=(
            PodSet(
                name="workers",
                count=pods,
                requests={GPU: gpus, CPU: 64_000, MEM: 512 * GI},
                tolerations=(Toleration(key="gpu", operator="Exists"),),
            ),
        ),
    )


# A cohort for preemption: ``owner`` lends its idle quota (all of one node) and
# reclaims it by preemption; ``borrower`` has none of its own; ``solo`` is in no
# cohort (it can take the node when free, but never preempts for it).
_ALL_OF_A_NODE = {GPU: 8, CPU: 96_000, MEM: TI}
OWNER = ClusterQueue(
    name=ClusterQueueName("owner"),
    cohort=CohortName("lenders"),
    preemption=PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY),
    flavors=(FlavorQuota(flavor=FlavorName("h100"), nominal=_ALL_OF_A_NODE),),
)
BORROWER = ClusterQueue(
    name=ClusterQueueName("borrower"),
    cohort=CohortName("lenders"),
    flavors=(FlavorQuota(flavor=FlavorName("h100"), nominal={GPU: 0, CPU: 0, MEM: 0}),),
)
SOLO = ClusterQueue(
    name=ClusterQueueName("solo"),
    flavors=(FlavorQuota(flavor=FlavorName("h100"), nominal=_ALL_OF_A_NODE),),
)


def seed_lenders(engine: Engine, actor: str = "test:admin") -> None:
    """One 8-GPU node (``node-0``) and the OWNER, BORROWER and SOLO queues.

    Each ClusterQueue is fed by LocalQueue ``default`` of the namespace of its name.
    """
    with engine.begin() as conn:
        upsert_flavor(conn, H100, actor=actor)
        upsert_node(conn, NODES[0], actor=actor)
        for cq in (OWNER, BORROWER, SOLO):
            upsert_cluster_queue(conn, cq, actor=actor)
            lq = LocalQueue(namespace=cq.name, name="default", cluster_queue=cq.name)
            upsert_local_queue(conn, lq, actor=actor)


def job(ns: str, name: str, created_at: float, priority: int = 0) -> Workload:
    """A one-pod gang of a whole node in namespace ``ns`` (LocalQueue ``default``)."""
    return dataclasses.replace(gang(name, created_at=created_at), namespace=ns, priority=priority)
