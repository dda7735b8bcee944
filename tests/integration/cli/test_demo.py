"""``queuemgr demo`` end to end: the real service on a real Postgres, in a fast mode.

The figures the demo prints are checked against the database rows it leaves
behind; a watcher thread checks node capacity while it runs.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy import Engine

from queuemgr.cli.main import main
from queuemgr.store.database import create_engine
from queuemgr.store.embedded import embedded_server
from tests.integration.cli.conftest import no_traceback

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
FAST = ["--jobs", "20", "--speed", "5"]
NODE_GPUS = 8

_ROWS = sa.text("""
SELECT w.namespace, w.name, w.state::text AS state,
       extract(epoch FROM w.created_at) AS created_at,
       extract(epoch FROM w.admitted_at) AS admitted_at,
       extract(epoch FROM w.finished_at) AS finished_at,
       (SELECT sum(ps.count * (ps.requests ->> 'nvidia.com/gpu')::int)
        FROM pod_sets ps WHERE ps.workload_id = w.id) AS gpus
FROM workloads w
""")

_NODE_USE = sa.text("""
SELECT p.node, sum(p.count * (ps.requests ->> 'nvidia.com/gpu')::int) AS gpus
FROM placements p JOIN pod_sets ps ON ps.workload_id = p.workload_id AND ps.name = p.pod_set
GROUP BY p.node
""")


def _nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@pytest.fixture
def node_watch(database_url: str) -> Iterator[dict[str, int]]:
    """The most GPUs each node was seen holding, polled from the placements while a test runs."""
    peak: dict[str, int] = {}
    stop = threading.Event()
    engine = create_engine(database_url)

    def watch() -> None:
        while not stop.is_set():
            with engine.connect() as conn:
                for r in conn.execute(_NODE_USE):
                    peak[r.node] = max(peak.get(r.node, 0), int(r.gpus))
            stop.wait(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield peak
    stop.set()
    thread.join(timeout=5)
    engine.dispose()


def _demo(database_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["demo", *args], env={"QUEUEMGR_DATABASE_URL": database_url})


def test_every_workload_finishes_and_the_summary_matches_the_rows(
    database_url: str, engine: Engine, tmp_path: Path, node_watch: dict[str, int]
) -> None:
    summary_path = tmp_path / "summary.json"
    result = _demo(database_url, *FAST, "--summary", str(summary_path))
    no_traceback(result)
    assert result.exit_code == 0, result.output
    s: dict[str, Any] = json.loads(summary_path.read_text())

    with engine.connect() as conn:
        rows = [r._asdict() for r in conn.execute(_ROWS)]
    assert len(rows) == 20
    assert {r["state"] for r in rows} == {"Finished"}
    assert s["outcome"] == "finished"
    assert s["planned"] == s["submitted"] == s["finished"] == 20
    assert s["admitted"] == sum(1 for r in rows if r["admitted_at"] is not None) == 20

    # Reclaim happened, and each preempted workload was admitted again to finish.
    assert s["preemptions"] >= 1
    assert s["admissions"] == s["admitted"] + s["preemptions"]
    assert sum(s["preemptions_by"].values()) == s["preemptions"]
    assert 1 <= s["preemptions_seen"] <= s["preemptions"]
    feed = [line.split() for line in result.stdout.splitlines() if re.match(r"\s+\d+\.\ds  ", line)]
    assert sum(1 for f in feed if f[1] == "preempted") == s["preemptions_seen"]
    assert sum(1 for f in feed if f[1] == "finished") == 20
    assert sum(1 for f in feed if f[1] == "submitted") == 20

    # Waits per tenant and the utilization, recomputed from the rows.
    for tenant in ("team-a", "team-b", "team-c"):
        mine = [r for r in rows if r["namespace"] == tenant]
        waits = [float(r["admitted_at"] - r["created_at"]) for r in mine]
        t = s["tenants"][tenant]
        assert t["submitted"] == t["finished"] == len(mine)
        assert t["wait_p50_s"] == pytest.approx(_nearest_rank(waits, 50), abs=1e-3)
        assert t["wait_p95_s"] == pytest.approx(_nearest_rank(waits, 95), abs=1e-3)
    gpu_seconds = sum(float(r["gpus"] * (r["finished_at"] - r["admitted_at"])) for r in rows)
    span = float(max(r["finished_at"] for r in rows) - min(r["created_at"] for r in rows))
    assert s["gpu_capacity"] == 4 * NODE_GPUS
    assert s["span_s"] == pytest.approx(span, abs=1e-3)
    assert s["gpu_utilization"] == pytest.approx(gpu_seconds / (32 * span), rel=1e-6)
    assert 0 < s["gpu_utilization"] <= 1

    # No node ever held more GPUs than it has, as seen by the demo and by the watcher.
    assert s["node_violations"] == []
    assert node_watch and max(node_watch.values()) <= NODE_GPUS
    assert set(node_watch) <= {f"gpu-node-{i}" for i in range(4)}

    out = result.stdout
    assert "queuemgr demo finished" in out
    assert f"preempted    {s['preemptions']}" in out
    assert "QUEUEMGR_DATABASE_URL already points at it" in out
    assert "queuemgr why " in out and "queuemgr audit" in out


def test_a_database_that_holds_anything_is_refused(database_url: str, engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO flavors (name) VALUES ('real-data')"))
    result = _demo(database_url, *FAST)
    no_traceback(result)
    assert result.exit_code == 1
    assert "QUEUEMGR_DATABASE_URL" in result.output and "not empty" in result.output
    assert "flavors" in result.output
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM workloads")).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM cluster_queues")).scalar() == 0


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """An embedded Postgres data directory outside pytest's tmp tree.

    A new pytest session takes the traverse bit off ``/tmp/pytest-of-<user>``,
    which the server's own account needs (as the session fixtures know).
    """
    path = Path(tempfile.mkdtemp(prefix="queuemgr-demo-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _queuemgr(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "queuemgr", *args],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_embedded_demo_database_is_recreated_and_left_for_the_cli(data_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QUEUEMGR_DATABASE_URL"}
    env["QUEUEMGR_DATA_DIR"] = str(data_dir)
    # A previous run's leftovers; holding the server also spares the demo a start.
    with embedded_server(data_dir / "demo") as url:
        leftover = create_engine(url, isolation_level="AUTOCOMMIT")
        with leftover.connect() as conn:
            conn.execute(sa.text("CREATE TABLE leftover (x int)"))
        leftover.dispose()
        done = _queuemgr("demo", "--jobs", "10", "--speed", "10", env=env)
        assert "Traceback" not in done.stdout + done.stderr
        assert done.returncode == 0, done.stdout + done.stderr
        fresh = create_engine(url)
        with fresh.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
        fresh.dispose()
        assert "leftover" not in tables and "workloads" in tables
    # The server has stopped; the command the demo printed starts it again.
    exported = re.search(r"export QUEUEMGR_DATA_DIR=(\S+)", done.stdout)
    assert exported is not None, done.stdout
    assert Path(exported.group(1)) == data_dir / "demo"
    env["QUEUEMGR_DATA_DIR"] = exported.group(1)
    listed = _queuemgr("list", "-A", "--all", "-o", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    workloads = json.loads(listed.stdout)["workloads"]
    assert len(workloads) == 10
    assert {w["state"] for w in workloads} == {"Finished"}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--speed", "0"], "--speed"),
        (["--jobs", "3"], "--jobs"),
        (["--jobs", "many"], "--jobs"),
        (["--summary", "/nonexistent-dir/summary.json"], "--summary"),
    ],
)
def test_a_bad_option_exits_2_naming_it(args: list[str], named: str) -> None:
    result = CliRunner().invoke(main, ["demo", *args], env={"QUEUEMGR_DATABASE_URL": None})
    no_traceback(result)
    assert result.exit_code == 2
    assert named in result.output and args[1] in result.output


def test_ctrl_c_stops_the_service_and_prints_the_summary(database_url: str) -> None:
    env = {**os.environ, "QUEUEMGR_DATABASE_URL": database_url, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuemgr", "demo", "--jobs", "40"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if " admitted " in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in out + err
    assert "queuemgr demo was interrupted" in out
    assert "of 40 submitted" in out
