"""The history dashboard's SQL runs against the real schema and sums what the service sampled.

Grafana sends the panels' SQL to Postgres after expanding its macros; this
test expands them the same way (time range, ``$tenant``, ``$object_kind``)
and runs every panel and variable query on a database the store filled.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import submit_workload
from queuemgr.store.usage import sample_usage
from tests.integration.controller.helpers import run_one_cycle
from tests.integration.store.helpers import gang, seed_config

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).parents[3] / "manifests/grafana/queuemgr-history-dashboard.json"


def _expand(sql: str, start: datetime, end: datetime) -> str:
    """Grafana's macros for the PostgreSQL data source, with every variable value selected."""
    frm, to = f"'{start.isoformat()}'", f"'{end.isoformat()}'"
    sql = sql.replace("$__timeFrom()", frm).replace("$__timeTo()", to)
    sql = re.sub(r"\$__timeFilter\((\w+)\)", rf"\1 BETWEEN {frm} AND {to}", sql)
    sql = sql.replace("$tenant", "'team-a', 'team-b'")
    return sql.replace("$object_kind", "'ClusterQueue', 'LocalQueue', 'Node'")


def _queries() -> dict[str, str]:
    d = json.loads(DASHBOARD.read_text())
    out = {f"panel {p['title']}": t["rawSql"] for p in d["panels"] for t in p["targets"]}
    for v in d["templating"]["list"]:
        if v.get("type") == "query":
            out[f"variable {v['name']}"] = v["query"]
    return out


def test_every_history_query_runs_and_gpu_hours_match_the_samples(engine: Engine) -> None:
    seed_config(engine)  # two 8-GPU nodes, ClusterQueue team-a, LocalQueue team-a/default
    with engine.begin() as conn:
        for name in ("a", "b"):
            submit_workload(conn, gang(name))
    run_one_cycle(engine)
    state = load_state(Database(engine))
    assert len(state.admitted) == 2
    now = time.time()
    with engine.begin() as conn:  # 16 GPUs held for two sampled hours
        for ago in (7200, 3600):
            sample_usage(conn, state.config, state.admitted, now=now - ago, period=3600)
    end = datetime.now(UTC) + timedelta(minutes=1)
    start = end - timedelta(days=2)
    results = {}
    with engine.connect() as conn:
        for name, sql in _queries().items():
            results[name] = conn.execute(sa.text(_expand(sql, start, end))).mappings().all()
    tables = [rows for name, rows in results.items() if name.startswith("panel") and rows]
    gpu_hours = sum(float(r["gpu_hours"]) for rows in tables for r in rows if "gpu_hours" in r)
    # Two panels (time series and table) show the same 32 GPU-hours of team-a.
    assert gpu_hours == pytest.approx(2 * 32.0)
    tenants = {r.get("tenant") or r.get("metric") for rows in tables for r in rows}
    assert "team-a" in tenants
    audit = [r for rows in tables for r in rows if "actor" in r]
    assert {r["object_kind"] for r in audit} >= {"ClusterQueue", "LocalQueue", "Node"}
    variables = {k: v for k, v in results.items() if k.startswith("variable")}
    assert any(rows and list(rows[0].values()) == ["team-a"] for rows in variables.values())
