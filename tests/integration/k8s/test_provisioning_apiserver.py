"""The provisioning-request admission check against the real apiserver and the upstream
ProvisioningRequest CRD (tests/integration/k8s/crds.py). The test plays the cluster
autoscaler: it sets the request's conditions, then creates the Node it "added".

A gang of a ClusterQueue that lists the check is admitted as a reservation: its
ProvisioningRequest exists with the check's class and one PodTemplate per pod set,
its Job stays suspended, and ``why`` and the Job say ``WaitingForAdmissionCheck``.
``Provisioned=True`` starts it. A gang whose request gets ``Failed=True`` is evicted
(``AdmissionCheckFailed``), requeued after the check's backoff, and reserved again
under a new request. A gang that fits the existing nodes only with those a flavor's
autoscale declares is admitted onto them in a queue with the check, and runs once its
request is provisioned and the autoscaler's Node exists.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from kubernetes import client

from queuemgr.cli.main import main
from queuemgr.controller.kube_section import AdmissionCheckSettings
from queuemgr.core.model import (
    ClusterQueueName,
    FlavorAutoscale,
    FlavorName,
    FlavorQuota,
    NodeTemplate,
)
from queuemgr.k8s.jobstatus import REASON_ANNOTATION
from queuemgr.k8s.provisioning import CHECK_LABEL, GROUP, PLURAL, VERSION
from queuemgr.store import config_objects as store_config
from tests.controlplane.harness import add_gpu_node, wait_for
from tests.integration.k8s.crds import install_provisioning_crd
from tests.integration.k8s.kube_env import GPU, POOL, FakeKubelet, KubeEnv, job_manifest

pytestmark = pytest.mark.integration

CHECK = "provisioning-request"
CLASS = "check-capacity.autoscaling.x-k8s.io"


def _checked_queue(env: KubeEnv) -> None:
    with env.engine.begin() as conn:
        config, _ = store_config.load_config(conn)
        cq = config.cluster_queues[ClusterQueueName("team-a")]
        assert cq.flavors == (FlavorQuota(flavor=FlavorName("h100"), nominal={GPU: 8}),)
        store_config.upsert_cluster_queue(
            conn, dataclasses.replace(cq, admission_checks=(CHECK,)), actor="test"
        )


def _requests(env: KubeEnv, ns: str) -> dict[str, Any]:
    found: Any = client.CustomObjectsApi(env.api).list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, label_selector=CHECK_LABEL
    )
    return {r["metadata"]["name"]: r for r in found["items"]}


def _condition(env: KubeEnv, ns: str, name: str, kind: str, status: str, message: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = _requests(env, ns)[name]
    kept = [c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] != kind]
    kept.append(
        {
            "type": kind,
            "status": status,
            "reason": kind,
            "message": message,
            "lastTransitionTime": now,
        }
    )
    client.CustomObjectsApi(env.api).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, name, {"status": {"conditions": kept}}
    )


def _reason(env: KubeEnv, ns: str, job: str) -> str:
    return str((env.job(ns, job).metadata.annotations or {}).get(REASON_ANNOTATION, ""))


def _why(env: KubeEnv, ns: str, job: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        main,
        ["why", job, "-n", ns, "-o", "json"],
        env={"QUEUEMGR_DATABASE_URL": env.database_url},
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.output)
    return doc


def test_a_gang_waits_for_its_request_then_starts_or_is_requeued(env: KubeEnv) -> None:
    install_provisioning_crd(env.api)
    _checked_queue(env)
    a, _ = env.namespaces
    check = AdmissionCheckSettings(name=CHECK, provisioning_class=CLASS, backoff=2, backoff_max=4)
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start(admission_checks=(check,))
        env.batch.create_namespaced_job(a, job_manifest("gang"))
        env.wait_state("gang", "Admitted")  # the reservation: quota and placement held
        first = "gang-provisioning-request-1"
        wait_for(lambda: first in _requests(env, a), what="the gang's ProvisioningRequest")
        spec = _requests(env, a)[first]["spec"]
        assert spec["provisioningClassName"] == CLASS
        (pod_set,) = spec["podSets"]
        assert pod_set["count"] == 1
        template = env.core.read_namespaced_pod_template(pod_set["podTemplateRef"]["name"], a)
        assert template.template.spec.node_selector[POOL] == env.suffix
        assert template.template.spec.containers[0].resources.limits == {"nvidia.com/gpu": "8"}

        _condition(env, a, first, "Provisioned", "False", "waiting for 1 node")
        waiting = f"WaitingForAdmissionCheck: {CHECK} (Provisioned=False: waiting for 1 node)"
        wait_for(lambda: _reason(env, a, "gang") == waiting, what="the reason on the Job")
        assert env.suspended(a, "gang") and not env.bound_pods(a, "gang")
        why = _why(env, a, "gang")
        assert (why["reason"], why["message"]) == (
            "WaitingForAdmissionCheck",
            f"{CHECK} (Provisioned=False: waiting for 1 node)",
        )

        # The autoscaler provisions: the condition, then the Node it added.
        _condition(env, a, first, "Provisioned", "True", "provisioned")
        node = f"gpu-{env.suffix}-new"
        add_gpu_node(env.api, node, gpus=8, labels={POOL: env.suffix})
        env.nodes.append(node)
        env.wait_running(a, "gang", 1)
        wait_for(lambda: _reason(env, a, "gang").startswith("Admitted"), what="Admitted")
        assert _why(env, a, "gang")["reason"] != "WaitingForAdmissionCheck"
        kubelet.finish(a, "gang", 1)
        env.wait_state("gang", "Finished")
        wait_for(lambda: not _requests(env, a), what="the finished gang's request deleted")
        wait_for(lambda: not env.core.list_namespaced_pod_template(a).items, what="templates")

        # A request that fails: evicted, requeued after the backoff, asked for again.
        env.batch.create_namespaced_job(a, job_manifest("unlucky"))
        env.wait_state("unlucky", "Admitted")
        request = "unlucky-provisioning-request-1"
        wait_for(lambda: request in _requests(env, a), what="unlucky's request")
        _condition(env, a, request, "Failed", "True", "out of stock")
        wait_for(
            lambda: env.states()["unlucky"] == ("Evicted", "AdmissionCheckFailed"),
            timeout=30,
            what="unlucky evicted for its failed check",
        )
        assert env.suspended(a, "unlucky")
        wait_for(
            lambda: _reason(env, a, "unlucky").startswith("AdmissionCheckFailed"),
            what="the eviction's reason on the Job",
        )
        assert "Failed=True: out of stock" in _reason(env, a, "unlucky")
        again = "unlucky-provisioning-request-2"
        wait_for(
            lambda: env.states()["unlucky"][0] == "Admitted" and again in _requests(env, a),
            timeout=30,
            what="unlucky requeued after its backoff and reserved under a new request",
        )
        wait_for(lambda: request not in _requests(env, a), what="the failed request deleted")
        assert env.suspended(a, "unlucky")


def test_a_gang_too_big_for_the_nodes_waits_for_the_autoscalers_nodes(env: KubeEnv) -> None:
    """The flavor may grow to three nodes (autoscale): a gang of three 8-GPU pods fits
    the two existing nodes only with a virtual one, which only a queue with the check
    plans on. Admitted there, it waits for its ProvisioningRequest, and runs once the
    test (the autoscaler) sets Provisioned=True and adds the Node."""
    install_provisioning_crd(env.api)
    a, _ = env.namespaces
    template = NodeTemplate(allocatable={GPU: 8})
    with env.engine.begin() as conn:
        config, _ = store_config.load_config(conn)
        flavor = config.flavors[FlavorName("h100")]
        store_config.upsert_flavor(
            conn,
            dataclasses.replace(flavor, autoscale=FlavorAutoscale(max_nodes=3, node=template)),
            actor="test",
        )
        cq = config.cluster_queues[ClusterQueueName("team-a")]
        bigger = dataclasses.replace(
            cq, flavors=(FlavorQuota(flavor=FlavorName("h100"), nominal={GPU: 24}),)
        )
        store_config.upsert_cluster_queue(conn, bigger, actor="test")
    check = AdmissionCheckSettings(name=CHECK, provisioning_class=CLASS)
    with FakeKubelet(env.plane, list(env.namespaces)) as kubelet:
        env.start(admission_checks=(check,))
        env.batch.create_namespaced_job(a, job_manifest("big", pods=3))
        wait_for(lambda: "big" in env.states(), what="big's workload")
        time.sleep(3)  # some cycles: no check, no virtual node, no fit
        assert env.states()["big"][0] == "Inadmissible"  # its gang fits no nodes there
        assert not _requests(env, a)

        with env.engine.begin() as conn:
            store_config.upsert_cluster_queue(
                conn, dataclasses.replace(bigger, admission_checks=(CHECK,)), actor="test"
            )
        env.wait_state("big", "Admitted")  # two existing nodes and a virtual one
        with env.engine.connect() as conn:
            nodes = {r.node for r in conn.execute(sa.text("SELECT node FROM placements"))}
        assert nodes == {*env.nodes, "h100~1"}
        request = "big-provisioning-request-1"
        wait_for(lambda: request in _requests(env, a), what="big's ProvisioningRequest")
        (pod_set,) = _requests(env, a)[request]["spec"]["podSets"]
        assert pod_set["count"] == 3
        _condition(env, a, request, "Provisioned", "False", "scaling up")
        wait_for(
            lambda: "Provisioned=False: scaling up" in _reason(env, a, "big"),
            what="big waiting for its request",
        )
        assert env.suspended(a, "big") and not env.bound_pods(a, "big")

        _condition(env, a, request, "Provisioned", "True", "provisioned")
        node = f"gpu-{env.suffix}-new"
        add_gpu_node(env.api, node, gpus=8, labels={POOL: env.suffix})
        env.nodes.append(node)
        env.wait_running(a, "big", 3)
        assert {p.spec.node_name for p in env.bound_pods(a, "big")} == set(env.nodes)
        kubelet.finish(a, "big", 3)
        env.wait_state("big", "Finished")
        wait_for(lambda: not _requests(env, a), what="the finished gang's request deleted")
