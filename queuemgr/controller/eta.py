"""How far off the ETA a pending workload was told was from when it really started.

Why it exists: an ETA is only worth showing if it is roughly right, and the
``queuemgr_eta_error_seconds`` histogram (and its alert) is how admins know.
The loop hands each cycle's pending workloads and decisions to an
:class:`EtaTracker`; it remembers the first ETA each workload was given and,
when the workload is admitted, yields (predicted, actual) for the metric.

What must stay true: a workload's prediction is the one of the first cycle
that saw it pending (later, better-informed ETAs are not what the tenant was
first told); a workload with no ETA (unknown, inadmissible) is not measured;
memory is bounded by the pending workloads: forgotten once admitted, or once
no longer pending (cancelled, finished) at the next cycle.
"""

from __future__ import annotations

from collections.abc import Iterable

from queuemgr.core.model import Workload, WorkloadId
from queuemgr.core.reasons import Decisions


class EtaTracker:
    def __init__(self) -> None:
        self._predicted: dict[WorkloadId, float | None] = {}

    def observe(
        self, pending: Iterable[Workload], decisions: Decisions, now: float
    ) -> list[tuple[float, float]]:
        """(predicted start, actual start) of this cycle's admissions that had an ETA."""
        measured: list[tuple[float, float]] = []
        for a in decisions.admitted:
            predicted = self._predicted.pop(a.workload.id, None)
            if predicted is not None:
                measured.append((predicted, now))
        still = {w.id for w in pending}
        statuses = decisions.pending
        for wid in still - self._predicted.keys():
            if wid in statuses:
                self._predicted[wid] = statuses.eta_by_id(wid)
        for gone in self._predicted.keys() - still:
            del self._predicted[gone]
        return measured

    def __len__(self) -> int:
        return len(self._predicted)
