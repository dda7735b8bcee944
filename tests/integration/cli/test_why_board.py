"""``why`` from the leader's status board: the answer a cycle evaluated here gives, read by index.

Each case submits workloads, lets a real loop run its cycles on the test
database (which write the board), then asks ``why`` about every workload
left pending twice: from the board and with ``--evaluate``. With nothing
changed in between, the two must agree on everything a tenant reads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.model import WorkloadId
from queuemgr.core.reasons import Decisions
from tests.integration.cli.conftest import Invoke, Login
from tests.integration.controller.helpers import make_loop, run_one_cycle

pytestmark = pytest.mark.integration

# (namespace, name, GPUs per pod, pods, declared runtime): team-a's 16 and team-b's 8 GPUs
# of quota share one cohort, on four 8-GPU nodes.
Job = tuple[str, str, int, int, str | None]
CASES = [
    pytest.param(
        [
            ("team-b", "r0", 8, 1, "30m"),
            ("team-a", "r1", 8, 2, "90m"),
            ("team-b", "w0", 8, 1, None),
            ("team-b", "w1", 8, 2, "1h"),
            ("team-b", "w2", 1, 1, None),
            ("team-a", "w3", 8, 1, "2h"),
        ],
        id="cohort-full-with-runtimes",
    ),
    pytest.param(
        [
            ("team-b", "r0", 8, 1, None),
            ("team-b", "w0", 8, 8, None),  # more than the cluster: inadmissible
            ("team-b", "w1", 4, 1, None),
            ("team-a", "w2", 8, 3, None),
        ],
        id="inadmissible-and-unknown-ends",
    ),
]


def _submit(cli: Invoke, job: Job) -> None:
    ns, name, gpus, pods, runtime = job
    args = ["submit", "-q", "default", "-n", ns, "--name", name]
    args += ["--gpus", str(gpus), "--pods", str(pods)]
    if runtime is not None:
        args += ["--max-runtime", runtime]
    r = cli(*args, "--", "train")
    assert r.exit_code == 0, r.output


def _why(cli: Invoke, ns: str, name: str, *flags: str) -> dict[str, Any]:
    r = cli("why", name, "-n", ns, "-o", "json", *flags)
    assert r.exit_code == 0, r.output
    doc: dict[str, Any] = json.loads(r.output)
    return doc


def _settle(engine: Engine) -> None:
    """Two cycles of one leader: the second judges what the first admitted as running
    (a reservation's start comes from their declared ends)."""
    loop, elector, _ = make_loop(engine)
    assert elector.step()
    try:
        loop.run_once()
        loop.run_once()
    finally:
        elector.stop()


def _pending(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT namespace, name FROM workloads"
                " WHERE state IN ('Pending', 'Inadmissible') ORDER BY id"
            )
        )
        return [(r.namespace, r.name) for r in rows]


SAME = (
    "state",
    "cluster_queue",
    "reason",
    "message",
    "position_in_local_queue",
    "position_in_cluster_queue",
    "ahead",
    "ahead_count",
    "frees_up",
    "eta_reason",
)


@pytest.mark.parametrize("jobs", CASES)
def test_the_board_answers_as_an_evaluated_cycle_does(
    cli: Invoke, engine: Engine, applied: object, jobs: list[Job]
) -> None:
    for job in jobs:
        _submit(cli, job)
    _settle(engine)
    pending = _pending(engine)
    assert len(pending) >= 2
    for ns, name in pending:
        board, evaluated = _why(cli, ns, name), _why(cli, ns, name, "--evaluate")
        assert (board["source"], evaluated["source"]) == ("board", "evaluated")
        for key in SAME:
            assert board[key] == evaluated[key], (name, key)
        if evaluated["eta"] is None:
            assert board["eta"] is None, name
        else:  # "now" is each one's own time
            assert board["eta_in_s"] == pytest.approx(evaluated["eta_in_s"], abs=5.0), name
    table = cli("why", pending[-1][1], "-n", pending[-1][0])
    assert table.exit_code == 0 and "As of:" in table.output


def test_a_queue_ordered_by_usage_reads_as_the_leader_placed_it(
    cli: Invoke, engine: Engine, applied: object
) -> None:
    """team-b's ClusterQueue ranks its two LocalQueues by usage: its rows hold positions
    as ranks (they move as usage does), not the queue order's keys. The leader's own
    last cycle is the reference: an evaluated one orders by the usage last saved,
    which may be older than the leader's."""
    assert cli("cq", "edit", "team-b", "--ordering", "usage").exit_code == 0
    assert cli("lq", "create", "shared", "-n", "team-a", "-c", "team-b").exit_code == 0

    def submit(ns: str, queue: str, name: str, pods: int) -> None:
        r = cli("submit", "-q", queue, "-n", ns, "--name", name, "--gpus", "8",
                "--pods", str(pods), "--", "x")  # fmt: skip
        assert r.exit_code == 0, r.output

    loop, elector, _ = make_loop(engine)
    seen: list[Decisions] = []
    loop._on_cycle = lambda d, _now: seen.append(d)
    assert elector.step()
    try:
        submit("team-b", "default", "b-run", 1)  # team-b's LocalQueue gets usage
        loop.run_once()
        # In queue order b-0 and b-1 come first; by usage team-a's LocalQueue, which
        # has none, comes before team-b's. Neither gang of 24 GPUs fits.
        for name in ("b-0", "b-1"):
            submit("team-b", "default", name, 3)
        submit("team-a", "shared", "a-0", 3)
        loop.run_once()
        loop.run_once()
    finally:
        elector.stop()
    pending = _pending(engine)
    assert len(pending) >= 3
    last = seen[-1].pending
    for ns, name in pending:
        board, leader = _why(cli, ns, name), last[WorkloadId(f"{ns}/{name}")]
        assert board["source"] == "board"
        assert (board["position_in_local_queue"], board["position_in_cluster_queue"]) == (
            leader.position_in_local_queue,
            leader.position_in_cluster_queue,
        ), name
        assert board["ahead_count"] == leader.position_in_cluster_queue - 1


def test_a_cycle_moves_the_board_and_a_quiet_one_writes_nothing(
    cli: Invoke, engine: Engine, applied: object
) -> None:
    for job in CASES[0].values[0]:
        _submit(cli, job)
    loop, elector, _ = make_loop(engine)
    assert elector.step()
    try:
        first = loop.run_once()
        loop.run_once()  # judges the first one's admissions as running (see _settle)
        quiet = loop.run_once()
        assert first is not None and quiet is not None
        assert first.board_written == len(_pending(engine)) and quiet.board_written == 0
        before = _why(cli, "team-b", "w2")
        assert cli("cancel", "w0", "-n", "team-b").exit_code == 0  # one ahead of w2 leaves
        moved = loop.run_once()
    finally:
        elector.stop()
    # w0's row is gone; w2's, behind it, is as it was: its rank holds, and a reader
    # counts its positions.
    assert moved is not None and moved.board_written == 1
    after = _why(cli, "team-b", "w2")
    assert after["source"] == "board"
    assert after["position_in_local_queue"] == before["position_in_local_queue"] - 1
    assert "team-b/w0" not in {a["workload"] for a in after["ahead"]}
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT count(*) FROM pending_statuses")).scalar_one()
    assert rows == len(_pending(engine))


def test_without_a_live_leader_why_evaluates(cli: Invoke, engine: Engine, applied: object) -> None:
    for job in CASES[0].values[0]:
        _submit(cli, job)
    run_one_cycle(engine)
    assert _why(cli, "team-b", "w2")["source"] == "board"
    with engine.begin() as conn:  # the last leader's cycle was an hour ago
        conn.execute(sa.text("UPDATE status_board SET at = now() - interval '1 hour'"))
    assert _why(cli, "team-b", "w2")["source"] == "evaluated"
    _submit(cli, ("team-b", "late", 1, 1, None))  # after the last cycle: not on the board
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE status_board SET at = now()"))
    assert _why(cli, "team-b", "late")["source"] == "evaluated"


def test_a_tenant_reads_the_board_without_other_namespaces_names(
    logins: dict[str, Login], cli: Invoke, engine: Engine
) -> None:
    """team-a queues behind team-b's gangs on team-b's ClusterQueue: three gangs of 24
    GPUs, where b-job holds one of the cohort's 24."""
    assert cli("lq", "create", "shared", "-n", "team-a", "-c", "team-b").exit_code == 0
    for name in ("b-big", "b-next"):
        _submit(cli, ("team-b", name, 8, 3, None))
    r = logins["a"].cli(
        "submit", "-q", "shared", "-n", "team-a", "--name", "a-late", "--gpus", "8",
        "--pods", "3", "--", "x",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    run_one_cycle(engine)
    tenant = logins["a"].cli("why", "a-late", "-n", "team-a", "-o", "json")
    admin = logins["admin"].cli("why", "a-late", "-n", "team-a", "-o", "json")
    mine, theirs = json.loads(tenant.output), json.loads(admin.output)
    assert mine["source"] == theirs["source"] == "board"
    assert theirs["ahead_count"] == mine["ahead_count"] == 2
    assert [a["position"] for a in mine["ahead"]] == [a["position"] for a in theirs["ahead"]]
    assert any(a["workload"].startswith("team-b/") for a in theirs["ahead"])
    text = json.dumps(mine)
    assert "team-b/" not in text and "b-big" not in text and "b-next" not in text
