"""A periodic trigger on the monotonic clock: the loop's safety cycle.

Why it exists: the safety cycle refreshes usage samples and pending reasons,
requeues evicted workloads and enforces max runtimes, so it must never stop.
A job scheduled on the wall clock did stop: after the clock stepped back, its
next run lay in the past of a clock it no longer trusted, and it never ran
again, even once the clock came back.

What must stay true: ``tick`` runs every ``interval`` seconds of monotonic
time (``threading.Event.wait`` measures on it), whatever the wall clock does;
an exception in ``tick`` is logged and the next tick still comes; ``stop()``
returns once the thread has ended; nothing is logged per tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Ticker:
    def __init__(self, interval: float, tick: Callable[[], None], *, name: str) -> None:
        if not interval > 0:
            raise ValueError(f"interval: must be above 0, got {interval!r}")
        self._interval = interval
        self._tick = tick
        self._name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self._tick()
            except Exception:  # the next tick must come all the same
                log.exception("%s failed", self._name)
