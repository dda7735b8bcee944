"""``queuemgr usage``: GPU-hours and borrowed GPU-hours from samples, decayed usage per tenant."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.usage import sample_usage, save_queue_usage
from tests.integration.cli.conftest import Invoke, no_traceback
from tests.integration.controller.helpers import run_one_cycle

pytestmark = pytest.mark.integration
HOUR = 3600.0


def _submit(cli: Invoke, name: str, ns: str) -> None:
    r = cli("submit", "-q", "default", "-n", ns, "--gpus", "8", "--name", name, "--", "train")
    assert r.exit_code == 0, r.output


@pytest.fixture
def sampled(cli: Invoke, applied: Path, engine: Engine) -> float:
    """team-b (nominal 8 GPUs) runs two 8-GPU jobs, one on team-a's idle quota, for 3 hours."""
    for name in ("one", "two"):
        _submit(cli, name, "team-b")
    assert len(run_one_cycle(engine).admitted) == 2
    state = load_state(Database(engine))
    now = time.time()
    with engine.begin() as conn:
        # One sample from three hours ago, two from the last two hours, an hour each.
        for ago in (3 * HOUR, 2 * HOUR, HOUR):
            sample_usage(conn, state.config, state.admitted, now=now - ago + 1, period=HOUR)
        save_queue_usage(conn, {("team-b", "default"): 12.5, ("team-a", "default"): 0.5}, now=now)
    return now


def _rows(cli: Invoke, *args: str) -> dict[str, dict[str, object]]:
    r = cli("usage", *args, "-o", "json")
    assert r.exit_code == 0, r.output
    return {row["name"]: row for row in json.loads(r.output)["rows"]}


@pytest.mark.parametrize(
    ("by", "since", "expected"),
    [
        pytest.param(
            "cq",
            "7d",
            {
                "team-a": {"gpu_hours": 0.0, "borrowed_gpu_hours": 0.0, "decayed_usage": 0.5},
                "team-b": {"gpu_hours": 48.0, "borrowed_gpu_hours": 24.0, "decayed_usage": 12.5},
            },
            id="by-cluster-queue",
        ),
        pytest.param(
            "cq",
            "150m",
            {
                "team-a": {"gpu_hours": 0.0, "borrowed_gpu_hours": 0.0, "decayed_usage": 0.5},
                "team-b": {"gpu_hours": 32.0, "borrowed_gpu_hours": 16.0, "decayed_usage": 12.5},
            },
            id="since-drops-older-samples",
        ),
        pytest.param(
            "lq",
            "7d",
            {
                "team-a/default": {
                    "gpu_hours": 0.0,
                    "borrowed_gpu_hours": None,
                    "decayed_usage": 0.5,
                },
                "team-b/default": {
                    "gpu_hours": 48.0,
                    "borrowed_gpu_hours": None,
                    "decayed_usage": 12.5,
                },
            },
            id="by-local-queue",
        ),
        pytest.param(
            "namespace",
            "7d",
            {
                "team-a": {"gpu_hours": 0.0, "borrowed_gpu_hours": None, "decayed_usage": 0.5},
                "team-b": {"gpu_hours": 48.0, "borrowed_gpu_hours": None, "decayed_usage": 12.5},
            },
            id="by-namespace",
        ),
    ],
)
def test_usage_sums_samples_over_their_periods(
    cli: Invoke, sampled: float, by: str, since: str, expected: dict[str, dict[str, object]]
) -> None:
    rows = _rows(cli, "--by", by, "--since", since)
    assert {k: {f: v for f, v in r.items() if f != "name"} for k, r in rows.items()} == expected


def test_usage_table_and_bad_input(cli: Invoke, sampled: float) -> None:
    r = cli("usage")
    assert r.exit_code == 0, r.output
    assert "team-b" in r.output and "48.00" in r.output and "24.00" in r.output
    bad = cli("usage", "--since", "7x")
    assert bad.exit_code == 2 and "--since" in bad.output and "7x" in bad.output
    no_traceback(bad)
    bad = cli("usage", "--by", "team")
    assert bad.exit_code == 2 and "--by" in bad.output
    no_traceback(bad)


def test_usage_of_an_empty_store_is_an_empty_table(cli: Invoke) -> None:
    assert _rows(cli) == {}
