"""Two real ``queuemgr serve`` replicas: one schedules, the other takes over within 5 s.

The in-process tests (test_events_and_leader.py) drive the elector by hand;
these run separate processes, so the leader's death is a real kill -9 and a
paused leader is a real SIGSTOP.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store.leadership import holder_pid
from queuemgr.store.transitions import submit_workload
from tests.integration.controller.helpers import states, wait_for
from tests.integration.service.processes import (
    ServeProcess,
    admissions_per_workload,
    cluster_yaml,
    install_admission_log,
    job,
    logs,
    overcommitted_nodes,
    write_config,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def replicas(tmp_path: Path, engine: Engine, database_url: str) -> Iterator[list[ServeProcess]]:
    write_config(tmp_path, cluster_yaml(nodes=3), cycle_interval=1, default_runtime=600)
    install_admission_log(engine)
    procs = [
        ServeProcess(tmp_path, database_url=database_url, replica=name).start()
        for name in ("a", "b")
    ]
    try:
        wait_for(lambda: all(p.role() is not None for p in procs), timeout=60, step=0.1)
        yield procs
    finally:
        for p in procs:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
                p.kill9()


def _submit(engine: Engine, name: str, *, gpus: int = 8) -> None:
    with engine.begin() as conn:
        submit_workload(conn, job(name, pods=1, gpus=gpus, runtime=600, created_at=time.time()))


def _leader(procs: list[ServeProcess]) -> tuple[ServeProcess, ServeProcess]:
    wait_for(lambda: any(p.leads() for p in procs), timeout=10, step=0.05)
    leader = next(p for p in procs if p.leads())
    return leader, next(p for p in procs if p is not leader)


def test_a_standby_process_takes_over_within_5s_of_a_kill_9(
    engine: Engine, replicas: list[ServeProcess]
) -> None:
    leader, standby = _leader(replicas)
    assert standby.role() == "standby"
    _submit(engine, "a")
    wait_for(lambda: states(engine).get("a") == "Admitted", timeout=10)

    leader.kill9()
    killed = time.monotonic()
    wait_for(standby.leads, timeout=10, step=0.05)
    took = time.monotonic() - killed
    assert took < 5, f"standby took {took:.2f}s\n{logs(replicas)}"
    # It schedules: the second gang is admitted by the new leader, the first is not re-admitted.
    _submit(engine, "b")
    wait_for(lambda: states(engine).get("b") == "Admitted", timeout=10)
    assert admissions_per_workload(engine) == {"a": 1, "b": 1}


def test_a_paused_leader_that_lost_its_lock_commits_nothing_when_it_wakes(
    engine: Engine, replicas: list[ServeProcess]
) -> None:
    leader, standby = _leader(replicas)
    assert leader.proc is not None
    leader.proc.send_signal(signal.SIGSTOP)
    # A network partition from the database: its lock session ends while it sleeps.
    with engine.connect() as conn:
        pid = holder_pid(conn)
        assert pid is not None
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        conn.commit()
    wait_for(standby.leads, timeout=10, step=0.05)
    for name in ("a", "b"):
        _submit(engine, name)
    wait_for(lambda: set(states(engine).values()) == {"Admitted"}, timeout=10)

    leader.proc.send_signal(signal.SIGCONT)
    # The NOTIFY wakes both loops at once, before the old one's heartbeat can
    # notice the lost lock: both decide to admit "c" on the last free node,
    # and only the fence stops the old leader's commit.
    _submit(engine, "c")
    wait_for(lambda: leader.role() == "standby", timeout=10, step=0.1)
    wait_for(lambda: states(engine).get("c") == "Admitted", timeout=10)
    time.sleep(1.0)  # a few more cycles of both
    assert admissions_per_workload(engine) == {"a": 1, "b": 1, "c": 1}
    assert overcommitted_nodes(engine) == []
    assert standby.leads()
