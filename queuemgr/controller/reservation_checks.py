"""One reservation's admission checks, driven to a verdict: Ready, Retry or Rejected.

Why it exists: for each gang the gate holds (``controller.admission_gate``),
the admission check worker (``controller.provisioning``) reserves its checks'
rows and asks each check what it says. The ``provisioning-request`` check
creates one ProvisioningRequest per reservation (and the PodTemplates it names,
``k8s.provisioning``) with the check's class, and reads its conditions:
``Provisioned=True`` makes the check Ready, and once every check is Ready the
job starts; ``Failed=True`` evicts the workload (reason ``AdmissionCheckFailed``,
the reservation released), to be requeued after the check's backoff, unless
that was the check's ``retry_limit``-th failure: then the check is Rejected and
the workload finished (reason ``AdmissionCheckRejected``, as Kueue deactivates
it); ``BookingExpired=True`` before the job started makes the next attempt's
request. While it waits the job says
``WaitingForAdmissionCheck: <check> (Provisioned=False: <message>)``, as
``queuemgr why`` does. :class:`ReservationChecks` is that, with the worker's
state; ``AdmissionCheckWorker`` extends it with its pass over every gang.

What must stay true: every verdict is written to the store on the admission it
was made for (``store.admission_checks``), fenced by the leader's token, in the
transaction that evicts or finishes the workload when it does; a check with no
settings in ``kubernetes.admission_checks`` stays Pending, never Ready.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from queuemgr.controller.admission_gate import AdmissionCheckGate
from queuemgr.controller.kube_section import PROVISIONING_REQUEST, AdmissionCheckSettings
from queuemgr.controller.kube_status import StatusWriter
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.ports import BackendError, Clock
from queuemgr.controller.worker import Worker
from queuemgr.core.model import AdmittedWorkload, ResourceFlavor, WorkloadId
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import ClusterWatch
from queuemgr.k8s.jobstatus import QueueStatus
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.provisioning import (
    BOOKING_EXPIRED,
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
    reserve,
    set_state,
)
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderToken, fence
from queuemgr.store.notify import CHECK_HELD_REASON
from queuemgr.store.transitions import evict, finish_workload

log = logging.getLogger(__name__)

WAITING_REASON = "WaitingForAdmissionCheck"
FAILED_REASON = CHECK_HELD_REASON
REJECTED_REASON = "AdmissionCheckRejected"


def waiting_message(states: dict[str, CheckStatus], checks: tuple[str, ...]) -> str:
    """``provisioning-request (Provisioned=False: ...)`` for each check not Ready yet."""
    parts = []
    for check in checks:
        st = states.get(check)
        if st is None or st.state is not CheckState.READY:
            detail = "Pending" if st is None or not st.message else st.message
            parts.append(f"{check} ({detail})")
    return "; ".join(parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Verdict:
    state: CheckState
    message: str
    next_attempt: bool = False


class ReservationChecks(Worker):
    """The admission check worker's state, and what one held gang's checks come to."""

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

    @property
    def _watch(self) -> ClusterWatch:
        return self._gate.inner.watch

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

    def _say(self, wid: WorkloadId, status: QueueStatus) -> None:
        if self._status is not None:
            self._status.set(wid, status)
