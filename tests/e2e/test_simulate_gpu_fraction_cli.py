"""`queuemgr simulate --trace-gpu-fraction`: the documented shared-GPU run, its rules, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "bench" / "scenarios" / "shared-gpus.yaml"
TRACE = REPO / "bench" / "traces" / "shared-gpus.csv"
QUICKSTART = REPO / "docs" / "examples" / "quickstart.yaml"
HEADER = (
    "job_id,tenant,submit_s,duration_s,gpus_per_worker,gpu_milli_per_worker,workers,"
    "cpus_per_worker,mem_gib_per_worker\n"
)


def simulate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def run(tmp_path: Path, *args: str) -> tuple[dict[str, object], list[dict[str, object]], str]:
    events, summary = tmp_path / "events.jsonl", tmp_path / "summary.json"
    code, _, err = simulate(*args, "--events", str(events), "--summary", str(summary))
    assert code == 0, err
    lines = events.read_text().splitlines()
    return json.loads(summary.read_text()), [json.loads(line) for line in lines], err


def test_the_documented_timeslice_run(tmp_path: Path) -> None:
    args = [str(SCENARIO), "--trace", str(TRACE), "--trace-gpu-fraction", "timeslice:4"]
    summary, events, err = run(tmp_path, *args)
    assert err == ""  # the scenario offers what the rule asks: no warning
    assert (summary["admitted"], summary["finished"], summary["pending_at_end"]) == (12, 12, 0)
    assert summary["makespan_s"] == 5400.0 and summary["invariant_violations"] == 0
    assert summary["trace_gpu_fraction"] == {
        "rule": "timeslice:4",
        "jobs": 8,
        "resources": {"nvidia.com/gpu.shared": 8},
    }
    flavors = {e["workload"]: e["flavor"] for e in events if e["event"] == "admitted"}
    shared = {"team-a/job-3", "team-a/job-4", "team-b/job-5", "team-b/job-6"}
    shared |= {"team-a/job-7", "team-b/job-8", "team-a/job-9", "team-a/job-11"}
    assert {w for w, f in flavors.items() if f == "a100-ts"} == shared
    admitted_at = {e["workload"]: e["t"] for e in events if e["event"] == "admitted"}
    assert admitted_at["team-b/job-6"] == 900.0  # waited for 12 of the node's 32 replicas
    queues = summary["cluster_queues"]
    assert isinstance(queues, dict)
    assert (queues["team-a"]["wait_max_s"], queues["team-b"]["wait_max_s"]) == (0.0, 3540.0)


@pytest.mark.parametrize(
    ("rule", "admitted", "pending", "makespan", "resources"),
    [
        (None, 12, 0, 5400.0, {"nvidia.com/gpu.shared": 8}),
        (
            "mig",
            11,
            1,
            5400.0,
            {
                "nvidia.com/mig-1g.5gb": 2,
                "nvidia.com/mig-2g.10gb": 3,
                "nvidia.com/mig-4g.20gb": 1,
                "nvidia.com/mig-7g.40gb": 2,
            },
        ),
        ("round-up", 12, 0, 6900.0, {"nvidia.com/gpu": 8}),
    ],
    ids=["default-is-timeslice-4", "mig", "round-up"],
)
def test_the_documented_table_of_rules(
    tmp_path: Path,
    rule: str | None,
    admitted: int,
    pending: int,
    makespan: float,
    resources: dict[str, int],
) -> None:
    args = [str(SCENARIO), "--trace", str(TRACE)]
    args += ["--trace-gpu-fraction", rule] if rule else []
    summary, events, _ = run(tmp_path, *args)
    assert (summary["admitted"], summary["pending_at_end"]) == (admitted, pending)
    assert summary["makespan_s"] == makespan and summary["invariant_violations"] == 0
    assert summary["trace_gpu_fraction"] == {
        "rule": rule or "timeslice:4",
        "jobs": 8,
        "resources": resources,
    }
    if rule == "mig":
        (stuck,) = [e for e in events if e["event"] == "inadmissible"]
        assert stuck["workload"] == "team-b/job-6"
        assert "a100-mig: needs 4 nvidia.com/mig-7g.40gb, quota allows at most 2" in str(
            stuck["reason"]
        )


def test_a_resource_the_scenario_never_offers_is_warned_and_reported(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "1,team-a,0,10,0,500,2,,\n2,team-a,0,10,1,,1,,\n")
    _, events, err = run(tmp_path, str(QUICKSTART), "--trace", str(trace))
    assert "warning: 1 trace jobs ask for nvidia.com/gpu.shared (--trace-gpu-fraction" in err
    assert "no ClusterQueue or cohort has quota for it" in err
    assert "no schedulable node offers it" in err
    jobs = [e for e in events if "/job-" in str(e["workload"])]
    (stuck,) = [e for e in jobs if e["event"] == "inadmissible"]
    assert stuck["workload"] == "team-a/job-1"
    # 2 pods x ceil(500 * 4 / 1000) replicas
    assert "needs 4 nvidia.com/gpu.shared, quota allows at most 0" in str(stuck["reason"])
    ends = {e["workload"] for e in jobs if e["event"] == "finished"}
    assert ends == {"team-a/job-2"}  # the whole-GPU job runs as before


@pytest.mark.parametrize(
    ("row", "args", "needle"),
    [
        ("1,team-a,0,10,0,500,1,,", ["--trace-gpu-fraction", "timeslice:0"], "1 <= N <= 1000"),
        ("1,team-a,0,10,0,500,1,,", ["--trace-gpu-fraction", "slices"], "expected timeslice:N"),
        ("1,team-a,0,10,0,1500,1,,", [], "t.csv:2: gpu_milli_per_worker: expected an integer"),
        ("1,team-a,0,10,2,500,1,,", [], "t.csv:2: gpu_milli_per_worker: a fraction is a share"),
    ],
    ids=["zero-replicas", "unknown-rule", "over-1000", "share-of-two-gpus"],
)
def test_bad_rules_and_cells_exit_2(tmp_path: Path, row: str, args: list[str], needle: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + row + "\n")
    code, _, err = simulate(str(QUICKSTART), "--trace", str(trace), *args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    value = args[1] if args else row.split(",")[5]
    assert repr(value) in err
    if args:
        assert "--trace-gpu-fraction: " in err


def test_trace_gpu_fraction_needs_trace() -> None:
    code, _, err = simulate(str(QUICKSTART), "--trace-gpu-fraction", "mig")
    assert code == 2 and "--trace-gpu-fraction needs --trace" in err
