"""How far off the ETA a pending workload was told was from when it really started.

Why it exists: an ETA is only worth showing if it is roughly right, and the
``queuemgr_eta_error_seconds`` histogram (and its alert) is how admins know.
The loop hands each cycle's admissions and the ETA of every workload left
pending (the status board computes them all) to an :class:`EtaTracker`; it
remembers the first ETA each workload was given and,
when the workload is admitted, yields (predicted, actual) for the metric.

What must stay true: a workload's prediction is the one of the first cycle
that saw it pending (later, better-informed ETAs are not what the tenant was
first told); a workload with no ETA (unknown, inadmissible) is not measured;
memory is bounded by the pending workloads: forgotten once admitted, or once
no longer pending (cancelled, finished) at the next cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queuemgr.core.model import AdmittedWorkload, WorkloadId


class EtaTracker:
    def __init__(self) -> None:
        self._predicted: dict[WorkloadId, float | None] = {}

    def observe(
        self,
        admitted: Iterable[AdmittedWorkload],
        etas: Mapping[WorkloadId, float | None],
        now: float,
    ) -> list[tuple[float, float]]:
        """(predicted start, actual start) of this cycle's admissions that had an ETA.

        ``etas``: the ETA of every workload the cycle left pending.
        """
        measured: list[tuple[float, float]] = []
        for a in admitted:
            predicted = self._predicted.pop(a.workload.id, None)
            if predicted is not None:
                measured.append((predicted, now))
        for wid in etas.keys() - self._predicted.keys():
            self._predicted[wid] = etas[wid]
        for gone in self._predicted.keys() - etas.keys():
            del self._predicted[gone]
        return measured

    def __len__(self) -> int:
        return len(self._predicted)
