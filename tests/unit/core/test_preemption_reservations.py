"""Preemption and backfill reservations: a preemptor keeps off the room a reserved gang counts on.

A preemptor within its nominal quota outranks a reservation, but is placed around the
reserved capacity when victims elsewhere let it; a preemptor that would borrow (fair
sharing) evicts nobody for room a reservation counts on. On the code before this rule,
each case below took the reserved gang's room and pushed its start back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from queuemgr.core.model import Cohort, CohortName
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.reasons import PreemptionReason
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload

# The gang of queue g is the largest pending workload: reserved before anything else.
LARGEST_FIRST = SchedulerPolicy(largest_reservations=1, largest_min_gpus=9)


def _gang_reserved_behind_borrowers(*, fair: bool, reclaim: str = "Never") -> World:
    """g (nominal 16) runs 8 GPUs on n-1 until t=100 and waits for a 16-GPU gang; a
    borrows g's other 8 on n-0 with runs that end by t=58 (max_runtime 50). So the gang
    is reserved from t=100 on n-0 and n-1."""
    world = World().cq(
        make_cq("g").cohort("c").nominal(gpu=16, cpu="192"),
        make_cq("a").cohort("c").nominal(gpu=0, cpu="0"),
        make_cq("b").cohort("c").nominal(gpu=0, cpu="0").preempt(reclaim=reclaim),
    )
    world.cohorts = [Cohort(name=CohortName("c"), fair_sharing=fair)]
    world.policy = LARGEST_FIRST
    world.node(make_nodes("n", 2))
    g_run = make_workload("g-run").ns("g").gpus(8).max_runtime(100.0).build()
    world.running(make_admitted(g_run, "g", "default", {"n-1": 1}, at=0.0))
    for i in range(8):
        job = make_workload(f"a{i}").ns("a").gpus(1).at(float(i)).max_runtime(50.0).build()
        world.running(make_admitted(job, "a", "default", {"n-0": 1}, at=float(1 + i)))
    world.submit(make_workload("big").ns("g").gang(2).gpus(8).at(0.0).max_runtime(100.0))
    return world


@pytest.mark.parametrize(
    ("limit", "evicts"),
    [
        pytest.param(1000.0, False, id="runs-past-the-reservation-waits"),
        pytest.param(None, False, id="no-limit-waits"),
        pytest.param(20.0, True, id="ends-before-the-reservation-preempts"),
    ],
)
def test_a_borrowing_preemptor_does_not_take_room_a_reservation_counts_on(
    limit: float | None, evicts: bool
) -> None:
    world = _gang_reserved_behind_borrowers(fair=True)
    # b has waited since before a's runs began, so fair sharing may take them.
    world.submit(make_workload("b0").ns("b").gpus(1).at(-100.0).max_runtime(limit))
    res = world.run(now=10.0)
    (reservation,) = res.decisions.reservations
    assert reservation.workload == "g/big"
    assert reservation.start == 100.0
    if evicts:
        # Gone before the gang starts: it delays nobody, as backfill would let it.
        (e,) = res.decisions.evicted
        assert e.reason is PreemptionReason.IN_COHORT_FAIR_SHARING
        assert res.reason("b/b0") is PendingReason.PREEMPTING
    else:
        assert res.decisions.evicted == ()
        assert res.decisions.claims == ()
        assert res.reason("b/b0") is PendingReason.WAITING_FOR_RESERVATION
        assert "g/big" in res.message("b/b0")


def test_without_a_reservation_the_borrowing_preemptor_still_preempts() -> None:
    world = _gang_reserved_behind_borrowers(fair=True)
    world.policy = SchedulerPolicy(reservation_depth=0)
    world.submit(make_workload("b0").ns("b").gpus(1).at(-100.0).max_runtime(1000.0))
    res = world.run(now=10.0)
    assert res.decisions.reservations == ()
    assert [e.victim.workload.name for e in res.decisions.evicted] == ["a7"]
    assert res.reason("b/b0") is PendingReason.PREEMPTING


def _reclaim_beside_a_reserved_gang(*, old_borrowed: bool = True) -> World:
    """The world above with a third node, n-2, where a also runs (admitted on borrowed
    quota if ``old_borrowed``): b (nominal 1) reclaims one GPU; a's newest run is on n-0,
    which the gang's reservation counts on."""
    world = World().cq(
        make_cq("g").cohort("c").nominal(gpu=17, cpu="204"),
        make_cq("a").cohort("c").nominal(gpu=7, cpu="96"),
        make_cq("b").cohort("c").nominal(gpu=1, cpu="96").preempt(reclaim="Any"),
    )
    world.policy = LARGEST_FIRST
    world.node(make_nodes("n", 3))
    g_run = make_workload("g-run").ns("g").gpus(8).max_runtime(100.0).build()
    world.running(make_admitted(g_run, "g", "default", {"n-1": 1}, at=0.0))
    # On n-2, the older runs, none ending before t=1000: eight loans, or seven runs
    # within a's nominal quota (they can be no more) beside one of g's.
    for i in range(8 if old_borrowed else 7):
        job = make_workload(f"old{i}").ns("a").gpus(1).at(i - 20.0).max_runtime(1000.0).build()
        run = make_admitted(job, "a", "default", {"n-2": 1}, at=i - 20.0)
        admission = dataclasses.replace(run.admission, borrowing=old_borrowed)
        world.running(dataclasses.replace(run, admission=admission))
    if not old_borrowed:
        g_fill = make_workload("g-fill").ns("g").gpus(1).max_runtime(1000.0).build()
        world.running(make_admitted(g_fill, "g", "default", {"n-2": 1}, at=0.0))
    for i in range(8):  # on n-0, the newer, ending by t=58
        job = make_workload(f"new{i}").ns("a").gpus(1).at(10.0 + i).max_runtime(50.0).build()
        world.running(make_admitted(job, "a", "default", {"n-0": 1}, at=float(1 + i)))
    world.submit(make_workload("big").ns("g").gang(2).gpus(8).at(0.0).max_runtime(100.0))
    world.submit(make_workload("mine").ns("b").gpus(1).at(5.0).max_runtime(1000.0))
    return world


def _only_on_the_gangs_node(world: World) -> World:
    """a borrows only on n-0 (nominal 7, 8 running): a reclaim must take one there."""
    world.admitted = [a for a in world.admitted if not a.workload.name.startswith("old")]
    world.nodes = [n for n in world.nodes if n.name != "n-2"]
    return world


@pytest.mark.parametrize(
    ("world", "victim", "node"),
    [
        # The newest run of a would lose the least work, but its node is the gang's:
        # the reclaim takes the newest borrowed run on n-2 instead, and goes there.
        pytest.param(
            lambda: _reclaim_beside_a_reserved_gang(old_borrowed=True),
            "old7",
            "n-2",
            id="goes-around-the-reserved-capacity",
        ),
        # a's runs on n-2 were admitted within its nominal quota (runs of days, on the
        # Philly trace): going around would throw their work away, so the reclaim takes
        # the newest borrowed run, on the gang's node, as without reservations.
        pytest.param(
            lambda: _reclaim_beside_a_reserved_gang(old_borrowed=False),
            "new7",
            "n-0",
            id="around-takes-only-runs-admitted-on-borrowed-quota",
        ),
        # Nowhere else to go: within its nominal quota it outranks the reservation.
        pytest.param(
            lambda: _only_on_the_gangs_node(_reclaim_beside_a_reserved_gang()),
            "new7",
            "n-0",
            id="outranks-a-reservation-it-cannot-go-around",
        ),
    ],
)
def test_an_in_nominal_preemptor_and_the_reserved_capacity(
    world: Callable[[], World], victim: str, node: str
) -> None:
    res = world().run(now=10.0)
    (reservation,) = res.decisions.reservations
    assert reservation.workload == "g/big" and reservation.start == 100.0
    (e,) = res.decisions.evicted
    assert e.reason is PreemptionReason.IN_COHORT_RECLAMATION
    assert e.victim.workload.name == victim
    (claim,) = res.decisions.claims
    assert claim.admission.pods_per_node == {node: 1}
