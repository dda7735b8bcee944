"""Postgres restarts under load: the service reconnects, reports not ready, loses nothing.

The test runs its own embedded Postgres (not the session's shared server,
which other tests use at the same time) and restarts it twice while a real
``queuemgr serve`` process schedules a stream of short jobs. During the
outage /readyz must say 503 and /healthz 200; afterwards every workload
finishes, each admitted exactly once, with no node overcommitted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from queuemgr.core.model import Workload
from queuemgr.store import migrate
from queuemgr.store.database import create_engine
from queuemgr.store.embedded import EmbeddedPostgres
from tests.integration.controller.helpers import wait_for
from tests.integration.service.processes import (
    ServeProcess,
    Submitter,
    admissions_per_workload,
    cluster_yaml,
    install_admission_log,
    job,
    logs,
    overcommitted_nodes,
    state_counts,
    write_config,
)

pytestmark = pytest.mark.integration

WORKLOADS = 300


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path / "pg")
    server.acquire()
    try:
        yield server
    finally:
        server.release()


def _submit_all(engine: Engine) -> Submitter:
    """Submits in small batches, retrying a batch the outage refused, as a client would."""
    rng = random.Random(7)

    def make(i: int) -> Workload:
        return job(
            f"w{i:03d}",
            pods=1,
            gpus=rng.choice((1, 1, 2, 4, 8)),
            runtime=round(rng.uniform(0.1, 0.6), 3),
            created_at=time.time(),
        )

    return Submitter(engine, WORKLOADS, batch=10, make=make, pause=lambda: 0.1, retry=True)


def test_the_service_rides_out_postgres_restarts(
    tmp_path: Path, own_postgres: EmbeddedPostgres
) -> None:
    url = own_postgres.url
    migrate.upgrade(url)
    engine = create_engine(url)
    write_config(tmp_path, cluster_yaml(nodes=4), cycle_interval=1, default_runtime=1)
    install_admission_log(engine)
    service = ServeProcess(tmp_path, database_url=url, replica="a").start()
    try:
        wait_for(service.leads, timeout=60, step=0.1)
        submitter = _submit_all(engine)
        submitter.start()
        for _ in range(2):
            wait_for(lambda: state_counts(engine).get("Admitted", 0) > 0, timeout=30)
            seen: dict[str, set[int]] = {"/readyz": set(), "/healthz": set()}
            outage = threading.Thread(target=own_postgres.restart, kwargs={"down_for": 3.0})
            outage.start()
            while outage.is_alive():
                for path, codes in seen.items():
                    codes.add(service.get(path)[0])
                time.sleep(0.1)
            assert 503 in seen["/readyz"], (seen, logs([service]))
            assert seen["/healthz"] == {200}, (seen, logs([service]))
            wait_for(service.leads, timeout=30, step=0.1)  # ready (and leading) again
        submitter.join(timeout=120)
        assert not submitter.is_alive()
        wait_for(
            lambda: state_counts(engine).get("Finished", 0) == WORKLOADS, timeout=120, step=0.5
        )
        assert service.alive and service.terminate() == 0, logs([service])
    finally:
        if service.alive:
            service.kill9()
        engine.dispose()
    assert submitter.refused, "the outage never reached the submitter: it did not happen under load"
    assert state_counts(engine) == {"Finished": WORKLOADS}
    assert set(admissions_per_workload(engine).values()) == {1}
    assert overcommitted_nodes(engine) == []
