"""Each job kind's patches applied by the real kube-apiserver, behind queuemgr's webhook.

A Job, a JobSet, a PyTorchJob, a RayCluster and a RayJob (their upstream CRDs
installed in the test apiserver, see ``crds.py``) are created labelled, come
back suspended from the mutating webhook, are run with ``run_with``'s JSON
Patch (the validating webhook lets the admission through) and suspended again
with ``suspend``'s, all through the real API: the typed client for Jobs, the
dynamic client for the custom resources. The CRDs' schemas prune what they do
not know, so each patch is checked to have been kept whole.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.jobs import (
    ORIGINAL_SELECTORS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    Placement,
    PodSetAssignment,
    job_for,
)
from queuemgr.k8s.jobstatus import (
    ADMITTED_CONDITION,
    PENDING_CONDITION,
    QueueStatus,
    condition_patch,
    has_conditions,
)
from tests.integration.k8s.crds import install_job_crds
from tests.integration.k8s.webhook_fixture import wait_until_called, webhook  # noqa: F401
from tests.unit.k8s.helpers import apply_patch, manifest

pytestmark = pytest.mark.integration

PLACEMENT = Placement(
    cluster_queue="gpu",
    flavor="h100",
    node_labels={"gpu": "h100"},
    pod_sets=(PodSetAssignment(pod_set="main", nodes={"n0": 2}),),
)
JSON_PATCH = "application/json-patch+json"


def _sample(name: str, namespace: str) -> dict[str, Any]:
    """A sample manifest sized for the test's queue (8-GPU nodes) in ``namespace``."""
    obj = manifest(name)
    obj["metadata"] = {
        "name": obj["metadata"]["name"],
        "labels": {"queuemgr.io/queue-name": "default"},
    }
    obj["metadata"]["namespace"] = namespace
    if name == "job-gpu":
        spec = obj["spec"]["template"]["spec"]
        spec["initContainers"] = []
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8", "cpu": "16"}}
    return obj


def _resource(api_client: client.ApiClient, obj: dict[str, Any]) -> Any:
    return dynamic.DynamicClient(api_client).resources.get(
        api_version=obj["apiVersion"], kind=obj["kind"]
    )


@pytest.mark.usefixtures("webhook")
@pytest.mark.parametrize("name", ["job-gpu", "jobset", "pytorchjob", "raycluster", "rayjob"])
def test_suspended_at_creation_run_and_suspended_again(
    k8s_client: client.ApiClient,
    namespace: str,
    name: str,
) -> None:
    install_job_crds(k8s_client)
    wait_until_called(client.BatchV1Api(k8s_client), namespace)
    obj = _sample(name, namespace)
    if name == "jobset":
        obj["spec"]["suspend"] = False  # the webhook must force it
    resource = _resource(k8s_client, obj)

    def read() -> dict[str, Any]:
        got = resource.get(name=obj["metadata"]["name"], namespace=namespace).to_dict()
        assert isinstance(got, dict)
        return got

    def apply(ops: list[dict[str, Any]]) -> dict[str, Any]:
        expected = apply_patch(read(), ops)
        resource.patch(
            body=ops, name=obj["metadata"]["name"], namespace=namespace, content_type=JSON_PATCH
        )
        got = read()
        assert got["spec"] == expected["spec"]  # nothing pruned
        assert got["metadata"].get("annotations") == expected["metadata"].get("annotations")
        assert got["metadata"].get("labels") == expected["metadata"].get("labels")
        return got

    resource.create(body=obj, namespace=namespace)
    created = read()
    job = job_for(created)
    assert job.is_suspended()
    assert [ps.name for ps in job.pod_sets()] == [ps.name for ps in job_for(obj).pod_sets()]

    running = apply(job.run_with(PLACEMENT).as_json())
    job = job_for(running)
    assert not job.is_suspended()
    # A RayJob's default submitter has no template in the object to pin to the flavor.
    pinned = [ps for ps in job.pod_sets() if not (name == "rayjob" and ps.name == "submitter")]
    assert pinned and all(ps.node_selector.get("gpu") == "h100" for ps in pinned)
    notes = running["metadata"]["annotations"]
    assert json.loads(notes[PLACEMENT_ANNOTATION])["flavor"] == "h100"
    assert ORIGINAL_SELECTORS_ANNOTATION in notes

    stopped = apply(job.suspend().as_json())
    assert job_for(stopped).is_suspended()
    assert PLACEMENT_ANNOTATION not in stopped["metadata"]["annotations"]


@pytest.mark.usefixtures("webhook")
def test_a_running_pytorchjob_keeps_its_gang(
    k8s_client: client.ApiClient,
    namespace: str,
) -> None:
    install_job_crds(k8s_client)
    wait_until_called(client.BatchV1Api(k8s_client), namespace)
    obj = _sample("pytorchjob", namespace)
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    resource = _resource(k8s_client, obj)
    resource.create(body=obj, namespace=namespace)
    created = resource.get(name="llm-finetune", namespace=namespace).to_dict()
    ops = job_for(created).run_with(PLACEMENT).as_json()
    resource.patch(body=ops, name="llm-finetune", namespace=namespace, content_type=JSON_PATCH)
    with pytest.raises(ApiException) as refused:
        resource.patch(
            body=[
                {"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 5}
            ],
            name="llm-finetune",
            namespace=namespace,
            content_type=JSON_PATCH,
        )
    message = json.loads(refused.value.body)["message"]
    assert 'pod set "worker": 1 x (8 nvidia.com/gpu, 48 cpu, 400Gi memory) -> 5 x' in message


@pytest.mark.parametrize(
    ("name", "keeps_conditions"),
    [("jobset", True), ("pytorchjob", True), ("raycluster", True), ("rayjob", False)],
)
def test_the_status_keeps_queuemgrs_conditions_where_the_schema_has_them(
    k8s_client: client.ApiClient,
    namespace: str,
    name: str,
    keeps_conditions: bool,
) -> None:
    """The upstream schemas prune ``lastProbeTime`` (metav1.Condition has none), and
    RayJob's status has no conditions at all: the apiserver prunes the list and
    answers 200. condition_patch must still find a written condition unchanged,
    and has_conditions tells the status writer to turn conditions off for RayJob."""
    install_job_crds(k8s_client)
    obj = _sample(name, namespace)
    resource = _resource(k8s_client, obj)
    resource.create(body=obj, namespace=namespace)
    waiting = QueueStatus(admitted=False, reason="QuotaExceeded", message="8 nvidia.com/gpu short")
    created = resource.get(name=obj["metadata"]["name"], namespace=namespace).to_dict()
    ops = condition_patch(created, waiting, "2026-01-01T00:00:00Z").as_json()
    written = resource.status.patch(
        body=ops, name=obj["metadata"]["name"], namespace=namespace, content_type=JSON_PATCH
    ).to_dict()
    assert has_conditions(written) is keeps_conditions
    got = resource.get(name=obj["metadata"]["name"], namespace=namespace).to_dict()
    kept = {c["type"] for c in (got.get("status") or {}).get("conditions") or ()}
    if keeps_conditions:
        assert {PENDING_CONDITION, ADMITTED_CONDITION} <= kept
        assert not condition_patch(got, waiting, "2026-01-01T00:01:00Z")  # nothing left to write
    else:
        assert not kept
