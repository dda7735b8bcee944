"""Admission checks (Kueue's two-phase admission), with ProvisioningRequest as the first.

Why it exists: a ClusterQueue may list admission checks. A workload the cycle
admits there holds its quota and placement in the store as every admission
does: that is its *reservation*. Its job starts only once every check of the
queue says Ready. Three parts:

- :class:`~queuemgr.controller.admission_gate.AdmissionCheckGate`, the loop's
  backend, keeps a gated gang's job suspended instead of starting it;
- :class:`~queuemgr.controller.reservation_checks.ReservationChecks` drives
  one held gang's checks to a verdict: the ``provisioning-request`` check's
  ProvisioningRequest created and read, then the job started, or the workload
  evicted (``AdmissionCheckFailed``) or finished (``AdmissionCheckRejected``);
- :class:`AdmissionCheckWorker`, here (leader only), extends it with its pass
  over every gang: the held ones are driven; a workload evicted by a failed
  check is requeued after ``backoff * 2^(n-1)`` seconds (at most
  ``backoff_max``) for its ``n``-th failure; ``CapacityRevoked=True`` on the
  request a started gang runs under evicts it
  (``AdmissionCheckCapacityRevoked``) and requeues it, without a backoff, once
  its pods are gone. A request (and its templates) is deleted once its
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

from queuemgr.controller.ports import BackendError
from queuemgr.controller.reservation_checks import FAILED_REASON, ReservationChecks
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import WorkloadId
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.cluster import WORKLOAD_LABEL
from queuemgr.k8s.jobstatus import QueueStatus
from queuemgr.k8s.provisioning import CAPACITY_REVOKED, CHECK_LABEL, conditions
from queuemgr.store.admission_checks import CheckState, CheckStatus, check_states, set_state
from queuemgr.store.errors import StoreError
from queuemgr.store.job_rows import RowState, row_states, unfinished
from queuemgr.store.leadership import LeaderToken, NotLeader, fence
from queuemgr.store.notify import CHECK_REVOKED_REASON
from queuemgr.store.transitions import evict, requeue_workload
from queuemgr.store.workloads import StateConflict

log = logging.getLogger(__name__)

REVOKED_REASON = CHECK_REVOKED_REASON


class AdmissionCheckWorker(ReservationChecks):
    """Each pass (leader only): held gangs' checks, started gangs' revoked capacity,
    evicted gangs' requeue, and the requests no gang waits for."""

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
