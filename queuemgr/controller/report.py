"""What one cycle of the loop reports, and the clock of its phases.

Why it exists: the loop's callers (the service's logs, the benchmarks, the tests)
read a cycle's outcome and where its time went, without reaching into the loop.

What must stay true: ``phases`` and ``cpu`` hold the seconds between consecutive
``Phases.done`` calls, wall clock and the loop thread's CPU time, in the order the
loop ran them; a phase the cycle skipped is absent, not zero.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from queuemgr.core.model import WorkloadId


@dataclass(frozen=True, kw_only=True)
class CycleReport:
    admitted: tuple[WorkloadId, ...]
    evicted: tuple[WorkloadId, ...]
    finished: tuple[WorkloadId, ...]
    pending: int
    duration_s: float  # schedule() alone
    # Seconds of each step (finish, load, safety, schedule, commit, apply, observe):
    # wall clock, and CPU time of the loop's thread (steadier on a busy machine).
    phases: Mapping[str, float] = field(default_factory=dict)
    cpu: Mapping[str, float] = field(default_factory=dict)
    statuses_written: int = 0  # pending reasons whose row the cycle updated
    board_written: int = 0  # status board rows the cycle wrote or deleted


class Phases:
    """Wall and thread CPU seconds between consecutive ``done`` calls."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def done(self, name: str) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        self.wall[name] = wall - self._wall
        self.cpu[name] = cpu - self._cpu
        self._wall, self._cpu = wall, cpu
