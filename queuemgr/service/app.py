"""The composition root: the one place that picks adapters and wires the service together.

Why it exists: the loop, the elector, the listener and the HTTP server only
know ports and each other's narrow methods; :class:`Service` builds the
concrete pieces (the store's Database, backend, metrics, APScheduler job) from a
:class:`~queuemgr.service.settings.ServiceConfig` and starts and stops them in
order.

What must stay true: the service never migrates the database (an operator
runs ``queuemgr db upgrade``); nodes and queues from the simulated cluster file
are upserted with an audit row and a NOTIFY before the loop starts; stopping
releases the leader's lease so a standby takes over at once.
"""

from __future__ import annotations

import logging
import os
import threading

from queuemgr.controller.admission_webhook import AdmissionWebhook
from queuemgr.controller.kube_controller import KubeController
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.listener import NotifyListener
from queuemgr.controller.loop import SchedulerLoop
from queuemgr.controller.ports import Clock, ClusterBackend, SystemClock
from queuemgr.controller.simulated import SimulatedBackend, load_cluster_file
from queuemgr.controller.ticker import Ticker
from queuemgr.core.model import Node
from queuemgr.core.reasons import Decisions
from queuemgr.core.tally import PreemptionTally
from queuemgr.metrics import SchedulerMetrics
from queuemgr.service.http import HttpServer
from queuemgr.service.settings import ServiceConfig
from queuemgr.spec.knobs import policy_knobs
from queuemgr.store import config_objects as store_config
from queuemgr.store.audit import os_actor
from queuemgr.store.cohorts import upsert_cohort
from queuemgr.store.database import URL_ENV, DatabaseError, resolve_url
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.leadership import NotLeader, fence, may_lead, record_leader
from queuemgr.store.readouts import require_schema

log = logging.getLogger(__name__)

# A loop whose cycles have all failed for this long makes /readyz fail: one failed
# cycle is a lost race or a blip, retried at once, but a full disk or a broken schema
# fails every cycle while the database still answers.
LOOP_FAILURE_GRACE = 30.0


def _seed_cluster(db: Database, config: ServiceConfig) -> list[Node]:
    """Upsert the cluster file's objects; returns its nodes for the simulated backend."""
    if config.cluster_file is None:
        return []
    cluster = load_cluster_file(config.cluster_file)
    actor = os_actor()
    with db.write() as conn:
        for f in cluster.flavors.values():
            store_config.upsert_flavor(conn, f, actor=actor)
        store_config.upsert_nodes(conn, list(cluster.nodes.values()), actor=actor)
        # Fair sharing, ordering and the tree, as `apply` writes them: parents first.
        for name in cluster.quota_topology.tree.top_down():
            upsert_cohort(conn, cluster.cohorts[name], actor=actor)
        store_config.upsert_cluster_queues(conn, list(cluster.cluster_queues.values()), actor=actor)
        store_config.upsert_local_queues(conn, list(cluster.local_queues.values()), actor=actor)
    return list(cluster.nodes.values())


class Service:
    def __init__(
        self,
        config: ServiceConfig,
        *,
        backend: ClusterBackend | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        # As every command resolves it: the URL is the configuration's (which already
        # read QUEUEMGR_DATABASE_URL), and without one the embedded server lives in
        # QUEUEMGR_DATA_DIR if that is set.
        env = {k: v for k, v in os.environ.items() if k != URL_ENV}
        if config.database_url is not None:
            env[URL_ENV] = config.database_url
        self.db = Database.open(resolve_url(env))
        self.db.check()
        try:
            with self.db.read() as conn:
                require_schema(conn)
                role = may_lead(conn)  # fails as well on a schema older than the lease
        except StoreError:
            raise DatabaseError(
                "the database has no queuemgr schema, or an older one: run `queuemgr db upgrade`"
            ) from None
        if role is not None:
            raise DatabaseError(
                f"queuemgr serve connects as database role {role!r}, which may not hold the"
                " scheduler's lease: connect as a member of queuemgr_scheduler or as the"
                " schema's owner (docs/operations.md, database roles)"
            )
        # Every replica serves the admission webhook, leader or not (it only reads the store).
        self.webhook = AdmissionWebhook(config.webhook, self.db) if config.webhook.enabled else None
        nodes = _seed_cluster(self.db, config)
        # backend: kubernetes: watches, sync, readiness and status write-back over the API.
        self.kube: KubeController | None = None
        if backend is None and config.backend == "kubernetes":
            self.kube = KubeController(config.kubernetes, self.db, self.clock)
            backend = self.kube.loop_backend
        self.backend: ClusterBackend = backend or SimulatedBackend(
            nodes, self.clock, default_runtime=config.default_runtime
        )
        self.metrics = SchedulerMetrics()
        # This replica's count of the preemptions it decided (the demo's summary reads it).
        self.preemptions = PreemptionTally()
        self.elector = LeaderElector(
            self.db, replica=config.replica, metrics=self.metrics, on_elected=self._wake
        )
        self.loop = SchedulerLoop(
            db=self.db,
            backend=self.backend,
            clock=self.clock,
            elector=self.elector,
            metrics=self.metrics,
            policy=config.policy
            if self.kube is None
            else self.kube.scheduling_policy(config.policy),
            safety_interval=config.cycle_interval,
            on_cycle=self._observe_cycle,
            freeze_heap=True,
        )
        if self.kube is not None:
            self.kube.attach(self.elector, self.metrics)
            self.kube.set_wake(self.loop.wake)
        self.listener = NotifyListener(self.db, self.loop.wake)
        self.jobs = Ticker(
            config.cycle_interval, self.loop.request_safety_cycle, name="queuemgr-safety-cycle"
        )
        self.http = HttpServer(
            host=config.http_host,
            port=config.http_port,
            metrics=self.metrics,
            healthy=self._healthy,
            ready=self._ready,
        )
        self._stopped = threading.Event()

    def _observe_cycle(self, decisions: Decisions, now: float) -> None:
        self.preemptions.observe(decisions, now)
        if self.kube is not None:
            self.kube.status.observe(decisions, now)

    def _wake(self) -> None:
        """Elected: record who leads with which knobs (``why`` decides like it), then schedule."""
        token = self.elector.token
        if token is not None:
            try:
                with self.db.write() as conn:
                    fence(conn, token)
                    record_leader(
                        conn,
                        replica=self.config.replica,
                        policy=policy_knobs(self.config.policy),
                        now=self.clock.now(),
                    )
            except (StoreError, NotLeader) as exc:  # informational; never blocks scheduling
                log.warning("could not record the leader's settings: %s", exc)
        self.loop.wake()

    def _healthy(self) -> tuple[bool, str]:
        return (True, "process sound") if self.loop.running else (False, "loop thread stopped")

    def _ready(self) -> tuple[bool, str]:
        if not self.loop.running:
            return False, "loop not running"
        try:
            self.db.check()
        except DatabaseError as exc:
            return False, str(exc)
        if self.kube is not None and not self.kube.watch.synced:
            return False, "the Kubernetes watches have not listed yet"
        failing = self.loop.failing_for()
        if failing > LOOP_FAILURE_GRACE:
            return False, f"every cycle has failed for {failing:.0f} s: {self.loop.last_error}"
        role = "leader" if self.elector.is_leader else "standby"
        return True, f"database reachable, loop running ({role})"

    def start(self) -> None:
        if self.webhook is not None:
            self.webhook.start()
        self.http.start()
        if self.kube is not None:
            self.kube.start()  # the watches list before the loop may act on the cluster
        self.loop.start()
        self.listener.start()
        self.elector.start()
        self.jobs.start()
        log.info(
            "queuemgr serve: replica %s, http on %s:%d", self.config.replica, *self.http.address
        )

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.jobs.stop()
        self.listener.stop()
        # The cycle in flight commits under the lease it began with; the lease goes after
        # it. Released first, the cycle's fence would find it gone and drop its decisions.
        self.loop.stop()
        self.elector.stop()
        if self.kube is not None:
            self.kube.stop()
        self.http.stop()
        if self.webhook is not None:
            self.webhook.stop()
        self.db.dispose()

    def wait(self) -> None:
        self._stopped.wait()
