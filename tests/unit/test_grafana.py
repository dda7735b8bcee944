"""The shipped Grafana dashboards, their ConfigMap, provisioning and Prometheus alerts."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from queuemgr.metrics import SchedulerMetrics

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "manifests/grafana"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GRAFANA / name).read_text())
    return data


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_configmap_matches_the_dashboard_json() -> None:
    spec = importlib.util.spec_from_file_location("build_configmap", GRAFANA / "build_configmap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (GRAFANA / "configmap.yaml").read_text()
    assert committed == module.render(), "run python manifests/grafana/build_configmap.py"
    data = yaml.safe_load(committed)["data"]
    assert json.loads(data["queuemgr-dashboard.json"]) == load("queuemgr-dashboard.json")


def test_overview_dashboard_has_the_variables_and_rows_of_issue_6() -> None:
    d = load("queuemgr-dashboard.json")
    assert d["title"] == "queuemgr" and d["uid"] and d["schemaVersion"] >= 39
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("cluster_queue", "namespace"):
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"]
        assert v["definition"].startswith("label_values(queuemgr_")
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows == [
        "Queue depth",
        "GPU quota and usage",
        "Wait time",
        "Admissions and preemptions",
        "Fair share",
        "Capacity and fragmentation",
        "Scheduler",
    ]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]


def test_every_metric_a_dashboard_or_alert_queries_is_exported() -> None:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    exported = {
        f.name + suffix
        for f in SchedulerMetrics().registry.collect()
        for suffix in suffixes.get(f.type, ("",))
    }
    alerts = yaml.safe_load((ROOT / "manifests/prometheus/alerts.yaml").read_text())
    texts = exprs(load("queuemgr-dashboard.json")) + [
        r["expr"] for g in alerts["groups"] for r in g["rules"]
    ]
    used = {m for e in texts for m in re.findall(r"\bqueuemgr_[a-z_]+", e)}
    assert used, "no metric found in the dashboards"
    assert used - exported == set()


def test_history_dashboard_queries_the_store_schema() -> None:
    d = load("queuemgr-history-dashboard.json")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["query"] == "grafana-postgresql-datasource"
    sql = " ".join(t["rawSql"] for p in d["panels"] for t in p["targets"])
    assert "FROM usage_samples" in sql and "FROM audit_log" in sql
    assert "store schema" in d["description"]


def test_provisioned_datasources_match_the_dashboards_defaults() -> None:
    raw = (GRAFANA / "provisioning/datasources/datasources.yaml").read_text()
    sources = {s["uid"]: s for s in yaml.safe_load(raw)["datasources"]}
    assert sources["prometheus"]["type"] == "prometheus"
    assert sources["queuemgr-postgres"]["type"] == "grafana-postgresql-datasource"
    history = {v["name"]: v for v in load("queuemgr-history-dashboard.json")["templating"]["list"]}
    assert history["datasource"]["current"]["value"] in sources


def test_alert_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (.ci/run installs Debian's prometheus package)")
    out = subprocess.run(
        [promtool, "check", "rules", str(ROOT / "manifests/prometheus/alerts.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout
