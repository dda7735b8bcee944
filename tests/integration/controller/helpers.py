"""Building blocks for the service tests: a loop on a test database, and bounded waits."""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.loop import SERVICE_POLICY, SchedulerLoop
from queuemgr.controller.ports import Clock, SystemClock
from queuemgr.controller.report import CycleReport
from queuemgr.controller.testing import FakeBackend
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.metrics import SchedulerMetrics
from queuemgr.store.handle import Database


def make_loop(
    engine: Engine,
    *,
    replica: str = "a",
    safety_interval: float = 30.0,
    policy: SchedulerPolicy = SERVICE_POLICY,
    clock: Clock | None = None,
) -> tuple[SchedulerLoop, LeaderElector, FakeBackend]:
    metrics = SchedulerMetrics()
    backend = FakeBackend()
    db = Database(engine)
    elector = LeaderElector(db, replica=replica, metrics=metrics, retry_interval=0.2)
    loop = SchedulerLoop(
        db=db,
        backend=backend,
        clock=clock or SystemClock(),
        elector=elector,
        metrics=metrics,
        safety_interval=safety_interval,
        policy=policy,
    )
    elector._on_elected = loop.wake  # what the composition root wires
    return loop, elector, backend


def run_one_cycle(engine: Engine, *, policy: SchedulerPolicy = SERVICE_POLICY) -> CycleReport:
    """Win the election, run one cycle on the database as it stands, and step down."""
    loop, elector, _ = make_loop(engine, policy=policy)
    assert elector.step()
    try:
        report = loop.run_once()
    finally:
        elector.stop()
    assert report is not None  # the elected leader always runs its cycle
    return report


def states(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT name, state::text AS state FROM workloads"))
        return {r.name: r.state for r in rows}


def placements(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT w.name, sum(p.count) AS pods FROM placements p "
                "JOIN workloads w ON w.id = p.workload_id GROUP BY w.name"
            )
        )
        return {r.name: int(r.pods) for r in rows}


def wait_for(check: Callable[[], bool], timeout: float, step: float = 0.02) -> float:
    """Seconds until ``check()`` held; AssertionError after ``timeout``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)
    return time.monotonic() - started
