"""Every PromQL query of the shipped dashboard, run by a real Prometheus against the exporter.

The exporter serves on loopback, fed by a paced simulator run of the scripted
scenario in ``tests/observability.py`` (through the engine's observer hook);
Prometheus scrapes it every second. Then each dashboard target, with
Grafana's template variables substituted, must parse, succeed and return
data (the scenario preempts, so the rarer series exist too), the key panels
must have finite values, and the values must equal the simulator's state.
``test_prometheus_serve.py`` does the same against a live ``queuemgr serve``.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest

from queuemgr.core.resources import GPU
from queuemgr.metrics import SchedulerMetrics, serve
from queuemgr.sim.engine import Engine, Event
from tests.integration.promserver import (
    DASHBOARD,
    KEY_PANELS,
    SERVICE_LOOP_PANELS,
    Prom,
    dashboard_targets,
    running_prometheus,
    substitute,
    wait,
)
from tests.observability import PREEMPTIONS, lost_gpu_seconds, queued, run, scenario_workloads

pytestmark = pytest.mark.integration

UNTIL = 120.0  # stop mid-run, so queues are non-empty and GPUs are in use
PREEMPTION_PANEL = "Preemptions per second, by victim queue and reason; GPU-seconds lost"


class Live(NamedTuple):
    prom: Prom
    engine: Engine
    events: list[Event]
    started: float  # wall clock (s since the epoch) before the first cycle


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("prometheus")
    metrics = SchedulerMetrics(version="test", priority_classes={0: "default", 100: "high"})
    metrics.set_leader("sim-0", True)
    server, thread = serve(metrics, port=0)
    try:
        with running_prometheus(tmp, f"127.0.0.1:{server.server_address[1]}") as prom:
            wait("the first scrape", lambda: bool(prom.query("queuemgr_build_info")), 30)
            # Pace the cycles over a few seconds so several scrapes see counters move.
            box: list[Engine] = []
            events: list[Event] = []
            started = time.time()

            def zeros_scraped() -> None:
                # Without a scrape of the 0 before a preemption, rate() has one sample
                # and cannot show it; the first preemption comes a few cycles in.
                wait("a scrape of the preemption series at 0", _zeros_seen(prom), 30)

            sim = threading.Thread(
                target=lambda: box.append(
                    run(
                        metrics,
                        until=UNTIL,
                        pace_s=0.06,
                        events=events,
                        after_first_cycle=zeros_scraped,
                    )
                )
            )
            sim.start()
            sim.join(timeout=120)
            assert not sim.is_alive() and box, "the simulation did not finish"
            engine = box[0]
            want = str(queued(engine))
            wait(
                "a scrape of the final state",
                lambda: prom.query("sum(queuemgr_pending_workloads)")[0]["value"][1] == want,
                30,
            )
            yield Live(prom, engine, events, started)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _zeros_seen(prom: Prom) -> Callable[[], bool]:
    def seen() -> bool:
        series = prom.query("queuemgr_preemptions_total == 0")
        return {(s["metric"]["cluster_queue"], s["metric"]["reason"]) for s in series} >= set(
            PREEMPTIONS
        )

    return seen


def test_every_dashboard_query_runs_and_returns_data(live: Live) -> None:
    prom = live.prom
    targets = dashboard_targets()
    assert len(targets) > 20
    # A rate needs two scrapes of a series; the last ones may be a second away.
    for title, expr in targets:
        if title in SERVICE_LOOP_PANELS:
            continue  # no loop here: test_prometheus_serve.py requires their data
        query = substitute(expr)
        wait(f"data for {title!r}: {query}", functools.partial(_has_data, prom, query), 10)


def _has_data(prom: Prom, query: str) -> bool:
    return bool(prom.query(query))


def test_key_panels_have_finite_values(live: Live) -> None:
    prom = live.prom
    for title, expr in dashboard_targets():
        if title not in KEY_PANELS:
            continue
        values = [float(s["value"][1]) for s in prom.query(substitute(expr))]
        assert any(math.isfinite(v) for v in values), (title, expr, values)


def test_template_variable_queries_return_values(live: Live) -> None:
    prom = live.prom
    dashboard = json.loads(DASHBOARD.read_text())
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"])
        assert match, var["definition"]
        selector, label = match.groups()
        result = prom.query(f"group by ({label}) ({substitute(selector)})")
        assert {s["metric"][label] for s in result}, var["name"]


def test_values_match_the_simulators_state(live: Live) -> None:
    prom, engine = live.prom, live.engine
    res = engine.result
    assert queued(engine) > 0 and res.running_at_end > 0
    assert prom.scalar("sum(queuemgr_pending_workloads)") == queued(engine)
    assert prom.scalar("sum(queuemgr_admitted_active_workloads)") == res.running_at_end
    assert prom.scalar("queuemgr_admitted_workloads_total") == res.admitted
    snapshot = engine.cache.snapshot()
    usage = prom.query('queuemgr_cluster_queue_resource_usage{resource="nvidia.com/gpu"}')
    seen = {
        (s["metric"]["cluster_queue"], s["metric"]["flavor"]): float(s["value"][1]) for s in usage
    }
    for cq, per_flavor in snapshot.usage.items():
        for flavor, vec in per_flavor.items():
            assert seen[(cq, flavor)] == vec.get(GPU, 0), (cq, flavor)
    assert sum(seen.values()) > 0
    free = sum(v.get(GPU, 0) for v in snapshot.node_free.values())
    assert prom.scalar('sum(queuemgr_node_free{resource="nvidia.com/gpu"})') == free
    assert prom.scalar("sum(queuemgr_leader)") == 1


def test_preemptions_match_the_simulators_evictions(live: Live) -> None:
    prom, res = live.prom, live.engine.result
    assert res.evictions == sum(PREEMPTIONS.values())
    counted = {
        (s["metric"]["cluster_queue"], s["metric"]["reason"]): float(s["value"][1])
        for s in prom.query("queuemgr_preemptions_total > 0")
    }
    assert counted == PREEMPTIONS
    lost = {
        s["metric"]["cluster_queue"]: float(s["value"][1])
        for s in prom.query("queuemgr_preempted_gpu_seconds_total > 0")
    }
    assert lost == pytest.approx(lost_gpu_seconds(live.events, scenario_workloads()))
    assert lost["team-d"] == 8 * 30.0  # all 8 GPUs from t=0 until team-e reclaimed at t=30
    # The series were exported at 0 before the first preemption, so over the run the
    # panel shows each preemption at some moment: none is lost to rate(). The panel is
    # read over the whole run, not at its end: on a slow machine the run outlasts the
    # panel's 1m window.
    exprs = [expr for title, expr in dashboard_targets() if title == PREEMPTION_PANEL]
    assert len(exprs) == 2
    shown = set()
    for expr in exprs:
        for s in prom.query_range(substitute(expr), live.started, time.time(), 1.0):
            if any(float(value) > 0 for _, value in s["values"]):
                key = (s["metric"]["cluster_queue"], s["metric"].get("reason", "GPU-seconds"))
                shown.add(key)
    assert shown == {
        *PREEMPTIONS,
        ("team-d", "GPU-seconds"),
        ("team-e", "GPU-seconds"),
    }
