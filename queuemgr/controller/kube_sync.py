"""Keeps the store in step with the cluster: a workload row per labelled job, a node row per Node.

Why it exists: the store is the system of record, but jobs are created,
finished and deleted in Kubernetes. This worker turns watch events into
store writes, each with a NOTIFY that wakes the scheduler:

- a labelled job in a managed namespace, not finished, without a row ->
  submitted (the workload from ``GenericJob.workload()``; the new jobs of a
  batch in one transaction with one NOTIFY); a job
  re-created under the name of a finished workload replaces that row;
- a job that failed, or completed while not admitted -> finished with
  ``Failed``/``Succeeded`` (an admitted one that completed is reported by
  the backend's ``poll_finished``); a job deleted (or unlabelled) -> finished
  with ``Deleted``, which frees its quota;
- a job running without an admission in the store (created while no webhook
  suspended it) -> suspended again, guarded by its ``resourceVersion``; a
  suspended one whose frozen template kept the flavor's tolerations (a preempted
  ``batch/v1`` Job) -> the user's put back once its controller releases it;
- a Node added or changed (allocatable, labels, taints, cordoned)
  -> ``upsert_node`` (audited), so capacity follows the cluster;
- a Node deleted, or gone while the service was down -> ``retire_nodes``
  (audited): its row goes once nothing is placed on it, and meanwhile it
  stays, unschedulable, so its running pods are still accounted.

What must stay true: only the leader writes (a standby's watches stay warm;
on election it resyncs everything); nothing is written before every watch has
listed once; after a (re)sync, every unfinished workload whose job is gone is
finished, so nothing waits for a job that no longer exists; events are
coalesced per object and handled in batches, one store read per batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from queuemgr.controller.ports import Clock
from queuemgr.controller.worker import Worker
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import Node, Workload, WorkloadId
from queuemgr.core.resources import ResourceName, add
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import ClusterWatch, JobRef, Topic
from queuemgr.k8s.dra import DeviceCharger, DeviceClassMapping, published_drivers, slice_devices
from queuemgr.k8s.jobframework import parse_timestamp
from queuemgr.k8s.jobs import owned_by_managed_kind
from queuemgr.k8s.jobstatus import QueueStatus, annotation_patch
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.nodes import NodeError, node_from_k8s
from queuemgr.k8s.patch import guard
from queuemgr.k8s.priority import job_priority
from queuemgr.k8s.reflector import Change, Obj, key_of
from queuemgr.store import config_objects as store_config
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.job_rows import RowState, row_states, unfinished
from queuemgr.store.transitions import finish_workload, resubmit_workload, submit_many
from queuemgr.store.workloads import StateConflict, WorkloadExists

log = logging.getLogger(__name__)


class NodeSource(Protocol):
    """Where the Nodes come from: the cluster's watch, or the worker clusters' union
    (multi-cluster dispatch), which tells the listeners it adds of each change."""

    def nodes(self) -> list[Obj]: ...

    def node(self, name: str) -> Obj | None: ...

    def add_listener(self, listener: Callable[[Topic, Change, Obj], None]) -> None: ...


ACTOR = "k8s:queuemgr-controller"


class JobSync(Worker):
    def __init__(
        self,
        db: Database,
        watch: ClusterWatch,
        *,
        is_leader: Callable[[], bool],
        clock: Clock,
        batch: int = 500,
        device_classes: Sequence[DeviceClassMapping] = (),
        nodes: NodeSource | None = None,
        shape: Callable[[Workload], Workload] | None = None,
    ) -> None:
        super().__init__("queuemgr-kube-sync")
        self._db = db
        self._watch = watch
        self._is_leader = is_leader
        self._clock = clock
        self._batch = batch
        self._lock = threading.Lock()
        self._jobs: set[str] = set()
        self._nodes: set[str] = set()
        self._node_deleted = False  # a Node went since the last pass: retire it
        self._kept: set[str] = set()  # gone Nodes still holding placements
        self._namespaces: set[str] = set()
        self._upserted: dict[str, Node] = {}  # the last node written, to skip no-op upserts
        self._resync = True
        self._classes_changed = False
        # DRA: claims charged by device class; each node's devices from ResourceSlices.
        self._drivers = {d.driver: d.resource for d in device_classes if d.driver}
        self._published: frozenset[str] = frozenset()
        self._devices: dict[str, dict[ResourceName, int]] = {}
        self._slices_changed = bool(self._drivers)
        self._charger = (
            DeviceCharger(device_classes, watch.claim_template, lambda d: d in self._published)
            if device_classes
            else None
        )
        self.passes = 0  # batches handled (tests wait on it)
        # Nodes from elsewhere than the watch (worker clusters); a workload's final touch.
        self._node_source: NodeSource = nodes or watch
        self._shape = shape
        watch.add_listener(self._on_change)
        if nodes is not None:
            nodes.add_listener(self._on_change)

    # -- events (reflector threads) ------------------------------------------------------
    def _on_change(self, topic: Topic, change: Change, obj: Obj) -> None:
        key = key_of(obj)
        with self._lock:
            if topic is Topic.JOB:
                self._jobs.add(key)
            elif topic is Topic.NODE:
                self._nodes.add(key)
                if change is Change.DELETED:
                    self._node_deleted = True
            elif topic is Topic.NAMESPACE:
                self._namespaces.add(key)
            elif topic in (Topic.PRIORITY_CLASS, Topic.CLAIM_TEMPLATE):
                # A job that named a missing class or template waits unsubmitted: look again.
                self._classes_changed = True
            elif topic is Topic.RESOURCE_SLICE:
                self._slices_changed = bool(self._drivers)
            else:
                return
        self._event.set()

    # -- the worker ------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            self._event.wait(1.0)
            self._event.clear()
            try:
                self.sync_once()
                backoff = 0.1
            except (StoreError, StateConflict) as exc:
                log.warning("job sync: the store failed (%s); retrying in %.1fs", exc, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                self._resync = True
                self._event.set()
            except Exception:
                log.exception("job sync failed; resyncing")
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                self._resync = True
                self._event.set()

    def sync_once(self) -> None:
        """Handle what changed since the last pass (everything after an election)."""
        if not self._is_leader():
            self._resync = True
            return
        if not self._watch.synced:
            self._stopping.wait(0.1)
            self._event.set()
            return
        resync, self._resync = self._resync, False
        with self._lock:
            if resync:
                self._jobs = {r.workload_id for r in self._watch.jobs()}
                self._nodes = {key_of(n) for n in self._node_source.nodes()}
                self._namespaces.clear()
            jobs, self._jobs = self._jobs, set()
            nodes, self._nodes = self._nodes, set()
            namespaces, self._namespaces = self._namespaces, set()
            classes_changed, self._classes_changed = self._classes_changed, False
            node_deleted, self._node_deleted = self._node_deleted, False
            slices_changed, self._slices_changed = self._slices_changed, False
        if slices_changed:
            nodes |= self._read_slices()
        if classes_changed:
            jobs |= {r.workload_id for r in self._watch.jobs()}
        if namespaces:
            jobs |= {
                r.workload_id
                for r in self._watch.jobs()
                if r.obj["metadata"]["namespace"] in namespaces
            }
        if nodes:
            self._sync_nodes(sorted(nodes))
        ordered = sorted(jobs)
        for i in range(0, len(ordered), self._batch):
            self._sync_jobs(ordered[i : i + self._batch])
        if resync:
            self._finish_vanished()
        # A kept Node may be free once a job of this pass finished.
        if resync or node_deleted or (self._kept and jobs):
            self._retire_nodes()
        self.passes += 1

    # -- nodes -----------------------------------------------------------------------------
    def _read_slices(self) -> set[str]:
        """Re-count the mapped drivers' devices per node; the nodes whose count changed."""
        slices = self._watch.resource_slices()
        devices = slice_devices(slices, self._drivers)
        self._published = published_drivers(slices)
        changed = {
            n
            for n in devices.keys() | self._devices.keys()
            if devices.get(n) != self._devices.get(n)
        }
        self._devices = devices
        return changed

    def _sync_nodes(self, names: list[str]) -> None:
        changed: list[Node] = []
        for name in names:
            obj = self._node_source.node(name)
            if obj is None:
                continue  # deleted: _retire_nodes' business
            try:
                node = node_from_k8s(obj)
                if self._devices.get(name):
                    node = replace(node, allocatable=add(node.allocatable, self._devices[name]))
            except NodeError as error:
                log.warning("node %s not taken: %s", name, error)
                continue
            if self._upserted.get(name) != node:
                changed.append(node)
        if not changed:
            return
        with self._db.write() as conn:  # a node that changed wakes the scheduler
            store_config.upsert_nodes(conn, changed, actor=ACTOR)
        for n in changed:
            self._upserted[n.name] = n

    def _retire_nodes(self) -> None:
        present = {key_of(n) for n in self._node_source.nodes()}
        with self._db.write() as conn:
            deleted, kept = store_config.retire_nodes(conn, present, actor=ACTOR)
        for name in (*deleted, *kept):  # written here, not by _sync_nodes: compare afresh
            self._upserted.pop(name, None)
        if deleted:
            log.info("nodes gone from the cluster, removed from the store: %s", deleted)
        self._kept = set(kept)

    # -- jobs ------------------------------------------------------------------------------
    def _sync_jobs(self, wids: list[str]) -> None:
        refs = {wid: self._watch.job(wid) for wid in wids}
        log.debug("syncing jobs %s", wids)
        with self._db.read() as conn:
            rows = row_states(conn, wids)
        new: list[Workload] = []
        for wid in wids:
            ref, row = refs[wid], rows.get(WorkloadId(wid))
            if ref is None:
                if row is not None and row.state is not WorkloadState.FINISHED:
                    self._finish(wid, "Deleted", "the job was deleted or lost its queue label")
                continue
            try:
                if self._sync_job(ref, row):
                    new.append(self._workload(ref))
            except ManifestError as error:
                self._invalid(ref, error)
        if new:
            with self._db.write() as conn:
                submitted = submit_many(conn, new)
            log.info("submitted %d new job(s)", len(submitted))

    def _sync_job(self, ref: JobRef, row: RowState | None) -> bool:
        """Bring one job's row in step; True when it is new (the caller submits it)."""
        meta = ref.obj["metadata"]
        if not self._watch.managed(meta["namespace"]) or owned_by_managed_kind(ref.obj):
            return False
        job, wid = ref.job, ref.workload_id
        done = job.finished()
        if done is not None:
            if row is None or row.state is WorkloadState.FINISHED:
                return False
            if done.succeeded and row.state is WorkloadState.ADMITTED:
                return False  # the backend reports it; the loop finishes it
            reason = "Succeeded" if done.succeeded else "Failed"
            self._finish(wid, reason, done.message or done.reason)
            return False
        created = parse_timestamp(meta.get("creationTimestamp") or "", "metadata.creationTimestamp")
        if row is None:
            return True
        if row.state is WorkloadState.FINISHED and abs(row.created_at - created) >= 1:
            self._resubmit(ref)
            return False
        if not job.is_suspended() and row.state is not WorkloadState.ADMITTED:
            log.info("%s runs without an admission (%s); suspending it", wid, row.state.value)
            self._patch(ref, guard(("metadata", "resourceVersion"), ref.version) + job.suspend())
        elif job.is_suspended() and row.state is not WorkloadState.ADMITTED:
            # A preempted batch/v1 Job kept the flavor's tolerations through its suspension;
            # its controller marking it Suspended releases the template: put the user's back.
            # Guarded: a start built on the same version wins, and run_with starts afresh.
            restore = job.leftover_restore()
            if restore:
                log.info("%s is suspended; its own tolerations are put back", wid)
                self._patch(ref, guard(("metadata", "resourceVersion"), ref.version) + restore)
        return False

    def _workload(self, ref: JobRef) -> Workload:
        """The job's workload, with the priority of the PriorityClass it names."""
        priority = job_priority(ref.job, self._watch.priority_classes())
        workload = ref.job.workload(priority=priority, devices=self._charger)
        return workload if self._shape is None else self._shape(workload)

    def _resubmit(self, ref: JobRef) -> None:
        try:
            workload = self._workload(ref)
        except ManifestError as error:
            self._invalid(ref, error)
            return
        with self._db.write() as conn:
            try:
                resubmit_workload(conn, workload)
            except (WorkloadExists, LookupError):
                log.info("%s: already submitted", workload.id)  # a race with another pass

    def _finish(self, wid: str, reason: str, message: str) -> None:
        try:
            with self._db.write() as conn:
                finish_workload(
                    conn, WorkloadId(wid), now=self._clock.now(), reason=reason, message=message
                )
            log.info("%s finished: %s", wid, reason)
        except StateConflict:
            pass  # finished meanwhile

    def _finish_vanished(self) -> None:
        with self._db.read() as conn:
            rows = unfinished(conn)
        known = {r.workload_id for r in self._watch.jobs()}
        for wid in sorted(set(rows) - known):
            self._finish(wid, "Deleted", "no such job in the cluster")

    def _invalid(self, ref: JobRef, error: ManifestError) -> None:
        log.info("%s cannot be queued: %s", ref.workload_id, error)
        status = QueueStatus(admitted=False, reason="Invalid", message=str(error))
        self._patch(ref, annotation_patch(ref.obj, status))

    def _patch(self, ref: JobRef, patch: Any) -> None:
        if not patch:
            return
        meta = ref.obj["metadata"]
        try:
            ref.api.patch(meta["namespace"], meta["name"], patch.as_json())
        except ApiException as error:  # a newer version is on its way: the next event retries
            log.info("patching %s: %s %s", ref.workload_id, error.status, error.reason)
