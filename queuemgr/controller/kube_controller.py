"""The Kubernetes controller's parts, built together for ``backend: kubernetes``.

Why it exists: on a real cluster the service runs, besides the loop, one set
of watches (jobs of every served kind, their pods, nodes, managed
namespaces), the backend over them, the job-to-store sync, the pods-ready
check and the status write-back. :mod:`queuemgr.service.app`, the composition
root, decides to use Kubernetes and hands this module the settings; this
module only builds those parts from them and starts and stops them in order.

What must stay true: one rate-limited API client for everything (so the
configured QPS is the controller's whole budget); the watches start before
the loop and the loop's backend refuses to act until they have listed; the
sync and the readiness check act only on the leader; stopping stops the
writers before the watches they read; a start reads its flavor from the store
at most ``FLAVOR_TTL`` seconds stale.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from queuemgr.controller.admission_gate import AdmissionCheckGate
from queuemgr.controller.kube_backend import KubernetesBackend
from queuemgr.controller.kube_readiness import PodsReadyCheck
from queuemgr.controller.kube_section import PROVISIONING_REQUEST, KubernetesSettings
from queuemgr.controller.kube_status import StatusWriter
from queuemgr.controller.kube_sync import JobSync
from queuemgr.controller.multicluster import Fleet, keep_in_one_cluster
from queuemgr.controller.multicluster_backend import MultiClusterBackend, WorkerMonitor
from queuemgr.controller.ports import Clock, ClusterBackend
from queuemgr.controller.provisioning import AdmissionCheckWorker
from queuemgr.core.domains import DomainChoice, DomainRule
from queuemgr.core.model import ResourceFlavor
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.k8s.apiclient import RateLimitedApiClient, api_client
from queuemgr.k8s.cluster import ClusterWatch
from queuemgr.k8s.events import EventRecorder
from queuemgr.k8s.jobapi import served_kinds
from queuemgr.k8s.provisioning import ProvisioningApi
from queuemgr.k8s.remote import CLUSTER_LABEL, WorkerApi
from queuemgr.store.handle import Database
from queuemgr.store.job_rows import flavor

if TYPE_CHECKING:
    from queuemgr.controller.leader import LeaderElector
    from queuemgr.metrics import SchedulerMetrics

log = logging.getLogger(__name__)


# Seconds a flavor read for a start is reused: an edit reaches the starts that late.
FLAVOR_TTL = 2.0


class KubeController:
    def __init__(
        self,
        settings: KubernetesSettings,
        db: Database,
        clock: Clock,
        *,
        client: RateLimitedApiClient | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.clock = clock
        self._flavors: dict[str, tuple[ResourceFlavor | None, float]] = {}
        self._flavor_lock = threading.Lock()
        self.client = client or api_client(
            settings.kubeconfig, qps=settings.qps, burst=settings.burst, context=settings.context
        )
        served, later = served_kinds(self.client)
        self.watch = ClusterWatch(
            self.client,
            served,
            later=later,
            discovery_interval=settings.kind_discovery_interval,
            managed_namespaces=settings.managed_namespaces,
            watch_timeout=settings.watch_timeout,
            dra=bool(settings.device_classes),
        )
        self.jobs = KubernetesBackend(
            self.watch,
            self._flavor,
            stop_timeout=settings.stop_timeout,
            start_concurrency=settings.start_concurrency,
        )
        # Multi-cluster dispatch: the jobs run as copies on the worker clusters.
        self.fleet: Fleet | None = None
        self.dispatch: MultiClusterBackend | None = None
        self.monitors: list[WorkerMonitor] = []
        if settings.worker_clusters:
            self.fleet = Fleet(
                [w.name for w in settings.worker_clusters], timeout=settings.worker_timeout
            )
            workers = {
                w.name: WorkerApi(
                    w.name,
                    w.kubeconfig,
                    context=w.context,
                    qps=settings.qps,
                    burst=settings.burst,
                    timeout=min(settings.worker_timeout, 10.0),
                )
                for w in settings.worker_clusters
            }
            self.dispatch = MultiClusterBackend(
                self.watch,
                self.fleet,
                workers,
                self._flavor,
                policy=settings.dispatch,
                start_concurrency=settings.start_concurrency,
            )
        # The loop's backend: a gang of a queue with admission checks starts once they pass.
        self.backend = AdmissionCheckGate(self.jobs, db)
        # What the loop drives: the dispatcher with worker clusters (admission checks are
        # not applied to dispatched jobs in this first cut), else the gate.
        self.loop_backend: ClusterBackend = self.dispatch or self.backend
        if self.dispatch is not None and settings.admission_checks:
            log.warning("kubernetes.admission_checks are ignored with worker_clusters")
        self.status = StatusWriter(
            self.watch, qps=settings.status_qps, events=EventRecorder(self.client)
        )
        self.sync: JobSync | None = None
        self.readiness: PodsReadyCheck | None = None
        self.checks: AdmissionCheckWorker | None = None

    def set_wake(self, wake: Callable[[], None]) -> None:
        """The loop's wake-up, called when a job completes."""
        self.backend.set_wake(wake)
        if self.dispatch is not None:
            self.dispatch.set_wake(wake)

    def _flavor(self, name: str) -> ResourceFlavor | None:
        # Each start needs its flavor's labels; a read per start cost a transaction
        # (and a pooled connection's ping) on the start threads, on the path from
        # admission to unsuspension. A flavor changes rarely: reused for a moment.
        now = time.monotonic()
        with self._flavor_lock:
            hit = self._flavors.get(name)
            if hit is not None and now - hit[1] < FLAVOR_TTL:
                return hit[0]
        with self.db.read() as conn:
            found = flavor(conn, name)
        with self._flavor_lock:
            self._flavors[name] = (found, now)
        return found

    def scheduling_policy(self, policy: SchedulerPolicy) -> SchedulerPolicy:
        """``policy``, with worker clusters: the dispatch policy as the core's rule for
        choosing a gang's cluster (the domain of ``queuemgr.io/cluster`` it requires)."""
        s = self.settings
        if not s.worker_clusters:
            return policy
        rule = DomainRule(
            label=CLUSTER_LABEL,
            choice=DomainChoice(s.dispatch),
            order=tuple(w.name for w in s.worker_clusters),
        )
        return replace(policy, domain_rules=(*policy.domain_rules, rule))

    def attach(self, elector: LeaderElector, metrics: SchedulerMetrics) -> None:
        """The parts that act only while leading."""
        self.sync = JobSync(
            self.db,
            self.watch,
            is_leader=lambda: elector.is_leader,
            clock=self.clock,
            device_classes=self.settings.device_classes,
            nodes=self.fleet,
            shape=keep_in_one_cluster if self.fleet is not None else None,
        )
        if self.dispatch is not None:
            self.monitors = [
                WorkerMonitor(
                    api,
                    self.dispatch,
                    db=self.db,
                    clock=self.clock,
                    token=lambda: elector.token,
                    interval=self.settings.worker_poll_interval,
                )
                for api in self.dispatch.workers.values()
            ]
        if self.settings.pods_ready is not None and self.dispatch is None:
            self.readiness = PodsReadyCheck(
                db=self.db,
                watch=self.watch,
                backend=self.jobs,
                elector=elector,
                clock=self.clock,
                metrics=metrics,
                settings=self.settings.pods_ready,
            )

        provisioning = any(
            c.controller == PROVISIONING_REQUEST for c in self.settings.admission_checks
        )
        self.checks = AdmissionCheckWorker(
            db=self.db,
            gate=self.backend,
            elector=elector,
            clock=self.clock,
            checks=self.settings.admission_checks,
            api=ProvisioningApi(self.client) if provisioning else None,
            flavors=self._flavor,
            status=self.status,
        )

    def start(self, synced_within: float = 30.0) -> None:
        self.watch.start()
        if not self.watch.wait_synced(synced_within):
            log.warning("Kubernetes watches not listed after %.0fs; still trying", synced_within)
        for monitor in self.monitors:
            monitor.start()
        for part in (self.sync, self.readiness, self.checks, self.status):
            if part is not None:
                part.start()

    def stop(self) -> None:
        for part in (self.status, self.checks, self.readiness, self.sync):
            if part is not None:
                part.stop()
        for monitor in self.monitors:
            monitor.stop()
        if self.dispatch is not None:
            for api in self.dispatch.workers.values():
                api.close()
        self.watch.stop()
        self.client.close()  # type: ignore[no-untyped-call]
