"""ETAs worked out per side and shared (core.eta) equal the planner's start, pair by pair."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from queuemgr.core.cache import Cache
from queuemgr.core.cycle import Cycle
from queuemgr.core.eta import Etas
from queuemgr.core.model import Cohort, CohortName, WorkloadId
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.reservations import Planner
from queuemgr.core.snapshot import Snapshot
from queuemgr.sim.engine import Engine
from tests import worlds
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload


def _compare(snapshot: Snapshot, now: float) -> int:
    """Assert every pending pair's ETA equals ``Planner.reserve``'s start; count the pairs."""
    cycle = Cycle(snapshot, now)
    cycle.run()
    evicted = {e.victim.workload.id: e.victim for e in cycle.evictions}
    planner = cycle.backfill.planner
    etas = Etas(planner, snapshot, cycle.planned, evicted, now)
    admitted = {a.workload.id for a in cycle.admitted}
    pairs = 0
    for name, queue in sorted(snapshot.pending.items()):
        cq = snapshot.config.cluster_queues[name]
        for run in queue.runs.values():
            for w in run:
                if w.id in admitted:
                    continue
                plan = planner.reserve(cq, w, admitted_now=cycle.planned, evicted=evicted, now=now)
                assert etas.start(cq, w) == plan.start, (now, w.id)
                pairs += 1
    return pairs


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(worlds.specs())
def test_every_eta_is_the_planners_start_on_random_worlds(spec: worlds.Spec) -> None:
    config, jobs = worlds.build(spec)
    seen: list[tuple[float, Snapshot]] = []
    engine = Engine(config, jobs, policy=SchedulerPolicy(reservation_depth=1))
    engine.observer = lambda now, snap, _decided, _took: seen.append((now, snap))
    engine.run()
    for now, snap in seen:
        _compare(snap, now)


def _two_cohorts_and_a_lone_queue() -> World:
    """Cohorts x (a, b) and y (c), and d alone; runs ending at 100, 200, 300 and never."""
    world = World().cq(
        make_cq("a").cohort("x").nominal(gpu=8, cpu="96"),
        make_cq("b").cohort("x").nominal(gpu=8, cpu="96").borrowing_max_runtime(150.0),
        make_cq("c").cohort("y").nominal(gpu=16, cpu="192"),
        make_cq("d").nominal(gpu=8, cpu="96"),
    )
    world.cohorts = [Cohort(name=CohortName("x")), Cohort(name=CohortName("y"))]
    world.node(make_nodes("n", 5))
    runs = [("a", 16, 100.0, "n-0"), ("c", 8, 200.0, "n-2"), ("d", 8, 300.0, "n-3")]
    for i, (q, gpus, limit, node) in enumerate(runs):
        job = make_workload(f"run{i}").ns(q).gang(gpus // 8).gpus(8).max_runtime(limit)
        placed = {node: 1} if gpus == 8 else {"n-0": 1, "n-1": 1}
        world.running(make_admitted(job.build(), q, "default", placed, at=0.0))
    forever = make_workload("forever").ns("c").gpus(8).build()
    world.running(make_admitted(forever, "c", "default", {"n-4": 1}, at=0.0))
    return world


@pytest.mark.parametrize(
    ("queue", "gpus", "limit", "eta"),
    [
        pytest.param("b", 8, None, 100.0, id="within-nominal-once-its-cohort-peer-ends"),
        pytest.param("b", 16, 100.0, 100.0, id="a-loan-once-its-cohort-peer-ends"),
        pytest.param("b", 16, 1000.0, None, id="no-loan-beyond-its-queues-limit"),
        pytest.param("c", 8, None, 200.0, id="another-cohorts-releases-do-not-count"),
        pytest.param("d", 8, None, 300.0, id="a-queue-of-no-cohort-waits-for-its-own"),
        pytest.param("a", 24, None, None, id="never-within-a-cohorts-quota"),
    ],
)
def test_etas_count_only_the_releases_of_the_queues_own_pool(
    queue: str, gpus: int, limit: float | None, eta: float | None
) -> None:
    world = _two_cohorts_and_a_lone_queue()
    world.submit(make_workload("w").ns(queue).gang(gpus // 8).gpus(8).max_runtime(limit))
    world.policy = SchedulerPolicy(reservation_depth=0)
    snapshot = world.snapshot()
    assert _compare(snapshot, 10.0) == 1
    cycle = Cycle(snapshot, 10.0)
    cycle.run()
    etas = Etas(cycle.backfill.planner, snapshot, cycle.planned, {}, 10.0)
    (w,) = (w for q in snapshot.pending.values() for run in q.runs.values() for w in run)
    assert etas.start(snapshot.config.cluster_queues[queue], w) == eta


def test_a_shape_that_may_borrow_and_one_that_may_not_get_their_own_etas() -> None:
    # b lends only to runs of at most 150 s: of two gangs of one shape, the one declaring
    # 100 s may borrow a's 8 once a's run ends; the one declaring 1,000 s never fits.
    world = _two_cohorts_and_a_lone_queue()
    short = make_workload("short").ns("b").gang(2).gpus(8).max_runtime(100.0).at(1.0).build()
    long = make_workload("long").ns("b").gang(2).gpus(8).max_runtime(1000.0).at(2.0).build()
    world.submit(short, long)
    world.policy = SchedulerPolicy(reservation_depth=0)
    snapshot = world.snapshot()
    cycle = Cycle(snapshot, 10.0)
    cycle.run()
    etas = Etas(cycle.backfill.planner, snapshot, cycle.planned, {}, 10.0)
    b = snapshot.config.cluster_queues["b"]
    assert short.shape == long.shape
    assert (etas.start(b, short), etas.start(b, long)) == (100.0, None)


def test_answers_are_carried_while_what_they_depend_on_stands() -> None:
    """The node side while nothing changed; the quota side per cohort, while its runs stand."""
    world = _two_cohorts_and_a_lone_queue()
    world.submit(make_workload("w").ns("b").gpus(8))
    cache = Cache(world.config())
    for a in world.admitted:
        cache.add_admitted(a)
    for w in world.pending:
        cache.add_pending(w)
    b = world.config().cluster_queues["b"]
    (w,) = world.pending
    x = (CohortName("x"), None, "default")  # b's pool: cohort x's quota on its flavor

    def etas(now: float) -> Etas:
        snapshot = cache.snapshot()
        made = Etas(Planner(snapshot), snapshot, (), {}, now)
        fresh = dataclasses.replace(snapshot, memo=None)
        assert made.start(b, w) == Etas(Planner(fresh), fresh, (), {}, now).start(b, w)
        return made

    first = etas(10.0)
    assert first.start(b, w) == 100.0  # once a's run ends
    nodes, answers = first._nodes, first._memo.pools[x]
    quiet = etas(20.0)  # nothing admitted or released in between
    assert quiet._nodes is nodes and quiet._memo.pools[x] is answers
    cache.add_pending(make_workload("later").ns("c").gpus(8).build())  # pending only
    assert etas(30.0)._nodes is nodes
    cache.remove_admitted(WorkloadId("c/run1"))  # a release in cohort y: x's runs stand
    released = etas(40.0)
    assert released._nodes is not nodes and released._memo.pools[x] is answers
    # a's run (cohort x) passes its declared end: it holds x's quota for ever now
    assert etas(150.0)._memo.pools[x] is not answers
