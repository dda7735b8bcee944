"""How far off the ETA a pending workload was told was from when it really started.

Why it exists: an ETA is only worth showing if it is roughly right, and the
``queuemgr_eta_error_seconds`` histogram (and its alert) is how admins know.
The loop hands each cycle's admissions and the ETAs of the queues whose
standing changed (the status board's) to an :class:`EtaTracker`; it
remembers the first ETA each workload was given and,
when the workload is admitted, yields (predicted, actual) for the metric.

What must stay true: a workload's prediction is the one of the first cycle
that saw it pending (later, better-informed ETAs are not what the tenant was
first told); a workload with no ETA (unknown, inadmissible) is not measured;
memory is bounded by the pending workloads: forgotten once admitted, or once
no longer pending (cancelled, finished) at the next cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, WorkloadId

_Queue = ClusterQueueName | None


class EtaTracker:
    def __init__(self) -> None:
        # By queue, as the board hands them: a queue the board carried is unchanged.
        self._predicted: dict[_Queue, dict[WorkloadId, float | None]] = {}

    def observe(
        self,
        admitted: Iterable[AdmittedWorkload],
        etas: Mapping[_Queue, Mapping[WorkloadId, float | None]],
        queues: Collection[_Queue],
        now: float,
    ) -> list[tuple[float, float]]:
        """(predicted start, actual start) of this cycle's admissions that had an ETA.

        ``etas``: the ETA (0.0: now) of every workload left pending in each queue
        whose standing changed; ``queues``: every queue with pending workloads (the
        others hold the same workloads as before, with the same ETAs).
        """
        measured: list[tuple[float, float]] = []
        for a in admitted:
            held = self._predicted.get(a.admission.cluster_queue)
            predicted = None if held is None else held.pop(a.workload.id, None)
            if predicted is not None:
                measured.append((predicted, now))
        for name, fresh in etas.items():
            old = self._predicted.get(name, {})
            self._predicted[name] = {
                wid: old.get(wid, now if eta == 0.0 else eta) for wid, eta in fresh.items()
            }
        for gone in [name for name in self._predicted if name not in queues]:
            del self._predicted[gone]
        return measured

    def __len__(self) -> int:
        return sum(map(len, self._predicted.values()))
