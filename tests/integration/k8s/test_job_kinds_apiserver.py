"""Each job kind's patches applied by the real kube-apiserver, behind queuemgr's webhook.

A Job, a JobSet, a PyTorchJob, a RayCluster and a RayJob (their upstream CRDs
installed in the test apiserver, see ``crds.py``) are created labelled, come
back suspended from the mutating webhook, are run with ``run_with``'s JSON
Patch (the validating webhook lets the admission through) and suspended again
with ``suspend``'s, all through the real API: the typed client for Jobs, the
dynamic client for the custom resources. The CRDs' schemas prune what they do
not know, so each patch is checked to have been kept whole. The flavor's
toleration lands on every pinned template and suspension takes it off again:
a Job's once the job controller has suspended it, as the API server refuses
a running Job's template change in the request that suspends it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from queuemgr.controller.kube_backend import api_error
from queuemgr.controller.ports import StaleObject
from queuemgr.core.model import TaintEffect, Toleration
from queuemgr.k8s.jobs import (
    ORIGINAL_SELECTORS_ANNOTATION,
    ORIGINAL_TOLERATIONS_ANNOTATION,
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
from queuemgr.k8s.patch import guard
from tests.integration.k8s.crds import install_job_crds
from tests.integration.k8s.webhook_fixture import wait_until_called, webhook  # noqa: F401
from tests.unit.k8s.helpers import apply_patch, manifest

pytestmark = pytest.mark.integration

PLACEMENT = Placement(
    cluster_queue="gpu",
    flavor="h100",
    node_labels={"gpu": "h100"},
    pod_sets=(PodSetAssignment(pod_set="main", nodes={"n0": 2}),),
    tolerations=(
        Toleration(key="example.com/spot", operator="Exists", effect=TaintEffect.NO_SCHEDULE),
    ),
)
TOLERATION = {"key": "example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
JSON_PATCH = "application/json-patch+json"


def _tolerations(obj: dict[str, Any]) -> dict[str, Any]:
    """Each pod template the object holds -> its tolerations field ("absent" without one)."""
    job = job_for(obj)
    out: dict[str, Any] = {}
    for t in job.templates():
        parent: Any = obj
        for token in t.tokens[:-1]:
            parent = parent[token]
        if t.tokens[-1] in parent:
            out[t.name] = parent[t.tokens[-1]]["spec"].get("tolerations", "absent")
    return out


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
    assert ORIGINAL_TOLERATIONS_ANNOTATION in notes
    assert all(TOLERATION in ts for ts in _tolerations(running).values()), running
    assert all(PLACEMENT.tolerations[0] in ps.tolerations for ps in pinned)

    stopped = apply(job.suspend().as_json())
    assert job_for(stopped).is_suspended()
    assert PLACEMENT_ANNOTATION not in stopped["metadata"]["annotations"]
    if name == "job-gpu":  # the template waits for the job controller to suspend the Job
        assert _tolerations(stopped) == _tolerations(running)
        deadline = time.monotonic() + 60
        while not job_for(stopped := read()).template_released():
            assert time.monotonic() < deadline, stopped.get("status")
            time.sleep(0.2)
        stopped = apply(job_for(stopped).suspend().as_json())
    assert _tolerations(stopped) == _tolerations(created)  # exactly the user's again
    assert ORIGINAL_TOLERATIONS_ANNOTATION not in stopped["metadata"]["annotations"]
    assert not job_for(stopped).suspend()


@pytest.mark.usefixtures("webhook")
def test_a_running_jobs_template_cannot_change_in_the_request_that_suspends_it(
    k8s_client: client.ApiClient,
    namespace: str,
) -> None:
    """Why ``suspend`` leaves a running Job's tolerations for later: the API server
    refuses them in the same request (a Job's scheduling directives change only while
    it is suspended), and a refused suspension would leave the Job running."""
    wait_until_called(client.BatchV1Api(k8s_client), namespace)
    obj = _sample("job-gpu", namespace)
    resource = _resource(k8s_client, obj)
    resource.create(body=obj, namespace=namespace)
    created = resource.get(name="pretrain", namespace=namespace).to_dict()
    ops = job_for(created).run_with(PLACEMENT).as_json()
    resource.patch(body=ops, name="pretrain", namespace=namespace, content_type=JSON_PATCH)
    running = resource.get(name="pretrain", namespace=namespace).to_dict()
    users = created["spec"]["template"]["spec"]["tolerations"]
    both = [
        *job_for(running).suspend().as_json(),
        {"op": "replace", "path": "/spec/template/spec/tolerations", "value": users},
    ]
    with pytest.raises(ApiException) as refused:
        resource.patch(body=both, name="pretrain", namespace=namespace, content_type=JSON_PATCH)
    assert refused.value.status == 422
    assert "spec.template" in json.loads(refused.value.body)["message"]
    assert not job_for(resource.get(name="pretrain", namespace=namespace).to_dict()).is_suspended()


@pytest.mark.usefixtures("webhook")
def test_a_patch_built_on_a_stale_copy_is_told_apart_from_a_refused_one(
    k8s_client: client.ApiClient,
    namespace: str,
) -> None:
    """Another writer got there first: the guard's ``test`` fails with the API server's
    bare 422, which the backend retries quietly (``StaleObject``); a change the server
    refuses is a 422 that names the field, and stays an error worth a warning."""
    batch = client.BatchV1Api(k8s_client)  # the typed client, as the backend's
    wait_until_called(batch, namespace)
    obj = _sample("job-gpu", namespace)
    _resource(k8s_client, obj).create(body=obj, namespace=namespace)

    def read() -> dict[str, Any]:
        got = k8s_client.sanitize_for_serialization(
            batch.read_namespaced_job("pretrain", namespace)
        )
        assert isinstance(got, dict)
        return got

    def patch(ops: list[dict[str, Any]]) -> None:
        batch.patch_namespaced_job("pretrain", namespace, ops, _content_type=JSON_PATCH)

    created = read()
    version = created["metadata"]["resourceVersion"]
    patch([{"op": "add", "path": "/metadata/labels/other-writer", "value": "was-here"}])
    start = guard(("metadata", "resourceVersion"), version) + job_for(created).run_with(PLACEMENT)
    with pytest.raises(ApiException) as lost:
        patch(start.as_json())
    assert isinstance(api_error("start", "ns/pretrain", lost.value), StaleObject)

    fresh = guard(("metadata", "resourceVersion"), read()["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as invalid:
        patch([*fresh.as_json(), {"op": "replace", "path": "/spec/parallelism", "value": -1}])
    error = api_error("start", "ns/pretrain", invalid.value)
    assert not isinstance(error, StaleObject)
    assert "parallelism" in str(error)


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
