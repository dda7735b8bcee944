"""Applying a cycle's committed decisions to the backend: stops, then concurrent starts.

Why it exists: on a real cluster each start is a round trip to the API server,
so a cycle's starts go out on a pool of ``start_concurrency`` threads, each
retried on its own, and how long each admitted gang waited for its start is
measured (``queuemgr_admission_start_seconds``). A backend that starts one at a
time (the simulated one: a start is a dictionary write) is called inline, so
``simulate`` and ``serve`` apply in the same order.

The loop waits for a cycle's starts before its next cycle. Leaving them in
flight while the next cycle ran was measured (docs/benchmarks.md, "Starts left
in flight") and was slower: the loop's next cycle held the interpreter while
the start threads waited for it, and the wait from admission to start grew.

What must stay true:

- the loop calls this only after the decisions are committed;
- each admission is started once, retried with backoff until it succeeds or
  this replica stops leading or stops (the next leader starts what is
  committed and not running);
- :meth:`Applier.start_all` returns once every start it was given has landed
  or been given up, so no backend call of a cycle overlaps the next cycle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from queuemgr.controller.ports import Clock, ClusterBackend, StaleObject
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
        self._pool: ThreadPoolExecutor | None = None  # made for the first concurrent starts

    def start_all(self, token: LeaderToken, starts: Sequence[AdmittedWorkload]) -> None:
        """Start each admitted gang, concurrently where the backend allows; wait for all."""
        if self._backend.start_concurrency <= 1 or len(starts) <= 1:
            for a in starts:
                self._start(token, a)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._backend.start_concurrency, thread_name_prefix="queuemgr-start"
            )
        list(self._pool.map(partial(self._start, token), starts))  # _start never raises

    def stop(self, token: LeaderToken, wid: WorkloadId) -> bool:
        """Stop ``wid``'s gang; False if given up (no longer leading, or stopping)."""
        return self.retry(token, partial(self._backend.stop, wid))

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def retry(self, token: LeaderToken, action: Callable[[], None]) -> bool:
        """Run ``action`` until it succeeds; give up only when stopping or no longer leading."""
        delay = 0.05
        attempt = 0
        while True:
            attempt += 1
            try:
                action()
                return True
            except StaleObject as exc:  # another writer got there first: routine, unless
                # it keeps happening (a patch that cannot apply looks the same to the server)
                level = logging.INFO if attempt <= 3 else logging.WARNING
                log.log(level, "%s; retrying in %.2fs", exc, delay)
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
