"""A queuemgr controller on the test control plane: queues in Postgres, GPU nodes, a fake kubelet.

``KubeEnv`` gives each test its own slice of the shared control plane: two
namespaces labelled with a per-test value (the service's managed-namespace
selector), two 8-GPU nodes carrying a per-test pool label (the flavor's node
label, so the scheduler binds the test's pods only there), and a cohort of
two ClusterQueues with a LocalQueue each. :class:`FakeKubelet` plays the
kubelets of those nodes: bound pods become Running and Ready, deleted pods
go at once (there is no kubelet to confirm a graceful deletion).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import Engine, text

from queuemgr.controller.kube_section import KubernetesSettings, PodsReadySettings
from queuemgr.controller.store_directory import StoreQueueDirectory
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceFlavor,
    Toleration,
)
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.apiserver import ApiNamespaceLabels, patch_ca_bundle
from queuemgr.k8s.certs import StaticCertificates, generate
from queuemgr.k8s.jobs import QUEUE_LABEL
from queuemgr.k8s.rules import WebhookSettings
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.webhook_registration import url_client_config, webhook_configurations
from queuemgr.k8s.webhook_server import WebhookServer
from queuemgr.service.app import Service
from queuemgr.service.settings import ServiceConfig
from queuemgr.store import config_objects as store_config
from queuemgr.store.cohorts import upsert_cohort
from queuemgr.store.handle import Database
from tests.controlplane.harness import ControlPlane, add_gpu_node, set_pod_phase, wait_for

GPU = ResourceName("nvidia.com/gpu")
POOL = "queuemgr.test/pool"
MANAGED = "queuemgr.test/managed"


def job_manifest(
    name: str, *, queue: str = "default", pods: int = 1, gpus: int = 8, suspend: bool | None = True
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.invalid/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            }
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": spec,
    }


class FakeKubelet:
    """Runs bound pods (unless held) and removes deleted ones, in the given namespaces."""

    def __init__(self, plane: ControlPlane, namespaces: list[str]) -> None:
        self._client = plane.api_client()
        self._core = client.CoreV1Api(self._client)
        self._namespaces = namespaces
        self.held: set[str] = set()  # job names whose pods stay Pending
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-kubelet")

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for ns in self._namespaces:
                with contextlib.suppress(Exception):
                    self._tick(ns)

    def _tick(self, namespace: str) -> None:
        for pod in self._core.list_namespaced_pod(namespace).items:
            meta, status = pod.metadata, pod.status
            if meta.deletion_timestamp is not None:
                with contextlib.suppress(ApiException):
                    self._core.delete_namespaced_pod(meta.name, namespace, grace_period_seconds=0)
                continue
            job = (meta.labels or {}).get("batch.kubernetes.io/job-name")
            if pod.spec.node_name and status.phase == "Pending" and job not in self.held:
                with contextlib.suppress(ApiException):
                    set_pod_phase(self._client, namespace, meta.name, "Running")

    def finish(self, namespace: str, job: str, pods: int, phase: str = "Succeeded") -> None:
        """Once all ``pods`` of ``job`` run, end them with ``phase``."""

        def running() -> list[Any]:
            found = self._core.list_namespaced_pod(
                namespace, label_selector=f"batch.kubernetes.io/job-name={job}"
            ).items
            ready = [p for p in found if p.status.phase == "Running"]
            return ready if len(ready) >= pods else []

        for p in wait_for(running, what=f"{pods} running pods of {namespace}/{job}"):
            set_pod_phase(self._client, namespace, p.metadata.name, phase)


@dataclass
class KubeEnv:
    plane: ControlPlane
    api: client.ApiClient
    engine: Engine
    database_url: str
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    namespaces: tuple[str, str] = ("", "")
    nodes: list[str] = field(default_factory=list)
    service: Service | None = None

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def setup(
        self,
        *,
        gpus_per_node: int = 8,
        node_count: int = 2,
        nominal: int = 8,
        reclaim: ReclaimWithinCohort = ReclaimWithinCohort.NEVER,
        tree: bool = False,
        tolerations: tuple[Toleration, ...] = (),
    ) -> None:
        """Two teams in cohort ``research``; with ``tree``, cousins instead: team-a in
        ``lab-a`` and team-b in ``lab-b``, both under ``research``, lending through it."""
        a, b = f"team-a-{self.suffix}", f"team-b-{self.suffix}"
        self.namespaces = (a, b)
        for ns in self.namespaces:
            self.core.create_namespace({"metadata": {"name": ns, "labels": {MANAGED: self.suffix}}})
        for i in range(node_count):
            name = f"gpu-{self.suffix}-{i}"
            add_gpu_node(self.api, name, gpus=gpus_per_node, labels={POOL: self.suffix})
            self.nodes.append(name)
        flavor = ResourceFlavor(
            name=FlavorName("h100"), node_labels={POOL: self.suffix}, tolerations=tolerations
        )
        preemption = PreemptionPolicy(reclaim_within_cohort=reclaim)
        with self.engine.begin() as conn:
            store_config.upsert_flavor(conn, flavor, actor="test")
            research = CohortName("research")
            upsert_cohort(conn, Cohort(name=research, fair_sharing=True), actor="test")
            labs = (CohortName("lab-a"), CohortName("lab-b")) if tree else (research, research)
            for lab in set(labs) - {research}:
                upsert_cohort(conn, Cohort(name=lab, parent=research), actor="test")
            for ns, team, lab in zip(self.namespaces, ("team-a", "team-b"), labs, strict=True):
                store_config.upsert_cluster_queue(
                    conn,
                    ClusterQueue(
                        name=ClusterQueueName(team),
                        cohort=lab,
                        flavors=(FlavorQuota(flavor=flavor.name, nominal={GPU: nominal}),),
                        namespaces=frozenset({ns}),
                        preemption=preemption,
                    ),
                    actor="test",
                )
                store_config.upsert_local_queue(
                    conn,
                    LocalQueue(namespace=ns, name="default", cluster_queue=ClusterQueueName(team)),
                    actor="test",
                )

    def config(self, **kube: Any) -> ServiceConfig:
        settings: dict[str, Any] = {
            "kubeconfig": Path(self.plane.kubeconfig()),
            "managed_namespaces": f"{MANAGED}={self.suffix}",
            "qps": 50.0,
            "burst": 100,
            "stop_timeout": 10.0,
            "pods_ready": None,
        }
        settings.update(kube)
        return ServiceConfig(
            database_url=self.database_url,
            backend="kubernetes",
            cycle_interval=1.0,
            http_port=0,
            replica=f"test-{self.suffix}",
            kubernetes=KubernetesSettings(**settings),
        )

    def start(self, **kube: Any) -> Service:
        self.service = Service(self.config(**kube))
        self.service.start()
        return self.service

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def teardown(self) -> None:
        self.stop()
        for ns in self.namespaces:
            if ns:
                with contextlib.suppress(ApiException):
                    self.core.delete_namespace(ns)
        for node in self.nodes:
            with contextlib.suppress(ApiException):
                self.core.delete_node(node)

    # -- reading ---------------------------------------------------------------------
    def job(self, ns: str, name: str) -> Any:
        return self.batch.read_namespaced_job(name, ns)

    def suspended(self, ns: str, name: str) -> bool:
        return bool(self.job(ns, name).spec.suspend)

    def bound_pods(self, ns: str, name: str) -> list[Any]:
        pods = self.core.list_namespaced_pod(
            ns, label_selector=f"batch.kubernetes.io/job-name={name}"
        ).items
        return [p for p in pods if p.spec.node_name and p.metadata.deletion_timestamp is None]

    def states(self) -> dict[str, tuple[str, str]]:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT name, state::text AS s, reason FROM workloads"))
            return {r.name: (r.s, r.reason) for r in rows}

    def admitted_gpus(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT coalesce(sum(p.count * (s.requests->>'nvidia.com/gpu')::int), 0)"
                        " FROM placements p JOIN pod_sets s"
                        " ON s.workload_id = p.workload_id AND s.name = p.pod_set"
                    )
                ).scalar_one()
            )

    def wait_state(self, name: str, state: str, timeout: float = 60) -> None:
        wait_for(
            lambda: self.states().get(name, ("", ""))[0] == state,
            timeout=timeout,
            what=f"{name} {state}",
        )

    def wait_running(self, ns: str, name: str, pods: int, timeout: float = 60) -> None:
        wait_for(
            lambda: not self.suspended(ns, name) and len(self.bound_pods(ns, name)) == pods,
            timeout=timeout,
            what=f"{ns}/{name} unsuspended with {pods} bound pods",
        )


@contextlib.contextmanager
def kube_env(plane: ControlPlane, engine: Engine, database_url: str) -> Iterator[KubeEnv]:
    with plane.api_client() as api:
        env = KubeEnv(plane=plane, api=api, engine=engine, database_url=database_url)
        try:
            yield env
        finally:
            env.teardown()


__all__ = [
    "GPU",
    "POOL",
    "FakeKubelet",
    "KubeEnv",
    "PodsReadySettings",
    "job_manifest",
    "kube_env",
    "store_webhook",
]


@contextlib.contextmanager
def store_webhook(env: KubeEnv) -> Iterator[WebhookServer]:
    """queuemgr's admission webhook over the test's store, for the test's namespaces only.

    It runs apart from the service (so the service can be stopped while it
    answers); the configurations' failurePolicy is Fail, as in production.
    """
    selector = LabelSelector.parse(f"{MANAGED}={env.suffix}")
    handler = AdmissionHandler(
        StoreQueueDirectory(Database(env.engine)),
        WebhookSettings(namespace_selector=selector),
        ApiNamespaceLabels(env.api),
    )
    cert = generate(dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    names = (f"queuemgr-mutating-{env.suffix}", f"queuemgr-validating-{env.suffix}")
    api = client.AdmissionregistrationV1Api(env.api)
    server = WebhookServer(handler, StaticCertificates(cert), host="127.0.0.1", port=0)
    server.__enter__()
    try:
        mutating, validating = webhook_configurations(
            mutate_client=url_client_config(server.url, "/mutate"),
            validate_client=url_client_config(server.url, "/validate"),
            ca_bundle=None,
            namespace_selector=selector,
            mutating_name=names[0],
            validating_name=names[1],
        )
        api.create_mutating_webhook_configuration(mutating)
        api.create_validating_webhook_configuration(validating)
        patch_ca_bundle(env.api, cert.ca_pem, mutating=names[0], validating=names[1])

        def suspends() -> bool:
            probe = job_manifest("probe", suspend=None)
            made = env.batch.create_namespaced_job(env.namespaces[0], probe, dry_run="All")
            return bool(made.spec.suspend)

        wait_for(suspends, timeout=30, interval=0.5, what="the webhook to be called")
        yield server
    finally:
        server.__exit__(None, None, None)
        with contextlib.suppress(ApiException):
            api.delete_mutating_webhook_configuration(names[0])
        with contextlib.suppress(ApiException):
            api.delete_validating_webhook_configuration(names[1])


def webhook_unreachable(env: KubeEnv) -> None:
    """Point the test's webhook configurations at a closed port: queuemgr is down."""
    api = client.AdmissionregistrationV1Api(env.api)
    nowhere = [
        {"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "https://127.0.0.1:9/x"}
    ]
    api.patch_mutating_webhook_configuration(f"queuemgr-mutating-{env.suffix}", nowhere)
    api.patch_validating_webhook_configuration(f"queuemgr-validating-{env.suffix}", nowhere)
