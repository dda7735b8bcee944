"""All-or-nothing readiness (Kueue's ``waitForPodsReady``): a gang runs whole or gives way.

Why it exists: an admitted gang holds its quota from admission on, but it is
only useful once every pod runs. A gang whose pods cannot all become ready
(an image that will not pull, a node that is not what it claims) would
hold GPUs for nothing, and a half-started gang can deadlock another.
So a gang not fully ready ``timeout`` seconds after its admission is
evicted: its job is suspended, its quota freed, and after a backoff of
``backoff * 2^(n-1)`` seconds (at most ``backoff_max``) it queues again. The
``n``-th time past ``requeue_limit`` it is finished instead, with reason
``RequeueLimitExceeded``, and its job stays suspended.

What must stay true:

- only the leader acts, every store write is fenced by its token;
- "ready" is every placed pod Running with Ready True, or Succeeded; once a
  gang was ready it is never evicted for readiness again (by this leader);
- the requeue count lives on the job (annotation ``queuemgr.io/requeue-count``),
  the backoff's start in the store (the eviction's ``state_since``), and the
  moment a gang was first all ready too (``pods_ready_at``), so a new leader
  continues the count and the backoff where the old one stopped, never
  evicts a gang that was ready under the old one, and times the others from
  their admission, as the old leader did;
- an evicted gang waits in ``Evicted`` with reason ``PodsReadyTimeout``,
  which the loop leaves alone (``store.notify.HELD_REASON``); it is requeued
  here, once its pods are gone and its backoff is over, and is pending at
  once then (the scheduler's requeue backoff is for preemptions; this
  eviction does not count as one).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from typing import Any

from queuemgr.controller.kube_backend import KubernetesBackend
from queuemgr.controller.kube_section import PodsReadySettings
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.ports import BackendError, Clock
from queuemgr.controller.worker import Worker
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import WorkloadId
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import ClusterWatch, pod_ready
from queuemgr.k8s.jobframework import PLACEMENT_ANNOTATION
from queuemgr.k8s.jobstatus import QueueStatus, annotation_patch
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.patch import guard
from queuemgr.k8s.reflector import Obj
from queuemgr.metrics import SchedulerMetrics
from queuemgr.store.admission_checks import CheckState, CheckStatus, check_states
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.job_rows import RowState, mark_pods_ready, unfinished
from queuemgr.store.leadership import LeaderToken, NotLeader, fence
from queuemgr.store.notify import HELD_REASON
from queuemgr.store.transitions import evict, finish_workload, requeue_workload
from queuemgr.store.workloads import StateConflict

log = logging.getLogger(__name__)

REQUEUE_COUNT = "queuemgr.io/requeue-count"
LIMIT_REASON = "RequeueLimitExceeded"


def requeue_count(obj: Obj) -> int:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(REQUEUE_COUNT, "0")
    return int(raw) if str(raw).isdigit() else 0


def expected_pods(obj: Obj, fallback: int, unlabelled: Collection[str] = ()) -> int:
    """Pods the admission placed (from the placement annotation), else ``fallback``;
    the pods of the ``unlabelled`` pod sets are not watched, so not expected."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(PLACEMENT_ANNOTATION)
    if not raw:
        return fallback
    try:
        record: Any = json.loads(raw)
        placed = [
            int(n)
            for name, ps in record["podSets"].items()
            if name not in unlabelled
            for n in ps["nodes"].values()
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        return fallback
    return sum(placed) or fallback


class PodsReadyCheck(Worker):
    def __init__(
        self,
        *,
        db: Database,
        watch: ClusterWatch,
        backend: KubernetesBackend,
        elector: LeaderElector,
        clock: Clock,
        metrics: SchedulerMetrics,
        settings: PodsReadySettings,
    ) -> None:
        super().__init__("queuemgr-podsready")
        self._db = db
        self._watch = watch
        self._backend = backend
        self._elector = elector
        self._clock = clock
        self._metrics = metrics
        self.settings = settings
        self._ready: set[tuple[str, float | None]] = set()  # (workload, admitted at)
        self._epoch: LeaderToken | None = None
        self._newly_ready: list[tuple[str, float]] = []  # to record in the store
        self.evictions = 0

    def _run(self) -> None:
        interval = min(1.0, max(self.settings.timeout / 4, 0.1))
        while not self._stopping.wait(interval):
            try:
                self.check_once()
            except (StoreError, NotLeader, StateConflict) as exc:
                log.warning("pods-ready check: %s", exc)
            except Exception:
                log.exception("pods-ready check failed")

    def check_once(self) -> None:
        token = self._elector.token
        if token is None or not self._watch.synced:
            return
        now = self._clock.now()
        if token != self._epoch:
            self._epoch, self._ready = token, set()
        with self._db.read() as conn:
            rows = unfinished(conn, (WorkloadState.ADMITTED, WorkloadState.EVICTED))
            checked = check_states(conn)
        admitted = {
            (w, r.admitted_at) for w, r in rows.items() if r.state is WorkloadState.ADMITTED
        }
        self._ready &= admitted
        for wid, row in sorted(rows.items()):
            if row.state is WorkloadState.ADMITTED and (wid, row.admitted_at) not in self._ready:
                if row.was_ready:  # seen ready before, perhaps by another leader
                    self._ready.add((wid, row.admitted_at))
                else:
                    since = self._started_at(wid, row, checked.get(wid, {}))
                    if since is not None:
                        self._check_admitted(token, wid, row, now, since)
            elif row.state is WorkloadState.EVICTED and row.reason == HELD_REASON:
                self._check_held(token, wid, row, now)
        if self._newly_ready:
            with self._db.write() as conn:
                fence(conn, token)
                mark_pods_ready(conn, self._newly_ready, now=now)
            self._newly_ready.clear()

    def _started_at(
        self, wid: str, row: RowState, states: Mapping[str, CheckStatus]
    ) -> float | None:
        """When the gang's pods were let go: its admission, or, in a queue with admission
        checks, the moment the last of them said Ready; None while they have not."""
        admitted = row.admitted_at or row.since
        if not states:
            return admitted
        mine = [s for s in states.values() if s.of_admission(row.admitted_at)]
        if mine:
            if any(s.state is not CheckState.READY for s in mine):
                return None  # a reservation: its job has not started
            return max(admitted, *(s.updated_at for s in mine))
        ref = self._watch.job(wid)  # checks of an earlier admission only
        try:
            suspended = ref is not None and ref.job.is_suspended()
        except ManifestError:
            suspended = False
        return None if suspended else admitted

    def _check_admitted(
        self, token: LeaderToken, wid: str, row: RowState, now: float, since: float
    ) -> None:
        ref = self._watch.job(wid)
        if ref is None:
            return
        job = ref.job
        try:
            # A default template's pods (a RayJob's submitter) carry no workload label.
            unlabelled = {t.name for t in job.templates() if not job.in_object(t)}
            fallback = sum(ps.count for ps in job.pod_sets() if ps.name not in unlabelled)
        except ManifestError:
            return
        expected = expected_pods(ref.obj, fallback, unlabelled)
        ready = sum(pod_ready(p) for p in self._watch.pods(wid))
        if ready >= expected:
            self._ready.add((wid, row.admitted_at))
            if row.admitted_at is not None:
                self._newly_ready.append((wid, row.admitted_at))
            return
        if now - since < self.settings.timeout:
            return
        count = requeue_count(ref.obj) + 1
        what = f"{ready} of {expected} pods ready {self.settings.timeout:g}s after admission"
        limit = self.settings.requeue_limit
        with self._db.write() as conn:
            fence(conn, token)
            if limit is not None and count > limit:
                reason, message = LIMIT_REASON, f"{what}; requeued {limit} times already"
                finish_workload(conn, WorkloadId(wid), now=now, reason=reason, message=message)
            else:
                delay = self.settings.delay(count)
                reason, message = HELD_REASON, f"{what}; requeue {count} in {delay:g}s"
                # Not a preemption: it waits out this backoff, not the scheduler's.
                evict(
                    conn,
                    WorkloadId(wid),
                    now=now,
                    reason=reason,
                    message=message,
                    preempted=False,
                )
        self.evictions += 1
        if reason == LIMIT_REASON:
            self._metrics.observe_finished(LIMIT_REASON)
        log.warning("%s: %s (%s)", wid, message, reason)
        self._mark(wid, QueueStatus(admitted=False, reason=reason, message=message), count)
        try:
            self._backend.stop(WorkloadId(wid))
        except BackendError as exc:
            log.info("%s: stopping after the timeout: %s (retried before requeue)", wid, exc)

    def _mark(self, wid: str, status: QueueStatus, count: int) -> None:
        """Suspend the job and record the count and the reason on it, in one guarded patch."""
        for _ in range(3):
            ref = self._watch.job(wid)
            if ref is None:
                return
            meta = ref.obj["metadata"]
            patch = guard(("metadata", "resourceVersion"), ref.version) + ref.job.suspend()
            patch += annotation_patch(ref.obj, status, {REQUEUE_COUNT: str(count)})
            try:
                result = ref.api.patch(meta["namespace"], meta["name"], patch.as_json())
                self._watch.remember(ref, result)
                return
            except ApiException as error:
                log.info("%s: marking the eviction: %s %s", wid, error.status, error.reason)
                self._stopping.wait(0.2)

    def _check_held(self, token: LeaderToken, wid: str, row: RowState, now: float) -> None:
        ref = self._watch.job(wid)
        if ref is None:
            return  # the job sync finishes it
        due = row.since + self.settings.delay(max(requeue_count(ref.obj), 1))
        if now < due:
            return
        try:
            self._backend.stop(WorkloadId(wid))
        except BackendError as exc:
            log.info("%s: not requeued yet: %s", wid, exc)
            return
        with self._db.write() as conn:
            fence(conn, token)
            requeue_workload(conn, WorkloadId(wid), now=now)
        log.info("%s: requeued after its backoff", wid)
