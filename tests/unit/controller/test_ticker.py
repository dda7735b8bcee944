"""The safety cycle's ticker keeps time on the monotonic clock, whatever the wall clock does."""

from __future__ import annotations

import time

import pytest

from queuemgr.controller.ticker import Ticker


def _count_ticks(ticker_interval: float, seconds: float) -> int:
    count = 0

    def tick() -> None:
        nonlocal count
        count += 1

    ticker = Ticker(ticker_interval, tick, name="test-ticker")
    ticker.start()
    try:
        time.sleep(seconds)
    finally:
        ticker.stop()
    return count


@pytest.mark.parametrize("step", [-86_400.0, -3_600.0, 3_600.0], ids=["back-1d", "back-1h", "fwd"])
def test_ticks_go_on_when_the_wall_clock_steps(
    monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    real = time.time
    # The wall clock steps back (or forward) now, and back again half-way through.
    started = time.monotonic()
    monkeypatch.setattr(
        time, "time", lambda: real() + (step if time.monotonic() - started < 0.25 else 0.0)
    )
    ticks = _count_ticks(0.02, 0.5)
    assert ticks >= 10  # ~25 expected; a ticker on the wall clock stalls at the step


def test_a_failing_tick_does_not_stop_the_next(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    def tick() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    ticker = Ticker(0.01, tick, name="test-ticker")
    ticker.start()
    # Until the third tick, however loaded the machine: a fixed sleep of 0.2 s saw
    # fewer than three 10 ms ticks once while a benchmark held both cores.
    deadline = time.monotonic() + 10
    while calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    ticker.stop()
    assert calls >= 3
    assert "test-ticker failed" in caplog.text


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_a_bad_interval_is_refused_by_name(interval: float) -> None:
    with pytest.raises(ValueError, match=r"^interval: "):
        Ticker(interval, lambda: None, name="x")
