"""Replaying a `bench/scenarios/` file through the real `queuemgr simulate` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from queuemgr.cli.main import main

SCENARIOS = Path(__file__).resolve().parents[2] / "bench" / "scenarios"


def replay(name: str, tmp_path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events and the summary of ``queuemgr simulate bench/scenarios/<name>``."""
    summary_path = tmp_path / "summary.json"
    result = CliRunner().invoke(
        main, ["simulate", str(SCENARIOS / name), "--events", "-", "--summary", str(summary_path)]
    )
    assert result.exit_code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    return events, json.loads(summary_path.read_text())
