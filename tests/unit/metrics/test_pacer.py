"""The gauge pacer: every cycle while cheap, a bounded share of time when not."""

from __future__ import annotations

import pytest

from queuemgr.metrics.pacer import GaugePacer


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def refresh(pacer: GaugePacer, clock: FakeClock, cost: float) -> None:
    started = pacer.now()
    clock.t += cost
    pacer.refreshed(started)


def test_the_first_cycle_always_refreshes() -> None:
    assert GaugePacer(clock=FakeClock()).due()


def test_cheap_refreshes_happen_after_every_cycle() -> None:
    clock = FakeClock()
    pacer = GaugePacer(clock=clock)
    for _ in range(5):
        assert pacer.due()
        refresh(pacer, clock, 0.001)
        clock.t += 0.0001


@pytest.mark.parametrize(
    ("cost", "after", "due"),
    [
        pytest.param(0.1, 1.5, False, id="100ms-cost-waits-the-minimum-interval"),
        pytest.param(0.2, 3.0, False, id="200ms-cost-waits-20x-its-cost"),
        pytest.param(0.2, 4.0, True, id="200ms-cost-due-after-4s"),
        pytest.param(0.01, 1.0, False, id="10ms-cost-waits-2s-minimum"),
        pytest.param(0.01, 2.001, True, id="10ms-cost-due-after-2s"),
        pytest.param(1.0, 19.0, False, id="1s-cost-stays-under-5pct-of-time"),
        pytest.param(1.0, 20.0, True, id="1s-cost-due-after-20s"),
    ],
)
def test_costly_refreshes_are_spaced_by_their_cost(cost: float, after: float, due: bool) -> None:
    clock = FakeClock()
    pacer = GaugePacer(clock=clock)
    refresh(pacer, clock, cost)
    clock.t += after
    assert pacer.due() is due


def test_a_costly_refresh_is_due_again_once_its_interval_passed() -> None:
    clock = FakeClock()
    pacer = GaugePacer(clock=clock)
    refresh(pacer, clock, 5.0)
    clock.t += 99.0
    assert not pacer.due()
    clock.t += 1.0
    assert pacer.due()
    refresh(pacer, clock, 0.001)  # the backlog drained: cheap again, every cycle
    assert pacer.due()
