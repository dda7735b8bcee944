"""The ETA error: the first ETA a workload was given against when it started."""

from __future__ import annotations

from queuemgr.controller.eta import EtaTracker
from queuemgr.core.cycle import schedule
from queuemgr.core.model import ClusterQueueName, WorkloadId
from queuemgr.core.reasons import Decisions
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload


def _world() -> World:
    # One 8-GPU node held until t=100 by a job with a declared runtime.
    world = World().cq(make_cq("a").nominal(gpu=8, cpu="96"))
    world.node(make_nodes("n", 1))
    running = make_workload("r").ns("a").gpus(8).max_runtime(100).build()
    world.running(make_admitted(running, "a", "default", {"n-0": 1}, at=0.0))
    return world


def _etas(decisions: Decisions) -> dict[ClusterQueueName | None, dict[WorkloadId, float | None]]:
    """Every pending workload's ETA by queue, as the status board hands them to the tracker."""
    return {
        s.cluster_queue: {row[0]: row[4] for row in s.rows} for s in decisions.pending.by_queue()
    }


A = [ClusterQueueName("a")]


def test_the_first_eta_is_measured_against_the_actual_start() -> None:
    world = _world().submit(make_workload("w").ns("a").gpus(8).at(1.0))
    tracker = EtaTracker()
    snapshot = world.snapshot()
    first = schedule(snapshot, 10.0)
    assert tracker.observe(first.admitted, _etas(first), A, 10.0) == []
    assert first.pending["a/w"].eta == 100.0
    # A later cycle's better ETA does not replace what the tenant was first told.
    tracker.observe((), {ClusterQueueName("a"): {WorkloadId("a/w"): 60.0}}, A, 50.0)
    # The running job ends late; w starts at 130: 30 s after its ETA.
    late = World().cq(make_cq("a").nominal(gpu=8, cpu="96"))
    late.node(make_nodes("n", 1))
    late.submit(make_workload("w").ns("a").gpus(8).at(1.0))
    started = schedule(late.snapshot(), 130.0)
    assert [a.workload.id for a in started.admitted] == ["a/w"]
    assert tracker.observe(started.admitted, _etas(started), A, 130.0) == [(100.0, 130.0)]
    assert len(tracker) == 0


def test_unknown_etas_and_vanished_workloads_are_not_measured() -> None:
    world = World().cq(make_cq("a").nominal(gpu=8, cpu="96"))
    world.node(make_nodes("n", 1))
    forever = make_workload("r").ns("a").gpus(8).max_runtime(None).build()
    world.running(make_admitted(forever, "a", "default", {"n-0": 1}))
    world.submit(make_workload("w").ns("a").gpus(8).at(1.0))
    decisions = schedule(world.snapshot(), 10.0)
    assert decisions.pending["a/w"].eta is None
    tracker = EtaTracker()
    tracker.observe(decisions.admitted, _etas(decisions), A, 10.0)
    assert len(tracker) == 1
    tracker.observe((), {ClusterQueueName("a"): {}}, A, 20.0)  # cancelled meanwhile
    assert len(tracker) == 0


def test_an_eta_due_now_is_measured_from_the_cycle_that_gave_it() -> None:
    # The board hands an ETA at or before the cycle's time as 0.0 ("now"); the tracker
    # records the time of that cycle, so a start 5 s later is 5 s off, not 55 s.
    tracker = EtaTracker()
    wid = WorkloadId("a/w")
    tracker.observe((), {ClusterQueueName("a"): {wid: 0.0}}, A, 50.0)
    running = make_admitted(make_workload("w").ns("a").gpus(8).build(), "a", "default", {"n-0": 1})
    assert tracker.observe([running], {ClusterQueueName("a"): {}}, A, 55.0) == [(50.0, 55.0)]
