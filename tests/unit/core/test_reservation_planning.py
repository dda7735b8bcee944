"""Reservation planning: placing around reserved nodes, later reservations around earlier
ones, and the incremental pod count agreeing with the placer node for node."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuemgr.core.model import ClusterQueueName, FlavorName, NodeName, PodSet
from queuemgr.core.node_topology import build_free_index
from queuemgr.core.placement import NodePool
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.timeline import PodCounter
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload


def _reserved_nodes_are_the_best_fit(extra_used: int = 4) -> World:
    """n-0 and n-1 have 2 GPUs free until t=100, then 8: the gang's reserved nodes.

    extra-0 has ``8 - extra_used`` free for ever (its job declares no max_runtime), so
    best fit puts a 2-GPU job on n-0 first, which the gang needs whole at t=100.
    """
    world = World().cq(make_cq("q").nominal(gpu=40, cpu="400"))
    world.node(make_nodes("n", 2), make_nodes("extra", 1))
    for i in range(2):
        job = make_workload(f"run{i}").ns("q").gpus(6).max_runtime(100.0).at(-5.0 + i).build()
        world.running(make_admitted(job, "q", "default", {f"n-{i}": 1}, at=0.0))
    forever = make_workload("forever").ns("q").gpus(extra_used).at(-1.0).build()
    world.running(make_admitted(forever, "q", "default", {"extra-0": 1}, at=0.0))
    world.submit(make_workload("gang").ns("q").gang(2).gpus(8).max_runtime(50.0).at(1.0))
    world.policy = SchedulerPolicy(reservation_depth=1)
    return world


@pytest.mark.parametrize(
    ("extra_used", "limit", "where"),
    [
        pytest.param(4, None, {"extra-0": 1}, id="no-limit-goes-around-the-reserved-nodes"),
        pytest.param(4, 1000.0, {"extra-0": 1}, id="long-limit-goes-around"),
        pytest.param(4, 50.0, {"n-0": 1}, id="ends-before-the-start-keeps-its-best-fit"),
        pytest.param(8, None, None, id="no-room-around-waits"),
    ],
)
def test_a_job_refused_on_reserved_nodes_is_placed_around_them(
    extra_used: int, limit: float | None, where: dict[str, int] | None
) -> None:
    world = _reserved_nodes_are_the_best_fit(extra_used)
    world.submit(make_workload("small").ns("q").gpus(2).max_runtime(limit).at(2.0))
    res = world.run(now=10.0)
    (r,) = res.decisions.reservations
    assert r.start == 100.0 and {p.node for p in r.placements} == {"n-0", "n-1"}
    if where is None:
        assert res.reason("q/small") is PendingReason.WAITING_FOR_RESERVATION
    else:
        assert res.admission("q/small").pods_per_node == where


def _two_gangs(depth: int) -> World:
    """n-0 frees at t=100, n-1 at t=200; gang a (1x8, 1000 s) then gang b (2x8)."""
    world = World().cq(make_cq("q").nominal(gpu=40, cpu="400"))
    world.node(make_nodes("n", 2))
    for i, end in enumerate((100.0, 200.0)):
        job = make_workload(f"run{i}").ns("q").gpus(8).max_runtime(end).at(-5.0 + i).build()
        world.running(make_admitted(job, "q", "default", {f"n-{i}": 1}, at=0.0))
    world.submit(
        make_workload("a").ns("q").gpus(8).max_runtime(1000.0).at(1.0),
        make_workload("b").ns("q").gang(2).gpus(8).max_runtime(50.0).at(2.0),
    )
    world.policy = SchedulerPolicy(reservation_depth=depth)
    return world


@pytest.mark.parametrize(
    ("depth", "starts"),
    [
        pytest.param(1, {"q/a": 100.0}, id="depth-1-reserves-for-the-first"),
        # b needs both nodes; a holds n-0 from t=100 to t=1100, so b reserves t=1100,
        # not t=200 when both nodes would be free if a did not exist.
        pytest.param(2, {"q/a": 100.0, "q/b": 1100.0}, id="the-second-plans-around-the-first"),
    ],
)
def test_later_reservations_plan_around_earlier_ones(depth: int, starts: dict[str, float]) -> None:
    res = _two_gangs(depth).run(now=10.0)
    assert {r.workload: r.start for r in res.decisions.reservations} == starts
    assert res.status("q/a").eta == 100.0
    # The ETA alone, without counting positions, is the status's.
    for w in res.world.pending:
        eta = res.decisions.pending.eta_of(w, ClusterQueueName("q"))
        assert eta == res.status(w.id).eta


def test_a_reserved_gang_without_max_runtime_holds_its_nodes_for_good() -> None:
    world = _two_gangs(2)
    world.pending[0] = dataclasses.replace(world.pending[0], max_runtime=None)
    res = world.run(now=10.0)
    (a, b) = res.decisions.reservations
    assert a.start == 100.0
    assert b.start is None  # it needs n-0, which a holds with no declared end


# -- PodCounter agrees with the placer ----------------------------------------------------


@st.composite
def _pools(draw: st.DrawFn) -> tuple[World, dict[NodeName, dict[ResourceName, int]], PodSet]:
    world = World()
    sizes = draw(st.lists(st.sampled_from([4, 8]), min_size=1, max_size=6))
    for i, gpu in enumerate(sizes):
        rack = {"rack": f"r{i % 2}"}
        world.node(make_nodes(f"n{i}", draw(st.integers(1, 3)), gpu=gpu, labels=rack))
    free: dict[NodeName, dict[ResourceName, int]] = {}
    for node in world.nodes:
        vec = dict(node.allocatable)
        vec[GPU] = draw(st.integers(-2, vec[GPU]))  # overlays may go below zero
        free[node.name] = vec
    selector = draw(st.sampled_from([{}, {"rack": "r0"}]))
    ps = PodSet(
        name="p",
        count=draw(st.integers(1, 12)),
        requests={GPU: draw(st.sampled_from([1, 2, 4, 8]))},
        node_selector=selector,
    )
    return world, free, ps


def _counter_and_pool(
    case: tuple[World, dict[NodeName, dict[ResourceName, int]], PodSet], indexed: bool
) -> tuple[World, PodSet, PodCounter, NodePool]:
    """The pod counter of ``case``'s gang on its free capacity, and a placer on the same."""
    world, free, ps = case
    topo = world.config().node_topology
    index = build_free_index(topo, free) if indexed else None
    snap = dataclasses.replace(world.snapshot(), node_free=free, node_index=index)
    counter = PodCounter.of(snap, FlavorName("default"), (ps,))
    assert counter is not None
    return world, ps, counter, NodePool(topo, free, index)


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_pools(), st.booleans())
def test_the_pod_count_and_its_placement_match_the_placer(
    case: tuple[World, dict[NodeName, dict[ResourceName, int]], PodSet], indexed: bool
) -> None:
    _world, ps, counter, pool = _counter_and_pool(case, indexed)
    placed = pool.place(FlavorName("default"), (ps,))
    assert counter.enough() is (placed is not None)
    assert counter.placement() == placed


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_pools(), st.booleans(), st.data())
def test_the_pod_count_follows_changes_as_the_placer_does(
    case: tuple[World, dict[NodeName, dict[ResourceName, int]], PodSet],
    indexed: bool,
    data: st.DataObject,
) -> None:
    """Runs taken and given back in batches (several on one node among them) leave the
    counter where a pool that took and gave back the same runs places the gang."""
    world, ps, counter, pool = _counter_and_pool(case, indexed)
    flavor = FlavorName("default")
    names = [node.name for node in world.nodes]
    for batch in range(data.draw(st.integers(1, 3))):
        runs = [
            make_admitted(
                make_workload(f"r{batch}-{i}").gpus(data.draw(st.sampled_from([1, 2]))).build(),
                "q",
                "default",
                {data.draw(st.sampled_from(names)): data.draw(st.integers(1, 2))},
            )
            for i in range(data.draw(st.integers(0, 4)))
        ]
        sign = data.draw(st.sampled_from([1, -1]))
        counter.change(runs, sign)
        for a in runs:
            (pool.take if sign > 0 else pool.release)(a.admission.placements, a.workload.pod_sets)
        placed = pool.place(flavor, (ps,))
        assert counter.enough() is (placed is not None)
        assert counter.placement() == placed
