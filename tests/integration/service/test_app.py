"""The composition root end to end: simulated backend, HTTP endpoints, config errors."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy import Engine

from queuemgr.cli.main import main
from queuemgr.controller.simulated import load_cluster_file
from queuemgr.core.model import CohortName
from queuemgr.service import app
from queuemgr.service.app import Service, _seed_cluster
from queuemgr.service.settings import ConfigError, load_config
from queuemgr.store.config_objects import load_config as load_store_config
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderSettings, leader_settings
from queuemgr.store.transitions import submit_workload
from tests.integration.controller.helpers import states, wait_for
from tests.integration.store.helpers import gang

pytestmark = pytest.mark.integration

CLUSTER = """
flavors:
  - {name: h100, node_labels: {gpu: h100}}
nodes:
  - {name: node, count: 2, flavor: h100, allocatable: {nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}}
cluster_queues:
  - name: team-a
    namespaces: [team-a]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 16, cpu: 192, memory: 2Ti}
local_queues:
  - {namespace: team-a, name: default, cluster_queue: team-a}
"""


@pytest.fixture
def service(tmp_path: Path, database_url: str) -> Iterator[Service]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "serve.yaml").write_text(
        "cluster_file: cluster.yaml\ncycle_interval: 30\nhttp_address: 127.0.0.1:0\n"
        "scheduler: {reservation_depth: 1}\n"
    )
    config = load_config(tmp_path / "serve.yaml", env={"QUEUEMGR_DATABASE_URL": database_url})
    svc = Service(config)
    svc.start()
    yield svc
    svc.stop()


def _get(svc: Service, path: str) -> tuple[int, str]:
    host, port = svc.http.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_runs_simulated_gangs_to_completion(service: Service, engine: Engine) -> None:
    wait_for(lambda: service.elector.is_leader, timeout=5)
    with engine.begin() as conn:
        for name in ("a", "b", "c"):
            w = dataclasses.replace(gang(name, created_at=time.time()), max_runtime=0.3)
            w = dataclasses.replace(
                w, pod_sets=(dataclasses.replace(w.pod_sets[0], tolerations=()),)
            )
            submit_workload(conn, w)
    # Two fit at once; the third starts when one of them finishes 0.3 s later.
    wait_for(lambda: set(states(engine).values()) == {"Finished"}, timeout=5)
    assert _get(service, "/healthz")[0] == 200
    status, body = _get(service, "/readyz")
    assert status == 200 and "leader" in body
    status, body = _get(service, "/metrics")
    assert status == 200
    assert 'queuemgr_leader{replica="' in body and "queuemgr_admission_attempts_total" in body


def test_the_leader_records_its_replica_and_knobs_for_why(service: Service, engine: Engine) -> None:
    wait_for(lambda: service.elector.is_leader, timeout=5)

    def recorded() -> LeaderSettings | None:
        with engine.connect() as conn:
            return leader_settings(conn)

    wait_for(lambda: recorded() is not None, timeout=5)
    settings = recorded()
    assert settings is not None and settings.replica == service.config.replica
    assert settings.policy["reservation_depth"] == 1  # the fixture's scheduler: knobs
    assert settings.policy["preemptor_admission"] == "after_victims_stop"


def test_a_stop_during_a_cycle_lets_it_commit_then_hands_the_lease_over(
    service: Service, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """``stop`` while a cycle runs: the cycle commits under the lease it began with, and
    only then is the lease released. Released first, the cycle's fence would find the
    lease gone, its admissions would be thrown away, and every clean shutdown during a
    cycle would warn that the lease is gone."""
    wait_for(lambda: service.elector.is_leader, timeout=5)
    running, real = threading.Event(), service.loop.run_once

    def slow() -> object:
        running.set()
        time.sleep(0.5)  # stop() is called meanwhile
        return real()

    service.loop.run_once = slow  # type: ignore[method-assign]
    with engine.begin() as conn:
        submit_workload(conn, gang("late", created_at=time.time()))
    service.loop.wake()
    assert running.wait(5)
    service.stop()
    assert states(engine)["late"] == "Admitted"
    assert "is gone" not in caplog.text
    with engine.connect() as conn:
        held = conn.execute(sa.text("SELECT holder_pid FROM scheduler_lease")).scalar()
    assert held is None  # released: a standby takes over at once


def test_readyz_fails_when_the_loop_is_not_running(service: Service) -> None:
    service.loop.stop()
    assert _get(service, "/readyz")[0] == 503
    assert _get(service, "/healthz")[0] == 503


def test_readyz_fails_while_every_cycle_fails_and_recovers_after(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait_for(lambda: service.elector.is_leader, timeout=5)
    assert _get(service, "/readyz")[0] == 200
    monkeypatch.setattr(app, "LOOP_FAILURE_GRACE", 0.5)
    works = service.loop.run_once

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(service.loop, "run_once", full_disk)  # the database still answers
    service.loop.wake()
    wait_for(lambda: _get(service, "/readyz")[0] == 503, timeout=10)
    _, body = _get(service, "/readyz")
    assert "No space left on device" in body and "every cycle has failed" in body
    assert _get(service, "/healthz")[0] == 200  # a restart would not free the disk
    monkeypatch.setattr(service.loop, "run_once", works)
    service.loop.wake()
    wait_for(lambda: _get(service, "/readyz")[0] == 200, timeout=10)


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        ("cycle_interval: -1\n", {}, "cycle_interval"),
        ("backend: slurm\n", {}, "backend"),
        ("bogus: 1\n", {}, "bogus"),
        ("scheduler: {preemptor_admission: same_cycle}\n", {}, "scheduler.preemptor_admission"),
        ("", {"QUEUEMGR_CYCLE_INTERVAL": "soon"}, "QUEUEMGR_CYCLE_INTERVAL"),
        ("", {"QUEUEMGR_HTTP_ADDRESS": "8080"}, "QUEUEMGR_HTTP_ADDRESS"),
    ],
)
def test_a_bad_value_names_its_key(
    tmp_path: Path, text: str, env: dict[str, str], named: str
) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=named):
        load_config(path, env=env)
    result = CliRunner().invoke(main, ["serve", "--config", str(path)], env=env)
    assert result.exit_code == 2 and named in result.output


def test_the_cluster_files_cohorts_keep_their_settings(
    tmp_path: Path, database_url: str, engine: Engine
) -> None:
    # `serve --cluster FILE` upserts the file's objects as `apply` would: a cohort's
    # fair sharing and ordering too (they were lost: serve then decided unlike simulate).
    cluster = CLUSTER.replace("  - name: team-a\n", "  - name: team-a\n    cohort: research\n")
    cluster += "cohorts:\n  - {name: research, fair_sharing: true, ordering: usage}\n"
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "serve.yaml").write_text("cluster_file: cluster.yaml\n")
    config = load_config(tmp_path / "serve.yaml", env={"QUEUEMGR_DATABASE_URL": database_url})
    _seed_cluster(Database(engine), config)  # what Service() does first
    with engine.connect() as conn:
        stored = load_store_config(conn)[0]
    assert stored.cohorts == load_cluster_file(tmp_path / "cluster.yaml").cohorts
    assert stored.cohorts[CohortName("research")].fair_sharing


def test_safety_cycles_log_nothing_at_info(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Fifteen quiet safety cycles write no line each: the APScheduler job serve ran them
    with before logged two INFO lines per cycle ("Running job ...", "... executed")."""
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "serve.yaml").write_text(
        "cluster_file: cluster.yaml\ncycle_interval: 0.1\nhttp_address: 127.0.0.1:0\n"
    )
    config = load_config(tmp_path / "serve.yaml", env={"QUEUEMGR_DATABASE_URL": database_url})
    caplog.set_level("INFO")
    svc = Service(config)
    svc.start()
    try:
        wait_for(lambda: svc.elector.is_leader, timeout=5)
        caplog.clear()
        time.sleep(1.5)
    finally:
        svc.stop()
    lines = [r for r in caplog.records if r.levelno >= 20 and "stop" not in r.getMessage()]
    assert len(lines) <= 2, [f"{r.name}: {r.getMessage()}" for r in lines]
