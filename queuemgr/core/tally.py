"""A tally of preemptions: how often, how wasteful, and how much work they threw away.

Why it exists: the issue's stability figures (preemptions per workload, wasted
preemptions, GPU-seconds lost) must mean the same in ``simulate``, in the
demo and in the service, so all of them count from the cycles' decisions
through this one class instead of each keeping its own books.

What must stay true: it only reads decisions, in their order (``Decisions.log``);
a preemption is wasted when its victim is admitted again while the preemptor it
made room for has not been admitted since; lost GPU-seconds are the victim's
placed GPUs times how long that run had run when it was evicted, counted in
all and by the preemption's reason (the sums agree).
"""

from __future__ import annotations

from queuemgr.core.model import WorkloadId
from queuemgr.core.reasons import Decisions, Eviction, PreemptionReason
from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import admitted_requests


class PreemptionTally:
    def __init__(self) -> None:
        self.by_workload: dict[WorkloadId, int] = {}
        self.wasted = 0
        self.lost_gpu_seconds = 0.0
        # Which rule threw the work away: reclaim, fair sharing or priority differ in cure.
        self.lost_by_reason: dict[PreemptionReason, float] = {}
        # Victim -> preemptors not admitted since they evicted it, and back.
        self._preemptors: dict[WorkloadId, set[WorkloadId]] = {}
        self._victims: dict[WorkloadId, set[WorkloadId]] = {}

    @property
    def preemptions(self) -> int:
        return sum(self.by_workload.values())

    @property
    def most_per_workload(self) -> int:
        return max(self.by_workload.values(), default=0)

    def observe(self, decisions: Decisions, now: float) -> None:
        for item in decisions.log:
            if isinstance(item, Eviction):
                self.evicted(item, now)
            else:
                self.admitted(item.workload.id)

    def evicted(self, e: Eviction, now: float) -> None:
        wid = e.victim.workload.id
        self.by_workload[wid] = self.by_workload.get(wid, 0) + 1
        gpus = admitted_requests(e.victim).get(GPU, 0)
        lost = gpus * max(0.0, now - e.victim.admitted_at)
        self.lost_gpu_seconds += lost
        self.lost_by_reason[e.reason] = self.lost_by_reason.get(e.reason, 0.0) + lost
        self._preemptors.setdefault(wid, set()).add(e.preemptor)
        self._victims.setdefault(e.preemptor, set()).add(wid)

    def admitted(self, wid: WorkloadId) -> None:
        for preemptor in self._preemptors.pop(wid, ()):
            self.wasted += 1  # that preemptor still waits for the room this victim gave
            self._victims[preemptor].discard(wid)
        for victim in self._victims.pop(wid, ()):
            self._preemptors[victim].discard(wid)
