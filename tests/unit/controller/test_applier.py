"""A cycle's starts: concurrent where the backend allows, all landed on return, timed."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

import pytest

from queuemgr.controller.applier import Applier
from queuemgr.controller.ports import StaleObject
from queuemgr.controller.testing import FakeBackend, FakeClock
from queuemgr.core.model import AdmittedWorkload, WorkloadId
from queuemgr.metrics import SchedulerMetrics
from queuemgr.store.leadership import LeaderToken
from tests.builders import make_admitted, make_workload

TOKEN = LeaderToken(epoch=1, pid=100, backend_start=datetime(2026, 1, 1, tzinfo=UTC))


def _admitted(name: str, at: float) -> AdmittedWorkload:
    return make_admitted(
        make_workload(name).ns("team-a").gpus(1).build(), "q", "f", {"n": 1}, at=at
    )


def _applier(
    backend: FakeBackend, clock: FakeClock, metrics: SchedulerMetrics, token: LeaderToken | None
) -> Applier:
    return Applier(
        backend=backend,
        leadership=lambda: token,
        clock=clock,
        metrics=metrics,
        stopping=threading.Event(),
    )


def _start_latencies(metrics: SchedulerMetrics) -> float:
    value = metrics.registry.get_sample_value("queuemgr_admission_start_seconds_count")
    return 0.0 if value is None else value


@pytest.mark.parametrize(
    ("concurrency", "overlap"),
    [pytest.param(1, False, id="inline"), pytest.param(4, True, id="concurrent")],
)
def test_start_all_returns_once_every_start_landed(concurrency: int, overlap: bool) -> None:
    backend = FakeBackend(start_concurrency=concurrency)
    backend.start_delay = 0.05
    clock, metrics = FakeClock(), SchedulerMetrics()
    applier = _applier(backend, clock, metrics, TOKEN)
    applier.start_all(TOKEN, [_admitted(f"j{i}", clock.now()) for i in range(3)])
    # Nothing of the cycle is left in flight: the next cycle's calls cannot overlap it.
    assert backend.running() == {WorkloadId(f"team-a/j{i}") for i in range(3)}
    assert (backend.max_in_flight > 1) is overlap
    assert _start_latencies(metrics) == 3
    applier.shutdown()


def test_a_failed_start_is_retried_and_counted_once_it_lands() -> None:
    backend = FakeBackend(start_concurrency=2)
    backend.fail_starts = 2
    clock, metrics = FakeClock(), SchedulerMetrics()
    applier = _applier(backend, clock, metrics, TOKEN)
    a = _admitted("a", clock.now() - 1.5)
    applier.start_all(TOKEN, [a])
    assert backend.start_calls[a.workload.id] == 3
    assert _start_latencies(metrics) == 1
    total = metrics.registry.get_sample_value("queuemgr_admission_start_seconds_sum")
    assert total == pytest.approx(1.5)
    applier.shutdown()


def test_a_replica_that_no_longer_leads_gives_up_a_failing_start() -> None:
    backend = FakeBackend(start_concurrency=2)
    backend.fail_starts = 1
    clock, metrics = FakeClock(), SchedulerMetrics()
    applier = _applier(backend, clock, metrics, None)  # the lease went meanwhile
    applier.start_all(TOKEN, [_admitted("a", clock.now())])
    assert backend.running() == set()
    assert _start_latencies(metrics) == 0
    applier.shutdown()


class _Racing(FakeBackend):
    """Each of its first ``stale`` starts loses a race with another writer."""

    def __init__(self, stale: int) -> None:
        super().__init__()
        self.stale = stale

    def start(self, admitted: AdmittedWorkload) -> None:
        if self.stale:
            self.stale -= 1
            raise StaleObject(f"start {admitted.workload.id}: the object changed meanwhile")
        super().start(admitted)


@pytest.mark.parametrize(
    ("stale", "warnings"),
    [pytest.param(2, 0, id="a-lost-race-is-routine"), pytest.param(4, 1, id="one-that-repeats")],
)
def test_a_start_built_on_a_stale_copy_is_retried_quietly_unless_it_repeats(
    caplog: pytest.LogCaptureFixture, stale: int, warnings: int
) -> None:
    backend = _Racing(stale)
    clock, metrics = FakeClock(), SchedulerMetrics()
    applier = _applier(backend, clock, metrics, TOKEN)
    a = _admitted("a", clock.now())
    with caplog.at_level(logging.INFO, logger="queuemgr.controller.applier"):
        applier.start_all(TOKEN, [a])
    assert backend.running() == {a.workload.id}
    levels = [r.levelno for r in caplog.records if "changed meanwhile" in r.getMessage()]
    assert len(levels) == stale
    assert levels.count(logging.WARNING) == warnings
    applier.shutdown()
