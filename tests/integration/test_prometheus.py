"""Every PromQL query of the shipped dashboard, run by a real Prometheus against the exporter.

The exporter serves on loopback, fed by a paced simulator run of the scripted
scenario in ``tests/observability.py`` (through the engine's observer hook, as
the service will feed it); Prometheus (Debian's package, run directly, never as
a system service) scrapes it every second. Then each dashboard target, with
Grafana's template variables substituted, must parse and succeed, the key
panels must return data, and the values must equal the simulator's state.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queuemgr.core.resources import GPU
from queuemgr.metrics import SchedulerMetrics, serve
from queuemgr.sim.engine import Engine
from tests.observability import run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests/grafana/queuemgr-dashboard.json"
UNTIL = 120.0  # stop mid-run, so queues are non-empty and GPUs are in use
# Grafana's variables, as "All" and a short range would expand them.
VARIABLES = {
    "${datasource}": "prometheus",
    "$cluster_queue": ".*",
    "$namespace": ".*",
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
}
KEY_PANELS = (
    "Pending workloads per cluster queue, by reason",
    "Pending workloads per local queue, by reason",
    "GPUs: usage vs nominal quota vs borrowed, per queue",
    "Scheduling cycle duration",
    "Free GPUs per flavor",
    "Leader",
)


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed; .ci/run installs Debian's package")
        pytest.skip(
            "prometheus binary not found: install it with "
            "`apt-get install prometheus` (.ci/run does this in CI)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


class Prom:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            body = _get(url)
        except urllib.error.HTTPError as exc:  # 400: the expression does not parse
            raise AssertionError(f"{expr}: {exc.read().decode()}") from None
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, expr: str) -> float:
        (sample,) = self.query(expr)
        return float(sample["value"][1])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prom, Engine]]:
    binary = _prometheus()
    tmp = tmp_path_factory.mktemp("prometheus")
    metrics = SchedulerMetrics(version="test", priority_classes={0: "default", 100: "high"})
    metrics.set_leader("sim-0", True)
    server, thread = serve(metrics, port=0)
    exporter_port = server.server_address[1]
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: queuemgr\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n"
    )
    port = _free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    prom = Prom(port)
    try:
        _wait("Prometheus to be ready", lambda: proc.poll() is None and _ready(prom), 60)
        _wait("the first scrape", lambda: bool(prom.query("queuemgr_build_info")), 30)
        # Pace the cycles over a few seconds so several scrapes see counters move.
        box: list[Engine] = []
        sim = threading.Thread(target=lambda: box.append(run(metrics, until=UNTIL, pace_s=0.06)))
        sim.start()
        sim.join(timeout=120)
        assert not sim.is_alive() and box, "the simulation did not finish"
        engine = box[0]
        want = engine.result.pending_at_end
        _wait(
            "a scrape of the final state",
            lambda: prom.query("sum(queuemgr_pending_workloads)")[0]["value"][1] == str(want),
            30,
        )
        yield prom, engine
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _ready(prom: Prom) -> bool:
    with urllib.request.urlopen(f"{prom.base}/-/ready", timeout=2) as resp:
        return bool(resp.status == 200)


def _targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def test_every_dashboard_query_runs(live: tuple[Prom, Engine]) -> None:
    prom, _ = live
    targets = _targets()
    assert len(targets) > 20
    empty_key = []
    for title, expr in targets:
        result = prom.query(substitute(expr))
        if title in KEY_PANELS and not result:
            empty_key.append((title, expr))
    assert empty_key == []


def test_key_panels_have_finite_values(live: tuple[Prom, Engine]) -> None:
    prom, _ = live
    for title, expr in _targets():
        if title not in KEY_PANELS:
            continue
        values = [float(s["value"][1]) for s in prom.query(substitute(expr))]
        assert any(math.isfinite(v) for v in values), (title, expr, values)


def test_template_variable_queries_return_values(live: tuple[Prom, Engine]) -> None:
    prom, _ = live
    dashboard = json.loads(DASHBOARD.read_text())
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"])
        assert match, var["definition"]
        selector, label = match.groups()
        result = prom.query(f"group by ({label}) ({substitute(selector)})")
        assert {s["metric"][label] for s in result}, var["name"]


def test_values_match_the_simulators_state(live: tuple[Prom, Engine]) -> None:
    prom, engine = live
    res = engine.result
    assert res.pending_at_end > 0 and res.running_at_end > 0
    assert prom.scalar("sum(queuemgr_pending_workloads)") == res.pending_at_end
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
