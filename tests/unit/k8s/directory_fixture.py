"""A small cluster behind an in-memory directory, for the webhook's tests."""

from __future__ import annotations

from queuemgr.core.model import (
    Admission,
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    PodSetPlacement,
    ResourceFlavor,
    WorkloadId,
)
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.jobs import job_for
from queuemgr.k8s.testing import InMemoryDirectory
from tests.unit.k8s.helpers import manifest

GPU, CPU, MEM = ResourceName("nvidia.com/gpu"), ResourceName("cpu"), ResourceName("memory")
TI, GI = 2**40, 2**30

H100 = ResourceFlavor(name=FlavorName("h100"), node_labels={"gpu": "h100"})
STANDARD = ResourceFlavor(name=FlavorName("standard"), node_labels={"pool": "cpu"})
B200 = ResourceFlavor(name=FlavorName("b200"), node_labels={"gpu": "b200"})

NODES = [
    Node(
        name=NodeName("h100-0"), labels={"gpu": "h100"}, allocatable={GPU: 8, CPU: 96_000, MEM: TI}
    ),
    Node(
        name=NodeName("h100-1"), labels={"gpu": "h100"}, allocatable={GPU: 8, CPU: 96_000, MEM: TI}
    ),
    # Cordoned: its 16 GPUs must not count.
    Node(
        name=NodeName("h100-big"),
        labels={"gpu": "h100"},
        allocatable={GPU: 16, CPU: 192_000, MEM: 2 * TI},
        schedulable=False,
    ),
    Node(name=NodeName("cpu-0"), labels={"pool": "cpu"}, allocatable={CPU: 64_000, MEM: 256 * GI}),
]


def _cq(
    name: str, flavor: ResourceFlavor, nominal: dict[ResourceName, int], ns: set[str] | None
) -> ClusterQueue:
    return ClusterQueue(
        name=ClusterQueueName(name),
        flavors=(FlavorQuota(flavor=flavor.name, nominal=nominal),),
        namespaces=None if ns is None else frozenset(ns),
    )


CLUSTER_QUEUES = [
    _cq("gpu", H100, {GPU: 16, CPU: 192_000, MEM: 2 * TI}, {"team-a", "team-b"}),
    _cq("cpu", STANDARD, {CPU: 64_000, MEM: 256 * GI}, None),
    _cq("locked", H100, {GPU: 8}, {"team-z"}),
    _cq("future", B200, {GPU: 64}, None),  # no b200 node reported yet
]


def _lq(ns: str, name: str, cq: str) -> LocalQueue:
    return LocalQueue(namespace=ns, name=name, cluster_queue=ClusterQueueName(cq))


LOCAL_QUEUES = [
    _lq("team-a", "default", "gpu"),
    _lq("team-a", "cpu", "cpu"),
    _lq("team-a", "locked", "locked"),
    _lq("team-a", "orphan", "deleted"),
    _lq("team-a", "future", "future"),
    _lq("team-b", "research", "gpu"),
]


def directory(*, admitted_pretrain: bool = False) -> InMemoryDirectory:
    admitted = []
    if admitted_pretrain:
        w = job_for(manifest("job-gpu")).workload(created_at=0.0)
        a = Admission(
            workload=WorkloadId(w.id),
            cluster_queue=ClusterQueueName("gpu"),
            flavor=H100.name,
            placements=(PodSetPlacement(pod_set="main", node=NodeName("h100-0"), count=4),),
        )
        admitted.append((w, a))
    return InMemoryDirectory(
        flavors=[H100, STANDARD, B200],
        nodes=NODES,
        cluster_queues=CLUSTER_QUEUES,
        local_queues=LOCAL_QUEUES,
        admitted=admitted,
    )
