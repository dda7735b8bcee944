"""Pending statuses answer verdict and ETA lookups without counting every position."""

from __future__ import annotations

from queuemgr.core.cycle import schedule
from queuemgr.core.model import WorkloadId
from tests.builders import World, make_admitted, make_cq, make_nodes
from tests.builders import make_workload as wl


def _world() -> World:
    world = World().node(make_nodes("n", 2, flavor="h100"))
    world.cq(make_cq("a").flavor("h100").nominal(gpu=8))
    world.cq(make_cq("b").flavor("h100").nominal(gpu=8))
    running = wl("running").ns("a").gpus(8).max_runtime(3600).build()
    world.running(make_admitted(running, "a", "h100", {"n-0": 1}))
    return world.submit(
        wl("fits").ns("b").gpus(4).at(1),
        wl("waits").ns("a").gpus(4).max_runtime(60).at(2),
        wl("too-big").ns("b").gang(4).gpus(8).at(3),
        wl("lost").ns("nowhere").gpus(1).at(4),  # no LocalQueue: unroutable
        wl("later").ns("a").gpus(1).max_runtime(60).at(5),
    )


IDS = [WorkloadId(w) for w in ("a/waits", "b/too-big", "nowhere/lost", "a/later")]


def test_lookups_before_and_after_counting_positions_agree() -> None:
    world = _world()
    snap = world.snapshot()
    lazy = schedule(snap, 100.0).pending  # nothing counted yet
    counted = schedule(snap, 100.0).pending
    assert set(counted) == set(IDS)  # iterating counts every position
    for wid in IDS:
        assert wid in lazy and wid in counted
        full = counted[wid]
        assert lazy.verdict(wid).reason is full.reason
        assert lazy.verdict(wid).message == full.message
        assert lazy.eta_by_id(wid) == full.eta
        assert counted.eta_by_id(wid) == full.eta


def test_admitted_workloads_are_not_pending() -> None:
    decisions = schedule(_world().snapshot(), 100.0)
    assert WorkloadId("b/fits") in decisions.admitted_ids()
    assert WorkloadId("b/fits") not in decisions.pending
    assert WorkloadId("a/running") not in decisions.pending


def test_membership_and_verdicts_do_not_count_positions() -> None:
    pending = schedule(_world().snapshot(), 100.0).pending
    for wid in IDS:
        assert wid in pending
        pending.verdict(wid)
        pending.eta_by_id(wid)
    # Counting ranks every queue: O(pending log pending), paid only when positions are read.
    assert pending._index is None
    assert pending["a/later"].position_in_local_queue == 2
    assert pending._index is not None
