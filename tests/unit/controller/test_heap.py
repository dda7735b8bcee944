"""When the leader freezes its heap: after a big load, then at most every REFREEZE_S."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from queuemgr.controller.heap import MANY_ROWS, REFREEZE_S, HeapKeeper


@pytest.fixture
def keeper() -> Iterator[HeapKeeper]:
    made = HeapKeeper()
    yield made
    made.release()


@pytest.mark.parametrize(
    ("rows", "live", "later", "due"),
    [
        pytest.param(0, 0, 1.0, False, id="a-quiet-cycle-soon-after"),
        pytest.param(MANY_ROWS, MANY_ROWS, 1.0, True, id="a-cycle-that-read-every-row"),
        pytest.param(MANY_ROWS, 2 * MANY_ROWS, 1.0, True, id="a-cycle-that-read-half-the-rows"),
        pytest.param(MANY_ROWS, 3 * MANY_ROWS, 1.0, False, id="a-busy-stream-read-many-new-rows"),
        pytest.param(MANY_ROWS - 1, MANY_ROWS - 1, 1.0, False, id="a-small-reload"),
        pytest.param(0, 0, REFREEZE_S, True, id="refrozen-once-the-interval-is-over"),
    ],
)
def test_freezes_when_due(
    keeper: HeapKeeper, rows: int, live: int, later: float, due: bool
) -> None:
    assert keeper.after_cycle(0, 100.0)  # the first cycle always freezes
    assert gc.get_freeze_count() > 0
    assert keeper.after_cycle(rows, 100.0 + later, live) is due


def test_release_hands_everything_back(keeper: HeapKeeper) -> None:
    keeper.after_cycle(0, 0.0)
    keeper.release()
    assert gc.get_freeze_count() == 0
    assert keeper.after_cycle(0, 1.0)  # known as never frozen again


def test_a_pause_lasts_until_the_next_freeze(keeper: HeapKeeper) -> None:
    keeper.after_cycle(0, 0.0)
    keeper.pause()
    assert not gc.isenabled()
    assert keeper.after_cycle(0, 1.0)  # the cycle after a pause always freezes
    assert gc.isenabled()
    keeper.pause()
    keeper.release()
    assert gc.isenabled()
