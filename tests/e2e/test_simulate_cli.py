"""`queuemgr simulate` end to end: the documented example, errors, and a Philly slice."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "docs" / "examples" / "quickstart.yaml"
PHILLY_SCENARIO = REPO / "docs" / "examples" / "philly-256x8.yaml"
PHILLY_TRACE = REPO.parent / "shared" / "traces" / "philly.csv.gz"


def simulate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_quickstart_runs_and_shows_borrowing_and_a_gang(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    code, out, err = simulate(str(QUICKSTART), "--events", "-", "--summary", str(summary_path))
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    admitted = {e["workload"]: e for e in events if e["event"] == "admitted"}
    pretrain = admitted["team-a/pretrain"]
    assert pretrain["borrowing"] is True
    assert sum(pretrain["placement"].values()) == 3  # the whole gang, one pod per node
    assert any(e["event"] == "inadmissible" for e in events)
    summary = json.loads(summary_path.read_text())
    assert summary["invariant_violations"] == 0
    assert summary["cluster_queues"]["team-a"]["borrowed_gpu_seconds"] > 0
    assert summary["pending_at_end"] == 1


def test_default_output_is_a_table() -> None:
    code, out, _ = simulate(str(QUICKSTART))
    assert code == 0
    assert "team-a" in out and "invariant_violations=0" in out


def test_bad_scenario_exits_2_with_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = QUICKSTART.read_text().replace("cpu: 192, memory: 2Ti}", "cpu: 12x, memory: 2Ti}", 1)
    bad.write_text(text)
    code, _, err = simulate(str(bad))
    assert code == 2
    assert "cluster_queues[0].resources[0].nominal.cpu: bad quantity '12x'" in err
    assert "Traceback" not in err


def test_bad_scenario_via_python_m_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("flavors: []\nnodes: []\ncluster_queues: []\nextra: 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "queuemgr", "simulate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "extra: unknown field" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.yaml"], "cannot read scenario"),
        ([str(QUICKSTART), "--assign-tenants", "3"], "--assign-tenants needs --trace"),
        ([str(QUICKSTART), "--until", "-1"], "--until"),
    ],
    ids=["missing-file", "assign-without-trace", "negative-until"],
)
def test_usage_errors_exit_2(args: list[str], needle: str) -> None:
    code, _, err = simulate(*args)
    assert code == 2
    assert needle in err and "Traceback" not in err


def test_empty_trace_tenant_without_assign_exits_2(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,tenant,submit_s,duration_s,gpus_per_worker,workers,cpus_per_worker,"
        "mem_gib_per_worker\n1,,0,10,1,1,,\n"
    )
    code, _, err = simulate(str(QUICKSTART), "--trace", str(trace))
    assert code == 2 and "pass --assign-tenants" in err


TRACE_HEADER = (
    "job_id,tenant,submit_s,duration_s,gpus_per_worker,workers,cpus_per_worker,"
    "mem_gib_per_worker,max_runtime_s\n"
)


def test_fractional_gib_in_a_trace_is_rounded_up(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEADER + "1,team-a,0,10,1,1,2,29.8018,\n")
    code, out, err = simulate(
        str(QUICKSTART),
        "--trace",
        str(trace),
        "--events",
        "-",
        "--summary",
        str(tmp_path / "s.json"),
    )
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert {"admitted", "finished"} <= {
        e["event"] for e in events if e["workload"] == "team-a/job-1"
    }


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--trace-max-runtime", "actual*0.5"], "--trace-max-runtime: expected a factor F >= 1"),
        (["--trace-max-runtime", "soon"], "--trace-max-runtime: expected auto, none, column"),
        (["--trace-max-runtime", "column"], "t.csv:2: max_runtime_s: empty"),
    ],
    ids=["factor-below-1", "unknown-rule", "column-rule-empty-cell"],
)
def test_bad_trace_max_runtime_exits_2(tmp_path: Path, args: list[str], needle: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEADER + "1,team-a,0,10,1,1,,,\n")
    code, _, err = simulate(str(QUICKSTART), "--trace", str(trace), *args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert args[1] in err  # the value


def test_trace_max_runtime_needs_trace() -> None:
    code, _, err = simulate(str(QUICKSTART), "--trace-max-runtime", "actual")
    assert code == 2 and "--trace-max-runtime needs --trace" in err


@pytest.mark.parametrize(
    ("rule", "finished"),
    [
        (None, [("team-a/job-1", 600.0, "MaxRuntimeExceeded"), ("team-a/job-2", 300.0, None)]),
        ("none", [("team-a/job-1", 1000.0, None), ("team-a/job-2", 300.0, None)]),
        ("actual*1.5", [("team-a/job-1", 1000.0, None), ("team-a/job-2", 300.0, None)]),
    ],
    ids=["default-reads-the-column", "none", "actual-never-overruns"],
)
def test_trace_max_runtime_reaches_the_engine(
    tmp_path: Path, rule: str | None, finished: list[tuple[str, float, str | None]]
) -> None:
    # Under overrun_policy evict a declared limit shorter than the run stops the job.
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEADER + "1,team-a,0,1000,1,1,,,600\n2,team-a,0,300,1,1,,,\n")
    events, summary = tmp_path / "events.jsonl", tmp_path / "summary.json"
    args = ["--trace", str(trace), "--scheduler", "overrun_policy=evict"]
    args += ["--trace-max-runtime", rule] if rule else []
    code, _, err = simulate(
        str(QUICKSTART), *args, "--events", str(events), "--summary", str(summary)
    )
    assert code == 0, err
    got = [json.loads(line) for line in events.read_text().splitlines()]
    ends = sorted(
        (e["workload"], e["t"], e["reason"])
        for e in got
        if e["event"] == "finished" and "/job-" in e["workload"]
    )
    assert ends == finished
    jobs = {None: 1, "none": 0, "actual*1.5": 2}[rule]
    assert json.loads(summary.read_text())["trace_max_runtime"] == {
        "rule": rule or "auto",
        "jobs": jobs,
    }


@pytest.mark.skipif(
    not PHILLY_TRACE.exists(), reason=f"shared Philly trace not present at {PHILLY_TRACE}"
)
def test_philly_first_2000_jobs(tmp_path: Path) -> None:
    head = tmp_path / "philly-2000.csv.gz"
    with gzip.open(PHILLY_TRACE, "rt") as src, gzip.open(head, "wt") as dst:
        dst.writelines(islice(src, 2001))  # header + 2,000 jobs
    code, out, err = simulate(
        str(PHILLY_SCENARIO), "--trace", str(head), "--assign-tenants", "8", "--summary", "-"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["workloads"] == 2000
    assert summary["tenants_assigned"] == {
        "rule": "zipf-s1-blake2b",
        "n": 8,
        "seed": 0,
        "jobs": 2000,
    }
    assert summary["finished"] + summary["pending_at_end"] + summary["running_at_end"] == 2000
    assert summary["invariant_violations"] == 0
    assert 0 < summary["gpu_utilization"] <= 1
