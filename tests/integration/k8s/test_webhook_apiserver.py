"""The real kube-apiserver calls queuemgr's admission webhook over TLS (see webhook_fixture)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.apiserver import ApiNamespaceLabels
from queuemgr.k8s.jobs import QUEUE_LABEL
from tests.integration.k8s.webhook_fixture import (
    NAME_LABEL,
    denied,
    job,
    wait_until_called,
    webhook,  # noqa: F401  (the fixture)
)

pytestmark = [pytest.mark.integration]


@pytest.mark.usefixtures("webhook")
def test_labelled_jobs_are_created_suspended_and_bad_queues_refused(
    k8s_client: client.ApiClient, namespace: str
) -> None:
    batch = client.BatchV1Api(k8s_client)
    wait_until_called(batch, namespace)

    created = batch.create_namespaced_job(namespace, job("train", "default"))
    assert created.spec.suspend is True
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True

    plain = batch.create_namespaced_job(namespace, job("plain", None))
    assert plain.spec.suspend is False  # unlabelled: untouched

    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job(namespace, job("typo", "defualt"))
    message = denied(refused.value)
    assert 'admission webhook "validate-jobs.queuemgr.io" denied the request' in message
    assert f'LocalQueue "defualt" does not exist in namespace "{namespace}"' in message
    assert 'did you mean "default"?' in message

    with pytest.raises(ApiException) as too_big:
        batch.create_namespaced_job(namespace, job("huge", "default", gpus=16))
    assert "one pod requests 16 nvidia.com/gpu" in denied(too_big.value)

    with pytest.raises(ApiException) as no_gpu:
        batch.create_namespaced_job(namespace, job("cpu-only", "default", gpus=0))
    assert "only GPU quota" in denied(no_gpu.value)


@pytest.mark.usefixtures("webhook")
def test_a_running_job_keeps_its_queue_and_gang(
    k8s_client: client.ApiClient, namespace: str
) -> None:
    batch = client.BatchV1Api(k8s_client)
    wait_until_called(batch, namespace)
    batch.create_namespaced_job(namespace, job("train", "default"))
    # The controller's admission: unsuspend (an UPDATE through the validating webhook).
    batch.patch_namespaced_job(
        "train", namespace, [{"op": "replace", "path": "/spec/suspend", "value": False}]
    )
    with pytest.raises(ApiException) as refused:
        batch.patch_namespaced_job(
            "train",
            namespace,
            [
                {
                    "op": "replace",
                    "path": f"/metadata/labels/{QUEUE_LABEL.replace('/', '~1')}",
                    "value": "other",
                }
            ],
        )
    assert "the queue of a running job cannot change (default -> other)" in denied(refused.value)
    with pytest.raises(ApiException) as rescaled:
        batch.patch_namespaced_job(
            "train", namespace, [{"op": "replace", "path": "/spec/parallelism", "value": 1}]
        )
    assert "the pods of a running job cannot change" in denied(rescaled.value)
    # Preemption: suspending is fine.
    batch.patch_namespaced_job(
        "train", namespace, [{"op": "replace", "path": "/spec/suspend", "value": True}]
    )
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True


@pytest.mark.usefixtures("webhook")
def test_unmanaged_namespaces_are_never_sent_to_the_webhook(
    k8s_client: client.ApiClient, namespace: str
) -> None:
    batch = client.BatchV1Api(k8s_client)
    wait_until_called(batch, namespace)
    core = client.CoreV1Api(k8s_client)
    other = f"test-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": other}})
    try:
        created = batch.create_namespaced_job(other, job("elsewhere", "no-such-queue"))
        assert created.spec.suspend is False
    finally:
        core.delete_namespace(other)


def test_namespace_labels_from_the_api(k8s_client: client.ApiClient, namespace: str) -> None:
    labels = ApiNamespaceLabels(k8s_client)
    assert labels.labels(namespace) == {NAME_LABEL: namespace}
    assert labels.labels("no-such-namespace") == {}
