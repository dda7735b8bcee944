"""Partial admission: the largest count >= min_count that fits (docs/scheduling.md)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from queuemgr.core.model import PodSet
from queuemgr.core.partial import largest_fit, partial_pod_set, smallest, with_count
from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import admitted_requests
from queuemgr.core.verdicts import PendingReason
from tests.builders import Result, World, make_admitted, make_cq, make_flavor, make_nodes, resources
from tests.builders import make_workload as wl

R = PendingReason
SETTINGS = settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])


def pods_admitted(res: Result, wid: str) -> int:
    return sum(p.count for p in res.admission(wid).placements)


def busy_world(*, quota: int, nodes: int, busy_nodes: int) -> World:
    """``nodes`` 8-GPU nodes, the first ``busy_nodes`` of them full with one running job each."""
    world = World().node(make_nodes("n", nodes, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=quota))
    for i in range(busy_nodes):
        job = wl(f"busy{i}").ns("q").gpus(8).build()
        world.running(make_admitted(job, "q", "h100", {f"n-{i}": 1}))
    return world


@pytest.mark.parametrize(
    ("quota", "nodes", "busy", "count", "min_count", "admitted"),
    [
        # 32 GPUs of quota, 16 used: room for 2 of 4 pods (nodes would hold 6).
        pytest.param(32, 8, 2, 4, 1, 2, id="quota-bound"),
        # Quota for everything, 2 of 4 nodes free.
        pytest.param(1000, 4, 2, 4, 1, 2, id="node-bound"),
        pytest.param(1000, 4, 2, 4, 2, 2, id="exactly-min-count"),
        pytest.param(40, 8, 2, 8, 1, 3, id="quota-bound-odd"),
        pytest.param(1000, 8, 1, 16, 4, 7, id="node-bound-large"),
    ],
)
def test_admits_the_largest_count_that_fits(
    quota: int, nodes: int, busy: int, count: int, min_count: int, admitted: int
) -> None:
    world = busy_world(quota=quota, nodes=nodes, busy_nodes=busy)
    res = world.submit(wl("elastic").ns("q").gang(count).gpus(8).min_count(min_count)).run()
    assert pods_admitted(res, "q/elastic") == admitted
    (a,) = res.decisions.admitted
    assert a.partial and a.pods == {"main": admitted}
    assert admitted_requests(a)[GPU] == 8 * admitted


def test_the_full_count_is_admitted_whole_when_it_fits() -> None:
    world = busy_world(quota=1000, nodes=4, busy_nodes=0)
    res = world.submit(wl("elastic").ns("q").gang(4).gpus(8).min_count(1)).run()
    (a,) = res.decisions.admitted
    assert not a.partial and pods_admitted(res, "q/elastic") == 4


@pytest.mark.parametrize(
    ("quota", "nodes", "busy", "reason"),
    [
        pytest.param(32, 8, 2, R.QUOTA_EXCEEDED, id="quota-bound"),
        pytest.param(1000, 4, 2, R.NO_NODE_FITS, id="node-bound"),
    ],
)
def test_never_below_min_count(quota: int, nodes: int, busy: int, reason: PendingReason) -> None:
    world = busy_world(quota=quota, nodes=nodes, busy_nodes=busy)
    res = world.submit(wl("elastic").ns("q").gang(4).gpus(8).min_count(3)).run()
    assert res.admitted_ids() == set()
    assert res.reason("q/elastic") is reason


def test_a_later_cycle_charges_only_the_admitted_pods() -> None:
    world = busy_world(quota=48, nodes=8, busy_nodes=2)  # 16 used, 32 left
    res = world.submit(wl("elastic").ns("q").gang(6).gpus(8).min_count(2)).run()
    assert pods_admitted(res, "q/elastic") == 4  # 32 of quota left: 4 pods
    nxt = res.next(wl("more").ns("q").gpus(8).at(5), finished=["q/busy0"]).run()
    assert nxt.snapshot.usage["q"]["h100"][GPU] == 8 + 32  # type: ignore[index]
    # busy0 finished: 8 GPUs of quota are free again, and "more" takes them.
    assert nxt.admitted_ids() == {"q/more"}


def test_a_partial_admission_frees_only_what_it_held() -> None:
    world = busy_world(quota=1000, nodes=4, busy_nodes=2)
    res = world.submit(wl("elastic").ns("q").gang(4).gpus(8).min_count(1)).run()
    nxt = res.next(wl("next").ns("q").gang(2).gpus(8).at(5), finished=["q/elastic"]).run()
    assert nxt.admitted_ids() == {"q/next"}


def test_more_than_the_quota_could_ever_hold_is_not_inadmissible_if_min_count_fits() -> None:
    world = busy_world(quota=16, nodes=8, busy_nodes=0)
    res = world.submit(wl("elastic").ns("q").gang(8).gpus(8).min_count(1)).run()
    assert pods_admitted(res, "q/elastic") == 2


def test_inadmissible_when_even_min_count_could_never_fit() -> None:
    world = busy_world(quota=16, nodes=8, busy_nodes=0)
    res = world.submit(wl("elastic").ns("q").gang(8).gpus(8).min_count(3)).run()
    assert res.reason("q/elastic") is R.INADMISSIBLE


def test_the_whole_gang_on_a_later_flavor_beats_a_partial_one_on_the_first() -> None:
    world = World().node(make_nodes("a", 2, flavor="a100"), make_nodes("h", 4, flavor="h100"))
    world.cq(make_cq("q").flavor("a100").nominal(gpu=64).flavor("h100").nominal(gpu=64))
    res = world.submit(wl("elastic").ns("q").gang(4).gpus(8).min_count(1)).run()
    a = res.admission("q/elastic")
    assert a.flavor == "h100" and pods_admitted(res, "q/elastic") == 4


def test_only_the_partial_pod_set_shrinks() -> None:
    world = busy_world(quota=1000, nodes=4, busy_nodes=1)  # 3 nodes free
    world.submit(
        wl("job").ns("q").pod_set("launcher", 1, gpu=8).min_count(1).pod_set("workers", 4, gpu=8)
    )
    # min_count applies to the pod set declared right after it: "workers".
    res = world.run()
    (a,) = res.decisions.admitted
    assert a.pods == {"launcher": 1, "workers": 2}


def test_partial_admissions_go_in_queue_order() -> None:
    world = busy_world(quota=32, nodes=8, busy_nodes=0)
    res = world.submit(
        wl("first").ns("q").gang(3).gpus(8).min_count(1).at(1),
        wl("second").ns("q").gang(3).gpus(8).min_count(1).at(2),
    ).run()
    assert pods_admitted(res, "q/first") == 3
    assert pods_admitted(res, "q/second") == 1


# -- the pieces -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "fits_up_to", "expected"),
    [
        pytest.param(1, 10, 7, 7, id="middle"),
        pytest.param(1, 10, 10, 10, id="top"),
        pytest.param(3, 10, 3, 3, id="bottom"),
        pytest.param(3, 10, 2, None, id="below-low"),
        pytest.param(5, 4, 9, None, id="empty-range"),
        pytest.param(1, 1000, 613, 613, id="large"),
    ],
)
def test_largest_fit(low: int, high: int, fits_up_to: int, expected: int | None) -> None:
    tried: list[int] = []

    def attempt(k: int) -> str | None:
        tried.append(k)
        return f"k={k}" if k <= fits_up_to else None

    found = largest_fit(low, high, attempt)
    assert (found[0] if found else None) == expected
    if found is not None:
        assert found[1] == f"k={found[0]}"
    assert len(tried) <= 2 + max(1, high - low + 1).bit_length()


def test_with_count_and_smallest() -> None:
    w = wl("j").gang(6).gpus(8).min_count(2).build()
    ps = partial_pod_set(w)
    assert ps is not None and ps.name == "main"
    low = smallest(w)
    assert low is not None and low.id == w.id and low.total_requests[GPU] == 16
    assert partial_pod_set(low) is None
    assert with_count(w, "main", 5).total_requests[GPU] == 40
    assert smallest(wl("k").gang(2).gpus(8).build()) is None
    # min_count == count: nothing may shrink.
    assert smallest(wl("m").gang(2).gpus(8).min_count(2).build()) is None


def test_min_count_is_part_of_the_shape() -> None:
    shapes = {wl("a").gang(4).gpus(8).min_count(m).build().shape for m in (None, 1, 2)}
    assert len(shapes) == 3


@pytest.mark.parametrize("bad", [0, 5])
def test_min_count_must_be_within_one_and_count(bad: int) -> None:
    with pytest.raises(ValueError, match="min_count"):
        PodSet(name="w", count=4, requests=resources(gpu=1), min_count=bad)


def test_only_one_pod_set_may_be_partial() -> None:
    with pytest.raises(ValueError, match="only one pod set"):
        wl("j").min_count(1).pod_set("a", 2, gpu=1).min_count(1).pod_set("b", 2, gpu=1).build()


# -- properties -----------------------------------------------------------------


@st.composite
def elastic_worlds(draw: st.DrawFn) -> World:
    world = World().flavor(make_flavor("h100"))
    for i in range(draw(st.integers(1, 6))):
        world.node(make_nodes(f"n{i}", 1, flavor="h100", gpu=draw(st.sampled_from([4, 8]))))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=draw(st.sampled_from([8, 16, 24, 1000]))))
    for j in range(draw(st.integers(1, 6))):
        count = draw(st.integers(1, 8))
        b = wl(f"w{j}").ns("q").at(j).gang(count).gpus(draw(st.sampled_from([1, 2, 4, 8])))
        if draw(st.booleans()):
            b = b.min_count(draw(st.integers(1, count)))
        world.submit(b)
    return world


def _check(world: World, res: Result) -> None:
    used: dict[str, int] = {}
    total = 0
    for a in [*res.snapshot.admitted.values(), *res.decisions.admitted]:
        per_pod = a.workload.pod_sets[0].requests[GPU]
        for p in a.admission.placements:
            used[p.node] = used.get(p.node, 0) + p.count * per_pod
        total += admitted_requests(a)[GPU]
    for node in world.nodes:
        assert used.get(node.name, 0) <= node.allocatable[GPU]
    assert total <= world.cqs[0].flavors[0].nominal[GPU]
    for a in res.decisions.admitted:
        ps = a.workload.pod_sets[0]
        placed = sum(p.count for p in a.admission.placements)
        low = ps.count if ps.min_count is None else ps.min_count
        assert low <= placed <= ps.count
        if placed < ps.count:
            event("partial admission")


@SETTINGS
@given(elastic_worlds(), st.integers(1, 3))
def test_partial_admissions_stay_within_min_count_and_count(world: World, cycles: int) -> None:
    res = world.run()
    _check(world, res)
    for _ in range(cycles - 1):
        res = res.next().run()
        _check(world, res)


@SETTINGS
@given(elastic_worlds())
def test_a_partial_admission_is_the_largest_that_fits(world: World) -> None:
    # With one elastic workload alone, no count above the admitted one would fit.
    w = next((w for w in world.pending if w.pod_sets[0].min_count is not None), None)
    assume(w is not None)
    assert w is not None
    world.pending = [w]
    res = world.run()
    ps = w.pod_sets[0]
    if not res.decisions.admitted:
        return
    placed = sum(p.count for p in res.decisions.admitted[0].admission.placements)
    if placed < ps.count:
        event("partial admission")
        bigger = World()
        bigger.flavors, bigger.cqs, bigger.nodes = world.flavors, world.cqs, world.nodes
        bigger.submit(with_count(w, ps.name, placed + 1))
        assert bigger.run().admitted_ids() == set()
