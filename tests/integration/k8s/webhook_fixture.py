"""queuemgr's admission webhook, registered with the test's real kube-apiserver.

The ``webhook`` fixture runs the webhook server in this process on 127.0.0.1
with a self-generated CA; the webhook configurations point at it by URL, their
``caBundle`` patched in by ``patch_ca_bundle``, and select only the test's
namespace, so nothing else on the control plane is affected. Test modules
import the fixture and use it with ``pytest.mark.usefixtures("webhook")``.
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
from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.apiserver import ApiNamespaceLabels, patch_ca_bundle
from queuemgr.k8s.certs import StaticCertificates, generate
from queuemgr.k8s.jobs import QUEUE_LABEL
from queuemgr.k8s.rules import WebhookSettings
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.testing import InMemoryDirectory
from queuemgr.k8s.webhook_registration import url_client_config, webhook_configurations
from queuemgr.k8s.webhook_server import WebhookServer
from tests.controlplane.harness import wait_for

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


def wait_until_called(batch: client.BatchV1Api, namespace: str) -> None:
    """New webhook configurations reach the API server's admission chain within seconds."""

    def suspended_on_dry_run() -> bool:
        created = batch.create_namespaced_job(namespace, job("probe", "default"), dry_run="All")
        return bool(created.spec.suspend)

    wait_for(suspended_on_dry_run, timeout=30, interval=0.5, what="the webhook to be called")


def denied(error: ApiException) -> str:
    body = json.loads(error.body)
    return str(body["message"])
