"""Reservations and backfill: a blocked gang reserves its start; others may not delay it."""

from __future__ import annotations

import pytest

from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload


def _busy_cluster(ends: tuple[float | None, ...] = (100.0, 300.0)) -> World:
    """Two 8-GPU nodes, each half used by a 4-GPU job admitted at t=0 with these limits."""
    # Quota (24) is roomier than the nodes (16), so the nodes are what binds.
    world = World().cq(make_cq("q").nominal(gpu=24, cpu="288"))
    world.node(make_nodes("n", 2))
    for i, limit in enumerate(ends):
        job = make_workload(f"run{i}").ns("q").gpus(4).max_runtime(limit).at(-10.0 + i).build()
        world.running(make_admitted(job, "q", "default", {f"n-{i}": 1}, at=0.0))
    world.policy = SchedulerPolicy(reservation_depth=1)
    return world


def gang() -> object:
    return make_workload("gang").ns("q").gang(2).gpus(8).at(1.0)


def test_a_blocked_gang_reserves_the_time_its_blockers_end() -> None:
    res = _busy_cluster().submit(gang()).run(now=50.0)
    (r,) = res.decisions.reservations
    assert r.workload == "q/gang"
    assert r.start == 300.0  # both nodes are free once the later job's limit has passed
    assert {p.node for p in r.placements} == {"n-0", "n-1"}
    status = res.status("q/gang")
    assert status.eta == 300.0
    assert "reserved from t=300" in status.message


@pytest.mark.parametrize(
    ("limit", "backfills"),
    [
        pytest.param(200.0, True, id="ends-before-the-reservation"),
        pytest.param(250.0, True, id="ends-exactly-at-the-start"),
        pytest.param(400.0, False, id="ends-after-the-reservation"),
        pytest.param(None, False, id="no-max-runtime-never-backfills"),
    ],
)
def test_backfill_only_if_it_does_not_delay_the_gang(limit: float | None, backfills: bool) -> None:
    small = make_workload("small").ns("q").gpus(4).max_runtime(limit).at(2.0)
    res = _busy_cluster().submit(gang(), small).run(now=50.0)
    assert ("q/small" in res.admitted_ids()) is backfills
    if not backfills:
        assert res.reason("q/small") is PendingReason.WAITING_FOR_RESERVATION
        assert "q/gang" in res.message("q/small")


def test_without_reservations_the_small_job_passes() -> None:
    world = _busy_cluster().submit(gang(), make_workload("small").ns("q").gpus(4).at(2.0))
    world.policy = SchedulerPolicy(reservation_depth=0)
    res = world.run(now=50.0)
    assert "q/small" in res.admitted_ids()
    assert res.decisions.reservations == ()


def test_a_job_that_leaves_room_for_the_gang_may_run_past_its_start() -> None:
    # A third node: the gang's two nodes at t=300 are n-0 and n-1; a job on n-2 never
    # touches them, however long it runs.
    world = _busy_cluster()
    world.node(make_nodes("extra", 1, gpu=4))
    small = make_workload("small").ns("q").gpus(4).at(2.0)
    res = world.submit(gang(), small).run(now=50.0)
    assert "q/small" in res.admitted_ids()
    assert res.admission("q/small").pods_per_node == {"extra-0": 1}


def test_unknown_when_a_blocker_declares_no_max_runtime() -> None:
    res = (
        _busy_cluster(ends=(100.0, None))
        .submit(gang(), make_workload("small").ns("q").gpus(4).at(2.0))
        .run(now=50.0)
    )
    (r,) = res.decisions.reservations
    assert r.start is None
    assert r.unknown_because == ("q/run1",)
    assert res.status("q/gang").eta is None
    assert "q/run1" in res.message("q/gang")
    # An unknown reservation holds nothing back.
    assert "q/small" in res.admitted_ids()


@pytest.mark.parametrize(
    ("ends", "fill_limit", "gpus", "eta"),
    [
        pytest.param((100.0, 300.0), 1000.0, 4, 100.0, id="first-end-makes-room"),
        pytest.param((100.0, 300.0), 1000.0, 8, 1000.0, id="a-whole-node-needs-both-ends"),
        pytest.param((None, 300.0), None, 4, 300.0, id="the-known-end-suffices"),
        pytest.param((None, None), None, 4, None, id="no-declared-end-no-eta"),
    ],
)
def test_every_pending_workload_gets_an_eta(
    ends: tuple[float | None, ...], fill_limit: float | None, gpus: int, eta: float | None
) -> None:
    world = _busy_cluster(ends)
    world.policy = SchedulerPolicy()  # no reservations: the ETA still comes from the plan
    # Fill the free half of each node, so that nothing fits now.
    for i in range(2):
        job = make_workload(f"fill{i}").ns("q").gpus(4).max_runtime(fill_limit).build()
        world.running(make_admitted(job, "q", "default", {f"n-{i}": 1}, at=0.0))
    res = world.submit(make_workload("w").ns("q").gpus(gpus).at(1.0)).run(now=50.0)
    assert res.status("q/w").eta == eta


def test_an_inadmissible_workload_has_no_eta() -> None:
    res = _busy_cluster().submit(make_workload("w").ns("q").gpus(16).at(1.0)).run(now=50.0)
    assert res.reason("q/w") is PendingReason.INADMISSIBLE
    assert res.status("q/w").eta is None
