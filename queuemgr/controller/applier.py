"""Applying a cycle's committed decisions to the backend: starts in flight, stops after them.

Why it exists: on a real cluster each start is a round trip to the API server.
Had the loop waited for a cycle's starts before its next cycle, every admission
would wait for the slowest start of its cycle, and every finish that came in
meanwhile for the next cycle to begin: on a busy cluster of short runs, quota
would sit admitted but not running. So a backend that can start gangs
concurrently (``start_concurrency`` above 1) gets them on a pool of threads,
and the loop goes on to its next cycle while they are in flight. A backend
that cannot (the simulated one: a start is a dictionary write) is called
inline, so ``simulate`` and ``serve`` apply in the same order.

What must stay true:

- the loop calls this only after the decisions are committed;
- each admission is started once, retried with backoff until it succeeds or
  this replica stops leading or stops (the next leader starts what is
  committed and not running);
- a stop of a workload waits for that workload's start in flight, so a
  victim's suspension never lands before its own unsuspension;
- :meth:`Applier.settle` waits for every start in flight: a new leadership's
  take-over reads what runs only after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial

from queuemgr.controller.ports import Clock, ClusterBackend
from queuemgr.core.model import AdmittedWorkload, WorkloadId
from queuemgr.metrics import SchedulerMetrics
from queuemgr.store.leadership import LeaderToken

log = logging.getLogger(__name__)


class Applier:
    def __init__(
        self,
        *,
        backend: ClusterBackend,
        leadership: Callable[[], LeaderToken | None],
        clock: Clock,
        metrics: SchedulerMetrics,
        stopping: threading.Event,
    ) -> None:
        self._backend = backend
        self._leadership = leadership  # this replica's current token, None when not leading
        self._clock = clock
        self._metrics = metrics
        self._stopping = stopping
        self._pool: ThreadPoolExecutor | None = None  # made for the first concurrent start
        self._lock = threading.Lock()
        self._in_flight: dict[WorkloadId, Future[bool]] = {}

    def start_all(self, token: LeaderToken, starts: Sequence[AdmittedWorkload]) -> None:
        """Start each admitted gang: inline, or handed to the pool without waiting."""
        if self._backend.start_concurrency <= 1:
            for a in starts:
                self._start(token, a)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._backend.start_concurrency, thread_name_prefix="queuemgr-start"
            )
        for a in starts:
            wid = a.workload.id
            self._settle_one(wid)  # admitted again after a stop: the earlier start came first
            future = self._pool.submit(self._start, token, a)
            with self._lock:
                self._in_flight[wid] = future
            future.add_done_callback(partial(self._landed, wid))

    def stop(self, token: LeaderToken, wid: WorkloadId) -> bool:
        """Stop ``wid`` once its start in flight (if any) has landed; False if given up."""
        self._settle_one(wid)
        return self.retry(token, partial(self._backend.stop, wid))

    def settle(self) -> None:
        """Wait until no start is in flight."""
        with self._lock:
            futures = list(self._in_flight.values())
        wait(futures)  # _start never raises; a start cancelled by shutdown is over too

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def retry(self, token: LeaderToken, action: Callable[[], None]) -> bool:
        """Run ``action`` until it succeeds; give up only when stopping or no longer leading."""
        delay = 0.05
        while True:
            try:
                action()
                return True
            except Exception as exc:  # any backend failure is retried; the store is the truth
                log.warning("applying a decision failed (%s); retrying in %.2fs", exc, delay)
            if self._stopping.is_set() or self._leadership() != token:
                return False  # the next leader re-applies what is committed
            self._stopping.wait(delay)
            delay = min(delay * 2, 2.0)

    def _start(self, token: LeaderToken, admitted: AdmittedWorkload) -> bool:
        started = self.retry(token, partial(self._backend.start, admitted))
        if started:
            self._metrics.observe_start(self._clock.now() - admitted.admitted_at)
        return started

    def _settle_one(self, wid: WorkloadId) -> None:
        with self._lock:
            future = self._in_flight.get(wid)
        if future is not None:
            wait([future])

    def _landed(self, wid: WorkloadId, future: Future[bool]) -> None:
        with self._lock:
            if self._in_flight.get(wid) is future:
                del self._in_flight[wid]
