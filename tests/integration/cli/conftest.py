"""Fixtures for the CLI tests: a CliRunner bound to a fresh, migrated database per test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine

from queuemgr.cli.main import main
from queuemgr.core.model import Node, NodeName
from queuemgr.core.resources import ResourceName
from queuemgr.store.config import upsert_node

QUEUES = """\
flavors:
  - name: h100
    node_labels: {gpu: h100}
  - name: a100
    node_labels: {gpu: a100}
cohorts:
  - name: research
cluster_queues:
  - name: team-a
    cohort: research
    namespaces: [team-a]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 16, cpu: 192}
  - name: team-b
    cohort: research
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 8}
local_queues:
  - {namespace: team-a, name: default, cluster_queue: team-a}
  - {namespace: team-b, name: default, cluster_queue: team-b}
"""

Invoke = Callable[..., Result]


@pytest.fixture
def cli(database_url: str) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(main, list(args), env={"QUEUEMGR_DATABASE_URL": database_url})

    return invoke


@pytest.fixture
def queues_file(tmp_path: Path) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUES)
    return path


@pytest.fixture
def applied(cli: Invoke, queues_file: Path, engine: Engine) -> Path:
    """QUEUES applied, plus four 8-GPU h100 nodes (the simulated backend's cluster file)."""
    result = cli("apply", "-f", str(queues_file))
    assert result.exit_code == 0, result.output
    with engine.begin() as conn:
        for i in range(4):
            node = Node(
                name=NodeName(f"h100-{i}"),
                labels={"gpu": "h100"},
                allocatable={ResourceName("nvidia.com/gpu"): 8, ResourceName("cpu"): 96_000},
            )
            upsert_node(conn, node, actor="test")
    return queues_file


def no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
