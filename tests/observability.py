"""A scripted scenario run through the simulator with a metrics exporter attached.

Shared by the exporter's unit tests and the real-Prometheus integration test:
the simulator's ``observer`` hook feeds :meth:`SchedulerMetrics.observe_cycle`
and its ``finished`` events feed :meth:`SchedulerMetrics.observe_finished`,
which is how the service will feed it from the store.
"""

from __future__ import annotations

import time
from typing import Any

from queuemgr.core.reasons import Decisions
from queuemgr.core.snapshot import Snapshot
from queuemgr.metrics import SchedulerMetrics
from queuemgr.sim.engine import Engine, Event, SimResult
from queuemgr.sim.scenario import parse_scenario

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


def scenario() -> dict[str, Any]:
    """Two flavors, a cohort of two queues and a lone StrictFIFO queue, and a steady stream.

    Workload names all start with ``wl-`` so a test can look for them in labels.
    """
    quota = {GPU: 16, "cpu": 192, "memory": "2Ti"}
    return {
        "flavors": [
            {"name": "h100", "node_labels": {"gpu": "h100"}},
            {"name": "a100", "node_labels": {"gpu": "a100"}},
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
        ],
        "cohorts": [{"name": "research"}],
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
        ],
        "local_queues": [
            {"namespace": ns, "name": "default", "cluster_queue": ns}
            for ns in ("team-a", "team-b", "team-c")
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
        ],
    }


def run(metrics: SchedulerMetrics, *, until: float | None = None, pace_s: float = 0.0) -> Engine:
    """Run :func:`scenario` with ``metrics`` attached; ``pace_s`` sleeps after each cycle.

    Pacing spreads the cycles over wall time so a real Prometheus scraping
    every second sees the counters move.
    """
    sc = parse_scenario(scenario())

    def observer(now: float, snap: Snapshot, decisions: Decisions, took: float) -> None:
        metrics.observe_cycle(snap, decisions, took, now)
        if pace_s:
            time.sleep(pace_s)

    def emit(event: Event) -> None:
        if event["event"] == "finished":
            metrics.observe_finished(str(event["reason"] or "Succeeded"))

    engine = Engine(sc.config, sc.workloads, emit=emit, observer=observer)
    engine.run(until=until)
    return engine


def simulate(until: float | None = None) -> SimResult:
    """The same run without metrics, to compare against."""
    sc = parse_scenario(scenario())
    return Engine(sc.config, sc.workloads).run(until=until)
