"""The loop's backend with ``kubernetes.worker_clusters``: admitted Jobs run as copies on workers.

Why it exists: on the manager an admitted Job stays suspended; ``start``
creates its copy on one worker cluster (chosen by the dispatch policy,
:func:`~queuemgr.controller.multicluster.choose_cluster`), unsuspended with
the admission's placement, and ``stop`` deletes that copy. A
:class:`WorkerMonitor` per worker reads the worker's Nodes and copies every
``worker_poll_interval`` seconds: the read is the health probe, the Nodes
become the manager's (through :class:`~queuemgr.controller.multicluster.Fleet`,
which the job sync reads as its node source), and a copy that completed or
failed ends its workload on the manager. A worker that does not answer for
``worker_timeout`` seconds is lost: its workloads are evicted (reason
``WorkerClusterLost``) and requeued by the loop; when it answers again, the
copies it still holds are deleted before anything is sent to it.

What must stay true: see :mod:`queuemgr.controller.multicluster` (no double
run); every method raises :class:`~queuemgr.controller.ports.BackendError`
until the manager's watches have listed and every worker has answered or been
found lost once; only the leader writes to the store (evictions, failures),
every write fenced by its token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from queuemgr.controller.kube_backend import start_placement
from queuemgr.controller.multicluster import Fleet, choose_cluster
from queuemgr.controller.ports import BackendError, Clock
from queuemgr.controller.worker import Worker
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, Node, ResourceFlavor, WorkloadId
from queuemgr.core.resources import ResourceName
from queuemgr.k8s import manifest as m
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import ClusterWatch
from queuemgr.k8s.jobframework import PLACEMENT_ANNOTATION, set_annotations
from queuemgr.k8s.jobs import BatchJob
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.nodes import NodeError, node_from_k8s, nodes_from_k8s
from queuemgr.k8s.placement import Finished, recorded_admission
from queuemgr.k8s.reflector import Obj, key_of
from queuemgr.k8s.remote import (
    CLUSTER_LABEL,
    WORKER_STATUS_ANNOTATION,
    RemoteError,
    WorkerApi,
    copy_of,
    worker_status,
)
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderToken, NotLeader, fence
from queuemgr.store.transitions import evict, finish_workload
from queuemgr.store.workloads import StateConflict

log = logging.getLogger(__name__)

LOST_REASON = "WorkerClusterLost"
FlavorLookup = Callable[[str], ResourceFlavor | None]
Need = dict[ResourceName, int]


def _split(wid: str) -> tuple[str, str]:
    namespace, _, name = wid.partition("/")
    return namespace, name


def copy_finished(obj: Obj) -> Finished | None:
    try:
        return BatchJob(obj).finished()
    except ManifestError:
        return None


def _copy_need(obj: Obj) -> Need:
    """What an adopted copy (one this process did not start) holds, from its spec."""
    try:
        workload = BatchJob(obj).workload()
    except (ManifestError, ValueError):
        return {}
    out: Need = {}
    for ps in workload.pod_sets:
        for r, v in ps.node_requests.items():
            out[r] = out.get(r, 0) + v * ps.count
    return out


def _admitted_need(admitted: AdmittedWorkload) -> Need:
    """What the gang's placed pods ask of nodes, in all."""
    per_pod = {ps.name: ps.node_requests for ps in admitted.workload.pod_sets}
    out: Need = {}
    for p in admitted.admission.placements:
        for r, v in per_pod.get(p.pod_set, {}).items():
            out[r] = out.get(r, 0) + v * p.count
    return out


class MultiClusterBackend:
    def __init__(
        self,
        watch: ClusterWatch,
        fleet: Fleet,
        workers: Mapping[str, WorkerApi],
        flavors: FlavorLookup,
        *,
        policy: str,
        start_concurrency: int = 8,
    ) -> None:
        self.watch = watch
        self.fleet = fleet
        self.workers = dict(workers)
        self.policy = policy
        self.start_concurrency = start_concurrency
        self._flavors = flavors
        self._lock = threading.Lock()
        self._choosing = threading.Lock()
        self._needs: dict[WorkloadId, Need] = {}
        self._completed: list[RunEnd] = []
        self._reported: set[tuple[WorkloadId, float | None]] = set()
        self._wake: Callable[[], None] = lambda: None
        # Seconds from a start's call to its copy's creation (the dispatch latency), kept
        # for the benchmark; bounded.
        self.dispatch_seconds: list[float] = []

    def set_wake(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def wake(self) -> None:
        self._wake()

    def _ready(self) -> None:
        if not self.watch.synced:
            raise BackendError("the Kubernetes watches have not listed yet")
        if not self.fleet.settled():
            raise BackendError("not every worker cluster has answered or been found lost yet")

    # -- what the monitors report ------------------------------------------------------------
    def copy_ended(self, wid: WorkloadId, copy: Obj) -> None:
        """A copy completed: report its run once (the loop finishes the workload)."""
        note = m.annotation_map(copy).get(PLACEMENT_ANNOTATION)
        run = RunEnd(workload=wid, admitted_at=recorded_admission(note))
        with self._lock:
            if (wid, run.admitted_at) in self._reported:
                return
            self._reported.add((wid, run.admitted_at))
            self._completed.append(run)
        self._wake()

    def mirror(self, wid: WorkloadId, text: str) -> bool:
        """Show a copy's status on the manager's Job (an annotation, written on change);
        True when it shows it (or the Job is gone)."""
        ref = self.watch.job(wid)
        if ref is None:
            return True
        patch = set_annotations(ref.obj, {WORKER_STATUS_ANNOTATION: text})
        if not patch:
            return True
        meta = ref.obj["metadata"]
        try:
            ref.api.patch(meta["namespace"], meta["name"], patch.as_json())
        except ApiException as error:
            log.info("mirroring %s: %s %s", wid, error.status, error.reason)
            return False
        return True

    # -- capacity ---------------------------------------------------------------------------
    def _free(self, cluster: str, dispatched: Mapping[WorkloadId, str]) -> Need:
        free: Need = {}
        for obj in self.fleet.nodes():
            if (obj["metadata"].get("labels") or {}).get(CLUSTER_LABEL) != cluster:
                continue
            try:
                node = node_from_k8s(obj)
            except NodeError:
                continue
            if not node.schedulable:
                continue
            for r, v in node.allocatable.items():
                free[r] = free.get(r, 0) + v
        copies = self.fleet.copies(cluster)
        for wid, where in dispatched.items():
            if where != cluster:
                continue
            copy = copies.get(wid)
            if copy is not None and copy_finished(copy) is not None:
                continue
            need = self._needs.get(wid)
            if need is None:
                need = self._needs[wid] = _copy_need(copy) if copy is not None else {}
            for r, v in need.items():
                free[r] = free.get(r, 0) - v
        return free

    # -- the port ---------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        self._ready()
        return nodes_from_k8s(self.fleet.nodes())

    def start(self, admitted: AdmittedWorkload) -> None:
        self._ready()
        began = time.monotonic()
        wid = admitted.workload.id
        ref = self.watch.job(wid)
        if ref is None:
            log.info("start %s: no such job (deleted?); the job sync finishes it", wid)
            return
        try:
            if ref.job.finished() is not None:
                return
        except ManifestError as error:
            raise BackendError(f"start {wid}: {error}") from error
        where = self.fleet.where(wid)
        if where is not None:
            copy = self.fleet.copies(where).get(wid)
            if copy is None or copy_finished(copy) is None:
                return  # it runs there (or its copy is on its way)
            self._delete(where, wid, "start")  # the copy of an earlier run
        placement = start_placement(admitted, self._flavors, self.fleet.node)
        # The cluster label is the manager's: the worker's nodes do not carry it.
        placement = replace(
            placement,
            pod_sets=tuple(
                replace(a, topology=None)
                if a.topology is not None and a.topology[0] == CLUSTER_LABEL
                else a
                for a in placement.pod_sets
            ),
        )
        try:
            body = copy_of(ref.obj, ref.job.run_with(placement))
        except RemoteError as error:
            raise BackendError(f"start {wid}: {error}") from error
        # One choice at a time: two starts must not both count the same free room.
        with self._choosing:
            cluster = self._choose(admitted)
            with self._lock:
                self._needs[wid] = _admitted_need(admitted)
            try:
                self.fleet.dispatch(wid, cluster)  # before the copy exists: a loss evicts it
            except ValueError as error:
                raise BackendError(f"start {wid}: {error}") from error
        try:
            created = self.workers[cluster].create(body)
        except RemoteError as error:
            # Maybe created, maybe not: it stays dispatched there until a listing of the
            # cluster says (absent: released and evicted; a lost cluster: evicted).
            raise BackendError(f"start {wid}: {error}") from error
        if created is None:
            self.fleet.release(wid, cluster)
            raise BackendError(f"start {wid}: a copy exists on {cluster}; it is deleted first")
        with self._lock:
            self.dispatch_seconds.append(time.monotonic() - began)
            del self.dispatch_seconds[:-10000]
        log.info("%s dispatched to %s", wid, cluster)

    def _choose(self, admitted: AdmittedWorkload) -> str:
        placed = {self.fleet.cluster_of_node(p.node) for p in admitted.admission.placements}
        live = self.fleet.live_clusters()
        if len(placed) > 1:
            raise BackendError(
                f"start {admitted.workload.id}: placed across worker clusters"
                f" {sorted(c or '?' for c in placed)}; a gang runs in one"
            )
        core = placed.pop() if placed else None
        if core is not None:
            # The core placed every pod on that cluster's nodes, and the store records
            # those nodes as used: no other worker is known to fit the gang node by node,
            # and sending it elsewhere would part the two views of per-node use.
            if core not in live:
                raise BackendError(
                    f"start {admitted.workload.id}: placed on worker cluster {core},"
                    " which is not live"
                )
            return core
        # Placed on no worker's nodes: the policy's choice, by counts.
        dispatched = self.fleet.dispatched()
        free = {c: self._free(c, dispatched) for c in live}
        chosen = choose_cluster(self.policy, self.fleet.order, free, _admitted_need(admitted))
        if chosen is None:
            raise BackendError(f"start {admitted.workload.id}: no live worker cluster holds it")
        return chosen

    def _delete(self, cluster: str, wid: WorkloadId, action: str) -> None:
        namespace, name = _split(wid)
        try:
            self.workers[cluster].delete(namespace, name)
        except RemoteError as error:
            raise BackendError(f"{action} {wid}: {error}") from error
        self.fleet.deleted(cluster, wid)
        self.fleet.release(wid, cluster)

    def stop(self, workload_id: WorkloadId) -> None:
        self._ready()
        where = self.fleet.where(workload_id)
        if where is None:
            return
        if not self.fleet.live(where):
            # Lost: its copy is stale, deleted before the cluster is used again.
            self.fleet.release(workload_id, where)
            return
        self._delete(where, workload_id, "stop")

    def running(self) -> set[WorkloadId]:
        self._ready()
        out = set()
        for wid, where in self.fleet.dispatched().items():
            copy = self.fleet.copies(where).get(wid)
            if copy is None or copy_finished(copy) is None:
                out.add(wid)
        return out

    def poll_finished(self, now: float) -> list[RunEnd]:
        with self._lock:
            done, self._completed = self._completed, []
        return done

    def next_finish(self) -> float | None:
        return None


class WorkerMonitor(Worker):
    """Reads one worker's Nodes and copies; marks it lost or live again; ends workloads."""

    def __init__(
        self,
        api: WorkerApi,
        backend: MultiClusterBackend,
        *,
        db: Database,
        clock: Clock,
        token: Callable[[], LeaderToken | None],
        interval: float,
    ) -> None:
        super().__init__(f"queuemgr-worker-{api.name}")
        self.api = api
        self.backend = backend
        self.fleet = backend.fleet
        self._db = db
        self._clock = clock
        self._token = token
        self._interval = interval
        self._evicting: set[WorkloadId] = set()  # lost workloads not yet evicted in the store
        self._failed: set[tuple[WorkloadId, str]] = set()  # failures written (wid, uid)
        self._mirrored: dict[WorkloadId, str] = {}  # the worker status last shown per workload
        self.rounds = 0
        self.losses = 0
        self.returns = 0

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.round()
            except Exception:
                log.exception("worker cluster %s: a round failed", self.api.name)
            self._event.wait(self._interval)
            self._event.clear()

    def round(self) -> None:
        name = self.api.name
        listed_at = self.fleet.now()
        try:
            nodes = self.api.nodes()
            copies = self.api.copies()
        except RemoteError as error:
            lost = self.fleet.failed(name)
            if lost is not None:
                self.losses += 1
                log.warning(
                    "worker cluster %s lost (%s); requeueing %d workload(s)",
                    name,
                    error,
                    len(lost),
                )
                self._evicting.update(lost)
            self._evict()
            self.rounds += 1
            return
        seen = self.fleet.observe(name, listed_at, nodes, copies)
        if seen.vanished:
            log.warning("worker cluster %s: copies gone, requeued: %s", name, seen.vanished)
            self._evicting.update(seen.vanished)
        for wid in seen.stale:
            namespace, job = _split(wid)
            try:
                self.api.delete(namespace, job)
                self.fleet.deleted(name, wid)
                log.info("worker cluster %s: deleted the stale copy of %s", name, wid)
            except RemoteError as error:
                log.warning("worker cluster %s: deleting %s: %s", name, wid, error)
        if seen.returned:
            self.returns += 1
            log.info("worker cluster %s is live", name)
            self.backend.wake()
        self._evict()
        self._ended(copies)
        if self._token() is not None:  # the leader's to write
            self._mirror(copies)
        self.rounds += 1

    def _mirror(self, copies: list[Obj]) -> None:
        name = self.api.name
        dispatched = self.fleet.dispatched()
        for copy in copies:
            wid = WorkloadId(key_of(copy))
            if dispatched.get(wid) != name:
                continue
            text = worker_status(name, copy)
            if self._mirrored.get(wid) != text and self.backend.mirror(wid, text):
                self._mirrored[wid] = text
        self._mirrored = {w: t for w, t in self._mirrored.items() if dispatched.get(w) == name}

    def _ended(self, copies: list[Obj]) -> None:
        dispatched = self.fleet.dispatched()
        for copy in copies:
            wid = WorkloadId(key_of(copy))
            if dispatched.get(wid) != self.api.name:
                continue
            done = copy_finished(copy)
            if done is None:
                continue
            if done.succeeded:
                self.backend.copy_ended(wid, copy)
                continue
            uid = str(copy["metadata"].get("uid", ""))
            if (wid, uid) in self._failed:
                continue
            why = f"on worker cluster {self.api.name}: {done.message or done.reason}"
            if self._write(partial(self._finish_failed, wid, why)):
                self._failed.add((wid, uid))

    def _finish_failed(self, wid: WorkloadId, message: str, conn: Any) -> None:
        finish_workload(conn, wid, now=self._clock.now(), reason="Failed", message=message)

    def _evict_one(self, wid: WorkloadId, conn: Any) -> None:
        message = f"worker cluster {self.api.name} stopped answering"
        evict(
            conn, wid, now=self._clock.now(), reason=LOST_REASON, message=message, preempted=False
        )

    def _evict(self) -> None:
        for wid in sorted(self._evicting):
            if self._write(partial(self._evict_one, wid)):
                self._evicting.discard(wid)

    def _write(self, action: Callable[[Any], None]) -> bool:
        """Run a fenced store write as the leader; True when done or moot (not leading,
        or the workload moved on meanwhile)."""
        token = self._token()
        if token is None:
            return True  # a new leader adopts: what is admitted and not running starts
        try:
            with self._db.write() as conn:
                fence(conn, token)
                action(conn)
        except (StateConflict, LookupError, NotLeader):
            return True
        except StoreError as error:
            log.warning("worker cluster %s: the store failed: %s", self.api.name, error)
            return False
        return True
