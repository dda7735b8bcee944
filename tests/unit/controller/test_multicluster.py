"""Multi-cluster dispatch without a cluster: the policy, the workers' state machine, and
the backend over fake workers, with the rule that no workload runs in two clusters at once."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from queuemgr.controller.multicluster import (
    FIRST_FIT,
    MOST_FREE,
    Fleet,
    choose_cluster,
    keep_in_one_cluster,
)
from queuemgr.controller.multicluster_backend import MultiClusterBackend, WorkerMonitor
from queuemgr.controller.ports import BackendError
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSet,
    PodSetPlacement,
    ResourceFlavor,
    Workload,
    WorkloadId,
)
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.k8s.cluster import Topic
from queuemgr.k8s.jobs import BatchJob
from queuemgr.k8s.reflector import Change
from queuemgr.k8s.remote import (
    CLUSTER_LABEL,
    COPY_LABEL,
    WORKER_STATUS_ANNOTATION,
    RemoteError,
    apply_patch,
    copy_of,
)

CPU = ResourceName("cpu")


# -- the policy --------------------------------------------------------------------------
def test_first_fit_takes_the_first_cluster_in_order_that_holds_the_gang() -> None:
    free = {"a": {GPU: 4}, "b": {GPU: 16}, "c": {GPU: 8}}
    assert choose_cluster(FIRST_FIT, ["a", "b", "c"], free, {GPU: 8}) == "b"
    assert choose_cluster(FIRST_FIT, ["c", "b", "a"], free, {GPU: 8}) == "c"
    assert choose_cluster(FIRST_FIT, ["a", "b", "c"], free, {GPU: 2}) == "a"


def test_most_free_takes_the_cluster_with_the_most_free_dominant_resource() -> None:
    free = {"a": {GPU: 4, CPU: 100}, "b": {GPU: 16, CPU: 1}, "c": {GPU: 8, CPU: 50}}
    assert choose_cluster(MOST_FREE, ["a", "b", "c"], free, {GPU: 2}) == "b"
    # Without GPUs the first resource asked for decides; b cannot hold it.
    assert choose_cluster(MOST_FREE, ["a", "b", "c"], free, {CPU: 10}) == "a"
    # Ties go to the earlier in order.
    tie = {"a": {GPU: 8}, "b": {GPU: 8}}
    assert choose_cluster(MOST_FREE, ["b", "a"], tie, {GPU: 1}) == "b"


def test_no_cluster_holds_the_gang_and_lost_clusters_are_not_candidates() -> None:
    assert choose_cluster(FIRST_FIT, ["a", "b"], {"a": {GPU: 4}}, {GPU: 8}) is None
    assert choose_cluster(FIRST_FIT, ["a", "b"], {"b": {GPU: 8}}, {GPU: 8}) == "b"


def test_a_gang_without_topology_is_kept_within_one_cluster() -> None:
    w = Workload(
        namespace="ns",
        name="j",
        queue="q",
        pod_sets=(
            PodSet(name="main", count=2, requests={GPU: 1}),
            PodSet(name="racked", count=2, requests={GPU: 1}, topology_required="rack"),
        ),
    )
    kept = keep_in_one_cluster(w)
    assert kept.pod_sets[0].topology_required == CLUSTER_LABEL
    assert kept.pod_sets[1].topology_required == "rack"
    assert keep_in_one_cluster(kept) is kept


# -- the copy ----------------------------------------------------------------------------
def _job(name: str = "j", namespace: str = "ns", gpus: int = 8, pods: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "u-1",
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "default"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
            "template": {
                "metadata": {
                    "labels": {"batch.kubernetes.io/controller-uid": "u-1", "job-name": name}
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
        "status": {"active": 0},
    }


def test_apply_patch_adds_replaces_and_removes() -> None:
    obj: dict[str, Any] = {"a": {"b": [1, 2]}, "c": 1}
    apply_patch(
        obj,
        [
            {"op": "test", "path": "/c", "value": 1},
            {"op": "add", "path": "/a/d~1e", "value": {"x": 1}},
            {"op": "replace", "path": "/a/b/0", "value": 5},
            {"op": "add", "path": "/a/b/-", "value": 3},
            {"op": "remove", "path": "/c"},
        ],
    )
    assert obj == {"a": {"b": [5, 2, 3], "d/e": {"x": 1}}}


def test_the_copy_is_the_job_unsuspended_with_its_placement_and_labelled() -> None:
    job = BatchJob(_job())
    from queuemgr.k8s.placement import Placement, PodSetAssignment

    placement = Placement(
        cluster_queue="cq",
        flavor="gpu",
        node_labels={"pool": "a"},
        pod_sets=(PodSetAssignment(pod_set="main", nodes={"w1.n1": 1}, pods=1),),
        admitted_at=12.5,
    )
    body = copy_of(job.obj, job.run_with(placement))
    assert body["spec"]["suspend"] is False
    assert "selector" not in body["spec"]
    assert body["spec"]["template"]["metadata"]["labels"] == {}
    assert body["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
    assert body["metadata"]["labels"][COPY_LABEL] == "true"
    assert "kubectl.kubernetes.io/last-applied-configuration" not in body["metadata"]["annotations"]
    assert "status" not in body and "uid" not in body["metadata"]
    assert job.obj["spec"]["suspend"] is True  # the manager's job is untouched


def test_only_batch_jobs_are_copied() -> None:
    other = {**_job(), "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
    with pytest.raises(RemoteError, match="batch/v1 Jobs only"):
        copy_of(other, BatchJob(_job()).suspend())


# -- fakes -------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def now(self) -> float:
        return self.t


def _node(name: str, gpus: int = 8) -> dict[str, Any]:
    alloc = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@dataclass
class FakeWorker:
    """A worker's API server: up or down; its copies (pods run while a copy exists)."""

    name: str
    nodes_: list[dict[str, Any]] = field(default_factory=list)
    up: bool = True
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The next create succeeds on the worker but its answer is lost.
    lose_next_answer: bool = False
    creates: int = 0

    def _check(self, what: str) -> None:
        if not self.up:
            raise RemoteError(f"{self.name}: {what}: connection refused")

    def nodes(self) -> list[dict[str, Any]]:
        self._check("list nodes")
        return list(self.nodes_)

    def copies(self) -> list[dict[str, Any]]:
        self._check("list copies")
        return [dict(j) for j in self.jobs.values()]

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        self._check("create")
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        if key in self.jobs:
            return None
        self.creates += 1
        self.jobs[key] = body
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise RemoteError(f"{self.name}: create: read timed out")
        return body

    def delete(self, namespace: str, name: str) -> None:
        self._check("delete")
        self.jobs.pop(f"{namespace}/{name}", None)

    def finish(self, key: str, succeeded: bool = True) -> None:
        kind = "Complete" if succeeded else "Failed"
        self.jobs[key] = {
            **self.jobs[key],
            "status": {"conditions": [{"type": kind, "status": "True", "reason": kind}]},
        }

    def close(self) -> None:
        pass


class FakeKindApi:
    """The manager's job API: patches applied to the watched object, and counted."""

    def __init__(self) -> None:
        self.patches = 0
        self.objects: dict[str, dict[str, Any]] = {}

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self.patches += 1
        apply_patch(self.objects[f"{namespace}/{name}"], ops)


@dataclass
class FakeRef:
    obj: dict[str, Any]
    api: FakeKindApi = field(default_factory=FakeKindApi)

    @property
    def job(self) -> BatchJob:
        return BatchJob(self.obj)

    @property
    def workload_id(self) -> str:
        return f"{self.obj['metadata']['namespace']}/{self.obj['metadata']['name']}"


class FakeWatch:
    synced = True

    def __init__(self) -> None:
        self.refs: dict[str, FakeRef] = {}
        self.api = FakeKindApi()

    def add(self, obj: dict[str, Any]) -> None:
        ref = FakeRef(obj, self.api)
        self.refs[ref.workload_id] = ref
        self.api.objects[ref.workload_id] = obj

    def job(self, wid: str) -> FakeRef | None:
        return self.refs.get(wid)


class FakeWrites:
    """Stands for the store: records the fenced writes the monitors make."""

    def __init__(self) -> None:
        self.evicted: list[str] = []
        self.failed: list[str] = []


FLAVOR = ResourceFlavor(name=FlavorName("gpu"), node_labels={"pool": "a"})


UNPLACED = "no-such-node"  # a node of no worker: the start falls back on the policy


def _admitted(wid: str, node: str, gpus: int = 8, at: float = 1.0) -> AdmittedWorkload:
    namespace, name = wid.split("/")
    w = Workload(
        namespace=namespace,
        name=name,
        queue="default",
        pod_sets=(PodSet(name="main", count=1, requests={GPU: gpus}),),
    )
    admission = Admission(
        workload=WorkloadId(wid),
        cluster_queue=ClusterQueueName("cq"),
        flavor=FlavorName("gpu"),
        placements=(PodSetPlacement(pod_set="main", node=NodeName(node), count=1),),
    )
    return AdmittedWorkload(workload=w, admission=admission, admitted_at=at)


class World:
    """A manager over two fake workers, its monitors' writes captured instead of stored."""

    def __init__(self, policy: str = FIRST_FIT, timeout: float = 10.0) -> None:
        self.clock = FakeClock()
        self.workers = {
            "w1": FakeWorker("w1", [_node("n1"), _node("n2")]),
            "w2": FakeWorker("w2", [_node("n1")]),
        }
        self.fleet = Fleet(["w1", "w2"], timeout=timeout, clock=self.clock)
        self.events: list[tuple[Topic, Change, str]] = []
        self.fleet.add_listener(lambda t, c, o: self.events.append((t, c, o["metadata"]["name"])))
        self.watch = FakeWatch()
        self.backend = MultiClusterBackend(
            self.watch,  # type: ignore[arg-type]
            self.fleet,
            self.workers,  # type: ignore[arg-type]
            lambda name: FLAVOR,
            policy=policy,
        )
        self.writes = FakeWrites()
        self.monitors = {}
        for name, api in self.workers.items():
            monitor = WorkerMonitor(
                api,  # type: ignore[arg-type]
                self.backend,
                db=None,  # type: ignore[arg-type]
                clock=self.clock,
                token=lambda: None,
                interval=1.0,
            )
            monitor._write = self._write  # type: ignore[method-assign]
            self.monitors[name] = monitor

    def _write(self, action: Any) -> bool:
        fn = action.func.__name__
        wid = action.args[0]
        (self.writes.evicted if fn == "_evict_one" else self.writes.failed).append(wid)
        return True

    def rounds(self, seconds: float = 1.0) -> None:
        self.clock.t += seconds
        for monitor in self.monitors.values():
            monitor.round()

    def submit(self, name: str, gpus: int = 8) -> str:
        self.watch.add(_job(name, gpus=gpus))
        return f"ns/{name}"

    def live_copies(self, wid: str) -> list[str]:
        """The up clusters holding a copy of ``wid`` that has not finished."""
        out = []
        for name, w in self.workers.items():
            job = w.jobs.get(wid)
            if w.up and job is not None and not (job.get("status") or {}).get("conditions"):
                out.append(name)
        return out


# -- the state machine -------------------------------------------------------------------
def test_nothing_is_dispatched_until_every_worker_answered_or_was_found_lost() -> None:
    world = World(timeout=5.0)
    world.workers["w2"].up = False
    wid = world.submit("a")
    with pytest.raises(BackendError, match="not every worker"):
        world.backend.start(_admitted(wid, "w1.n1"))
    world.rounds()
    with pytest.raises(BackendError, match="not every worker"):
        world.backend.running()
    world.rounds(6.0)  # w2 found lost: settled
    assert world.fleet.settled() and world.fleet.live_clusters() == ["w1"]
    world.backend.start(_admitted(wid, "w1.n1"))
    assert world.fleet.where(WorkloadId(wid)) == "w1"


def test_a_live_cluster_s_nodes_are_the_manager_s_renamed_and_labelled() -> None:
    world = World()
    world.rounds()
    names = sorted(n["metadata"]["name"] for n in world.fleet.nodes())
    assert names == ["w1.n1", "w1.n2", "w2.n1"]
    node = world.fleet.node("w2.n1")
    assert node is not None and node["metadata"]["labels"][CLUSTER_LABEL] == "w2"
    assert {(c, n) for _, c, n in world.events} == {
        (Change.ADDED, "w1.n1"),
        (Change.ADDED, "w1.n2"),
        (Change.ADDED, "w2.n1"),
    }
    world.workers["w1"].nodes_.pop()
    world.rounds()
    assert world.events[-1][1:] == (Change.DELETED, "w1.n2")


def test_a_gang_goes_to_the_cluster_the_core_placed_it_on() -> None:
    """The core fitted it on that cluster's nodes, and the store records them as used:
    the policy never sends it elsewhere (the counts cannot tell it fits node by node)."""
    world = World()
    world.rounds()
    for i in range(3):
        wid = world.submit(f"j{i}")
        world.backend.start(_admitted(wid, "w1.n1"))
    wid = world.submit("j3")
    world.backend.start(_admitted(wid, "w2.n1"))
    where = {w: world.fleet.where(WorkloadId(w)) for w in ("ns/j0", "ns/j1", "ns/j2", "ns/j3")}
    assert where == {"ns/j0": "w1", "ns/j1": "w1", "ns/j2": "w1", "ns/j3": "w2"}
    world.workers["w2"].up = False
    world.rounds(20.0)
    wid = world.submit("j4")
    with pytest.raises(BackendError, match="placed on worker cluster w2, which is not live"):
        world.backend.start(_admitted(wid, "w2.n1"))


def test_first_fit_takes_clusters_in_order_for_a_gang_placed_on_no_workers_nodes() -> None:
    world = World()
    world.rounds()
    for i in range(3):
        wid = world.submit(f"j{i}")
        world.backend.start(_admitted(wid, UNPLACED))
    where = {w: world.fleet.where(WorkloadId(w)) for w in ("ns/j0", "ns/j1", "ns/j2")}
    assert where == {"ns/j0": "w1", "ns/j1": "w1", "ns/j2": "w2"}


def test_most_free_spreads() -> None:
    world = World(policy=MOST_FREE)
    world.workers["w2"].nodes_ = [_node("n1"), _node("n2"), _node("n3")]
    world.rounds()
    placed = []
    for i in range(4):
        wid = world.submit(f"j{i}")
        world.backend.start(_admitted(wid, UNPLACED))
        placed.append(world.fleet.where(WorkloadId(wid)))
    assert placed == ["w2", "w1", "w2", "w1"]


def test_start_and_stop_are_idempotent_and_stop_deletes_the_copy() -> None:
    world = World()
    world.rounds()
    wid = world.submit("a")
    admitted = _admitted(wid, "w1.n1")
    world.backend.start(admitted)
    world.backend.start(admitted)
    assert world.workers["w1"].creates == 1
    assert world.backend.running() == {wid}
    world.backend.stop(WorkloadId(wid))
    world.backend.stop(WorkloadId(wid))
    assert wid not in world.workers["w1"].jobs and world.backend.running() == set()


def test_a_completed_copy_is_reported_once_and_a_failed_one_fails_the_workload() -> None:
    world = World()
    world.rounds()
    a, b = world.submit("a"), world.submit("b")
    world.backend.start(_admitted(a, "w1.n1", at=5.0))
    world.backend.start(_admitted(b, "w1.n1", at=6.0))
    world.workers["w1"].finish(a)
    world.workers["w1"].finish(b, succeeded=False)
    world.rounds()
    world.rounds()
    ends = world.backend.poll_finished(0.0)
    assert [(e.workload, e.admitted_at) for e in ends] == [(a, 5.0)]
    assert world.backend.poll_finished(0.0) == []
    assert world.writes.failed == [b]
    assert world.backend.running() == set()


def test_a_lost_worker_s_workloads_are_evicted_and_its_stale_copies_deleted_on_return() -> None:
    world = World(timeout=10.0)
    world.rounds()
    wid = world.submit("a")
    world.backend.start(_admitted(wid, "w1.n1"))
    world.workers["w1"].up = False
    world.rounds(5.0)
    assert world.fleet.live("w1") and world.writes.evicted == []  # within the timeout
    world.rounds(6.0)
    assert not world.fleet.live("w1")
    assert world.writes.evicted == [wid]
    assert world.fleet.where(WorkloadId(wid)) is None
    assert all(not n["metadata"]["name"].startswith("w1.") for n in world.fleet.nodes())
    # The loop stops (a no-op: released) and requeues it; it is dispatched to w2.
    world.backend.stop(WorkloadId(wid))
    world.backend.start(_admitted(wid, "w2.n1", at=2.0))
    assert world.fleet.where(WorkloadId(wid)) == "w2"
    # w1 answers again, its copy still there: deleted before w1 is live.
    world.workers["w1"].up = True
    world.rounds()
    assert wid not in world.workers["w1"].jobs and not world.fleet.live("w1")
    world.rounds()
    assert world.fleet.live("w1") and world.monitors["w1"].returns == 2  # first contact, back
    assert world.live_copies(wid) == ["w2"]


def test_a_create_whose_answer_is_lost_stays_dispatched_until_a_listing_says() -> None:
    world = World()
    world.rounds()
    wid = world.submit("a")
    world.workers["w1"].lose_next_answer = True
    with pytest.raises(BackendError, match="read timed out"):
        world.backend.start(_admitted(wid, "w1.n1"))
    world.backend.start(_admitted(wid, "w1.n1"))  # the loop's retry: it may run there
    assert world.workers["w1"].creates == 1 and world.fleet.where(WorkloadId(wid)) == "w1"
    world.rounds()
    assert world.fleet.where(WorkloadId(wid)) == "w1" and world.writes.evicted == []


def test_a_copy_deleted_on_the_worker_requeues_its_workload() -> None:
    world = World()
    world.rounds()
    wid = world.submit("a")
    world.backend.start(_admitted(wid, "w1.n1"))
    del world.workers["w1"].jobs[wid]
    world.rounds()
    assert world.writes.evicted == [wid] and world.fleet.where(WorkloadId(wid)) is None


def test_first_contact_adopts_the_copies_of_a_previous_manager() -> None:
    world = World()
    world.workers["w2"].jobs["ns/old"] = {
        **_job("old"),
        "metadata": {"name": "old", "namespace": "ns"},
    }
    world.rounds()
    assert world.fleet.where(WorkloadId("ns/old")) == "w2"
    assert world.backend.running() == {"ns/old"}


def test_a_cluster_first_found_lost_adopts_nothing_when_it_answers() -> None:
    world = World(timeout=2.0)
    world.workers["w2"].up = False
    world.workers["w2"].jobs["ns/old"] = {"metadata": {"name": "old", "namespace": "ns"}}
    world.rounds()
    world.rounds(3.0)
    assert world.fleet.settled() and not world.fleet.live("w2")
    world.workers["w2"].up = True
    world.rounds()
    world.rounds()
    assert world.workers["w2"].jobs == {} and world.fleet.live("w2")
    assert world.fleet.where(WorkloadId("ns/old")) is None


@pytest.mark.parametrize("seed", range(40))
def test_no_workload_is_ever_dispatched_twice_or_runs_in_two_reachable_clusters(
    seed: int,
) -> None:
    """Random starts, stops, finishes, lost answers, outages and returns: at every step a
    workload is dispatched to at most one cluster, a live one, and no two reachable
    clusters hold an unfinished copy of it once the returning one is live."""
    rng = random.Random(seed)
    world = World(timeout=3.0, policy=rng.choice([FIRST_FIT, MOST_FREE]))
    world.rounds()
    wids = [world.submit(f"j{i}", gpus=rng.choice([2, 4, 8])) for i in range(12)]
    admitted_at = {w: 0.0 for w in wids}
    for step in range(300):
        op = rng.random()
        wid = rng.choice(wids)
        try:
            if op < 0.35:
                admitted_at[wid] += 1
                gpus = int(
                    world.watch.refs[wid].obj["spec"]["template"]["spec"]["containers"][0][
                        "resources"
                    ]["limits"]["nvidia.com/gpu"]
                )
                world.backend.start(_admitted(wid, "w1.n1", gpus=gpus, at=admitted_at[wid]))
            elif op < 0.5:
                world.backend.stop(WorkloadId(wid))
            elif op < 0.55:
                where = world.fleet.where(WorkloadId(wid))
                if (
                    where is not None
                    and wid in world.workers[where].jobs
                    and world.workers[where].up
                ):
                    world.workers[where].finish(wid, succeeded=rng.random() < 0.8)
            elif op < 0.6:
                world.workers[rng.choice(["w1", "w2"])].lose_next_answer = True
            elif op < 0.68:
                w = world.workers[rng.choice(["w1", "w2"])]
                w.up = not w.up
            else:
                world.rounds(rng.choice([0.5, 1.0, 2.0]))
        except BackendError:
            pass
        dispatched = world.fleet.dispatched()
        for w, where in dispatched.items():
            assert world.fleet.live(where), (step, w, where)
        for w in wids:
            holders = [c for c in world.live_copies(w) if world.fleet.live(c)]
            assert len(holders) <= 1, (step, w, holders)
            if holders:
                # A copy on a live cluster is the one dispatched there, or stale and not
                # yet deleted by this round only if it is also not dispatched elsewhere.
                assert dispatched.get(WorkloadId(w)) in (holders[0], None), (step, w)


# -- the configuration -------------------------------------------------------------------
def test_worker_clusters_and_the_dispatch_policy_are_read_and_checked(tmp_path: Any) -> None:
    from queuemgr.controller.kube_section import KubeConfigError, parse_kubernetes
    from queuemgr.spec.checks import InputError

    settings = parse_kubernetes(
        {
            "worker_clusters": [
                {"name": "east", "kubeconfig": "east.yaml"},
                {"name": "west", "kubeconfig": "/etc/queuemgr-clusters/west/kubeconfig"},
            ],
            "dispatch": "most-free",
            "worker_timeout": 15,
        },
        tmp_path,
    )
    assert [w.name for w in settings.worker_clusters] == ["east", "west"]
    assert settings.worker_clusters[0].kubeconfig == tmp_path / "east.yaml"
    assert settings.dispatch == "most-free" and settings.worker_timeout == 15
    assert parse_kubernetes({}, tmp_path).dispatch == "first-fit"
    with pytest.raises(KubeConfigError, match=r"kubernetes.dispatch: expected one of"):
        parse_kubernetes({"dispatch": "random"}, tmp_path)
    with pytest.raises(InputError, match=r"worker_clusters\[1\].name: duplicate"):
        parse_kubernetes({"worker_clusters": [{"name": "a", "kubeconfig": "x"}] * 2}, tmp_path)
    with pytest.raises(InputError, match=r"worker_clusters\[0\].name: bad name"):
        parse_kubernetes({"worker_clusters": [{"name": "A.b", "kubeconfig": "x"}]}, tmp_path)


def test_a_gang_placed_across_clusters_is_refused() -> None:
    world = World()
    world.rounds()
    wid = world.submit("a")
    admitted = _admitted(wid, "w1.n1", gpus=4)
    spread = Admission(
        workload=WorkloadId(wid),
        cluster_queue=ClusterQueueName("cq"),
        flavor=FlavorName("gpu"),
        placements=(
            PodSetPlacement(pod_set="main", node=NodeName("w1.n1"), count=1),
            PodSetPlacement(pod_set="main", node=NodeName("w2.n1"), count=1),
        ),
    )
    across = AdmittedWorkload(workload=admitted.workload, admission=spread, admitted_at=1.0)
    with pytest.raises(BackendError, match="placed across worker clusters"):
        world.backend.start(across)
    assert world.fleet.where(WorkloadId(wid)) is None


def test_concurrent_starts_do_not_count_the_same_free_room_twice() -> None:
    import threading

    world = World()
    world.rounds()
    wids = [world.submit(f"c{i}") for i in range(3)]
    barrier = threading.Barrier(3)

    def start(wid: str) -> None:
        barrier.wait()
        world.backend.start(_admitted(wid, UNPLACED))

    threads = [threading.Thread(target=start, args=(w,)) for w in wids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    where = sorted(str(world.fleet.where(WorkloadId(w))) for w in wids)
    assert where == ["w1", "w1", "w2"]


def test_the_copys_status_is_shown_on_the_managers_job_when_it_changes() -> None:
    world = World()
    for monitor in world.monitors.values():
        monitor._token = lambda: object()  # type: ignore[assignment,return-value]
    world.rounds()
    wid = world.submit("a")
    world.backend.start(_admitted(wid, "w2.n1"))
    world.rounds()
    notes = world.watch.refs[wid].obj["metadata"]["annotations"]
    assert json.loads(notes[WORKER_STATUS_ANNOTATION]) == {"cluster": "w2"}
    world.workers["w2"].jobs[wid]["status"] = {"active": 1, "ready": 1, "startTime": "t0"}
    world.rounds()
    shown = json.loads(
        world.watch.refs[wid].obj["metadata"]["annotations"][WORKER_STATUS_ANNOTATION]
    )
    assert shown == {"cluster": "w2", "active": 1, "ready": 1, "startTime": "t0"}
    patches = world.watch.api.patches
    world.rounds()  # nothing changed: nothing written
    assert world.watch.api.patches == patches == 2
