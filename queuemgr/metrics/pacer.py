"""When the service refreshes its gauges: after every cycle while that is cheap.

Why it exists: the gauges (queue depth per reason, pending demand, free node
capacity) cost O(pending) to recompute, about a second at 100,000 pending
workloads. Prometheus reads them every 15 s or so, while a busy service runs
many cycles a second; recomputing them after each one would make every
submission wait behind that second. Counters and histograms (admissions,
waits, evictions, cycle times) are not paced: they stay exact.

What must stay true:

- while a refresh is cheap (under ``cheap_s``) it happens after every cycle,
  so small installations and tests see gauges that match the last cycle;
- otherwise the service spends at most ``1/duty`` of its time on them, and
  never lets them grow older than ``max(min_interval_s, duty x cost)`` plus
  the gap to the next cycle (the loop's safety cycle runs every few seconds,
  so gauges settle soon after the service goes quiet). The floor is 2 s, a
  fraction of a 15 s scrape: at 1 s a busy stream spent 5 % of its loop on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class GaugePacer:
    def __init__(
        self,
        *,
        cheap_s: float = 0.005,
        duty: float = 20.0,
        min_interval_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._cheap_s, self._duty, self._min_interval_s = cheap_s, duty, min_interval_s
        self._clock = clock
        self._last_at: float | None = None
        self._last_cost = 0.0

    def due(self) -> bool:
        """Whether the gauges should be recomputed after this cycle."""
        if self._last_at is None or self._last_cost < self._cheap_s:
            return True
        wait = max(self._min_interval_s, self._duty * self._last_cost)
        return self._clock() - self._last_at >= wait

    def refreshed(self, started_at: float) -> None:
        """Record a refresh that began at ``started_at`` (this pacer's clock) and ended now."""
        now = self._clock()
        self._last_at, self._last_cost = now, now - started_at

    def now(self) -> float:
        return self._clock()
