"""The webhook's QueueDirectory over a real Postgres answers as the in-memory fake does."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from queuemgr.controller.store_directory import StoreQueueDirectory
from queuemgr.core.cycle import schedule
from queuemgr.core.directory import ClusterQueueView
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    ResourceFlavor,
    Taint,
    TaintEffect,
)
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.jobs import QUEUE_LABEL, job_for
from queuemgr.k8s.queue_directory import DirectoryUnavailable, QueueDirectory
from queuemgr.k8s.testing import InMemoryDirectory
from queuemgr.store import decisions as store_decisions
from queuemgr.store.config_objects import (
    upsert_cluster_queue,
    upsert_flavor,
    upsert_local_queue,
    upsert_node,
)
from queuemgr.store.database import create_engine
from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import submit_workload
from tests.unit.k8s.helpers import manifest
from tests.unit.k8s.test_admission_handler import review

pytestmark = pytest.mark.integration

GPU, CPU, MEM = ResourceName("nvidia.com/gpu"), ResourceName("cpu"), ResourceName("memory")
TI, GI = 2**40, 2**30
H100 = ResourceFlavor(
    name=FlavorName("h100"),
    node_labels={"gpu": "h100"},
    taints=(Taint(key="nvidia.com/gpu", effect=TaintEffect.NO_SCHEDULE),),
)
STANDARD = ResourceFlavor(name=FlavorName("standard"), node_labels={"pool": "cpu"})
NODES = [
    Node(
        name=NodeName(f"h100-{i}"),
        labels={"gpu": "h100", "topology.kubernetes.io/rack": f"r{i // 2}"},
        allocatable={GPU: 8, CPU: 96_000, MEM: TI},
    )
    for i in range(4)
] + [
    Node(
        name=NodeName("h100-big"),
        labels={"gpu": "h100"},
        allocatable={GPU: 16, CPU: 192_000, MEM: 2 * TI},
        schedulable=False,  # cordoned: does not count
    ),
    Node(name=NodeName("cpu-0"), labels={"pool": "cpu"}, allocatable={CPU: 64_000, MEM: 256 * GI}),
    Node(
        name=NodeName("cpu-1"),
        labels={"pool": "cpu", "x": "y"},
        allocatable={CPU: 32_000, MEM: 128 * GI},
    ),
]
CLUSTER_QUEUES = [
    ClusterQueue(
        name=ClusterQueueName("gpu"),
        flavors=(FlavorQuota(flavor=H100.name, nominal={GPU: 32, CPU: 384_000, MEM: 4 * TI}),),
        namespaces=frozenset({"team-a", "team-b"}),
    ),
    ClusterQueue(
        name=ClusterQueueName("mixed"),
        flavors=(
            FlavorQuota(flavor=STANDARD.name, nominal={CPU: 96_000, MEM: 384 * GI}),
            FlavorQuota(flavor=H100.name, nominal={GPU: 8}),
        ),
    ),
]
LOCAL_QUEUES = [
    LocalQueue(namespace="team-a", name="default", cluster_queue=ClusterQueueName("gpu")),
    LocalQueue(namespace="team-a", name="batch", cluster_queue=ClusterQueueName("mixed")),
    LocalQueue(namespace="team-a", name="orphan", cluster_queue=ClusterQueueName("gone")),
    LocalQueue(namespace="team-b", name="research", cluster_queue=ClusterQueueName("gpu")),
]


def _tolerant_job() -> dict[str, object]:
    obj = manifest("job-gpu")
    obj["spec"]["parallelism"] = obj["spec"]["completions"] = 2  # 16 GPUs: fits the quota
    del obj["spec"]["template"]["spec"]["nodeSelector"]  # no node of this cluster has it
    return obj


@pytest.fixture
def directories(engine: Engine) -> tuple[StoreQueueDirectory, InMemoryDirectory]:
    with engine.begin() as conn:
        for f in (H100, STANDARD):
            upsert_flavor(conn, f, actor="test:k8s")
        for n in NODES:
            upsert_node(conn, n, actor="test:k8s")
        for cq in CLUSTER_QUEUES:
            upsert_cluster_queue(conn, cq, actor="test:k8s")
        for lq in LOCAL_QUEUES:
            upsert_local_queue(conn, lq, actor="test:k8s")
        workload = job_for(_tolerant_job()).workload(created_at=1_700_000_000.0)
        submit_workload(conn, workload)
    decisions = schedule(load_state(Database(engine)).snapshot(), 1_700_000_001.0)
    assert [a.workload.name for a in decisions.admitted] == ["pretrain"]
    with engine.begin() as conn:
        store_decisions.persist_decisions(conn, decisions, now=1_700_000_001.0)
    admitted = [(a.workload, a.admission) for a in decisions.admitted]
    fake = InMemoryDirectory(
        flavors=[H100, STANDARD],
        nodes=NODES,
        cluster_queues=CLUSTER_QUEUES,
        local_queues=LOCAL_QUEUES,
        admitted=admitted,
    )
    return StoreQueueDirectory(Database(engine)), fake


def _comparable(view: ClusterQueueView | None) -> object:
    """Node shapes as a sorted list: their order is not part of the port."""
    if view is None:
        return None
    return (
        view.name,
        view.namespaces,
        [
            (f.flavor, dict(f.nominal), sorted(tuple(sorted(s.items())) for s in f.node_shapes))
            for f in view.flavors
        ],
    )


def _answers(d: QueueDirectory) -> list[object]:
    queues = [("team-a", "default"), ("team-a", "batch"), ("team-a", "nope"), ("team-x", "default")]
    out: list[object] = [d.local_queue(ns, name) for ns, name in queues]
    out += [d.local_queues("team-a"), d.local_queues("team-b"), d.local_queues("team-x")]
    out += [_comparable(d.cluster_queue(cq)) for cq in ("gpu", "mixed", "gone")]
    out += [d.admitted("team-a", "pretrain"), d.admitted("team-a", "other")]
    return out


def test_store_directory_answers_like_the_fake(
    directories: tuple[StoreQueueDirectory, InMemoryDirectory],
) -> None:
    real, fake = directories
    assert _answers(real) == _answers(fake)
    gpu = real.cluster_queue("gpu")
    assert gpu is not None
    assert gpu.flavors[0].node_shapes == ({CPU: 96_000, GPU: 8, MEM: TI},)  # cordoned one left out
    mixed = real.cluster_queue("mixed")
    assert mixed is not None and [f.flavor for f in mixed.flavors] == ["standard", "h100"]
    assert len(mixed.flavors[0].node_shapes) == 2
    admitted = real.admitted("team-a", "pretrain")
    assert admitted is not None
    assert (admitted.queue, admitted.cluster_queue, admitted.flavor) == ("default", "gpu", "h100")
    assert admitted.pod_sets == job_for(_tolerant_job()).pod_sets()


def test_webhook_over_the_store(directories: tuple[StoreQueueDirectory, InMemoryDirectory]) -> None:
    handler = AdmissionHandler(directories[0])
    ok = handler.validate(
        review(
            "CREATE",
            _tolerant_job()
            | {
                "metadata": {"name": "x", "namespace": "team-a", "labels": {QUEUE_LABEL: "default"}}
            },
        )
    )
    assert ok["response"]["allowed"] is True
    wrong = manifest("job-gpu")
    wrong["metadata"]["labels"][QUEUE_LABEL] = "defaul"
    denied = handler.validate(review("CREATE", wrong))["response"]
    assert denied["allowed"] is False
    assert 'did you mean "default"?' in denied["status"]["message"]
    # The store says pretrain is admitted: its gang may not change, even while suspended.
    old = _tolerant_job()
    old["spec"]["suspend"] = True
    new = _tolerant_job()
    new["spec"]["suspend"] = True
    new["spec"]["parallelism"] = new["spec"]["completions"] = 3
    edit = handler.validate(review("UPDATE", new, old))["response"]
    assert (
        edit["allowed"] is False
        and "the pods of a running job cannot change" in edit["status"]["message"]
    )


def test_an_unreachable_database_is_unavailable_not_an_error() -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    try:
        with pytest.raises(DirectoryUnavailable, match="the queuemgr database"):
            StoreQueueDirectory(Database(engine)).local_queue("team-a", "default")
        out = AdmissionHandler(StoreQueueDirectory(Database(engine))).validate(
            review("CREATE", manifest("job-gpu"))
        )
        assert out["response"]["allowed"] is True and out["response"]["warnings"]
    finally:
        engine.dispose()
