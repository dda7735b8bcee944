"""Fixtures for the CLI tests: a CliRunner bound to a fresh, migrated database per test."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from queuemgr.cli.main import main
from queuemgr.core.model import Node, NodeName
from queuemgr.core.resources import ResourceName
from queuemgr.store.config_objects import upsert_node

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


def flavor_doc(cli: Invoke, name: str) -> dict[str, Any]:
    """``flavor describe NAME -o json``, which must succeed."""
    shown = cli("flavor", "describe", name, "-o", "json")
    assert shown.exit_code == 0, shown.output
    doc: dict[str, Any] = json.loads(shown.stdout)
    return doc


@dataclass(frozen=True)
class Login:
    role: str
    url: str
    cli: Invoke


@pytest.fixture
def logins(
    admin_engine: Engine, database_url: str, cli: Invoke, applied: Path
) -> Iterator[dict[str, Login]]:
    """Roles ``a`` and ``b`` (tenants, granted team-a and team-b), ``admin`` and ``sched``
    (a member of queuemgr_scheduler, as ``queuemgr serve`` runs); workloads
    ``a-job`` (team-a) and ``b-job`` (team-b, admitted on a node), submitted by the superuser."""
    made: dict[str, Login] = {}
    roles = (("a", "tenant"), ("b", "tenant"), ("admin", "admin"), ("sched", "scheduler"))
    for key, group in roles:
        role = f"qm_{key}_{uuid.uuid4().hex[:8]}"
        password = secrets.token_hex(8)
        with admin_engine.connect() as conn:
            conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
            conn.execute(sa.text(f"GRANT queuemgr_{group} TO {role}"))
        url = make_url(database_url).set(username=role, password=password)
        rendered = url.render_as_string(hide_password=False)
        made[key] = Login(role, rendered, _invoker(rendered))
    for key, ns in (("a", "team-a"), ("b", "team-b")):
        r = made["admin"].cli("grant", made[key].role, ns)
        assert r.exit_code == 0, r.output
    for ns, name in (("team-a", "a-job"), ("team-b", "b-job")):
        r = cli("submit", "-q", "default", "-n", ns, "--name", name, "--gpus", "1", "--", "x")
        assert r.exit_code == 0, r.output
    with sa.create_engine(database_url).begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE workloads SET state = 'Admitted', admitted_at = now(),"
                " cluster_queue = 'team-b', flavor = 'h100' WHERE name = 'b-job'"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO placements (workload_id, pod_set, node, count)"
                " SELECT id, 'main', 'h100-0', 1 FROM workloads WHERE name = 'b-job'"
            )
        )
    yield made
    with admin_engine.connect() as conn:
        for login in made.values():
            conn.execute(sa.text(f"DROP OWNED BY {login.role}"))
            conn.execute(sa.text(f"DROP ROLE IF EXISTS {login.role}"))


def _invoker(url: str) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(main, list(args), env={"QUEUEMGR_DATABASE_URL": url})

    return invoke


def dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
