"""Admission checks (Kueue's two-phase admission), with ProvisioningRequest as the first.

Why it exists: a ClusterQueue may list admission checks. A workload the cycle
admits there holds its quota and placement in the store as every admission
does: that is its *reservation*. Its job starts only once every check of the
queue says Ready. Two parts, both here:

- :class:`AdmissionCheckGate` is the loop's backend (the
  :class:`~queuemgr.controller.ports.ClusterBackend` port) around the
  Kubernetes one: ``start`` of a gang whose queue has checks that are not all
  Ready for this admission keeps the gang (its job stays suspended) instead
  of starting it; every other call goes straight through;
- :class:`AdmissionCheckWorker` (leader only) drives the checks of the gangs
  the gate holds. The ``provisioning-request`` check creates one
  ProvisioningRequest per reservation (and the PodTemplates it names) with the
  check's class, and reads its conditions: ``Provisioned=True`` makes the
  check Ready (the worker then starts the job); ``Failed=True`` evicts the
  workload (reason ``AdmissionCheckFailed``, the reservation released) and
  requeues it after ``backoff * 2^(n-1)`` seconds (at most ``backoff_max``)
  for its ``n``-th failure, unless that was the check's ``retry_limit``-th:
  then the check is Rejected and the workload finished (reason
  ``AdmissionCheckRejected``, as Kueue deactivates it); ``BookingExpired=True``
  before the job started makes the next attempt's request;
  ``CapacityRevoked=True`` on the request a started gang runs under evicts it
  (``AdmissionCheckCapacityRevoked``) and requeues it, without a backoff, once
  its pods are gone. While it waits the job says
  ``WaitingForAdmissionCheck: <check> (Provisioned=False: <message>)``, as
  ``queuemgr why`` does. A request (and its templates) is deleted once its
  workload is no longer admitted under it (finished, evicted, requeued) or a
  newer attempt replaced it.

What must stay true:

- the core never hears of any of this: ``schedule(snapshot, now)`` decides
  the same with or without checks, and the simulator, which has no checks,
  takes every check as Ready at once (docs/simulate.md);
- every verdict lives in the store (``store.admission_checks``), on the
  admission it was made for, and every store write is fenced by the leader's
  token, so a new leader continues: the loop's take-over re-offers every
  admitted gang to the gate, which starts those whose checks are all Ready and
  holds the others; a failure's backoff runs from the eviction's
  ``state_since`` and the failures counted on the check's row;
- the pods-ready check times a gated gang from the moment its checks were all
  Ready, not from its admission (``kube_readiness``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from queuemgr.controller.kube_backend import KubernetesBackend
from queuemgr.controller.kube_section import (
    PROVISIONING_REQUEST,
    AdmissionCheckSettings,
)
from queuemgr.controller.kube_status import StatusWriter
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.ports import BackendError, Clock
from queuemgr.controller.worker import Worker
from queuemgr.core.lifecycle import RunEnd, WorkloadState
from queuemgr.core.model import AdmittedWorkload, Node, ResourceFlavor, WorkloadId
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import WORKLOAD_LABEL, ClusterWatch
from queuemgr.k8s.jobstatus import QueueStatus
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.provisioning import (
    BOOKING_EXPIRED,
    CAPACITY_REVOKED,
    CHECK_LABEL,
    FAILED,
    PROVISIONED,
    ProvisioningClient,
    conditions,
    request_name,
    request_objects,
)
from queuemgr.store.admission_checks import (
    CheckState,
    CheckStatus,
    check_states,
    queue_checks,
    reserve,
    set_state,
)
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.job_rows import RowState, row_states, unfinished
from queuemgr.store.leadership import LeaderToken, NotLeader, fence
from queuemgr.store.notify import CHECK_HELD_REASON, CHECK_REVOKED_REASON
from queuemgr.store.transitions import evict, finish_workload, requeue_workload
from queuemgr.store.workloads import StateConflict

log = logging.getLogger(__name__)

WAITING_REASON = "WaitingForAdmissionCheck"
FAILED_REASON = CHECK_HELD_REASON
REVOKED_REASON = CHECK_REVOKED_REASON
REJECTED_REASON = "AdmissionCheckRejected"
QUEUE_CHECKS_TTL = 2.0  # seconds a read of the queues' checks is reused


def waiting_message(states: dict[str, CheckStatus], checks: tuple[str, ...]) -> str:
    """``provisioning-request (Provisioned=False: ...)`` for each check not Ready yet."""
    parts = []
    for check in checks:
        st = states.get(check)
        if st is None or st.state is not CheckState.READY:
            detail = "Pending" if st is None or not st.message else st.message
            parts.append(f"{check} ({detail})")
    return "; ".join(parts)


class AdmissionCheckGate:
    """The loop's backend: the Kubernetes one, but a gated gang's start waits for its checks."""

    def __init__(self, inner: KubernetesBackend, db: Database) -> None:
        self.inner = inner
        self.start_concurrency = inner.start_concurrency
        self._db = db
        self._lock = threading.Lock()
        self._held: dict[WorkloadId, AdmittedWorkload] = {}
        self._checks: tuple[dict[str, tuple[str, ...]], float] | None = None
        self.wake: Callable[[], None] = lambda: None  # the worker's, when a gang is held

    def set_wake(self, wake: Callable[[], None]) -> None:
        self.inner.set_wake(wake)

    def checks_of(self, cluster_queue: str) -> tuple[str, ...]:
        now = time.monotonic()
        with self._lock:
            cached = self._checks
        if cached is None or now - cached[1] > QUEUE_CHECKS_TTL:
            with self._db.read() as conn:
                cached = (queue_checks(conn), now)
            with self._lock:
                self._checks = cached
        return cached[0].get(cluster_queue, ())

    def held(self) -> dict[WorkloadId, AdmittedWorkload]:
        with self._lock:
            return dict(self._held)

    def release(self, wid: WorkloadId) -> None:
        with self._lock:
            self._held.pop(wid, None)

    # -- the port ----------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        return self.inner.nodes()

    def start(self, admitted: AdmittedWorkload) -> None:
        checks = self.checks_of(admitted.admission.cluster_queue)
        wid = admitted.workload.id
        if checks:
            with self._db.read() as conn:
                states = check_states(conn, [wid]).get(wid, {})
            ready = all(
                (st := states.get(c)) is not None
                and st.state is CheckState.READY
                and st.of_admission(admitted.admitted_at)
                for c in checks
            )
            if not ready:
                with self._lock:
                    self._held[wid] = admitted
                self.wake()
                return
        self.release(wid)
        self.inner.start(admitted)

    def stop(self, workload_id: WorkloadId) -> None:
        self.release(workload_id)
        self.inner.stop(workload_id)

    def running(self) -> set[WorkloadId]:
        return self.inner.running()

    def poll_finished(self, now: float) -> list[RunEnd]:
        return self.inner.poll_finished(now)

    def next_finish(self) -> float | None:
        return self.inner.next_finish()


@dataclass(frozen=True, kw_only=True, slots=True)
class _Verdict:
    state: CheckState
    message: str
    next_attempt: bool = False


class AdmissionCheckWorker(Worker):
    def __init__(
        self,
        *,
        db: Database,
        gate: AdmissionCheckGate,
        elector: LeaderElector,
        clock: Clock,
        checks: tuple[AdmissionCheckSettings, ...],
        api: ProvisioningClient | None,
        flavors: Callable[[str], ResourceFlavor | None],
        status: StatusWriter | None = None,
        interval: float = 1.0,
    ) -> None:
        super().__init__("queuemgr-admission-checks")
        self._db = db
        self._gate = gate
        self._elector = elector
        self._clock = clock
        self._checks = {c.name: c for c in checks}
        self._api = api
        self._flavors = flavors
        self._status = status
        self._interval = interval
        gate.wake = self._event.set
        self.evictions = 0
        self.rejections = 0

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._event.wait(self._interval)
            self._event.clear()
            try:
                self.check_once()
            except (StoreError, NotLeader, StateConflict) as exc:
                log.warning("admission checks: %s", exc)
            except Exception:
                log.exception("admission checks failed")
                self._stopping.wait(1.0)

    @property
    def _watch(self) -> ClusterWatch:
        return self._gate.inner.watch

    def check_once(self) -> None:
        token = self._elector.token
        if token is None or not self._watch.synced:
            return
        now = self._clock.now()
        held = self._gate.held()
        requests = self._requests()
        with self._db.read() as conn:
            rows = row_states(conn, sorted(held))
            evicted = unfinished(conn, (WorkloadState.EVICTED,))
            owners = row_states(conn, sorted({wid for wid, _ in requests.values()}))
            states = check_states(conn, sorted(set(held) | set(evicted)))
            started = check_states(
                conn,
                sorted(
                    wid
                    for wid, row in owners.items()
                    if row.state is WorkloadState.ADMITTED and wid not in held
                ),
            )
        current: set[str] = set()  # the names of the requests still wanted
        for wid, admitted in sorted(held.items()):
            row = rows.get(wid)
            if (
                row is None
                or row.state is not WorkloadState.ADMITTED
                or row.admitted_at is None
                or abs(row.admitted_at - admitted.admitted_at) > 0.001
            ):
                self._gate.release(wid)  # no longer this reservation
                continue
            current |= self._drive(token, wid, admitted, requests, now)
        self._revoke_started(token, requests, owners, started, now)
        for wid, row in sorted(evicted.items()):
            if row.reason in (FAILED_REASON, REVOKED_REASON):
                self._requeue_when_due(
                    token,
                    wid,
                    row.since,
                    states.get(wid, {}),
                    now,
                    revoked=row.reason == REVOKED_REASON,
                )
        self._collect(requests, owners, current)

    # -- one reservation ---------------------------------------------------------------
    def _drive(
        self,
        token: LeaderToken,
        wid: WorkloadId,
        admitted: AdmittedWorkload,
        requests: dict[tuple[str, str], tuple[WorkloadId, dict[str, object]]],
        now: float,
    ) -> set[str]:
        checks = self._gate.checks_of(admitted.admission.cluster_queue)
        with self._db.write() as conn:
            fence(conn, token)
            states = reserve(conn, wid, checks, admitted_at=admitted.admitted_at, now=now)
        wanted: set[str] = set()
        for check in checks:
            st = states.get(check)
            settings = self._checks.get(check)
            if st is not None and settings is not None:
                wanted.add(self._request_name(wid, check, st.attempt))
            if st is None or st.state is not CheckState.PENDING:
                continue
            if settings is None:
                verdict = _Verdict(
                    state=CheckState.PENDING,
                    message="not configured in kubernetes.admission_checks",
                )
            elif settings.controller == PROVISIONING_REQUEST:
                verdict = self._provisioning(wid, admitted, settings, st, requests)
            else:  # pragma: no cover - the section allows no other controller
                continue
            if verdict.state is CheckState.RETRY:
                self._fail(token, wid, admitted, check, verdict.message, now)
                return wanted
            if (verdict.state, verdict.message) != (st.state, st.message) or verdict.next_attempt:
                with self._db.write() as conn:
                    fence(conn, token)
                    set_state(
                        conn,
                        wid,
                        check,
                        verdict.state,
                        message=verdict.message,
                        now=now,
                        admitted_at=admitted.admitted_at,
                        next_attempt=verdict.next_attempt,
                    )
                states[check] = CheckStatus(
                    check=check,
                    state=verdict.state,
                    message=verdict.message,
                    admitted_at=st.admitted_at,
                    attempt=st.attempt + int(verdict.next_attempt),
                    failures=st.failures,
                    updated_at=now,
                )
                if verdict.next_attempt:
                    self._event.set()  # make the next attempt's request at once
        if all((s := states.get(c)) is not None and s.state is CheckState.READY for c in checks):
            self._start(wid, admitted)
        else:
            self._say(
                wid,
                QueueStatus(
                    admitted=False,
                    reason=WAITING_REASON,
                    message=waiting_message(states, checks),
                ),
            )
        return wanted

    def _request_name(self, wid: WorkloadId, check: str, attempt: int) -> str:
        return request_name(wid.partition("/")[2], check, attempt)

    def _provisioning(
        self,
        wid: WorkloadId,
        admitted: AdmittedWorkload,
        settings: AdmissionCheckSettings,
        st: CheckStatus,
        requests: dict[tuple[str, str], tuple[WorkloadId, dict[str, object]]],
    ) -> _Verdict:
        namespace = wid.partition("/")[0]
        name = self._request_name(wid, settings.name, st.attempt)
        found = requests.get((namespace, name))
        if found is None:
            return self._create(wid, admitted, settings, st)
        conds = conditions(found[1])
        if (c := conds.get(FAILED)) is not None and c.true:
            return _Verdict(state=CheckState.RETRY, message=c.text)
        if (c := conds.get(PROVISIONED)) is not None and c.true:
            return _Verdict(state=CheckState.READY, message=c.text)
        if (c := conds.get(BOOKING_EXPIRED)) is not None and c.true:
            # Not started yet: the capacity it booked is gone; ask again.
            return _Verdict(
                state=CheckState.PENDING,
                message=f"{c.text}; asking again",
                next_attempt=True,
            )
        c = conds.get(PROVISIONED)
        if c is None:
            return _Verdict(
                state=CheckState.PENDING,
                message=f"{PROVISIONED}=False: ProvisioningRequest {name} not answered yet",
            )
        return _Verdict(
            state=CheckState.PENDING, message=f"{PROVISIONED}=False: {c.message or c.reason}"
        )

    def _create(
        self,
        wid: WorkloadId,
        admitted: AdmittedWorkload,
        settings: AdmissionCheckSettings,
        st: CheckStatus,
    ) -> _Verdict:
        name = self._request_name(wid, settings.name, st.attempt)
        ref = self._watch.job(wid)
        if ref is None or self._api is None:
            return _Verdict(state=CheckState.PENDING, message=st.message or "waiting for its job")
        try:
            objects = request_objects(
                ref.job,
                self._flavors(admitted.admission.flavor),
                check=settings.name,
                attempt=st.attempt,
                provisioning_class=settings.provisioning_class,
                parameters=dict(settings.parameters),
            )
            self._api.create(objects)
        except (ApiException, ManifestError) as exc:
            log.info("%s: creating ProvisioningRequest %s: %s", wid, name, exc)
            return _Verdict(
                state=CheckState.PENDING,
                message=f"{PROVISIONED}=False: cannot create ProvisioningRequest {name}: {exc}",
            )
        log.info("%s: ProvisioningRequest %s created", wid, name)
        return _Verdict(
            state=CheckState.PENDING,
            message=f"{PROVISIONED}=False: ProvisioningRequest {name} created",
        )

    def _start(self, wid: WorkloadId, admitted: AdmittedWorkload) -> None:
        try:
            self._gate.inner.start(admitted)
        except BackendError as exc:
            log.info("%s: checks Ready, not started yet: %s", wid, exc)
            return
        self._gate.release(wid)
        adm = admitted.admission
        self._say(
            wid,
            QueueStatus(
                admitted=True,
                reason="Admitted",
                message=f"ClusterQueue {adm.cluster_queue}, flavor {adm.flavor}",
            ),
        )
        log.info("%s: every admission check Ready; started", wid)

    def _fail(
        self,
        token: LeaderToken,
        wid: WorkloadId,
        admitted: AdmittedWorkload,
        check: str,
        why: str,
        now: float,
    ) -> None:
        settings = self._checks[check]
        with self._db.write() as conn:
            fence(conn, token)
            set_state(
                conn,
                wid,
                check,
                CheckState.RETRY,
                message=why,
                now=now,
                admitted_at=admitted.admitted_at,
                failed=True,
            )
            failures = check_states(conn, [wid])[wid][check].failures
            if settings.rejects(failures):
                # Kueue deactivates a workload whose check is Rejected: it is finished.
                reason = REJECTED_REASON
                message = (
                    f"admission check {check} rejected the workload after {failures}"
                    f" failed ProvisioningRequests (retry_limit {settings.retry_limit}): {why}"
                )
                set_state(
                    conn,
                    wid,
                    check,
                    CheckState.REJECTED,
                    message=why,
                    now=now,
                    admitted_at=admitted.admitted_at,
                )
                finish_workload(conn, wid, now=now, reason=reason, message=message)
            else:
                reason = FAILED_REASON
                delay = settings.delay(failures)
                message = f"admission check {check}: {why}; requeue {failures} in {delay:g}s"
                evict(
                    conn,
                    wid,
                    now=now,
                    reason=reason,
                    message=message,
                    preempted=False,
                )
        if reason == REJECTED_REASON:
            self.rejections += 1
        else:
            self.evictions += 1
        self._gate.release(wid)
        log.warning("%s: %s (%s)", wid, message, reason)
        self._say(wid, QueueStatus(admitted=False, reason=reason, message=message))

    def _revoke_started(
        self,
        token: LeaderToken,
        requests: dict[tuple[str, str], tuple[WorkloadId, dict[str, object]]],
        owners: dict[WorkloadId, RowState],
        states: dict[WorkloadId, dict[str, CheckStatus]],
        now: float,
    ) -> None:
        """Evict a started gang whose current request says ``CapacityRevoked=True``."""
        held_now = self._gate.held()
        revoked: dict[WorkloadId, tuple[str, str]] = {}
        for (_, name), (wid, obj) in sorted(requests.items()):
            row = owners.get(wid)
            if row is None or row.state is not WorkloadState.ADMITTED or wid in held_now:
                continue
            for check, st in states.get(wid, {}).items():
                if (
                    st.state is CheckState.READY
                    and st.of_admission(row.admitted_at)
                    and name == self._request_name(wid, check, st.attempt)
                    and (c := conditions(obj).get(CAPACITY_REVOKED)) is not None
                    and c.true
                ):
                    revoked.setdefault(wid, (check, c.text))
        for wid, (check, why) in sorted(revoked.items()):
            row = owners[wid]
            assert row.admitted_at is not None
            message = f"admission check {check}: {why}; requeued once its pods are gone"
            try:
                with self._db.write() as conn:
                    fence(conn, token)
                    set_state(
                        conn,
                        wid,
                        check,
                        CheckState.RETRY,
                        message=why,
                        now=now,
                        admitted_at=row.admitted_at,
                    )
                    evict(
                        conn,
                        wid,
                        now=now,
                        reason=REVOKED_REASON,
                        message=message,
                        preempted=False,
                    )
            except StateConflict:
                continue  # finished or evicted meanwhile
            self.evictions += 1
            log.warning("%s: %s (%s)", wid, message, REVOKED_REASON)
            self._say(wid, QueueStatus(admitted=False, reason=REVOKED_REASON, message=message))

    def _requeue_when_due(
        self,
        token: LeaderToken,
        wid: WorkloadId,
        since: float,
        states: dict[str, CheckStatus],
        now: float,
        *,
        revoked: bool = False,
    ) -> None:
        failures = max((s.failures for s in states.values()), default=1)
        settings = [self._checks[c] for c in states if c in self._checks]
        delay = 0.0 if revoked else max((s.delay(failures) for s in settings), default=0.0)
        if now < since + delay:
            return
        try:
            self._gate.inner.stop(wid)  # never started: returns at once
        except BackendError as exc:
            log.info("%s: not requeued yet: %s", wid, exc)
            return
        with self._db.write() as conn:
            fence(conn, token)
            requeue_workload(conn, wid, now=now)
        log.info("%s: requeued after its admission check's backoff", wid)

    # -- the requests ------------------------------------------------------------------
    def _requests(self) -> dict[tuple[str, str], tuple[WorkloadId, dict[str, object]]]:
        """Our requests by (namespace, name), with the workload each is for."""
        if self._api is None:
            return {}
        try:
            listed = self._api.requests()
        except ApiException as exc:
            log.info("listing ProvisioningRequests: %s %s", exc.status, exc.reason)
            return {}
        out = {}
        for obj in listed:
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            if CHECK_LABEL in labels and WORKLOAD_LABEL in labels:
                wid = WorkloadId(f"{meta['namespace']}/{labels[WORKLOAD_LABEL]}")
                out[(meta["namespace"], meta["name"])] = (wid, obj)
        return out

    def _collect(
        self,
        requests: dict[tuple[str, str], tuple[WorkloadId, dict[str, object]]],
        owners: dict[WorkloadId, RowState],
        current: set[str],
    ) -> None:
        """Delete the requests no reservation waits for and no started gang runs under."""
        if self._api is None:
            return
        held_now = self._gate.held()
        for (namespace, name), (wid, _) in sorted(requests.items()):
            row = owners.get(wid)
            admitted = row is not None and row.state is WorkloadState.ADMITTED
            held = wid in held_now
            if name in current or (admitted and not held):
                continue  # waited for, or the request its started gang was provisioned by
            try:
                self._api.delete(namespace, name)
                log.info("%s: ProvisioningRequest %s deleted", wid, name)
            except ApiException as exc:
                log.info("deleting ProvisioningRequest %s: %s", name, exc.status)

    def _say(self, wid: WorkloadId, status: QueueStatus) -> None:
        if self._status is not None:
            self._status.set(wid, status)
