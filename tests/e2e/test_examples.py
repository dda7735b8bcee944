"""Every shipped scenario runs through `queuemgr simulate`, and so does the whole shared trace.

The examples in docs/ and bench/scenarios/ are what users copy; they must stay valid
and hold the scheduler's invariants. The full Philly replay is the largest input the
simulator is asked to take.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main

REPO = Path(__file__).resolve().parents[2]
KUEUE_BASELINE = REPO / "bench" / "scenarios" / "kueue-baseline.yaml"
SCENARIOS = sorted(
    p
    for p in [*(REPO / "docs" / "examples").glob("*.yaml"), *KUEUE_BASELINE.parent.glob("*.yaml")]
    if p != KUEUE_BASELINE  # run on its own below, with its own numbers
)
PHILLY_SCENARIO = REPO / "docs" / "examples" / "philly-256x8.yaml"
PHILLY_TRACE = REPO.parent / "shared" / "traces" / "philly.csv.gz"


def run(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(main, ["simulate", *args, "--summary", "-"])
    assert result.exit_code == 0, result.stderr
    summary: dict[str, object] = json.loads(result.stdout)
    return summary


def test_there_are_examples_to_run() -> None:
    names = {p.name for p in SCENARIOS}
    assert "quickstart.yaml" in names
    assert KUEUE_BASELINE.exists()


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_scenario_runs_and_holds_the_invariants(path: Path) -> None:
    summary = run(str(path))
    assert summary["invariant_violations"] == 0
    workloads = summary["workloads"]
    assert isinstance(workloads, int)
    assert summary["finished"] + summary["pending_at_end"] + summary["running_at_end"] == workloads


def test_kueue_baseline_admits_all_15000() -> None:
    summary = run(str(KUEUE_BASELINE))
    assert summary["workloads"] == summary["admitted"] == summary["finished"] == 15000
    assert summary["invariant_violations"] == 0


@pytest.mark.slow
@pytest.mark.skipif(not PHILLY_TRACE.exists(), reason=f"shared trace missing: {PHILLY_TRACE}")
def test_the_whole_shared_philly_trace_replays() -> None:
    summary = run(str(PHILLY_SCENARIO), "--trace", str(PHILLY_TRACE), "--assign-tenants", "8")
    assert summary["workloads"] == 111_549
    assert summary["finished"] == 111_549
    assert summary["invariant_violations"] == 0
