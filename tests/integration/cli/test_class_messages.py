"""A class's reason and message are kept once, on the status board, and every reader
shows them.

The workloads of one shape that a cycle judged as a whole share one verdict, whose
message tells the room their queue has free. When that room changes (a small
workload is admitted beside them), the leader writes the class's message once;
the workloads' own rows are not rewritten, and ``status``, ``list`` and ``why``
show each of them the class's new words, as a cycle evaluated afresh gives them.
The first reason of each workload of a class (over the one it was created with) is
the class's too: a first cycle writes only the rows of the workloads judged alone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.report import CycleReport
from queuemgr.controller.testing import FakeClock
from queuemgr.store.handle import Database
from queuemgr.store.readouts import workload_progress
from tests.integration.cli.conftest import Invoke, Login
from tests.integration.controller.helpers import make_loop

pytestmark = pytest.mark.integration

WAITING = [f"w{i}" for i in range(8)]


def _submit(cli: Invoke, ns: str, name: str, gpus: int, pods: int = 1) -> None:
    r = cli("submit", "-q", "default", "-n", ns, "--name", name, "--gpus", str(gpus),
            "--pods", str(pods), "--", "x")  # fmt: skip
    assert r.exit_code == 0, r.output


def _doc(cli: Invoke, *args: str) -> Any:
    r = cli(*args, "-o", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _settle_then_change(cli: Invoke, engine: Engine) -> tuple[dict[str, str], CycleReport]:
    """team-b's waiting gangs of 8 GPUs, one class, told "4 free"; then a small one is
    admitted beside them, and the cycle after that tells them "3 free". The messages
    before, and that cycle's report."""
    _submit(cli, "team-a", "a-run", 8, pods=2)  # team-a's 16: nothing to lend
    _submit(cli, "team-b", "b-run", 4)  # team-b has 4 of its 8 left
    for name in WAITING:
        _submit(cli, "team-b", name, 8)
    loop, elector, _ = make_loop(engine)
    assert elector.step()
    try:
        for _ in range(3):
            loop.run_once()
        before = {n: _doc(cli, "status", n, "-n", "team-b")["message"] for n in WAITING}
        _submit(cli, "team-b", "b-small", 1)
        loop.run_once()  # admits it; the heads it tried before that were told "4 free"
        moved = loop.run_once()
    finally:
        elector.stop()
    assert moved is not None
    return before, moved


def test_a_class_message_that_changed_is_written_once_and_read_by_all(
    cli: Invoke, engine: Engine, applied: object
) -> None:
    before, moved = _settle_then_change(cli, engine)
    assert all("queue has 4 free of 8" in m for m in before.values())
    # The head, judged on its own, is written; the seven behind it share one class row.
    assert (moved.statuses_written, moved.board_written) == (1, 1)
    shown = {n: _doc(cli, "status", n, "-n", "team-b")["message"] for n in WAITING}
    listed = {
        d["name"]: d["message"]
        for d in _doc(cli, "list", "-n", "team-b")["workloads"]
        if d["name"] in shown
    }
    assert listed == shown
    assert all("queue has 3 free of 8" in m for m in shown.values()), shown
    assert len(set(shown[n] for n in WAITING[1:])) == 1
    for name in (WAITING[0], WAITING[3], WAITING[-1]):
        evaluated = _doc(cli, "why", name, "-n", "team-b", "--evaluate")
        board = _doc(cli, "why", name, "-n", "team-b")
        assert board["source"] == "board"
        assert shown[name] == board["message"] == evaluated["message"], name
    with engine.connect() as conn:  # the class's rows hold none of their own
        own = dict(
            conn.execute(
                sa.text("SELECT name, message FROM workloads WHERE namespace = 'team-b'")
            ).all()
        )
    assert [own[n] for n in WAITING[1:]] == [""] * (len(WAITING) - 1)
    assert own[WAITING[0]] == shown[WAITING[0]]
    # Cancelled before the next cycle, it still has its board row: its own words show.
    assert cli("cancel", WAITING[-1], "-n", "team-b").exit_code == 0
    gone = _doc(cli, "status", WAITING[-1], "-n", "team-b")
    assert gone["state"] == "Finished" and gone["message"].startswith("cancelled by"), gone


def test_a_tenant_reads_only_the_classes_it_waits_in(
    logins: dict[str, Login], cli: Invoke, engine: Engine
) -> None:
    """A class's message may name another namespace's workload (here team-a's a-run, which
    team-b's gangs wait for): team-a's tenant, with no workload in the class, reads no
    row of it; team-b's reads its own workloads' messages."""
    _settle_then_change(cli, engine)
    mine = logins["b"].cli("status", WAITING[-1], "-n", "team-b", "-o", "json")
    assert mine.exit_code == 0, mine.output
    theirs = _doc(logins["admin"].cli, "status", WAITING[-1], "-n", "team-b")
    assert json.loads(mine.output)["message"] == theirs["message"]
    assert "free of 8" in theirs["message"]  # b-job, admitted beside them, holds one more
    for key, visible in (("a", set()), ("b", {"team-b"}), ("admin", {"team-b"})):
        with sa.create_engine(logins[key].url).connect() as conn:
            seen = conn.execute(sa.text("SELECT cluster_queue FROM pending_classes")).scalars()
            assert set(seen) == visible, key


def test_a_first_cycle_writes_a_class_reason_once_and_every_reader_shows_it(
    cli: Invoke, engine: Engine, applied: object
) -> None:
    _submit(cli, "team-a", "a-run", 8, pods=2)  # team-a's 16
    _submit(cli, "team-b", "b-run", 8)  # team-b's 8: nothing to lend
    for name in WAITING:
        _submit(cli, "team-a", name, 8)
    loop, elector, _ = make_loop(engine)
    assert elector.step()
    try:
        first = loop.run_once()
    finally:
        elector.stop()
    assert first is not None and set(first.admitted) == {"team-a/a-run", "team-b/b-run"}
    # The head is judged on its own and written; the seven behind it are one class,
    # and their rows keep the reason they were created with.
    assert first.statuses_written == 1
    with engine.connect() as conn:
        own = dict(
            conn.execute(
                sa.text("SELECT name, reason FROM workloads WHERE name LIKE 'w%'")
            ).all()
        )
    assert own[WAITING[0]] != "Created"
    assert [own[n] for n in WAITING[1:]] == ["Created"] * (len(WAITING) - 1)
    shown = {n: _doc(cli, "status", n, "-n", "team-a")["reason"] for n in WAITING}
    assert shown[WAITING[0]] == own[WAITING[0]]
    kept = shown[WAITING[1]]
    assert kept in ("QuotaExceeded", "CohortExhausted")
    assert [shown[n] for n in WAITING[1:]] == [kept] * (len(WAITING) - 1), shown
    listed = {
        d["name"]: d["reason"] for d in _doc(cli, "list", "-n", "team-a")["workloads"]
    }
    assert {n: listed[n] for n in WAITING} == shown
    last = _doc(cli, "why", WAITING[-1], "-n", "team-a")
    evaluated = _doc(cli, "why", WAITING[-1], "-n", "team-a", "--evaluate")
    assert last["source"] == "board"
    assert last["reason"] == evaluated["reason"] == kept
    ahead = [(a["workload"], a["reason"]) for a in last["ahead"]]
    assert ahead == [(f"team-a/{n}", shown[n]) for n in WAITING[:5]]  # the first five
    progress = {p.name: p.reason for p in workload_progress(Database(engine))}
    assert {n: progress[n] for n in WAITING} == shown
    assert progress["a-run"] == "Admitted"


def test_a_cycle_after_one_that_admitted_rewrites_no_eta(
    cli: Invoke, engine: Engine, applied: object
) -> None:
    """The runs a cycle admits end, for the next cycle, at the time read back from their
    rows, which keep microseconds; the clock has more digits. Every ETA behind those
    runs is then the same in both cycles, and the second writes no row of the board."""
    for i in range(3):
        _submit_with_limit(cli, "team-a", f"run-{i}", 8)
    for name in WAITING:
        _submit_with_limit(cli, "team-a", name, 8)
    clock = FakeClock(1_700_000_000.123456789)  # nanoseconds, as the system clock gives
    loop, elector, _ = make_loop(engine, clock=clock)
    assert elector.step()
    try:
        first = loop.run_once()
        clock.advance(1.0)
        second = loop.run_once()
    finally:
        elector.stop()
    assert first is not None and second is not None
    assert len(first.admitted) == 3 and not second.admitted
    assert first.board_written > 0
    assert (second.board_written, second.statuses_written) == (0, 0)
    with engine.connect() as conn:  # the ETAs wait for those runs' declared ends
        etas = conn.execute(
            sa.text("SELECT eta FROM pending_classes UNION ALL SELECT eta FROM pending_statuses")
        ).scalars()
        assert any(eta is not None and eta > clock.now() for eta in etas)


def _submit_with_limit(cli: Invoke, ns: str, name: str, gpus: int) -> None:
    r = cli("submit", "-q", "default", "-n", ns, "--name", name, "--gpus", str(gpus),
            "--max-runtime", "1h", "--", "x")  # fmt: skip
    assert r.exit_code == 0, r.output
