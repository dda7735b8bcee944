"""The admission checks' gate: a reserved gang's job starts once its checks are Ready.

Why it exists: a ClusterQueue may list admission checks (Kueue's two-phase
admission). A workload the cycle admits there holds its quota and placement in
the store as every admission does: that is its *reservation*. Its job starts
only once every check of the queue says Ready. :class:`AdmissionCheckGate` is
the loop's backend (the :class:`~queuemgr.controller.ports.ClusterBackend`
port) around the Kubernetes one: ``start`` of a gang whose queue has checks
that are not all Ready for this admission keeps the gang (its job stays
suspended) instead of starting it, and wakes the worker that drives its checks
(``controller.provisioning``); every other call goes straight through.

What must stay true: a gated gang starts here only when every check of its
queue is Ready for this admission (``CheckStatus.of_admission``), as the store
says, so a verdict on an earlier admission never starts a later one; what the
gate holds is in memory only, and a new leader's take-over, which re-offers
every admitted gang, holds again those whose checks are not all Ready.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from queuemgr.controller.kube_backend import KubernetesBackend
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, Node, WorkloadId
from queuemgr.store.admission_checks import CheckState, check_states, queue_checks
from queuemgr.store.handle import Database

QUEUE_CHECKS_TTL = 2.0  # seconds a read of the queues' checks is reused


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
