"""``queuemgr serve`` with its webhook enabled, called by the real kube-apiserver.

Two ``queuemgr serve`` processes (real subprocesses, one database) serve the
webhook with self-signed certificates and each adds its own CA to the
configurations' ``caBundle``. The configurations point at the first by URL
on 127.0.0.1 and select only the test's namespace; the queues come from the
simulated cluster file. A labelled Job is created suspended, a Job naming a
queue that doesn't exist is refused with the webhook's message, and both
replicas' certificates verify against the patched bundle.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.apiserver import trust_ca
from queuemgr.k8s.certs import generate
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.webhook_registration import url_client_config, webhook_configurations
from tests.controlplane.harness import ControlPlane, wait_for
from tests.integration.k8s.webhook_fixture import NAME_LABEL, denied, job, wait_until_called
from tests.integration.service.processes import ServeProcess, free_port, write_config

pytestmark = [pytest.mark.integration]


def _cluster(namespace: str) -> str:
    return f"""
flavors:
  - {{name: h100, node_labels: {{gpu: h100}}}}
nodes:
  - {{name: node, count: 2, flavor: h100, labels: {{gpu: h100}},
      allocatable: {{nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}}}}
cluster_queues:
  - name: gpu
    namespaces: [{namespace}]
    resources:
      - flavor: h100
        nominal: {{nvidia.com/gpu: 16, cpu: 192, memory: 2Ti}}
local_queues:
  - {{namespace: {namespace}, name: default, cluster_queue: gpu}}
"""


class Replica:
    def __init__(self, process: ServeProcess, webhook_port: int) -> None:
        self.process = process
        self.webhook_port = webhook_port

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def webhook_get(self, path: str, cafile: Path | None = None) -> tuple[int, str]:
        """(status, body) over HTTPS; verified against ``cafile`` when given."""
        if cafile is None:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(cafile=str(cafile))
        try:
            with urllib.request.urlopen(self.url + path, timeout=3, context=context) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)


@pytest.fixture
def replicas(
    control_plane: ControlPlane,
    k8s_client: client.ApiClient,
    namespace: str,
    database_url: str,
    tmp_path: Path,
) -> Iterator[tuple[list[Replica], tuple[str, str]]]:
    suffix = uuid.uuid4().hex[:8]
    names = (f"queuemgr-mutating-{suffix}", f"queuemgr-validating-{suffix}")
    selector = f"{NAME_LABEL}={namespace}"
    ports = [free_port(), free_port()]
    api = client.AdmissionregistrationV1Api(k8s_client)
    first = f"https://127.0.0.1:{ports[0]}"
    mutating, validating = webhook_configurations(
        mutate_client=url_client_config(first, "/mutate"),
        validate_client=url_client_config(first, "/validate"),
        namespace_selector=LabelSelector.parse(selector),
        mutating_name=names[0],
        validating_name=names[1],
    )
    api.create_mutating_webhook_configuration(mutating)
    api.create_validating_webhook_configuration(validating)
    write_config(
        tmp_path,
        _cluster(namespace),
        cycle_interval=30,
        webhook={
            "enabled": True,
            "self_signed": True,
            "dns_names": ["localhost"],
            "ip_addresses": ["127.0.0.1"],
            "patch_ca_bundle": True,
            "mutating_configuration": names[0],
            "validating_configuration": names[1],
            "managed_namespaces": selector,
        },
    )
    started: list[Replica] = []
    try:
        for i, port in enumerate(ports):
            process = ServeProcess(
                tmp_path,
                database_url=database_url,
                replica=f"r{i}",
                extra_env={
                    "KUBECONFIG": str(control_plane.kubeconfig()),
                    "QUEUEMGR_WEBHOOK_ADDRESS": f"127.0.0.1:{port}",
                },
            )
            started.append(Replica(process.start(), port))
            # One after the other: the second must add its CA, not replace the first's.
            wait_for(
                lambda r=started[-1]: r.webhook_get("/readyz")[0] == 200 or not r.process.alive,
                timeout=60,
                what=f"replica r{i}'s webhook to be ready",
            )
            assert started[-1].process.alive, started[-1].process.log()
        yield started, names
    finally:
        for replica in started:
            if replica.process.alive:
                replica.process.terminate()
        api.delete_mutating_webhook_configuration(names[0])
        api.delete_validating_webhook_configuration(names[1])


def _bundles(k8s_client: client.ApiClient, names: tuple[str, str]) -> list[bytes]:
    api = client.AdmissionregistrationV1Api(k8s_client)
    hooks = list(api.read_mutating_webhook_configuration(names[0]).webhooks)
    hooks += list(api.read_validating_webhook_configuration(names[1]).webhooks)
    return [base64.b64decode(h.client_config.ca_bundle) for h in hooks]


def test_serve_suspends_labelled_jobs_and_refuses_bad_queues(
    replicas: tuple[list[Replica], tuple[str, str]],
    k8s_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    started, names = replicas
    # Both replicas' CAs are in every webhook's bundle, each replica's
    # certificate verifies against it, and both serve (leader or standby).
    bundles = _bundles(k8s_client, names)
    assert len(bundles) == 2 and bundles[0] == bundles[1]
    assert bundles[0].count(b"-----BEGIN CERTIFICATE-----") == 2
    cafile = tmp_path / "bundle.pem"
    cafile.write_bytes(bundles[0])
    for replica in started:
        assert replica.webhook_get("/healthz", cafile=cafile) == (200, "ok\n")

    batch = client.BatchV1Api(k8s_client)
    wait_until_called(batch, namespace)

    created = batch.create_namespaced_job(namespace, job("train", "default"))
    assert created.spec.suspend is True
    assert batch.read_namespaced_job("train", namespace).spec.suspend is True

    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job(namespace, job("typo", "defualt"))
    message = denied(refused.value)
    assert 'admission webhook "validate-jobs.queuemgr.io" denied the request' in message
    assert f'LocalQueue "defualt" does not exist in namespace "{namespace}"' in message
    assert 'did you mean "default"?' in message

    # The queue directory is the database: a queue the store doesn't have is refused too.
    with pytest.raises(ApiException) as unknown:
        batch.create_namespaced_job(namespace, job("elsewhere", "team-b"))
    assert 'LocalQueue "team-b" does not exist' in denied(unknown.value)


def test_a_restarted_replica_adds_its_new_ca(
    replicas: tuple[list[Replica], tuple[str, str]],
    k8s_client: client.ApiClient,
    namespace: str,
) -> None:
    started, names = replicas
    first = started[0]
    first.process.terminate()
    first.process.start()  # a new process: a new CA, put first in the bundle
    wait_for(
        lambda: first.webhook_get("/readyz")[0] == 200 or not first.process.alive,
        timeout=60,
        what="the restarted replica's webhook",
    )
    assert first.process.alive, first.process.log()
    assert all(b.count(b"-----BEGIN CERTIFICATE-----") == 3 for b in _bundles(k8s_client, names))
    batch = client.BatchV1Api(k8s_client)
    wait_until_called(batch, namespace)
    created = batch.create_namespaced_job(namespace, job("again", "default"))
    assert created.spec.suspend is True
    body = json.dumps(created.to_dict(), default=str)
    assert "queuemgr.io/queue-name" in body


def test_trust_ca_puts_ours_first_drops_expired_cas_and_keeps_eight(
    k8s_client: client.ApiClient, namespace: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    names = (f"queuemgr-mutating-{suffix}", f"queuemgr-validating-{suffix}")
    expired = generate(
        dns_names=["old"], days=1, now=dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    )
    others = [generate(dns_names=[f"r{i}"]) for i in range(9)]
    start = expired.ca_pem + b"".join(c.ca_pem for c in others)
    mutating, validating = webhook_configurations(
        mutate_client=url_client_config("https://127.0.0.1:9", "/mutate"),
        validate_client=url_client_config("https://127.0.0.1:9", "/validate"),
        ca_bundle=start,
        namespace_selector=LabelSelector.parse(f"{NAME_LABEL}={namespace}"),
        mutating_name=names[0],
        validating_name=names[1],
    )
    api = client.AdmissionregistrationV1Api(k8s_client)
    api.create_mutating_webhook_configuration(mutating)
    api.create_validating_webhook_configuration(validating)
    try:
        ours = generate(dns_names=["new"])
        assert trust_ca(k8s_client, ours.ca_pem, mutating=names[0], validating=names[1]) == 2
        expected = ours.ca_pem + b"".join(c.ca_pem for c in others[:7])
        assert _bundles(k8s_client, names) == [expected, expected]
        # Already trusted: nothing written, whatever its position.
        assert trust_ca(k8s_client, others[0].ca_pem, mutating=names[0], validating=names[1]) == 0
    finally:
        api.delete_mutating_webhook_configuration(names[0])
        api.delete_validating_webhook_configuration(names[1])
