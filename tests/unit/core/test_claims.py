"""Claims, the in-nominal first pass, NominalDemandWaiting and min_runtime, cycle by cycle."""

from __future__ import annotations

import dataclasses

import pytest

from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.reasons import PreemptionReason
from queuemgr.core.verdicts import PendingReason
from queuemgr.core.victim_rules import REPEAT_VICTIM
from tests.builders import (
    World,
    lending_cohort,
    make_admitted,
    make_cq,
    make_nodes,
    make_workload,
)


def _lent(*, min_runtime: float = 0.0) -> World:
    """a (nominal 8) lends to b (nominal 8): b runs 16 GPUs on two nodes, b1 borrowed."""
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96").preempt(min_runtime=min_runtime),
    )
    world.node(make_nodes("n", 2))
    for i in range(2):
        job = make_workload(f"b{i}").ns("b").gpus(8).at(float(i)).build()
        world.running(make_admitted(job, "b", "default", {f"n-{i}": 1}, at=float(i)))
    return world


def test_a_claim_outlives_its_cycle_and_is_admitted_where_it_was_promised() -> None:
    world = _lent().submit(make_workload("mine").ns("a").gpus(8).at(10.0))
    first = world.run(now=20.0)
    assert first.evicted_ids() == {"b/b1"}
    (claim,) = first.decisions.claims
    assert claim.victims == ("b/b1",)
    # The victim is still stopping, and b submits more: the claimed node stays a's.
    second_world = first.next(make_workload("b2").ns("b").gpus(8).at(21.0), stopping=["b/b1"])
    second = second_world.run(now=21.0)
    assert second.admitted_ids() == set()
    assert second.decisions.evicted == ()
    assert second.reason("a/mine") is PendingReason.PREEMPTING
    assert "still stopping: b/b1" in second.message("a/mine")
    # Stopped now, and requeued at once (no backoff in this world): the claim is admitted,
    # on the node it was promised; neither the victim nor b2 takes it.
    third = second.next().run(now=22.0)
    assert third.admitted_ids() == {"a/mine"}
    assert third.admission("a/mine").pods_per_node == {"n-1": 1}
    assert third.decisions.evicted == ()


def test_a_claim_whose_room_is_gone_is_released() -> None:
    world = _lent().submit(make_workload("mine").ns("a").gpus(8).at(10.0))
    first = world.run(now=20.0)
    nxt = first.next()
    nxt.nodes = [n for n in nxt.nodes if n.name != "n-1"]  # the claimed node left
    nxt._config = None
    second = nxt.run(now=21.0)
    assert second.decisions.released_claims == ("a/mine",)
    assert "a/mine" not in second.admitted_ids()


@pytest.mark.parametrize(
    ("min_runtime", "now", "reclaims"),
    [
        pytest.param(0.0, 20.0, True, id="no-minimum"),
        pytest.param(60.0, 20.0, False, id="too-young"),
        pytest.param(60.0, 61.0, True, id="old-enough"),
    ],
)
def test_min_runtime_protects_young_runs_from_reclaim(
    min_runtime: float, now: float, reclaims: bool
) -> None:
    world = _lent(min_runtime=min_runtime).submit(make_workload("mine").ns("a").gpus(8).at(10.0))
    res = world.run(now=now)
    assert (res.evicted_ids() == {"b/b1"}) is reclaims
    if reclaims:
        assert res.decisions.evicted[0].reason is PreemptionReason.IN_COHORT_RECLAMATION


def test_min_runtime_does_not_protect_from_priority_within_the_queue() -> None:
    world = World().cq(
        make_cq("a").nominal(gpu=8, cpu="96").preempt(within="LowerPriority", min_runtime=3600)
    )
    world.node(make_nodes("n", 1))
    low = make_workload("low").ns("a").gpus(8).build()
    world.running(make_admitted(low, "a", "default", {"n-0": 1}, at=10.0))
    res = world.submit(make_workload("high").ns("a").gpus(8).priority(5)).run(now=11.0)
    assert res.evicted_ids() == {"a/low"}


def _two_queues_one_free_node() -> World:
    """a and b (nominal 8 each) share 16 GPUs; b borrows n-1; n-0 is free."""
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96"),
    )
    world.node(make_nodes("n", 2))
    return world


def test_in_nominal_demand_is_served_before_a_borrower_of_another_queue() -> None:
    # b (nominal 8) already runs 8: its next job would borrow. a's job is within nominal.
    # b's job was created first, yet a borrower goes second.
    world = _two_queues_one_free_node()
    held = make_workload("b0").ns("b").gpus(8).build()
    world.running(make_admitted(held, "b", "default", {"n-1": 1}))
    world.submit(make_workload("borrow").ns("b").gpus(8).at(1.0))
    world.submit(make_workload("mine").ns("a").gpus(8).at(5.0))
    res = world.run(now=10.0)
    assert res.admitted_ids() == {"a/mine"}
    assert res.decisions.evicted == ()
    assert res.reason("b/borrow") is PendingReason.COHORT_EXHAUSTED


def test_a_preempted_workload_does_not_borrow_while_in_nominal_demand_waits() -> None:
    # a's 2x8 gang is within a's nominal 24 but only n-2 is free; b's job that was preempted
    # before must not borrow n-2 meanwhile (a would reclaim it); one never preempted may.
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=24, cpu="288"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96"),
    )
    world.node(make_nodes("n", 3))
    b0 = make_workload("b0").ns("b").gpus(8).build()
    a0 = make_workload("a0").ns("a").gpus(8).build()
    world.running(make_admitted(b0, "b", "default", {"n-0": 1}))
    world.running(make_admitted(a0, "a", "default", {"n-1": 1}))
    again = make_workload("again").ns("b").gpus(8).at(1.0).build()
    world.submit(dataclasses.replace(again, evictions=1))
    world.submit(make_workload("pair").ns("a").gang(2).gpus(8).at(3.0))
    world.policy = SchedulerPolicy(reservation_depth=0)
    res = world.run(now=10.0)
    assert res.reason("a/pair") is PendingReason.NO_NODE_FITS
    assert res.reason("b/again") is PendingReason.NOMINAL_DEMAND_WAITING
    assert "cohort c" in res.message("b/again")
    fresh = world.submit(make_workload("fresh").ns("b").gpus(8).at(2.0)).run(now=10.0)
    assert fresh.admitted_ids() == {"b/fresh"}


@pytest.mark.parametrize(
    ("evictions", "b_nominal", "borrows"),
    [
        pytest.param(REPEAT_VICTIM - 1, 8, True, id="preempted-twice-borrows"),
        pytest.param(REPEAT_VICTIM, 8, False, id="preempted-three-times-waits-for-nominal"),
        pytest.param(REPEAT_VICTIM, 4, True, id="unless-its-nominal-could-never-hold-it"),
    ],
)
def test_a_workload_preempted_three_times_is_not_lent_quota_again(
    evictions: int, b_nominal: int, borrows: bool
) -> None:
    # b already runs its nominal quota; a lends an idle node. Nobody waits within nominal,
    # but a fourth loan would be the likeliest to be reclaimed a fourth time.
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=16, cpu="192"),
        make_cq("b").cohort("c").nominal(gpu=b_nominal, cpu="96"),
    )
    world.node(make_nodes("n", 2))
    held = make_workload("held").ns("b").gpus(b_nominal).build()
    world.running(make_admitted(held, "b", "default", {"n-0": 1}))
    again = make_workload("again").ns("b").gpus(8).at(1.0).build()
    world.submit(dataclasses.replace(again, evictions=evictions))
    res = world.run(now=10.0)
    assert (res.admitted_ids() == {"b/again"}) is borrows
    if not borrows:
        assert res.reason("b/again") is PendingReason.PREEMPTED_TOO_OFTEN
        assert "borrows no more" in res.message("b/again")


def _twice_then_three_times(twice: str, three_times: str) -> list[object]:
    """(evictions, whether it may still borrow): one short of REPEAT_VICTIM, then at it."""
    return [
        pytest.param(REPEAT_VICTIM - 1, True, id=twice),
        pytest.param(REPEAT_VICTIM, False, id=three_times),
    ]


@pytest.mark.parametrize(
    ("evictions", "eta"),
    [
        pytest.param(REPEAT_VICTIM - 1, 100.0, id="preempted-twice-plans-the-loan"),
        pytest.param(REPEAT_VICTIM, 1000.0, id="preempted-three-times-plans-its-nominal-quota"),
    ],
)
def test_a_workload_preempted_three_times_is_planned_within_its_nominal_quota(
    evictions: int, eta: float
) -> None:
    # b runs its nominal 8 until t=1000; a runs its own nominal 8 until t=100, so nothing
    # is lent and nothing may be reclaimed or taken by fair sharing. b's job could borrow
    # a's 8 at t=100, but a workload preempted 3 times borrows no more: a reservation
    # for that loan is one it could never use, and it would hold back everyone else's
    # backfill for nothing. Its reservation is its own queue's quota, at t=1000, which
    # keeps its queue's later work from taking that quota first.
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
    )
    world.node(make_nodes("n", 2))
    world.policy = SchedulerPolicy(reservation_depth=1)
    mine = make_workload("mine").ns("a").gpus(8).max_runtime(100.0).build()
    world.running(make_admitted(mine, "a", "default", {"n-1": 1}))
    held = make_workload("held").ns("b").gpus(8).max_runtime(1000.0).build()
    world.running(make_admitted(held, "b", "default", {"n-0": 1}))
    again = make_workload("again").ns("b").gpus(8).max_runtime(50.0).at(1.0).build()
    world.submit(dataclasses.replace(again, evictions=evictions))
    res = world.run(now=10.0)
    assert res.admitted_ids() == set()
    assert res.decisions.evicted == ()
    assert [r.start for r in res.decisions.reservations] == [eta]
    assert res.status("b/again").eta == eta
    if evictions < REPEAT_VICTIM:
        assert res.reason("b/again") is PendingReason.COHORT_EXHAUSTED
    else:
        assert res.reason("b/again") is PendingReason.PREEMPTED_TOO_OFTEN
        assert "borrows no more" in res.message("b/again")


@pytest.mark.parametrize(
    ("evictions", "takes"),
    _twice_then_three_times(
        "preempted-twice-may-take-a-loan", "preempted-three-times-evicts-nobody"
    ),
)
def test_a_workload_preempted_three_times_does_not_borrow_by_fair_sharing(
    evictions: int, takes: bool
) -> None:
    # The cohort is full: a borrows 16 on two loans, b runs its nominal 8. b's job would
    # borrow, and fair sharing may take a loan of a for it (a keeps a share of 8).
    world = lending_cohort(lender=16, a=0, b=8, fair=True, nodes=3)
    held = make_workload("held").ns("b").gpus(8).build()
    world.running(make_admitted(held, "b", "default", {"n-0": 1}))
    for i in (1, 2):
        loan = make_workload(f"loan{i}").ns("a").gpus(8).build()
        world.running(make_admitted(loan, "a", "default", {f"n-{i}": 1}, at=2.0))
    again = make_workload("again").ns("b").gpus(8).at(1.0).build()
    world.submit(dataclasses.replace(again, evictions=evictions))
    res = world.run(now=10.0)
    assert bool(res.decisions.evicted) is takes
    if not takes:
        assert res.reason("b/again") is PendingReason.PREEMPTED_TOO_OFTEN


@pytest.mark.parametrize(
    ("within", "low_first"),
    [
        pytest.param("LowerPriority", False, id="a-head-that-may-preempt-keeps-its-turn"),
        pytest.param("Never", True, id="one-that-may-not-lets-in-nominal-work-pass"),
    ],
)
def test_the_first_pass_keeps_a_queues_priority_order(within: str, low_first: bool) -> None:
    # q0 (nominal 8) may borrow q1's idle 8. `high` must borrow; `low` fits within nominal.
    # Admitting `low` first would only have `high` evict it in the next cycle.
    world = World().cq(
        make_cq("q0").cohort("c").nominal(gpu=8, cpu="96").preempt(within=within),
        make_cq("q1").cohort("c").nominal(gpu=8, cpu="96"),
    )
    world.node(make_nodes("n", 2))
    world.submit(make_workload("high").ns("q0").gang(2).gpus(8).priority(2))
    world.submit(make_workload("low").ns("q0").gpus(8).priority(0))
    res = world.run(now=0.0)
    assert res.order() == (["q0/low"] if low_first else ["q0/high"])
    assert res.decisions.evicted == ()
    if not low_first:
        assert res.next().run(now=1.0).decisions.evicted == ()
