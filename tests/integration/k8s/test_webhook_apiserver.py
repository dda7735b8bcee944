"""The real kube-apiserver calls queuemgr's admission webhook over TLS.

The webhook server runs in this process on 127.0.0.1 with a self-generated CA;
the webhook configurations point at it by URL, their ``caBundle`` patched in by
``patch_ca_bundle``, and select only the test's namespace so nothing else on the
control plane is affected.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    ResourceFlavor,
)
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.apiserver import ApiNamespaceLabels, patch_ca_bundle
from queuemgr.k8s.certs import StaticCertificates, generate
from queuemgr.k8s.fakes import InMemoryDirectory
from queuemgr.k8s.jobs import QUEUE_LABEL
from queuemgr.k8s.rules import WebhookSettings
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.server import WebhookServer
from queuemgr.k8s.webhook import AdmissionHandler
from queuemgr.k8s.webhookconfig import url_client_config, webhook_configurations
from tests.controlplane.harness import wait_for

pytestmark = pytest.mark.integration

GPU, CPU, MEM = ResourceName("nvidia.com/gpu"), ResourceName("cpu"), ResourceName("memory")
NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


def _directory(namespace: str) -> InMemoryDirectory:
    h100 = ResourceFlavor(name=FlavorName("h100"), node_labels={"gpu": "h100"})
    return InMemoryDirectory(
        flavors=[h100],
        nodes=[
            Node(
                name=NodeName("n0"),
                labels={"gpu": "h100"},
                allocatable={GPU: 8, CPU: 96_000, MEM: 2**40},
            )
        ],
        cluster_queues=[
            ClusterQueue(
                name=ClusterQueueName("gpu"),
                flavors=(FlavorQuota(flavor=h100.name, nominal={GPU: 16}),),
                namespaces=frozenset({namespace}),
            )
        ],
        local_queues=[
            LocalQueue(namespace=namespace, name="default", cluster_queue=ClusterQueueName("gpu"))
        ],
    )


@pytest.fixture
def webhook(k8s_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """queuemgr's webhook serving ``namespace``; yields the namespace."""
    cert = generate(dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    selector = LabelSelector.parse(f"{NAME_LABEL}={namespace}")
    handler = AdmissionHandler(
        _directory(namespace),
        WebhookSettings(namespace_selector=selector),
        ApiNamespaceLabels(k8s_client),
    )
    suffix = uuid.uuid4().hex[:8]
    names = (f"queuemgr-mutating-{suffix}", f"queuemgr-validating-{suffix}")
    api = client.AdmissionregistrationV1Api(k8s_client)
    with WebhookServer(handler, StaticCertificates(cert), host="127.0.0.1", port=0) as server:
        mutating, validating = webhook_configurations(
            mutate_client=url_client_config(server.url, "/mutate"),
            validate_client=url_client_config(server.url, "/validate"),
            ca_bundle=None,  # patched in below, as the service does with its own CA
            namespace_selector=selector,
            mutating_name=names[0],
            validating_name=names[1],
        )
        api.create_mutating_webhook_configuration(mutating)
        api.create_validating_webhook_configuration(validating)
        try:
            assert (
                patch_ca_bundle(k8s_client, cert.ca_pem, mutating=names[0], validating=names[1])
                == 2
            )
            assert (
                patch_ca_bundle(k8s_client, cert.ca_pem, mutating=names[0], validating=names[1])
                == 0
            )
            yield namespace
        finally:
            api.delete_mutating_webhook_configuration(names[0])
            api.delete_validating_webhook_configuration(names[1])


def job(name: str, queue: str | None, gpus: int = 2, parallelism: int = 2) -> dict[str, Any]:
    labels = {} if queue is None else {QUEUE_LABEL: queue}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                }
            },
        },
    }


def _wait_until_called(batch: client.BatchV1Api, namespace: str) -> None:
    """New webhook configurations reach the API server's admission chain within seconds."""

    def suspended_on_dry_run() -> bool:
        created = batch.create_namespaced_job(namespace, job("probe", "default"), dry_run="All")
        return bool(created.spec.suspend)

    wait_for(suspended_on_dry_run, timeout=30, interval=0.5, what="the webhook to be called")


def _denied(error: ApiException) -> str:
    body = json.loads(error.body)
    return str(body["message"])


def test_labelled_jobs_are_created_suspended_and_bad_queues_refused(
    k8s_client: client.ApiClient, webhook: str
) -> None:
    namespace = webhook
    batch = client.BatchV1Api(k8s_client)
    _wait_until_called(batch, namespace)

    created = batch.create_namespaced_job(namespace, job("train", "default"))
    assert created.spec.suspend is True
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True

    plain = batch.create_namespaced_job(namespace, job("plain", None))
    assert plain.spec.suspend is False  # unlabelled: untouched

    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job(namespace, job("typo", "defualt"))
    message = _denied(refused.value)
    assert 'admission webhook "validate-jobs.queuemgr.io" denied the request' in message
    assert f'LocalQueue "defualt" does not exist in namespace "{namespace}"' in message
    assert 'did you mean "default"?' in message

    with pytest.raises(ApiException) as too_big:
        batch.create_namespaced_job(namespace, job("huge", "default", gpus=16))
    assert "one pod requests 16 nvidia.com/gpu" in _denied(too_big.value)

    with pytest.raises(ApiException) as no_gpu:
        batch.create_namespaced_job(namespace, job("cpu-only", "default", gpus=0))
    assert "only GPU quota" in _denied(no_gpu.value)


def test_a_running_job_keeps_its_queue_and_gang(k8s_client: client.ApiClient, webhook: str) -> None:
    namespace = webhook
    batch = client.BatchV1Api(k8s_client)
    _wait_until_called(batch, namespace)
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
    assert "the queue of a running job cannot change (default -> other)" in _denied(refused.value)
    with pytest.raises(ApiException) as rescaled:
        batch.patch_namespaced_job(
            "train", namespace, [{"op": "replace", "path": "/spec/parallelism", "value": 1}]
        )
    assert "the pods of a running job cannot change" in _denied(rescaled.value)
    # Preemption: suspending is fine.
    batch.patch_namespaced_job(
        "train", namespace, [{"op": "replace", "path": "/spec/suspend", "value": True}]
    )
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True


def test_unmanaged_namespaces_are_never_sent_to_the_webhook(
    k8s_client: client.ApiClient, webhook: str
) -> None:
    batch = client.BatchV1Api(k8s_client)
    _wait_until_called(batch, webhook)
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
