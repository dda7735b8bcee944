"""A scripted scenario run through the simulator with a metrics exporter attached.

Shared by the exporter's unit tests and the real-Prometheus integration test:
the simulator's ``observer`` hook feeds :meth:`SchedulerMetrics.observe_cycle`
and its ``finished`` events feed :meth:`SchedulerMetrics.observe_finished`,
which is how the service will feed it from the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from queuemgr.core.model import WorkloadId
from queuemgr.core.reasons import Decisions
from queuemgr.core.snapshot import Snapshot
from queuemgr.metrics import SchedulerMetrics
from queuemgr.sim.engine import Engine, Event, SimResult
from queuemgr.spec.scenario import SimWorkload, parse_scenario

GPU = "nvidia.com/gpu"


def _job(name: str, ns: str, *, at: float, runtime: float, gpus: int, **extra: Any) -> Any:
    pods = extra.pop("pods", 1)
    return {
        "name": name,
        "namespace": ns,
        "queue": "default",
        "submit_at": at,
        "runtime": runtime,
        "pod_sets": [
            {
                "name": "workers",
                "count": pods,
                "requests": {GPU: gpus, "cpu": "1500m", "memory": "16Gi"},
            }
        ],
        **extra,
    }


# The ``ops`` cohort's preemptions by (victim's queue, reason), by construction
# (see :func:`scenario`); the busy cohort adds none.
PREEMPTIONS = {("team-d", "InCohortReclamation"): 1, ("team-e", "InClusterQueue"): 1}


def scenario() -> dict[str, Any]:
    """Three flavors, two cohorts of two queues, a lone StrictFIFO queue, and a steady stream.

    The busy ``research`` cohort and ``team-c`` feed the queue-depth, quota and
    wait panels. The small ``ops`` cohort, on a flavor of its own so the busy
    queues cannot change its course, preempts twice at known times, so the
    preemption panels have data and known values (:data:`PREEMPTIONS`):
    team-d borrows all 8 GPUs at t=0, team-e reclaims its half at t=30, and a
    higher-priority team-e job evicts that one at t=50.

    Workload names all start with ``wl-`` so a test can look for them in labels.
    """
    quota = {GPU: 16, "cpu": 192, "memory": "2Ti"}
    ops_quota = {GPU: 4, "cpu": 32, "memory": "256Gi"}
    return {
        "flavors": [
            {"name": "h100", "node_labels": {"gpu": "h100"}},
            {"name": "a100", "node_labels": {"gpu": "a100"}},
            {"name": "l40s", "node_labels": {"gpu": "l40s"}},
        ],
        "nodes": [
            {
                "name": "h100-node",
                "count": 4,
                "flavor": "h100",
                "allocatable": {GPU: 8, "cpu": 96, "memory": "1Ti"},
            },
            {
                "name": "a100-node",
                "count": 2,
                "flavor": "a100",
                "allocatable": {GPU: 4, "cpu": 64, "memory": "512Gi"},
            },
            {
                "name": "l40s-node",
                "count": 1,
                "flavor": "l40s",
                "allocatable": {GPU: 8, "cpu": 64, "memory": "512Gi"},
            },
        ],
        # research sits under org (no quota of its own), so the per-cohort panels see a tree.
        "cohorts": [{"name": "org"}, {"name": "research", "parent": "org"}, {"name": "ops"}],
        "cluster_queues": [
            {
                "name": "team-a",
                "cohort": "research",
                "resources": [
                    {
                        "flavor": "h100",
                        "nominal": quota,
                        "borrowing_limit": {GPU: 8},
                        "lending_limit": {GPU: 8},
                    }
                ],
            },
            {
                "name": "team-b",
                "cohort": "research",
                "resources": [{"flavor": "h100", "nominal": quota}],
            },
            {
                "name": "team-c",
                "queueing_strategy": "StrictFIFO",
                "namespaces": ["team-c"],
                "resources": [{"flavor": "a100", "nominal": {GPU: 8, "cpu": 128, "memory": "1Ti"}}],
            },
            {
                "name": "team-d",
                "cohort": "ops",
                "resources": [{"flavor": "l40s", "nominal": ops_quota}],
            },
            {
                "name": "team-e",
                "cohort": "ops",
                # It may not borrow, so its urgent job preempts instead of borrowing.
                "resources": [
                    {"flavor": "l40s", "nominal": ops_quota, "borrowing_limit": {GPU: 0}}
                ],
                "preemption": {
                    "reclaim_within_cohort": "Any",
                    "within_cluster_queue": "LowerPriority",
                },
            },
        ],
        "local_queues": [
            {"namespace": ns, "name": "default", "cluster_queue": ns}
            for ns in ("team-a", "team-b", "team-c", "team-d", "team-e")
        ]
        # team-c's queue refuses this namespace: its workloads are unroutable.
        + [{"namespace": "team-x", "name": "default", "cluster_queue": "team-c"}],
        "workloads": [
            _job("wl-a", "team-a", at=0, runtime=50, gpus=4, count=30, submit_every=5),
            _job("wl-b", "team-b", at=2, runtime=40, gpus=8, count=20, submit_every=7),
            _job("wl-gang", "team-a", at=10, runtime=60, gpus=8, pods=3),
            _job("wl-hi", "team-b", at=20, runtime=30, gpus=2, priority=100),
            _job("wl-huge", "team-a", at=30, runtime=10, gpus=8, pods=6),  # never fits
            _job("wl-c", "team-c", at=0, runtime=45, gpus=3, count=12, submit_every=4),
            _job("wl-lost", "team-x", at=15, runtime=10, gpus=1),  # refused by team-c
            # Borrows team-e's idle half; reclaimed at t=30, then too big for team-d alone.
            _job("wl-borrow", "team-d", at=0, runtime=1000, gpus=8),
            # Within team-e's nominal: takes it back; evicted at t=50 by the next one.
            _job("wl-own", "team-e", at=30, runtime=1000, gpus=4),
            _job("wl-urgent", "team-e", at=50, runtime=1000, gpus=4, priority=100),
        ],
    }


def run(
    metrics: SchedulerMetrics,
    *,
    until: float | None = None,
    pace_s: float = 0.0,
    events: list[Event] | None = None,
    after_first_cycle: Callable[[], None] | None = None,
) -> Engine:
    """Run :func:`scenario` with ``metrics`` attached; ``pace_s`` sleeps after each cycle.

    Pacing spreads the cycles over wall time so a real Prometheus scraping
    every second sees the counters move. ``events`` collects what the engine emits.
    ``after_first_cycle`` runs once, after the first cycle is observed: a test
    waits there for a scrape of the series that cycle exported at 0, as a
    service's first scrape comes long before its first preemption.
    """
    sc = parse_scenario(scenario())
    first = [after_first_cycle]

    def observer(now: float, snap: Snapshot, decisions: Decisions, took: float) -> None:
        metrics.observe_cycle(snap, decisions, took, now)
        hook, first[0] = first[0], None
        if hook is not None:
            hook()
        if pace_s:
            time.sleep(pace_s)

    def emit(event: Event) -> None:
        if events is not None:
            events.append(event)
        if event["event"] == "finished":
            metrics.observe_finished(str(event["reason"] or "Succeeded"))

    engine = Engine(sc.config, sc.workloads, emit=emit, observer=observer)
    engine.run(until=until)
    return engine


def queued(engine: Engine) -> int:
    """Workloads in the scheduler's queues at the end of a run: what the pending gauge counts.

    The engine's ``pending_at_end`` also counts preempted workloads still
    stopping or waiting out their requeue backoff: no cycle sees those, so the
    exporter, fed from cycles, cannot count them.
    """
    return sum(1 for _ in engine.cache.pending())


def simulate(until: float | None = None) -> SimResult:
    """The same run without metrics, to compare against."""
    sc = parse_scenario(scenario())
    return Engine(sc.config, sc.workloads).run(until=until)


def lost_gpu_seconds(events: Iterable[Event], workloads: Iterable[SimWorkload]) -> dict[str, float]:
    """GPU-seconds of the preempted runs per victim's ClusterQueue, from the engine's events.

    Worked out apart from the exporter: each run from its ``admitted`` event to
    its ``evicted`` one, times the GPUs its spec asks for (whole gangs here).
    """
    gpus = {sw.workload.id: sw.workload.gpus for sw in workloads}
    since: dict[WorkloadId, float] = {}
    out: dict[str, float] = {}
    for e in events:
        wid, t = cast(WorkloadId, e["workload"]), cast(float, e["t"])
        if e["event"] == "admitted":
            since[wid] = t
        elif e["event"] == "evicted":
            cq = str(e["cluster_queue"])
            out[cq] = out.get(cq, 0.0) + gpus[wid] * (t - since.pop(wid))
    return out


def scenario_workloads() -> list[SimWorkload]:
    """The workloads of :func:`scenario`, as the engine gets them."""
    return list(parse_scenario(scenario()).workloads)
