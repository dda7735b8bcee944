"""In-memory implementations of the controller's ports: a testing module, beside its ports.

Why it exists: tests of the loop need a backend whose every call can be
counted and that finishes (or fails) exactly when the test says so. It lives
beside the port, not in ``tests/``, so it is type-checked against the
Protocol and kept in step with it.

What must stay true: it honours the port's contract (idempotent ``start`` and
``stop``, each finish reported once) and is safe to call from several threads.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from queuemgr.controller.ports import BackendError
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, Node, WorkloadId


class FakeBackend:
    """Records calls; ``finish`` makes a running gang finish; ``fail_starts`` injects errors."""

    def __init__(self, nodes: list[Node] | None = None, *, start_concurrency: int = 1) -> None:
        self._nodes = list(nodes or [])
        self.start_concurrency = start_concurrency
        self._lock = threading.Lock()
        self.start_delay = 0.0  # seconds each start takes (outside the lock), as a round trip
        self.max_in_flight = 0  # the most start calls seen running at once
        self._in_flight = 0
        self._running: dict[WorkloadId, AdmittedWorkload] = {}
        self._finished: list[RunEnd] = []
        self.start_calls: Counter[WorkloadId] = Counter()
        self.stop_calls: Counter[WorkloadId] = Counter()
        self.calls: list[tuple[str, WorkloadId]] = []  # ("start" | "stop", workload), in order
        self.fail_starts = 0  # the next N start calls raise BackendError

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def start(self, admitted: AdmittedWorkload) -> None:
        if self.start_delay:
            with self._lock:
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
            time.sleep(self.start_delay)
            with self._lock:
                self._in_flight -= 1
        with self._lock:
            wid = admitted.workload.id
            self.start_calls[wid] += 1
            self.calls.append(("start", wid))
            if self.fail_starts > 0:
                self.fail_starts -= 1
                raise BackendError(f"injected failure starting {wid}")
            self._running.setdefault(wid, admitted)

    def stop(self, workload_id: WorkloadId) -> None:
        with self._lock:
            self.stop_calls[workload_id] += 1
            self.calls.append(("stop", workload_id))
            self._running.pop(workload_id, None)

    def running(self) -> set[WorkloadId]:
        with self._lock:
            return set(self._running)

    def poll_finished(self, now: float) -> list[RunEnd]:
        with self._lock:
            done, self._finished = self._finished, []
            return done

    def next_finish(self) -> float | None:
        return None

    # -- test controls --------------------------------------------------------
    def finish(self, workload_id: WorkloadId) -> None:
        """The gang ends on its own; the next poll reports it."""
        with self._lock:
            run = self._running.pop(workload_id, None)
            if run is not None:
                self._finished.append(RunEnd(workload=workload_id, admitted_at=run.admitted_at))


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
