"""A real Prometheus for the observability tests, and the shipped dashboard's queries.

Why it exists: two tests scrape queuemgr with Debian's ``prometheus`` (run
directly, never as a system service): one feeds the exporter from the
simulator, the other scrapes a live ``queuemgr serve``. Both evaluate every
PromQL expression of the dashboard with Grafana's variables substituted.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests/grafana/queuemgr-dashboard.json"
# Grafana's variables, as "All" and a short range would expand them.
VARIABLES = {
    "${datasource}": "prometheus",
    "$cluster_queue": ".*",
    "$namespace": ".*",
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
}
# Fed by the service's loop only (its phases and its starts): the simulator's observer
# has neither, so the live service's test (test_prometheus_serve.py) requires their data.
SERVICE_LOOP_PANELS = frozenset({"Scheduler loop time by phase", "Admission to start"})
KEY_PANELS = (
    "Pending workloads per cluster queue, by reason",
    "Pending workloads per local queue, by reason",
    "GPUs: usage vs nominal quota vs borrowed, per queue",
    # Exported at 0 for every configured queue, so it has data before any preemption.
    "Preemptions per second, by victim queue and reason; GPU-seconds lost",
    "Scheduling cycle duration",
    "Free GPUs per flavor",
    "Leader",
)


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed; .ci/run installs Debian's package")
        pytest.skip(
            "prometheus binary not found: install it with "
            "`apt-get install prometheus` (.ci/run does this in CI)"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def wait(what: str, check: Callable[[], bool], timeout: float) -> None:
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
            body = get_json(url)
        except urllib.error.HTTPError as exc:  # 400: the expression does not parse
            raise AssertionError(f"{expr}: {exc.read().decode()}") from None
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, expr: str) -> float:
        (sample,) = self.query(expr)
        return float(sample["value"][1])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": start, "end": end, "step": step}
        body = get_json(f"{self.base}/api/v1/query_range?" + urllib.parse.urlencode(params))
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


@contextmanager
def running_prometheus(tmp: Path, target: str) -> Iterator[Prom]:
    """Prometheus scraping ``target`` (host:port) every second, until the block ends."""
    binary = prometheus_binary()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: queuemgr\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
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
        wait("Prometheus to be ready", lambda: proc.poll() is None and ready(prom), 60)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def ready(prom: Prom) -> bool:
    with urllib.request.urlopen(f"{prom.base}/-/ready", timeout=2) as resp:
        return bool(resp.status == 200)


def dashboard_targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def render_png(prom: Prom, title: str, expr: str, start: float, end: float, path: Path) -> int:
    """Draw one panel's series over [start, end] stacked, as Grafana does; returns how many."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first, last = int(start), int(end) + 1  # whole seconds, so samples land on the grid
    series = prom.query_range(substitute(expr), first, last, step=1.0)
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    grid = list(range(first, last + 1))
    xs = [t - first for t in grid]
    stacks: list[list[float]] = []
    labels: list[str] = []
    for s in sorted(series, key=lambda s: sorted(s["metric"].items())):
        values = {round(float(t)): float(v) for t, v in s["values"]}
        if not any(values.values()):
            continue  # Grafana hides all-zero series in a stacked panel too
        stacks.append([values.get(t, 0.0) for t in grid])
        labels.append(", ".join(f"{k}={v}" for k, v in sorted(s["metric"].items())))
    if stacks:
        ax.stackplot(xs, stacks, labels=labels, alpha=0.85)
        ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.set_title(title)
    ax.set_xlabel("seconds")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return len(stacks)
