"""Each job kind's patches applied by the real kube-apiserver, behind queuemgr's webhook.

A Job, a JobSet and a PyTorchJob (CRDs installed in the test apiserver) are
created labelled, come back suspended from the mutating webhook, are run with
``run_with``'s JSON Patch (the validating webhook lets the admission through)
and suspended again with ``suspend``'s, all through the real API: the typed
client for Jobs, the dynamic client for the custom resources.
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
from tests.integration.k8s.crds import install_job_crds
from tests.integration.k8s.webhook_fixture import wait_until_called, webhook  # noqa: F401
from tests.unit.k8s.helpers import manifest

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
@pytest.mark.parametrize("name", ["job-gpu", "jobset", "pytorchjob"])
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
        resource.patch(
            body=ops, name=obj["metadata"]["name"], namespace=namespace, content_type=JSON_PATCH
        )
        return read()

    resource.create(body=obj, namespace=namespace)
    created = read()
    job = job_for(created)
    assert job.is_suspended()
    assert [ps.name for ps in job.pod_sets()] == [ps.name for ps in job_for(obj).pod_sets()]

    running = apply(job.run_with(PLACEMENT).as_json())
    job = job_for(running)
    assert not job.is_suspended()
    assert all(ps.node_selector.get("gpu") == "h100" for ps in job.pod_sets())
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
