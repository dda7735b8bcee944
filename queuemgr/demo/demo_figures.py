"""What the demo shows: one read of the database as a frame, and the run's summary.

Why it exists: these are the plain values the view (:mod:`queuemgr.cli.demo`)
draws, kept apart from the run that makes them. :class:`~queuemgr.demo.run.Demo`
builds a :class:`Frame` at every read and a :class:`Summary` at the end;
:func:`summarize_rows` computes the summary's per-tenant figures, span and
utilization from workload rows alone, with no database or service at hand.

What must stay true: the summary's counts, waits and utilization are computed
from the workload rows (:mod:`queuemgr.store.readouts`) alone; admissions and
preemptions are the service's own counters of committed decisions, since a
row keeps only its latest admission. A wait is submission to the latest
admission, and the utilization counts finished runs only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.sim.report import percentile
from queuemgr.store.readouts import WorkloadProgress

# -- what one read of the database shows ---------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Event:
    at: float  # seconds since the demo started
    kind: str  # submitted | admitted | preempted | finished
    workload: str  # namespace/name
    gpus: int
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class QueueLine:
    cluster_queue: str
    nominal: int  # GPUs
    used: int
    pending: int
    running: int
    finished: int
    reasons: Mapping[str, int]  # pending reason code -> workloads

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.nominal)


@dataclass(frozen=True, kw_only=True)
class NodeLine:
    name: str
    capacity: int
    held: Mapping[str, int]  # namespace -> GPUs

    @property
    def used(self) -> int:
        return sum(self.held.values())


@dataclass(frozen=True, kw_only=True)
class Frame:
    elapsed: float
    queues: tuple[QueueLine, ...]
    nodes: tuple[NodeLine, ...]
    events: tuple[Event, ...]  # new since the previous frame, in time order
    planned: int
    submitted: int
    finished: int
    admissions: int
    preemptions: int
    leader: bool

    @property
    def done(self) -> bool:
        return self.finished == self.planned


# -- the summary -------------------------------------------------------------------------


# -- the summary -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TenantSummary:
    submitted: int
    finished: int
    admitted: int
    wait_p50_s: float | None
    wait_p95_s: float | None
    gpu_seconds: float  # of runs that finished


@dataclass(frozen=True, kw_only=True)
class Summary:
    outcome: str  # finished | interrupted | timed out
    seed: int
    speed: float
    planned: int
    submitted: int
    finished: int
    admitted: int  # workloads admitted at least once
    admissions: int  # admission decisions, re-admissions after a preemption included
    preemptions: int
    preemptions_by: Mapping[str, int]  # preempting ClusterQueue -> workloads preempted
    preemptions_seen: int  # preemptions the view saw happen
    # From the service's own tally of its decisions (core.tally).
    max_preemptions_per_workload: int
    wasted_preemptions: int  # victims re-admitted while their preemptor still waited
    lost_gpu_seconds: float  # of runs thrown away by preemption
    tenants: Mapping[str, TenantSummary]
    gpu_capacity: int
    span_s: float  # first submission to last finish (or now)
    gpu_utilization: float | None  # GPU-seconds of finished runs / (capacity x span)
    gpu_busy: float | None  # GPUs held on average over the run, sampled by the view
    node_violations: tuple[str, ...]
    elapsed_s: float

    def doc(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "seed": self.seed,
            "speed": self.speed,
            "planned": self.planned,
            "submitted": self.submitted,
            "finished": self.finished,
            "admitted": self.admitted,
            "admissions": self.admissions,
            "preemptions": self.preemptions,
            "preemptions_by": dict(self.preemptions_by),
            "preemptions_seen": self.preemptions_seen,
            "max_preemptions_per_workload": self.max_preemptions_per_workload,
            "wasted_preemptions": self.wasted_preemptions,
            "lost_gpu_seconds": self.lost_gpu_seconds,
            "tenants": {
                t: {
                    "submitted": s.submitted,
                    "finished": s.finished,
                    "admitted": s.admitted,
                    "wait_p50_s": s.wait_p50_s,
                    "wait_p95_s": s.wait_p95_s,
                    "gpu_seconds": s.gpu_seconds,
                }
                for t, s in self.tenants.items()
            },
            "gpu_capacity": self.gpu_capacity,
            "span_s": self.span_s,
            "gpu_utilization": self.gpu_utilization,
            "gpu_busy": self.gpu_busy,
            "node_violations": list(self.node_violations),
            "elapsed_s": self.elapsed_s,
        }


def summarize_rows(
    rows: list[WorkloadProgress], *, capacity: int, now: float
) -> tuple[dict[str, TenantSummary], float, float | None]:
    """Per-tenant figures, the span and the utilization, from workload rows alone.

    A wait is submission to the latest admission (for a preempted workload, the
    admission that ran it to the end); the utilization counts finished runs only.
    """
    tenants: dict[str, TenantSummary] = {}
    for ns in sorted({r.namespace for r in rows}):
        mine = [r for r in rows if r.namespace == ns]
        waits = sorted(r.admitted_at - r.created_at for r in mine if r.admitted_at is not None)
        tenants[ns] = TenantSummary(
            submitted=len(mine),
            finished=sum(1 for r in mine if r.state is WorkloadState.FINISHED),
            admitted=len(waits),
            wait_p50_s=percentile(waits, 50),
            wait_p95_s=percentile(waits, 95),
            gpu_seconds=math.fsum(_run_gpu_seconds(r) for r in mine),
        )
    if not rows:
        return tenants, 0.0, None
    first = min(r.created_at for r in rows)
    done = [r.finished_at for r in rows if r.finished_at is not None]
    all_done = len(done) == len(rows)
    last = max(done) if all_done else now
    span = max(0.0, last - first)
    used = math.fsum(t.gpu_seconds for t in tenants.values())
    utilization = used / (capacity * span) if capacity and span > 0 else None
    return tenants, span, utilization


def _run_gpu_seconds(r: WorkloadProgress) -> float:
    if r.state is not WorkloadState.FINISHED or r.admitted_at is None or r.finished_at is None:
        return 0.0
    return r.gpus * max(0.0, r.finished_at - r.admitted_at)
