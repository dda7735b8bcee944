"""`bench/scenarios/usage-ordering.yaml`: yesterday's heavy user waits today."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main

SCENARIO = Path(__file__).resolve().parents[2] / "bench" / "scenarios" / "usage-ordering.yaml"


@pytest.mark.parametrize(
    ("ordering", "first", "second"),
    [
        pytest.param("usage", "tenant-b", "tenant-a", id="usage"),
        pytest.param("fifo", "tenant-a", "tenant-b", id="fifo"),
    ],
)
def test_who_goes_first_today(ordering: str, first: str, second: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "simulate",
            str(SCENARIO),
            "--scheduler",
            f"ordering={ordering}",
            "--events",
            "-",
            "--summary",
            "/dev/null",
        ],
    )
    assert result.exit_code == 0, result.stderr
    starts: dict[str, list[float]] = {}
    for line in result.stdout.splitlines():
        e = json.loads(line)
        if e["event"] == "admitted" and "/today-" in e["workload"]:
            starts.setdefault(e["workload"].split("/")[0], []).append(e["t"])
    assert len(starts[first]) == len(starts[second]) == 16
    assert max(starts[first]) < min(starts[second])
