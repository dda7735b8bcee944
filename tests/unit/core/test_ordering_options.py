"""``ordering`` on a ClusterQueue or a cohort, falling back to the global knob."""

from __future__ import annotations

import dataclasses

import pytest

from queuemgr.core.cycle import schedule
from queuemgr.core.model import Cohort, CohortName, Ordering
from queuemgr.core.policy import SchedulerPolicy
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload

FIFO, USAGE = Ordering.FIFO, Ordering.USAGE


def _with(world: World, cohort: Ordering | None, queues: dict[str, Ordering | None]) -> World:
    world.cohorts = [Cohort(name=CohortName("c"), ordering=cohort)]
    world.cqs = [dataclasses.replace(q, ordering=queues.get(q.name)) for q in world.cqs]
    return world


@pytest.mark.parametrize(
    ("default", "cohort", "queue", "first"),
    [
        pytest.param(FIFO, None, None, "tenant-a", id="global-fifo"),
        pytest.param(USAGE, None, None, "tenant-b", id="global-usage"),
        pytest.param(FIFO, USAGE, None, "tenant-b", id="cohort-usage-over-global-fifo"),
        pytest.param(USAGE, FIFO, None, "tenant-a", id="cohort-fifo-over-global-usage"),
        pytest.param(FIFO, USAGE, FIFO, "tenant-a", id="queue-fifo-over-cohort-usage"),
        pytest.param(FIFO, None, USAGE, "tenant-b", id="queue-usage-over-global-fifo"),
    ],
)
def test_ordering_within_a_queue_falls_back_queue_cohort_global(
    default: Ordering, cohort: Ordering | None, queue: Ordering | None, first: str
) -> None:
    world = World().cq(make_cq("shared").cohort("c").nominal(gpu=4, cpu="48"))
    world.lq("tenant-a", "default", "shared").lq("tenant-b", "default", "shared")
    world.node(make_nodes("n", 1, gpu=4))
    for ns in ("tenant-a", "tenant-b"):
        world.submit(*(make_workload(f"j{i}").ns(ns).gpus(1).at(5.0) for i in range(4)))
    world.policy = SchedulerPolicy(ordering=default, reservation_depth=0)
    _with(world, cohort, {"shared": queue})
    snap = dataclasses.replace(world.snapshot(), queue_usage={("tenant-a", "default"): 100.0})
    decided = schedule(snap, 10.0)
    assert {a.workload.namespace for a in decided.admitted} == {first}


@pytest.mark.parametrize(
    ("default", "cohort", "queues", "winner"),
    [
        # Equal dominant shares: the earlier creation (y's) wins under fifo.
        pytest.param(FIFO, None, {}, "y", id="global-fifo-by-share"),
        pytest.param(USAGE, None, {}, "x", id="global-usage-by-decayed-usage"),
        pytest.param(FIFO, USAGE, {}, "x", id="cohort-usage"),
        pytest.param(USAGE, FIFO, {}, "y", id="cohort-fifo-over-global-usage"),
        # A queue's own ordering orders its own workloads, not the cohort's borrowers.
        pytest.param(FIFO, None, {"x": USAGE, "y": USAGE}, "y", id="queue-usage-not-across"),
    ],
)
def test_ordering_among_a_cohorts_borrowers(
    default: Ordering, cohort: Ordering | None, queues: dict[str, Ordering | None], winner: str
) -> None:
    world = World().cq(
        make_cq("x").cohort("c").nominal(gpu=1, cpu="48"),
        make_cq("y").cohort("c").nominal(gpu=1, cpu="48"),
        make_cq("lender").cohort("c").nominal(gpu=2, cpu="48"),
    )
    world.node(make_nodes("n", 1, gpu=3))  # one GPU left once x and y hold their nominal
    for q in ("x", "y"):
        job = make_workload(f"{q}-run").ns(q).gpus(1).at(0.0).build()
        world.running(make_admitted(job, q, "default", {"n-0": 1}))
    world.submit(
        make_workload("late").ns("x").gpus(1).at(2.0),
        make_workload("early").ns("y").gpus(1).at(1.0),
    )
    world.policy = SchedulerPolicy(ordering=default, reservation_depth=0)
    _with(world, cohort, queues)
    usage = {("x", "default"): 1.0, ("y", "default"): 50.0}
    decided = schedule(dataclasses.replace(world.snapshot(), queue_usage=usage), 10.0)
    assert [a.admission.cluster_queue for a in decided.admitted] == [winner]
