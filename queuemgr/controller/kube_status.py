"""Writes each cycle's verdicts back onto the jobs: why it waits, where it stands, when it starts.

Why it exists: the loop decides, the store records, but the tenant reads
``kubectl describe job``. After every cycle the loop hands its decisions
here (:meth:`StatusWriter.observe`, O(1) on the loop's thread); a worker
thread turns them into :class:`~queuemgr.k8s.jobstatus.QueueStatus`es and
writes the ones that changed: annotations always, the two conditions on
``status.conditions`` when the kind's status takes them, and an Event when
the reason or message changed.

What must stay true: a status is written only when it differs from the last
one written for that job (position and ETA alone change only the
annotations, not the conditions), and a cycle costs the writer the queues
whose standing changed, not every pending job (an ETA written as "now"
stays as written while the job waits on: it reads "due"); writes are paced by their own token
bucket, below the client's, so start and stop patches keep their share of
the client's rate; a write that loses a race (the job changed meanwhile) is
retried on the fresh copy; nothing here affects scheduling.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from queuemgr.controller.worker import Worker
from queuemgr.core.model import ClusterQueueName
from queuemgr.core.reasons import Decisions, PendingStatus
from queuemgr.core.standings import QueueStanding
from queuemgr.k8s.apiclient import ApiException, RateLimiter
from queuemgr.k8s.cluster import ClusterWatch, JobRef
from queuemgr.k8s.events import EventRecorder
from queuemgr.k8s.jobstatus import QueueStatus, annotation_patch, condition_patch, has_conditions
from queuemgr.k8s.patch import Patch, guard
from queuemgr.k8s.reflector import Obj

log = logging.getLogger(__name__)
# Verdicts recorded as Warning events (the rest are Normal).
WARNINGS = frozenset(
    {
        "Invalid",
        "PodsReadyTimeout",
        "RequeueLimitExceeded",
        "Preempted",
        "AdmissionCheckFailed",
        "AdmissionCheckRejected",
        "AdmissionCheckCapacityRevoked",
        "WorkerClusterLost",
    }
)


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pending_status(st: PendingStatus) -> QueueStatus:
    where = f"ClusterQueue {st.cluster_queue}" if st.cluster_queue else "no ClusterQueue"
    return QueueStatus(
        admitted=False,
        reason=st.reason.value,
        message=st.message,
        position=(
            f"{st.position_in_local_queue} in its LocalQueue, "
            f"{st.position_in_cluster_queue} in {where}"
        ),
        eta=None if st.eta is None else rfc3339(st.eta),
    )


class StatusWriter(Worker):
    def __init__(
        self,
        watch: ClusterWatch,
        *,
        qps: float,
        burst: int = 10,
        events: EventRecorder | None = None,
    ) -> None:
        super().__init__("queuemgr-status")
        self._watch = watch
        self._events = events
        self._limiter = RateLimiter(qps, burst)
        self._lock = threading.Lock()
        self._decisions: tuple[Decisions, float] | None = None
        self._desired: dict[str, QueueStatus] = {}
        self._written: dict[str, QueueStatus] = {}
        self._dirty: set[str] = set()  # desired, and not what was last written
        self._absorbed: dict[ClusterQueueName | None, QueueStanding] = {}
        self._conditions_off: set[str] = set()  # kinds whose status refused our conditions
        self.writes = 0

    # -- inputs -------------------------------------------------------------------------
    def observe(self, decisions: Decisions, now: float) -> None:
        """The loop's hook after each cycle: keep only the latest decisions."""
        with self._lock:
            self._decisions = (decisions, now)
        self._event.set()

    def set(self, workload_id: str, status: QueueStatus) -> None:
        with self._lock:
            self._want(workload_id, status)
        self._event.set()

    def _want(self, workload_id: str, status: QueueStatus) -> None:
        # Under the lock. Only what differs from the last write is to do: a cycle
        # costs the writer what changed, not every pending job.
        self._desired[workload_id] = status
        if self._written.get(workload_id) != status:
            self._dirty.add(workload_id)
        else:
            self._dirty.discard(workload_id)

    # -- the worker ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._event.wait(5.0)
            self._event.clear()
            try:
                if self.write_once():
                    self._stopping.wait(1.0)  # some lost a race: retry on fresh copies
                    self._event.set()
            except Exception:
                log.exception("status write-back failed")
                self._stopping.wait(1.0)

    def write_once(self) -> int:
        """Write every status that changed; returns how many must be tried again."""
        with self._lock:
            decisions, self._decisions = self._decisions, None
        if decisions is not None:
            self._absorb(*decisions)
        with self._lock:
            todo = [(w, self._desired[w]) for w in sorted(self._dirty)]
        retry = 0
        for wid, status in todo:
            if self._stopping.is_set():
                break
            ref = self._watch.job(wid)
            if ref is None:
                with self._lock:
                    self._desired.pop(wid, None)
                    self._written.pop(wid, None)
                    self._dirty.discard(wid)
                continue
            if not self._write(ref, status, self._written.get(wid)):
                retry += 1
                continue
            with self._lock:
                self._written[wid] = status
                if self._desired.get(wid) == status:
                    self._dirty.discard(wid)
        return retry

    def _absorb(self, decisions: Decisions, now: float) -> None:
        fresh: dict[str, QueueStatus] = {}
        for a in decisions.admitted:
            adm = a.admission
            fresh[a.workload.id] = QueueStatus(
                admitted=True,
                reason="Admitted",
                message=f"ClusterQueue {adm.cluster_queue}, flavor {adm.flavor}",
            )
        for e in decisions.evicted:
            fresh[e.victim.workload.id] = QueueStatus(
                admitted=False, reason="Preempted", message=e.message
            )
        # A queue whose standing is the one absorbed last time (``core.standings``
        # carried it) holds the same statuses: skipped whole.
        absorbed: dict[ClusterQueueName | None, QueueStanding] = {}
        for standing in decisions.pending.by_queue():
            absorbed[standing.cluster_queue] = standing
            if self._absorbed.get(standing.cluster_queue) is standing:
                continue
            for wid, cq, lq_pos, cq_pos, eta, verdict, _, _, _ in standing.rows:
                at = now if eta == 0.0 else eta
                judged = PendingStatus.judged(wid, cq, verdict, (lq_pos, cq_pos), at)
                fresh[wid] = pending_status(judged)
        self._absorbed = absorbed
        with self._lock:
            for job, status in fresh.items():
                self._want(job, status)

    def _write(self, ref: JobRef, status: QueueStatus, last: QueueStatus | None) -> bool:
        meta = ref.obj["metadata"]
        version = guard(("metadata", "resourceVersion"), ref.version)
        try:
            notes = annotation_patch(ref.obj, status)
            if notes:
                self._send(ref, version + notes, status=False)
            same_condition = last is not None and (last.admitted, last.reason, last.message) == (
                status.admitted,
                status.reason,
                status.message,
            )
            kind = ref.api.name
            if not same_condition and kind not in self._conditions_off:
                current = self._watch.job(ref.workload_id) or ref
                patch = condition_patch(current.obj, status, rfc3339(_now()))
                if patch:
                    try:
                        written = self._send(current, patch, status=True)
                    except ApiException as error:
                        if error.status not in (404, 405):
                            raise
                        written = None
                    if written is None or not has_conditions(written):
                        log.info("%s status takes no conditions; annotations only", kind)
                        self._conditions_off.add(kind)
            if not same_condition and self._events is not None:
                self._limiter.acquire()
                warning = status.reason in WARNINGS
                self._events.record(ref.obj, status.reason, status.message, warning=warning)
        except ApiException as error:
            log.debug(
                "status of %s/%s: %s %s",
                meta["namespace"],
                meta["name"],
                error.status,
                error.reason,
            )
            return False
        return True

    def _send(self, ref: JobRef, patch: Patch, *, status: bool) -> Obj:
        self._limiter.acquire()
        meta = ref.obj["metadata"]
        result = ref.api.patch(meta["namespace"], meta["name"], patch.as_json(), status=status)
        self.writes += 1
        self._watch.remember(ref, result)
        return result


def _now() -> float:
    return datetime.now(UTC).timestamp()
