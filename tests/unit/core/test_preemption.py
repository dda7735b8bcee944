"""Preemption: within a ClusterQueue by priority, and reclaiming lent quota in a cohort."""

from __future__ import annotations

import dataclasses

import pytest

from queuemgr.core.policy import PreemptorAdmission, SchedulerPolicy
from queuemgr.core.reasons import PreemptionReason
from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import admitted_requests
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload


def _full_queue(within: str, running_priority: int, running_at: float = 0.0) -> World:
    """One queue of 8 GPUs on one node, filled by two 4-GPU jobs of ``running_priority``."""
    w = World().cq(make_cq("a").nominal(gpu=8, cpu="96").preempt(within=within))
    w.node(make_nodes("n", 1))
    for i in range(2):
        job = (
            make_workload(f"low{i}")
            .ns("a")
            .gpus(4)
            .priority(running_priority)
            .at(running_at + i)
            .build()
        )
        w.running(make_admitted(job, "a", "default", {"n-0": 1}, at=10.0 + i))
    return w


@pytest.mark.parametrize(
    ("within", "running_priority", "evicts"),
    [
        pytest.param("Never", 0, False, id="never"),
        pytest.param("LowerPriority", 0, True, id="lower-priority-evicts"),
        pytest.param("LowerPriority", 10, False, id="equal-priority-is-safe"),
        pytest.param("LowerOrNewerEqualPriority", 10, True, id="newer-equal-evicts"),
    ],
)
@pytest.mark.parametrize(
    "admission",
    [pytest.param(p, id=p.value) for p in PreemptorAdmission],
)
def test_within_cluster_queue(
    within: str, running_priority: int, evicts: bool, admission: PreemptorAdmission
) -> None:
    # The preemptor is created at t=-1, before the running jobs (created at 0 and 1).
    world = _full_queue(within, running_priority).submit(
        make_workload("high").ns("a").gpus(4).priority(10).at(-1.0)
    )
    world.policy = SchedulerPolicy(preemptor_admission=admission)
    res = world.run()
    assert ("a/high" in res.admitted_once_victims_stop()) is evicts
    if evicts:
        # One victim suffices; the most recently admitted goes first.
        assert res.evicted_ids() == {"a/low1"}
        if admission is PreemptorAdmission.SAME_CYCLE:
            assert "a/high" not in res.decisions.pending  # admitted, so not also pending
        (e,) = res.decisions.evicted
        assert e.reason is PreemptionReason.IN_CLUSTER_QUEUE
        assert "a/high" in e.message
    else:
        assert res.decisions.evicted == ()
        assert res.reason("a/high") is PendingReason.QUOTA_EXCEEDED


def test_older_equal_priority_is_not_a_victim() -> None:
    world = _full_queue("LowerOrNewerEqualPriority", 10, running_at=0.0).submit(
        make_workload("late").ns("a").gpus(4).priority(10).at(50.0)
    )
    res = world.run()
    assert res.decisions.evicted == ()


def _lender_and_borrower(reclaim: str, borrower_priority: int) -> World:
    """a lends its idle 8 GPUs: b (nominal 8) runs 16 GPUs, 8 of them borrowed."""
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim=reclaim),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96"),
    )
    world.node(make_nodes("n", 2))
    for i in range(2):
        job = make_workload(f"b{i}").ns("b").gpus(8).priority(borrower_priority).at(i).build()
        world.running(make_admitted(job, "b", "default", {f"n-{i}": 1}, at=float(i)))
    return world


@pytest.mark.parametrize(
    ("reclaim", "borrower_priority", "reclaims"),
    [
        pytest.param("Never", 0, False, id="never"),
        pytest.param("Any", 100, True, id="any-reclaims-higher-priority"),
        pytest.param("LowerPriority", 0, True, id="lower-priority-reclaims"),
        pytest.param("LowerPriority", 100, False, id="lower-priority-spares-higher"),
    ],
)
@pytest.mark.parametrize(
    "admission",
    [pytest.param(p, id=p.value) for p in PreemptorAdmission],
)
def test_reclaim_within_cohort(
    reclaim: str, borrower_priority: int, reclaims: bool, admission: PreemptorAdmission
) -> None:
    world = _lender_and_borrower(reclaim, borrower_priority).submit(
        make_workload("mine").ns("a").gpus(8).priority(50).at(10.0)
    )
    world.policy = SchedulerPolicy(preemptor_admission=admission)
    res = world.run()
    assert ("a/mine" in res.admitted_once_victims_stop()) is reclaims
    if reclaims:
        # b borrows with b1 or b0; the most recently admitted one (b1) goes.
        assert res.evicted_ids() == {"b/b1"}
        assert res.decisions.evicted[0].reason is PreemptionReason.IN_COHORT_RECLAMATION
    else:
        assert res.evicted_ids() == set()


@pytest.mark.parametrize(
    ("big_at", "victim"),
    [
        pytest.param(500.0, "b/small", id="the-old-1-gpu-run-loses-less-than-8-gpus-since-500"),
        pytest.param(950.0, "b/big", id="8-gpus-since-950-lose-less-than-the-old-1-gpu-run"),
    ],
)
def test_reclaim_takes_the_run_that_loses_the_least_work(big_at: float, victim: str) -> None:
    # b borrows all it runs: 8 GPUs filling n-0 since big_at, and 1 GPU on n-1 since
    # t=100. a's 8-GPU job needs a whole node; either run's going makes one. At t=1000
    # the newest run is always the 8-GPU one, but it has done more work (GPUs x seconds)
    # than the old 1-GPU run unless it started less than 112.5 s ago.
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=16, cpu="192").preempt(reclaim="Any"),
        make_cq("b").cohort("c").nominal(gpu=0, cpu="96"),
    )
    world.node(make_nodes("n", 2))
    big = make_workload("big").ns("b").gpus(8).build()
    small = make_workload("small").ns("b").gpus(1).build()
    world.running(make_admitted(big, "b", "default", {"n-0": 1}, at=big_at))
    world.running(make_admitted(small, "b", "default", {"n-1": 1}, at=100.0))
    res = world.submit(make_workload("mine").ns("a").gpus(8).at(990.0)).run(now=1000.0)
    assert res.evicted_ids() == {victim}
    assert "a/mine" in res.admitted_once_victims_stop(now=1000.0)


def test_no_reclaim_beyond_the_preemptors_nominal() -> None:
    # a wants 16 GPUs: 8 above its nominal, so it may not take them back by force.
    world = _lender_and_borrower("Any", 0).submit(
        make_workload("big").ns("a").gpus(8).gang(2).at(10.0)
    )
    res = world.run()
    assert res.evicted_ids() == set()
    assert "a/big" not in res.admitted_ids()


def test_a_peer_within_its_nominal_is_never_reclaimed_from() -> None:
    # b runs exactly its nominal: nothing of a's is borrowed, so nothing is reclaimed.
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96"),
    )
    world.node(make_nodes("n", 1))
    job = make_workload("b0").ns("b").gpus(8).build()
    world.running(make_admitted(job, "b", "default", {"n-0": 1}))
    res = world.submit(make_workload("mine").ns("a").gpus(8).at(10.0)).run()
    assert res.evicted_ids() == set()


def test_victim_set_is_minimal() -> None:
    # Victims are tried lowest priority first: p0 (2 GPUs) alone cannot make room for
    # 6 GPUs, p1 (2 more) cannot either, p2 (4 GPUs) then suffices; pruning gives back
    # the ones the preemptor can do without.
    world = World().cq(make_cq("a").nominal(gpu=8, cpu="96").preempt(within="LowerPriority"))
    world.node(make_nodes("n", 1))
    for name, gpus, prio in (("p0", 2, 0), ("p1", 2, 1), ("p2", 4, 2)):
        job = make_workload(name).ns("a").gpus(gpus).priority(prio).build()
        world.running(make_admitted(job, "a", "default", {"n-0": 1}))
    res = world.submit(make_workload("high").ns("a").gpus(6).priority(10)).run()
    assert "a/high" in res.admitted_once_victims_stop()
    freed = sum(admitted_requests(e.victim)[GPU] for e in res.decisions.evicted)
    assert freed >= 6
    # Minimal: giving back any single victim would leave too little room.
    for e in res.decisions.evicted:
        assert freed - admitted_requests(e.victim)[GPU] < 6


def test_never_evicts_when_the_nodes_still_would_not_hold_the_gang() -> None:
    # Quota has room, but a 2x8 gang needs two whole nodes: a low-priority job sits
    # on n-0 and a high-priority one on n-1, so evicting the first would not help.
    world = World().cq(make_cq("a").nominal(gpu=24, cpu="288").preempt(within="LowerPriority"))
    world.node(make_nodes("n", 2))
    low = make_workload("low").ns("a").gpus(1).priority(0).build()
    keep = make_workload("keep").ns("a").gpus(1).priority(100).build()
    world.running(
        make_admitted(low, "a", "default", {"n-0": 1}),
        make_admitted(keep, "a", "default", {"n-1": 1}),
    )
    res = world.submit(make_workload("gang").ns("a").gang(2).gpus(8).priority(50)).run()
    assert res.decisions.evicted == ()
    assert res.reason("a/gang") is PendingReason.NO_NODE_FITS


def test_a_gang_victim_is_evicted_whole() -> None:
    world = World().cq(make_cq("a").nominal(gpu=16, cpu="192").preempt(within="LowerPriority"))
    world.node(make_nodes("n", 2))
    gang = make_workload("gang").ns("a").gang(2).gpus(8).priority(0).build()
    world.running(make_admitted(gang, "a", "default", {"n-0": 1, "n-1": 1}))
    res = world.submit(make_workload("high").ns("a").gpus(8).priority(10)).run()
    (e,) = res.decisions.evicted
    assert e.victim.workload.id == "a/gang"
    assert sum(p.count for p in e.victim.admission.placements) == 2


def test_after_victims_stop_the_preemptor_waits() -> None:
    world = _full_queue("LowerPriority", 0).submit(
        make_workload("high").ns("a").gpus(4).priority(10)
    )
    world.policy = SchedulerPolicy(preemptor_admission=PreemptorAdmission.AFTER_VICTIMS_STOP)
    res = world.run()
    assert res.evicted_ids() == {"a/low1"}
    assert "a/high" not in res.admitted_ids()
    assert res.reason("a/high") is PendingReason.PREEMPTING
    assert "a/low1" in res.message("a/high")


def test_a_waiting_preemptor_keeps_the_capacity_it_needs_for_the_rest_of_the_cycle() -> None:
    # a reclaims n-0 (8 GPUs): b2's 4 GPUs there plus the 4 still free. While a waits for
    # b2 to stop, b3 must not take the free half, or a would preempt b3 next (a ping-pong).
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96"),
    )
    world.node(make_nodes("n", 2))
    b1 = make_workload("b1").ns("b").gpus(8).at(1.0).build()
    b2 = make_workload("b2").ns("b").gpus(4).at(2.0).build()
    world.running(make_admitted(b1, "b", "default", {"n-1": 1}, at=1.0))
    world.running(make_admitted(b2, "b", "default", {"n-0": 1}, at=2.0))  # the newest goes first
    world.submit(make_workload("b3").ns("b").gpus(4).at(3.0))
    world.submit(make_workload("mine").ns("a").gpus(8).at(10.0))
    world.policy = SchedulerPolicy(preemptor_admission=PreemptorAdmission.AFTER_VICTIMS_STOP)
    res = world.run()
    assert res.evicted_ids() == {"b/b2"}
    assert res.reason("a/mine") is PendingReason.PREEMPTING
    assert res.admitted_ids() == set()  # b3 waits: the free half of n-0 is a's
    same_cycle = dataclasses.replace(
        world.policy, preemptor_admission=PreemptorAdmission.SAME_CYCLE
    )
    world.policy = same_cycle
    assert world.run().admitted_ids() == {"a/mine"}  # the same claim, admitted at once
