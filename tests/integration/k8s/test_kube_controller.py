"""The controller against the real control plane: queue, admit, run, finish, preempt.

Acceptance points 1-4 of the Kubernetes issue: two namespaces with a
LocalQueue each, two ClusterQueues of 8 GPUs in one cohort, 16 fake GPUs on
two nodes; Jobs created suspended are admitted in fair-share order,
unsuspended with the flavor's node selector, their pods bound by the real
scheduler; quota comes back when the Job completes; a gang that does not fit
waits with its reason on the Job; a borrower is preempted (suspended) for a
reclaiming queue and resumes later.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import Engine, text

from queuemgr.core.model import ReclaimWithinCohort, TaintEffect, Toleration
from queuemgr.k8s.cluster import WORKLOAD_LABEL
from queuemgr.k8s.jobframework import (
    ORIGINAL_TOLERATIONS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    QUEUE_LABEL,
)
from queuemgr.k8s.jobstatus import (
    ADMITTED_CONDITION,
    PENDING_CONDITION,
    POSITION_ANNOTATION,
    REASON_ANNOTATION,
)
from queuemgr.k8s.kinds import PyTorchJob
from tests.controlplane.harness import ControlPlane, wait_for
from tests.integration.k8s.crds import install_job_crds, remove_job_crds
from tests.integration.k8s.kube_env import POOL, FakeKubelet, KubeEnv, job_manifest, kube_env

pytestmark = pytest.mark.integration


def test_jobs_admitted_in_fair_share_order_run_on_the_flavor_and_free_quota(env: KubeEnv) -> None:
    a, b = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start()
        # team-a's 16-GPU gang borrows team-b's idle quota: the whole cluster.
        env.batch.create_namespaced_job(a, job_manifest("big", pods=2))
        env.wait_running(a, "big", 2)
        job = env.job(a, "big")
        assert job.spec.template.spec.node_selector == {POOL: env.suffix}
        placement = json.loads(job.metadata.annotations[PLACEMENT_ANNOTATION])
        assert placement["flavor"] == "h100"
        assert sum(placement["podSets"]["main"]["nodes"].values()) == 2
        assert {p.spec.node_name for p in env.bound_pods(a, "big")} <= set(env.nodes)
        # Meanwhile team-a queues two 8-GPU jobs, then team-b two.
        for ns, name in ((a, "a1"), (a, "a2"), (b, "b1"), (b, "b2")):
            env.batch.create_namespaced_job(ns, job_manifest(name))
        for name in ("a1", "a2", "b1", "b2"):
            env.wait_state(name, "Pending")
        wait_for(
            lambda: REASON_ANNOTATION in (env.job(b, "b2").metadata.annotations or {}),
            what="b2's reason annotation",
        )
        assert env.admitted_gpus() == 16
        # The big gang completes: its quota comes back, and each queue's head gets half.
        kubelet.finish(a, "big", 2)
        env.wait_state("big", "Finished")
        assert env.states()["big"] == ("Finished", "Succeeded")
        env.wait_running(a, "a1", 1)
        env.wait_running(b, "b1", 1)
        assert env.suspended(a, "a2") and env.suspended(b, "b2")
        assert env.states()["a2"][0] == env.states()["b2"][0] == "Pending"
        assert env.admitted_gpus() == 16
        wait_for(  # written by the status write-back, a moment after the cycle
            lambda: (
                env.job(a, "a2")
                .metadata.annotations.get(POSITION_ANNOTATION, "")
                .startswith("1 in its LocalQueue")
            ),
            what="a2 first in its LocalQueue, on the Job",
        )


def test_a_gang_that_does_not_fit_waits_with_its_reason_then_starts(env: KubeEnv) -> None:
    a, b = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start()
        env.batch.create_namespaced_job(b, job_manifest("small"))
        env.wait_running(b, "small", 1)
        env.batch.create_namespaced_job(a, job_manifest("gang", pods=2))
        env.wait_state("gang", "Pending")

        def reason() -> str:
            return str((env.job(a, "gang").metadata.annotations or {}).get(REASON_ANNOTATION, ""))

        wait_for(reason, what="the gang's reason on the Job")
        assert env.suspended(a, "gang")
        assert not env.bound_pods(a, "gang")
        described = env.plane.kubectl("describe", "job", "gang", "-n", a)
        assert reason().split(":")[0] in described
        assert "queuemgr.io/reason" in described
        wait_for(
            lambda: (
                "queuemgr"
                in env.plane.kubectl("describe", "job", "gang", "-n", a).split("Events:")[-1]
            ),
            what="queuemgr's event under Events:",
        )

        def pending_condition() -> bool:
            conditions = {c.type: c for c in env.job(a, "gang").status.conditions or ()}
            found = conditions.get(PENDING_CONDITION)
            return found is not None and (found.status, found.reason) == (
                "True",
                reason().split(":")[0],
            )

        wait_for(pending_condition, what="QueuemgrPending on the Job's status")
        kubelet.finish(b, "small", 1)
        env.wait_running(a, "gang", 2)
        assert env.states()["gang"][0] == "Admitted"


def test_preemption_suspends_the_borrower_which_resumes_later(
    control_plane: ControlPlane, engine: Engine, database_url: str
) -> None:
    # The flavor adds a toleration: the victim gets its own template back once the job
    # controller has suspended it (the API server refuses it in the suspending request).
    with kube_env(control_plane, engine, database_url) as env:
        env.setup(reclaim=ReclaimWithinCohort.ANY, tolerations=(SPOT,))
        _preemption(env, restored=True)


def test_a_cousin_reclaims_through_the_cohort_tree(
    control_plane: ControlPlane, engine: Engine, database_url: str
) -> None:
    # team-a and team-b sit in cohorts lab-a and lab-b under research: the loan and
    # its reclaim both go through their common ancestor.
    with kube_env(control_plane, engine, database_url) as env:
        env.setup(reclaim=ReclaimWithinCohort.ANY, tree=True)
        _preemption(env)


SPOT = Toleration(key="example.com/spot", operator="Exists", effect=TaintEffect.NO_SCHEDULE)


def _tolerations(env: KubeEnv, ns: str, name: str) -> list[dict[str, Any]]:
    job = env.batch.api_client.sanitize_for_serialization(env.job(ns, name))
    return list(job["spec"]["template"]["spec"].get("tolerations") or [])


def _preemption(env: KubeEnv, *, restored: bool = False) -> None:
    a, b = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start()
        env.batch.create_namespaced_job(b, job_manifest("b1"))
        env.wait_running(b, "b1", 1)
        env.batch.create_namespaced_job(b, job_manifest("b2"))  # borrows team-a's quota
        env.wait_running(b, "b2", 1)
        env.batch.create_namespaced_job(a, job_manifest("a1"))  # reclaims it
        env.wait_running(a, "a1", 1)
        victims = [n for n in ("b1", "b2") if env.suspended(b, n)]
        assert len(victims) == 1, victims
        victim = victims[0]
        assert env.states()[victim][0] == "Pending"
        assert not env.bound_pods(b, victim)
        if restored:
            wait_for(
                lambda: _tolerations(env, b, victim) == [],
                what="the victim's own (empty) tolerations put back",
            )
            annotations = env.job(b, victim).metadata.annotations or {}
            assert ORIGINAL_TOLERATIONS_ANNOTATION not in annotations
            assert _tolerations(env, a, "a1") == [
                {"key": "example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
            ]
        assert env.admitted_gpus() == 16
        kubelet.finish(a, "a1", 1)
        env.wait_running(b, victim, 1)
        assert env.states()[victim][0] == "Admitted"


def test_nodes_follow_the_cluster_and_a_deleted_job_frees_its_quota(env: KubeEnv) -> None:
    a, _ = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)):
        service = env.start()
        host, port = service.http.address
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=5) as ready:
            assert ready.status == 200  # the watches listed before start() returned
        env.batch.create_namespaced_job(a, job_manifest("one"))
        env.wait_running(a, "one", 1)
        # Cordon the node that is free: the 16-GPU gang no longer fits anywhere.
        busy = env.bound_pods(a, "one")[0].spec.node_name
        free = next(n for n in env.nodes if n != busy)
        env.core.patch_node(free, {"spec": {"unschedulable": True}})
        env.batch.delete_namespaced_job("one", a, propagation_policy="Background")
        env.wait_state("one", "Finished")
        assert env.states()["one"] == ("Finished", "Deleted")
        env.batch.create_namespaced_job(a, job_manifest("gang", pods=2))
        env.wait_state("gang", "Inadmissible")  # one schedulable 8-GPU node: never fits
        wait_for(lambda: env.admitted_gpus() == 0, what="the deleted job's quota freed")
        assert env.suspended(a, "gang")
        env.core.patch_node(free, {"spec": {"unschedulable": False}})
        env.wait_running(a, "gang", 2)


def _stored_nodes(env: KubeEnv) -> dict[str, bool]:
    with env.engine.connect() as conn:
        rows = conn.execute(text("SELECT name, schedulable FROM nodes"))
        return {r.name: r.schedulable for r in rows if r.name in env.nodes}


def _placed_node(env: KubeEnv, namespace: str, name: str) -> str:
    with env.engine.connect() as conn:
        (node,) = conn.execute(
            text(
                "SELECT DISTINCT p.node FROM placements p JOIN workloads w ON w.id = p.workload_id"
                " WHERE w.namespace = :ns AND w.name = :name"
            ),
            {"ns": namespace, "name": name},
        ).scalars()
        return str(node)


def test_a_deleted_node_leaves_the_store_once_nothing_runs_on_it(env: KubeEnv) -> None:
    a, _ = env.namespaces
    with FakeKubelet(env.plane, list(env.namespaces)):
        env.start()
        wait_for(lambda: len(_stored_nodes(env)) == 2, what="both nodes in the store")
        env.batch.create_namespaced_job(a, job_manifest("one"))
        env.wait_running(a, "one", 1)
        # "Runs on it" as queuemgr accounts it: the node its placement names. The
        # kube-scheduler binds the pod anywhere in the flavor (nodes are not pinned),
        # so the bound pod's node may be the other one.
        busy = _placed_node(env, a, "one")
        free = next(n for n in env.nodes if n != busy)
        env.core.delete_node(free)
        wait_for(lambda: free not in _stored_nodes(env), what="the free node gone from the store")
        # The busy node goes too, but its pod's GPUs stay accounted until the job ends.
        env.core.delete_node(busy)
        wait_for(lambda: _stored_nodes(env) == {busy: False}, what="the busy node unschedulable")
        assert env.admitted_gpus() == 8
        env.batch.delete_namespaced_job("one", a, propagation_policy="Background")
        env.wait_state("one", "Finished")
        wait_for(lambda: _stored_nodes(env) == {}, what="the busy node gone once its job ended")
        with env.engine.connect() as conn:
            deleted = conn.execute(
                text(
                    "SELECT object_name FROM audit_log"
                    " WHERE object_kind = 'Node' AND action = 'delete' ORDER BY id"
                )
            ).scalars()
            assert list(deleted) == [free, busy]


def test_a_node_deleted_while_the_service_was_down_leaves_the_store_on_restart(
    env: KubeEnv,
) -> None:
    with FakeKubelet(env.plane, list(env.namespaces)):
        env.start()
        wait_for(lambda: len(_stored_nodes(env)) == 2, what="both nodes in the store")
        env.stop()
        gone, kept = env.nodes
        env.core.delete_node(gone)
        assert _stored_nodes(env) == {gone: True, kept: True}  # nobody noticed
        env.start()
        wait_for(lambda: _stored_nodes(env) == {kept: True}, what="the gone node retired")


def _pytorchjob(name: str, *replicas: str) -> dict[str, Any]:
    """A suspended, labelled PyTorchJob with one 8-GPU pod per replica type."""
    template = job_manifest("unused")["spec"]["template"]
    return {
        "apiVersion": f"{PyTorchJob.GROUP}/{PyTorchJob.VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "default"}},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {r: {"replicas": 1, "template": template} for r in replicas},
        },
    }


def test_a_pytorchjob_gang_runs_through_the_controller_and_finishes(
    control_plane: ControlPlane, engine: Engine, database_url: str
) -> None:
    with kube_env(control_plane, engine, database_url) as env:
        env.setup()
        install_job_crds(env.api)  # before the service starts: it watches what is served
        a, _ = env.namespaces
        custom = client.CustomObjectsApi(env.api)
        group, version, plural = PyTorchJob.GROUP, PyTorchJob.VERSION, PyTorchJob.PLURAL

        def read() -> dict[str, Any]:
            got = custom.get_namespaced_custom_object(group, version, a, plural, "ddp")
            assert isinstance(got, dict)
            return got

        body = _pytorchjob("ddp", "Master", "Worker")
        env.start()
        custom.create_namespaced_custom_object(group, version, a, plural, body)
        env.wait_state("ddp", "Admitted")
        wait_for(lambda: not read()["spec"]["runPolicy"]["suspend"], what="ddp unsuspended")
        specs = read()["spec"]["pytorchReplicaSpecs"]
        for kind in ("Master", "Worker"):
            template = specs[kind]["template"]
            assert template["spec"]["nodeSelector"] == {POOL: env.suffix}
            assert template["metadata"]["labels"][WORKLOAD_LABEL] == "ddp"
        assert env.admitted_gpus() == 16

        def admitted_condition() -> bool:
            conditions = (read().get("status") or {}).get("conditions") or []
            return any(
                c["type"] == ADMITTED_CONDITION and c["status"] == "True" for c in conditions
            )

        wait_for(admitted_condition, what="QueuemgrAdmitted on the PyTorchJob's status")
        # Play the training operator: the job succeeded.
        done = {"type": "Succeeded", "status": "True", "reason": "Done", "message": "ok"}
        status = dict(read().get("status") or {})
        status["conditions"] = [*(status.get("conditions") or []), done]
        custom.patch_namespaced_custom_object_status(
            group, version, a, plural, "ddp", {"status": status}
        )
        env.wait_state("ddp", "Finished")
        assert env.states()["ddp"] == ("Finished", "Succeeded")
        assert env.admitted_gpus() == 0


def test_a_crd_installed_after_the_service_started_is_watched_and_its_jobs_queued(
    control_plane: ControlPlane, engine: Engine, database_url: str
) -> None:
    with kube_env(control_plane, engine, database_url) as env:
        env.setup()
        remove_job_crds(env.api)  # an earlier test of this control plane may have installed them
        a, _ = env.namespaces
        custom = client.CustomObjectsApi(env.api)
        group, version, plural = PyTorchJob.GROUP, PyTorchJob.VERSION, PyTorchJob.PLURAL
        body = _pytorchjob("late", "Master")
        service = env.start(kind_discovery_interval=0.5)
        assert service.kube is not None
        watched = {api.kind.KIND for api in service.kube.watch.kinds}
        assert "PyTorchJob" not in watched
        install_job_crds(env.api)
        custom.create_namespaced_custom_object(group, version, a, plural, body)
        env.wait_state("late", "Admitted")
        got = custom.get_namespaced_custom_object(group, version, a, plural, "late")
        assert isinstance(got, dict)
        assert got["spec"]["runPolicy"]["suspend"] is False
        assert {"JobSet", "PyTorchJob"} <= {api.kind.KIND for api in service.kube.watch.kinds}
