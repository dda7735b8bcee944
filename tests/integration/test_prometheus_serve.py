"""The shipped dashboard against a live ``queuemgr serve``, scraped by a real Prometheus.

A real service process (simulated backend) schedules a scripted stream of
jobs in two ClusterQueues of one cohort: short jobs for twenty seconds, then
long 8-GPU jobs that fill the cluster and leave a queue. Prometheus scrapes
the service's /metrics every second. Every dashboard query must parse and
succeed, the key panels and the loop's own (phases, admission to start) must have
data, and the values must equal what the
store says: pending and admitted counts and GPU usage per ClusterQueue.

It also draws the pending-workloads panel over the run to a PNG; set
``QUEUEMGR_PANEL_PNG`` to keep it (docs/img/dashboard-pending.png was made so).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store.transitions import submit_workload
from tests.integration.promserver import (
    KEY_PANELS,
    SERVICE_LOOP_PANELS,
    Prom,
    dashboard_targets,
    prometheus_binary,
    render_png,
    running_prometheus,
    substitute,
    wait,
)
from tests.integration.service.processes import ServeProcess, job, logs, state_counts, write_config

pytestmark = pytest.mark.integration

CLUSTER = """
flavors:
  - {name: h100, node_labels: {gpu: h100}}
cohorts:
  - {name: research}
nodes:
  - {name: node, count: 4, flavor: h100, allocatable: {nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}}
cluster_queues:
  - name: team-a
    cohort: research
    namespaces: [team-a]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 16, cpu: 192, memory: 2Ti}
  - name: team-b
    cohort: research
    namespaces: [team-b]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 16, cpu: 192, memory: 2Ti}
local_queues:
  - {namespace: team-a, name: default, cluster_queue: team-a}
  - {namespace: team-b, name: default, cluster_queue: team-b}
"""
PANEL = "Pending workloads per cluster queue, by reason"

USAGE = sa.text("""
SELECT w.cluster_queue, sum(p.count * (ps.requests ->> 'nvidia.com/gpu')::bigint) AS gpus
FROM workloads w
JOIN placements p ON p.workload_id = w.id
JOIN pod_sets ps ON ps.workload_id = w.id AND ps.name = p.pod_set
WHERE w.state = 'Admitted'
GROUP BY 1
""")


def _submit(engine: Engine, name: str, ns: str, *, gpus: int, runtime: float) -> None:
    w = job(name, pods=1, gpus=gpus, runtime=runtime, created_at=time.time())
    with engine.begin() as conn:
        submit_workload(conn, dataclasses.replace(w, namespace=ns))


def _store(engine: Engine) -> tuple[dict[str, int], dict[str, int]]:
    with engine.connect() as conn:
        usage = {r.cluster_queue: int(r.gpus) for r in conn.execute(USAGE)}
    return state_counts(engine), usage


def test_the_dashboard_against_a_live_service(
    tmp_path: Path, engine: Engine, database_url: str
) -> None:
    prometheus_binary()  # skips before a service starts that a skip would stop mid-start
    write_config(tmp_path, CLUSTER, cycle_interval=1, default_runtime=600)
    service = ServeProcess(tmp_path, database_url=database_url, replica="a").start()
    try:
        with running_prometheus(tmp_path, f"127.0.0.1:{service.port}") as prom:
            wait("the service to lead", service.leads, 60)
            wait("the first scrape", lambda: bool(prom.query("queuemgr_leader")), 30)
            started = time.time()
            rng = random.Random(6)
            for i in range(40):  # short jobs for 20 s: queues grow and drain
                for ns in ("team-a", "team-b"):
                    gpus = rng.choice((1, 2, 4, 8))
                    _submit(engine, f"s{i}", ns, gpus=gpus, runtime=rng.uniform(1.0, 4.0))
                time.sleep(0.5)
            for i in range(6):  # then long 8-GPU jobs fill the cluster and leave a queue
                for ns in ("team-a", "team-b"):
                    _submit(engine, f"long{i}", ns, gpus=8, runtime=600)
            wait(
                "the short jobs to finish",
                lambda: _store(engine)[0] == {"Finished": 80, "Admitted": 4, "Pending": 8},
                60,
            )
            counts, usage = _store(engine)
            wait(
                "a scrape of that state",
                lambda: prom.scalar("sum(queuemgr_pending_workloads)") == counts["Pending"],
                30,
            )
            ended = time.time()
            _check_every_query(prom)
            assert prom.scalar("sum(queuemgr_admitted_active_workloads)") == counts["Admitted"]
            assert prom.scalar("queuemgr_admitted_workloads_total") == 84
            assert prom.scalar('queuemgr_finished_workloads_total{result="Succeeded"}') == 80
            gpu = prom.query('queuemgr_cluster_queue_resource_usage{resource="nvidia.com/gpu"}')
            seen = {s["metric"]["cluster_queue"]: float(s["value"][1]) for s in gpu}
            assert seen == {cq: float(n) for cq, n in usage.items()}
            assert sum(seen.values()) == 32
            assert prom.scalar('sum(queuemgr_node_free{resource="nvidia.com/gpu"})') == 0
            assert prom.scalar("sum(queuemgr_leader)") == 1
            png = Path(os.environ.get("QUEUEMGR_PANEL_PNG") or tmp_path / "panel.png")
            expr = next(e for t, e in dashboard_targets() if t == PANEL)
            assert render_png(prom, PANEL, expr, started, ended, png) >= 2
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    finally:
        if service.alive:
            assert service.terminate() == 0, logs([service])


def _check_every_query(prom: Prom) -> None:
    targets = dashboard_targets()
    assert len(targets) > 20
    empty_key = []
    for title, expr in targets:
        result = prom.query(substitute(expr))
        if title in KEY_PANELS or title in SERVICE_LOOP_PANELS:
            values = [float(s["value"][1]) for s in result]
            if not any(math.isfinite(v) for v in values):
                empty_key.append((title, expr))
    assert empty_key == []
