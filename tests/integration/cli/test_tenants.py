"""Tenant commands: submit, list, status, why (reason, positions, who is ahead), cancel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.cli.conftest import Invoke, no_traceback

pytestmark = pytest.mark.integration

WHY_KEYS = {
    "workload",
    "state",
    "cluster_queue",
    "cohort",
    "reason",
    "message",
    "position_in_local_queue",
    "position_in_cluster_queue",
    "eta",
    "eta_in_s",
    "eta_reason",
    "ahead",
    "ahead_count",
    "frees_up",
    "claim",
    "backoff",
    "scheduler",
    "evaluated_at",
    "source",
    "as_of",
}
WORKLOAD_KEYS = {
    "namespace",
    "name",
    "local_queue",
    "cluster_queue",
    "state",
    "reason",
    "message",
    "priority",
    "gpus",
    "created_at",
    "state_since",
    "admitted_at",
    "finished_at",
    "max_runtime_s",
    "flavor",
    "borrowing",
    "evictions",
    "requeue_at",
    "pod_sets",
    "placements",
}


def _submit(cli: Invoke, name: str, gpus: int = 8, ns: str = "team-b") -> None:
    r = cli(
        "submit",
        "-q",
        "default",
        "-n",
        ns,
        "--gpus",
        str(gpus),
        "--name",
        name,
        "--max-runtime",
        "2h",
        "--",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    )
    assert r.exit_code == 0, r.output
    assert f"{ns}/{name} submitted" in r.output


def test_why_names_the_reason_positions_and_who_is_ahead(cli: Invoke, applied: Path) -> None:
    # team-b holds 8 nominal GPUs and may borrow team-a's 16 idle ones: 24 in all.
    for i in range(5):
        _submit(cli, f"job-{i}")
    why = cli("why", "job-4", "-n", "team-b", "-o", "json")
    assert why.exit_code == 0, why.output
    doc = json.loads(why.stdout)
    assert set(doc) == WHY_KEYS
    assert doc["reason"] in ("QuotaExceeded", "CohortExhausted")
    assert doc["position_in_cluster_queue"] == 2 and doc["position_in_local_queue"] == 2
    # The jobs ahead would start now and declare 2 h: room comes back when they end.
    assert doc["eta"] is not None and 7100 <= doc["eta_in_s"] <= 7200
    ahead = [a["workload"] for a in doc["ahead"]]
    assert ahead == ["team-b/job-0", "team-b/job-1", "team-b/job-2", "team-b/job-3"]
    assert doc["ahead_count"] == 4
    table = cli("why", "job-4", "-n", "team-b")
    assert "Ahead of it (4)" in table.output and "in its ClusterQueue" in table.output
    first = json.loads(cli("why", "job-0", "-n", "team-b", "-o", "json").stdout)
    assert first["reason"] == "Admissible" and first["eta_in_s"] == 0.0


def test_unroutable_and_inadmissible_reasons(cli: Invoke, applied: Path) -> None:
    _submit(cli, "huge", gpus=64)
    doc = json.loads(cli("why", "huge", "-n", "team-b", "-o", "json").stdout)
    assert doc["reason"] == "Inadmissible" and "nvidia.com/gpu" in doc["message"]
    assert cli("cq", "stop", "team-b").exit_code == 0
    stopped = json.loads(cli("why", "huge", "-n", "team-b", "-o", "json").stdout)
    assert stopped["reason"] == "ClusterQueueStopped"


def test_list_status_cancel(cli: Invoke, applied: Path) -> None:
    _submit(cli, "a")
    _submit(cli, "b", ns="team-a")
    listed = json.loads(cli("list", "-A", "-o", "json").stdout)
    assert [(w["namespace"], w["name"]) for w in listed["workloads"]] == [
        ("team-a", "b"),
        ("team-b", "a"),
    ]
    assert set(listed["workloads"][0]) == WORKLOAD_KEYS
    only_b = json.loads(cli("list", "-n", "team-b", "-o", "json").stdout)
    assert [w["name"] for w in only_b["workloads"]] == ["a"]
    status = json.loads(cli("status", "a", "-n", "team-b", "-o", "json").stdout)
    assert status["state"] == "Pending" and status["gpus"] == 8
    assert status["max_runtime_s"] == 7200
    assert cli("cancel", "a", "-n", "team-b").exit_code == 0
    cancelled = yaml.safe_load(cli("status", "a", "-n", "team-b", "-o", "yaml").stdout)
    assert cancelled["state"] == "Finished" and cancelled["reason"] == "Cancelled"
    again = cli("cancel", "a", "-n", "team-b")
    assert again.exit_code == 1 and "already finished" in again.output


def test_unknown_names_suggest_the_nearest(cli: Invoke, applied: Path) -> None:
    r = cli("submit", "-q", "defualt", "-n", "team-b", "--gpus", "1")
    assert r.exit_code == 1 and "did you mean 'default'" in r.output
    no_traceback(r)
    w = cli("why", "jbo-1", "-n", "team-b")
    assert w.exit_code == 1 and "not found" in w.output
    bad = cli("submit", "-q", "default", "-n", "team-b", "--gpus", "two")
    assert bad.exit_code == 2 and "--gpus" in bad.output
    no_traceback(bad)


def test_queues_lists_quota_usage_and_depth(cli: Invoke, applied: Path) -> None:
    _submit(cli, "a")
    doc = json.loads(cli("queues", "-n", "team-b", "-o", "json").stdout)
    (q,) = doc["local_queues"]
    assert q["cluster_queue"] == "team-b" and q["pending"] == 1
    assert q["quota"] == {"h100": {"nvidia.com/gpu": 8}}
    assert "team-b" in cli("queues", "-A").output
