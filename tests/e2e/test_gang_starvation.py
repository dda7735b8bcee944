"""`bench/scenarios/gang-starvation.yaml`: reservations bound a big gang's wait."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main

SCENARIO = Path(__file__).resolve().parents[2] / "bench" / "scenarios" / "gang-starvation.yaml"
ARRIVAL = 1005.0
LONGEST_MAX_RUNTIME_RUNNING = 900.0  # every small job declares 900 s
STREAM_END = 20_000.0


def gang_start(depth: int) -> float:
    result = CliRunner().invoke(
        main,
        [
            "simulate",
            str(SCENARIO),
            "--scheduler",
            f"reservation_depth={depth}",
            "--events",
            "-",
            "--summary",
            "/dev/null",
        ],
    )
    assert result.exit_code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (admitted,) = [
        e for e in events if e["workload"] == "team/pretrain" and e["event"] == "admitted"
    ]
    return float(admitted["t"])


def test_with_a_reservation_the_gang_starts_within_the_longest_max_runtime() -> None:
    assert gang_start(1) <= ARRIVAL + LONGEST_MAX_RUNTIME_RUNNING


def test_without_reservations_the_stream_starves_the_gang() -> None:
    assert gang_start(0) >= STREAM_END


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        pytest.param("reservation_depth=-1", "reservation_depth", id="negative"),
        pytest.param("reservation_depth=two", "reservation_depth", id="not-a-number"),
        pytest.param("no_such_knob=1", "no_such_knob", id="unknown-knob"),
        pytest.param("ordering=random", "ordering", id="bad-ordering"),
        pytest.param("usage_half_life=0", "usage_half_life", id="zero-half-life"),
        pytest.param("nonsense", "KNOB=VALUE", id="no-equals"),
    ],
)
def test_bad_knob_exits_2_naming_it(override: str, needle: str) -> None:
    result = CliRunner().invoke(main, ["simulate", str(SCENARIO), "--scheduler", override])
    assert result.exit_code == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
