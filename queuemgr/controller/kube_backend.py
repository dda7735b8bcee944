"""The ``kubernetes`` cluster backend: admitted gangs run as the jobs they came from.

Why it exists: the loop speaks the :class:`~queuemgr.controller.ports.ClusterBackend`
port; on a real cluster "start" is unsuspending the job with the admission's
node selectors (flavor labels, topology domain), the placement annotation and
the ``queuemgr.io/workload`` label on its pod templates, and "stop" is
suspending it again, after which the job controller deletes its pods.
Capacity is the Nodes' allocatable; what runs and what finished is read from
the watched jobs (:class:`~queuemgr.k8s.cluster.ClusterWatch`), never polled.

What must stay true:

- every method raises :class:`~queuemgr.controller.ports.BackendError` until the
  watches have listed once (an empty cache is not an empty cluster), and on
  any API error, so the loop retries;
- ``start`` and ``stop`` are idempotent and guarded by the job's
  ``resourceVersion`` (a patch built on a stale copy fails and is retried on
  a fresh one); a job that no longer exists is a no-op (the job sync
  finishes its workload);
- ``stop`` returns once every pod of the gang is finished or being deleted,
  so a preemptor is admitted only once its victims let go;
- ``poll_finished`` reports each job that reached ``Complete`` once per
  process; the loop ignores reports of workloads it no longer runs.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from queuemgr.controller.ports import BackendError, StaleObject
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, Node, NodeName, ResourceFlavor, WorkloadId
from queuemgr.k8s import manifest as m
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import WORKLOAD_LABEL, ClusterWatch, JobRef, Topic, pod_done
from queuemgr.k8s.jobframework import PLACEMENT_ANNOTATION, GenericJob
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.nodes import nodes_from_k8s
from queuemgr.k8s.patch import Patch, Token, guard, set_value
from queuemgr.k8s.placement import Placement, recorded_admission
from queuemgr.k8s.reflector import Change, Obj

log = logging.getLogger(__name__)

FlavorLookup = Callable[[str], ResourceFlavor | None]


def _labels_at(obj: Mapping[str, Any], tokens: tuple[Token, ...]) -> Mapping[str, Any]:
    current: Any = obj
    for token in (*tokens, "metadata", "labels"):
        if isinstance(token, int):
            ok = isinstance(current, list) and 0 <= token < len(current)
            current = current[token] if ok else None
        else:
            current = current.get(token) if isinstance(current, Mapping) else None
        if current is None:
            return {}
    return current if isinstance(current, Mapping) else {}


def workload_label_patch(job: GenericJob) -> Patch:
    """Label every pod template with the workload, so its pods can be watched."""
    patch = Patch()
    for t in job.templates():
        if not job.in_object(t):
            continue  # a default template: nothing to label (and a patch would create it)
        if _labels_at(job.obj, t.tokens).get(WORKLOAD_LABEL) != job.name:
            patch += set_value(job.obj, (*t.tokens, "metadata", "labels", WORKLOAD_LABEL), job.name)
    return patch


def start_placement(
    admitted: AdmittedWorkload,
    flavors: FlavorLookup,
    node: Callable[[str], Obj | None],
) -> Placement:
    """What a start writes on the job: the admission on its flavor, with the labels of
    the nodes the gang is placed on only (a start must not cost a walk of every node)."""
    flavor = flavors(admitted.admission.flavor)
    if flavor is None:
        raise BackendError(
            f"start {admitted.workload.id}: flavor {admitted.admission.flavor} not found"
        )
    labels: dict[NodeName, dict[str, Any]] = {}
    for p in admitted.admission.placements:
        obj = node(p.node)
        if obj is not None:
            labels[p.node] = dict(obj["metadata"].get("labels") or {})
    return Placement.of(
        admitted.admission,
        flavor,
        admitted.workload.pod_sets,
        labels,
        admitted_at=admitted.admitted_at,
    )


# What the API server answers when a JSON Patch does not apply to the object, its
# ``test`` operation included: a 422 with this message and no details (a validation
# error names its fields). Every patch of ours opens with a test of the resourceVersion
# it was built on, and is built against that very copy, so it fails so only when the
# object moved on (the applier warns if it keeps failing).
_GUARD_FAILED = "the server rejected our request due to an error in our request"


def api_error(action: str, wid: str, error: ApiException) -> BackendError:
    try:
        status = json.loads(error.body or "{}")
        why = status.get("message") or error.reason
    except (ValueError, AttributeError):
        status, why = {}, error.reason
    if error.status == 409 or (
        error.status == 422 and why == _GUARD_FAILED and not status.get("details")
    ):
        return StaleObject(f"{action} {wid}: the object changed meanwhile; retried on the new one")
    return BackendError(f"{action} {wid}: API server said {error.status}: {why}")


class KubernetesBackend:
    def __init__(
        self,
        watch: ClusterWatch,
        flavors: FlavorLookup,
        *,
        stop_timeout: float = 30.0,
        start_concurrency: int = 8,
    ) -> None:
        self.watch = watch
        self.start_concurrency = start_concurrency
        self._flavors = flavors
        self._stop_timeout = stop_timeout
        self._lock = threading.Lock()
        self._completed: list[RunEnd] = []
        self._reported: set[WorkloadId] = set()
        self._wake: Callable[[], None] = lambda: None
        watch.add_listener(self._on_change)

    def set_wake(self, wake: Callable[[], None]) -> None:
        """Called when a job completes: the loop's wake-up (``next_finish`` is always None)."""
        self._wake = wake

    def _on_change(self, topic: Topic, change: Change, obj: Obj) -> None:
        if topic is not Topic.JOB:
            return
        wid = WorkloadId(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
        if change is Change.DELETED:
            with self._lock:
                self._reported.discard(wid)
            return
        ref = self.watch.job(wid)
        try:
            finished = ref.job.finished() if ref is not None else None
        except ManifestError:
            return
        if finished is None or not finished.succeeded:
            return
        with self._lock:
            if wid in self._reported:
                return
            self._reported.add(wid)
            note = m.annotation_map(ref.job.obj).get(PLACEMENT_ANNOTATION) if ref else None
            self._completed.append(RunEnd(workload=wid, admitted_at=recorded_admission(note)))
        self._wake()

    def _ready(self) -> None:
        if not self.watch.synced:
            raise BackendError("the Kubernetes watches have not listed yet")

    # -- the port ----------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        self._ready()
        return nodes_from_k8s(self.watch.nodes())

    def start(self, admitted: AdmittedWorkload) -> None:
        self._ready()
        wid = admitted.workload.id
        ref = self.watch.job(wid)
        if ref is None:
            log.info("start %s: no such job (deleted?); the job sync finishes it", wid)
            return
        job = ref.job
        if job.finished() is not None:
            return
        placement = start_placement(admitted, self._flavors, self.watch.node)
        patch = job.run_with(placement) + workload_label_patch(job)
        self._patch(ref, patch, "start")

    def stop(self, workload_id: WorkloadId) -> None:
        self._ready()
        ref = self.watch.job(workload_id)
        if ref is None:
            return
        if not ref.job.is_suspended():
            self._patch(ref, ref.job.suspend(), "stop")

        def gone(pods: list[Obj]) -> bool:
            return all(pod_done(p) for p in pods)

        if not self.watch.wait_pods(workload_id, gone, self._stop_timeout):
            left = sum(not pod_done(p) for p in self.watch.pods(workload_id))
            raise BackendError(f"stop {workload_id}: {left} pods still running")

    def _patch(self, ref: JobRef, patch: Patch, action: str) -> None:
        if not patch:
            return
        meta = ref.obj["metadata"]
        ops = (guard(("metadata", "resourceVersion"), ref.version) + patch).as_json()
        try:
            result = ref.api.patch(meta["namespace"], meta["name"], ops)
        except ApiException as error:
            if error.status == 404:
                log.info("%s %s: the job is gone", action, ref.workload_id)
                return
            raise api_error(action, ref.workload_id, error) from error
        self.watch.remember(ref, result)

    def running(self) -> set[WorkloadId]:
        self._ready()
        out = set()
        for ref in self.watch.jobs():
            try:
                if not ref.job.is_suspended() and ref.job.finished() is None:
                    out.add(WorkloadId(ref.workload_id))
            except ManifestError:
                continue
        return out

    def poll_finished(self, now: float) -> list[RunEnd]:
        with self._lock:
            done, self._completed = self._completed, []
        return done

    def next_finish(self) -> float | None:
        return None
