"""Topology-aware gang placement: required and preferred label domains (docs/scheduling.md)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from queuemgr.core.domain_rules import DomainChoice, DomainRule
from queuemgr.core.domains import plan_domains
from queuemgr.core.model import Admission, FlavorName, Node, NodeName, PodSet
from queuemgr.core.node_topology import NodeTopology
from queuemgr.core.placement import NodePool
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.resources import GPU
from queuemgr.core.verdicts import PendingReason
from tests.builders import (
    Result,
    World,
    make_admitted,
    make_cq,
    make_flavor,
    make_nodes,
    resources,
)
from tests.builders import make_workload as wl

R = PendingReason
SETTINGS = settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])


def racks(sizes: Mapping[str, int], *, gpu: int = 8) -> list[Node]:
    """``sizes[rack]`` 8-GPU nodes per rack, named ``<rack>-<i>``, labelled ``rack=<rack>``."""
    out: list[Node] = []
    for rack, n in sizes.items():
        out.extend(make_nodes(rack, n, flavor="h100", gpu=gpu, labels={"rack": rack}))
    return out


def world_of(nodes: list[Node], quota: int = 1000) -> World:
    return World().node(nodes).cq(make_cq("q").flavor("h100").nominal(gpu=quota))


def domains_used(world: World, a: Admission, key: str = "rack") -> set[str | None]:
    labels = {n.name: n.labels for n in world.nodes}
    return {labels[p.node].get(key) for p in a.placements}


def gpus_placed(a: Admission, per_pod: int = 8) -> int:
    return sum(p.count for p in a.placements) * per_pod


# -- required -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "pods", "rack"),
    [
        pytest.param({"a": 4, "b": 3, "c": 2}, 2, "c", id="smallest-rack-that-fits"),
        pytest.param({"a": 4, "b": 3, "c": 2}, 3, "b", id="skips-racks-too-small"),
        pytest.param({"a": 4, "b": 3, "c": 2}, 4, "a", id="only-the-largest-fits"),
        pytest.param({"b": 2, "a": 2}, 2, "a", id="equal-racks-tie-by-value"),
        pytest.param({"x": 1, "y": 2}, 1, "x", id="one-pod-goes-to-the-smallest"),
    ],
)
def test_required_topology_packs_the_gang_into_the_best_fitting_rack(
    sizes: dict[str, int], pods: int, rack: str
) -> None:
    world = world_of(racks(sizes))
    res = world.submit(wl("gang").ns("q").gang(pods).gpus(8).topology(required="rack")).run()
    a = res.admission("q/gang")
    assert domains_used(world, a) == {rack}
    assert gpus_placed(a) == 8 * pods


def test_best_fit_counts_free_capacity_not_rack_size() -> None:
    # Rack a is bigger but half used: 16 GPUs free in a, 24 in b. A 16-GPU gang goes to a.
    world = world_of(racks({"a": 4, "b": 3}))
    busy = wl("busy").ns("q").gang(2).gpus(8).build()
    world.running(make_admitted(busy, "q", "h100", {"a-0": 1, "a-1": 1}))
    res = world.submit(wl("gang").ns("q").gang(2).gpus(8).topology(required="rack")).run()
    assert domains_used(world, res.admission("q/gang")) == {"a"}


def test_required_topology_fails_naming_the_label_when_no_rack_holds_the_gang() -> None:
    # 40 GPUs free in the cluster, but at most 24 in one rack: a 32-GPU gang cannot start.
    world = world_of(racks({"a": 3, "b": 2}))
    busy = wl("busy").ns("q").gpus(8).build()
    world.running(make_admitted(busy, "q", "h100", {"a-0": 1}))
    world.running(make_admitted(wl("busy2").ns("q").gpus(8).build(), "q", "h100", {"b-0": 1}))
    world.submit(wl("gang").ns("q").gang(3).gpus(8).topology(required="rack"))
    res = world.run()
    assert res.reason("q/gang") is R.NO_NODE_FITS
    message = res.message("q/gang")
    assert "needs 24 nvidia.com/gpu in one rack" in message
    assert "the largest rack (a) has 16 free" in message


def test_without_the_topology_the_same_gang_would_fit() -> None:
    world = world_of(racks({"a": 3, "b": 2}))
    world.running(make_admitted(wl("busy").ns("q").gpus(8).build(), "q", "h100", {"a-0": 1}))
    world.running(make_admitted(wl("busy2").ns("q").gpus(8).build(), "q", "h100", {"b-0": 1}))
    res = world.submit(wl("gang").ns("q").gang(3).gpus(8)).run()
    assert domains_used(world, res.admission("q/gang")) == {"a", "b"}


def test_a_gang_no_rack_could_ever_hold_is_inadmissible() -> None:
    world = world_of(racks({"a": 2, "b": 2}))
    res = world.submit(wl("gang").ns("q").gang(3).gpus(8).topology(required="rack")).run()
    assert res.reason("q/gang") is R.INADMISSIBLE
    assert "no set of empty nodes" in res.message("q/gang")


def test_nodes_without_the_label_never_host_a_required_pod_set() -> None:
    unlabelled = make_nodes("plain", 4, flavor="h100")
    world = world_of([*racks({"a": 1}), *unlabelled])
    res = world.submit(
        wl("fits").ns("q").gpus(8).topology(required="rack"),
        wl("too-big").ns("q").gang(2).gpus(8).topology(required="rack").at(1),
    ).run()
    assert domains_used(world, res.admission("q/fits")) == {"a"}
    # Four free unlabelled nodes would hold it, but none carries the label.
    assert res.reason("q/too-big") is R.INADMISSIBLE


def test_no_node_with_the_label_is_named_in_the_message() -> None:
    world = world_of(make_nodes("plain", 2, flavor="h100"))
    busy = wl("busy").ns("q").gpus(8).build()
    world.running(make_admitted(busy, "q", "h100", {"plain-0": 1}))
    pool = NodePool(world.config().node_topology, world.snapshot().node_free)
    ps = PodSet(name="w", count=1, requests=resources(gpu=8), topology_required="zone")
    assert pool.place(FlavorName("h100"), (ps,)) is None
    assert pool.last_failure is not None
    assert "requires topology 'zone'" in pool.last_failure.describe_topology(FlavorName("h100"))


def test_each_pod_set_of_a_gang_picks_its_own_rack() -> None:
    world = world_of(racks({"a": 2, "b": 1}))
    res = world.submit(
        wl("job")
        .ns("q")
        .topology(required="rack")
        .pod_set("workers", 2, gpu=8)
        .pod_set("launcher", 1, gpu=8)
    ).run()
    a = res.admission("q/job")
    labels = {n.name: n.labels["rack"] for n in world.nodes}
    by_set = {ps: {labels[p.node] for p in a.placements if p.pod_set == ps} for ps in ("workers",)}
    assert by_set == {"workers": {"a"}}
    assert {labels[p.node] for p in a.placements if p.pod_set == "launcher"} == {"b"}


def test_a_label_key_like_nvlink_domain_works_too() -> None:
    key = "nvidia.com/nvlink-domain"
    nodes = [
        *make_nodes("x", 2, flavor="h100", labels={key: "nvl-0"}),
        *make_nodes("y", 4, flavor="h100", labels={key: "nvl-1"}),
    ]
    world = world_of(nodes)
    res = world.submit(wl("gang").ns("q").gang(3).gpus(8).topology(required=key)).run()
    assert domains_used(world, res.admission("q/gang"), key) == {"nvl-1"}


# -- preferred ------------------------------------------------------------------


def test_preferred_topology_uses_one_rack_when_one_holds_it() -> None:
    world = world_of(racks({"a": 4, "b": 2, "c": 3}))
    res = world.submit(wl("gang").ns("q").gang(3).gpus(8).topology(preferred="rack")).run()
    assert domains_used(world, res.admission("q/gang")) == {"c"}


@pytest.mark.parametrize(
    ("sizes", "pods", "expected"),
    [
        # Largest first (a: 3), then the best fit for the remaining 2 (c: 2, not b: 3).
        pytest.param({"a": 3, "b": 3, "c": 2, "d": 1}, 5, {"a", "c"}, id="two-racks"),
        pytest.param({"a": 2, "b": 2, "c": 2}, 6, {"a", "b", "c"}, id="all-racks"),
        pytest.param({"a": 1, "b": 1, "c": 4}, 5, {"a", "c"}, id="largest-then-smallest"),
    ],
)
def test_preferred_topology_spans_the_fewest_racks(
    sizes: dict[str, int], pods: int, expected: set[str]
) -> None:
    world = world_of(racks(sizes))
    res = world.submit(wl("gang").ns("q").gang(pods).gpus(8).topology(preferred="rack")).run()
    a = res.admission("q/gang")
    assert domains_used(world, a) == expected
    assert gpus_placed(a) == 8 * pods


def test_preferred_topology_falls_back_to_unlabelled_nodes() -> None:
    world = world_of([*racks({"a": 1}), *make_nodes("plain", 2, flavor="h100")])
    res = world.submit(wl("gang").ns("q").gang(3).gpus(8).topology(preferred="rack")).run()
    assert domains_used(world, res.admission("q/gang")) == {"a", None}


@pytest.mark.parametrize(
    ("room", "free", "count", "spill", "plan"),
    [
        pytest.param({"a": 4, "b": 2}, {"a": 32, "b": 16}, 2, False, ["b"], id="best-fit"),
        pytest.param({"a": 4, "b": 2}, {"a": 32, "b": 16}, 5, False, None, id="required-fails"),
        pytest.param({"a": 4, "b": 2}, {"a": 32, "b": 16}, 5, True, ["a", "b"], id="spill"),
        pytest.param({"a": 1}, {"a": 8}, 3, True, ["a"], id="too-little-lists-all"),
        pytest.param({}, {}, 1, True, [], id="no-domains"),
        pytest.param({"b": 2, "a": 2}, {"a": 16, "b": 16}, 2, False, ["a"], id="tie-by-value"),
    ],
)
def test_plan_domains(
    room: dict[str, int], free: dict[str, int], count: int, spill: bool, plan: list[str] | None
) -> None:
    assert plan_domains(count, room, free, spill=spill) == plan


def test_pod_sets_without_topology_are_placed_as_before() -> None:
    # Same nodes, a gang without topology: plain best fit by node name.
    world = world_of(racks({"b": 2, "a": 2}))
    res = world.submit(wl("gang").ns("q").gang(2).gpus(8)).run()
    assert {p.node for p in res.admission("q/gang").placements} == {"a-0", "a-1"}


def test_topology_is_part_of_the_shape() -> None:
    plain = wl("p").gang(2).gpus(8).build()
    packed = wl("t").gang(2).gpus(8).topology(required="rack").build()
    preferred = wl("u").gang(2).gpus(8).topology(preferred="rack").build()
    assert len({plain.shape, packed.shape, preferred.shape}) == 3


def test_required_and_preferred_together_is_an_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        PodSet(
            name="w",
            count=1,
            requests=resources(gpu=1),
            topology_required="rack",
            topology_preferred="rack",
        )


def test_domains_are_cached_per_flavor_and_key() -> None:
    world = world_of(racks({"a": 2, "b": 1}))
    topo: NodeTopology = world.config().node_topology
    flavor = topo.flavor_of[NodeName("a-0")]
    first = topo.domain_of(flavor, "rack")
    assert first == {"a-0": "a", "a-1": "a", "b-0": "b"}
    assert topo.domain_of(flavor, "rack") is first


# -- properties -----------------------------------------------------------------


@st.composite
def rack_worlds(draw: st.DrawFn) -> World:
    world = World().flavor(make_flavor("h100"))
    nodes: list[Node] = []
    for r in range(draw(st.integers(1, 4))):
        for i in range(draw(st.integers(1, 4))):
            nodes.extend(
                make_nodes(
                    f"r{r}n{i}",
                    1,
                    flavor="h100",
                    gpu=draw(st.sampled_from([4, 8])),
                    labels={"rack": f"r{r}"} if draw(st.integers(0, 5)) else {},
                )
            )
    world.node(nodes)
    world.cq(make_cq("q").flavor("h100").nominal(gpu=draw(st.sampled_from([16, 64, 1000]))))
    for j in range(draw(st.integers(1, 8))):
        b = wl(f"w{j}").ns("q").at(j).gang(draw(st.integers(1, 6)))
        b = b.gpus(draw(st.sampled_from([1, 2, 4, 8])))
        kind = draw(st.sampled_from(["required", "preferred", None]))
        if kind == "required":
            b = b.topology(required="rack")
        elif kind == "preferred":
            b = b.topology(preferred="rack")
        world.submit(b)
    return world


def _check(world: World, res: Result) -> None:
    nodes = {n.name: n for n in world.nodes}
    used: dict[str, int] = {}
    for a in [*res.snapshot.admitted.values(), *res.decisions.admitted]:
        for p in a.admission.placements:
            used[p.node] = used.get(p.node, 0) + p.count * a.workload.pod_sets[0].requests[GPU]
    for node in world.nodes:
        assert used.get(node.name, 0) <= node.allocatable[GPU]
    for a in res.decisions.admitted:
        ps = a.workload.pod_sets[0]
        assert sum(p.count for p in a.admission.placements) == ps.count
        if ps.topology_required is not None:
            values = {nodes[p.node].labels.get("rack") for p in a.admission.placements}
            assert len(values) == 1 and None not in values
            event("required topology admitted")
        elif ps.topology_preferred is not None and len(a.admission.placements) > 1:
            event("preferred topology admitted on several nodes")


@SETTINGS
@given(rack_worlds(), st.integers(1, 3))
def test_required_gangs_sit_in_one_rack_and_no_node_is_overcommitted(
    world: World, cycles: int
) -> None:
    res = world.run()
    _check(world, res)
    for _ in range(cycles - 1):
        res = res.next().run()
        _check(world, res)


ROOM = {"a": 2, "b": 2, "c": 4}
FREE = {"a": 16, "b": 9, "c": 32}


@pytest.mark.parametrize(
    ("rule", "chosen"),
    [
        pytest.param(None, "b", id="best-fit-by-default"),
        pytest.param(DomainRule(label="rack", choice=DomainChoice.BEST_FIT), "b", id="best-fit"),
        pytest.param(
            DomainRule(label="rack", choice=DomainChoice.FIRST_FIT, order=("c", "a", "b")),
            "c",
            id="first-fit-in-order",
        ),
        pytest.param(
            DomainRule(label="rack", choice=DomainChoice.FIRST_FIT, order=("z",)),
            "a",
            id="first-fit-unlisted-by-value",
        ),
        pytest.param(DomainRule(label="rack", choice=DomainChoice.MOST_FREE), "c", id="most-free"),
    ],
)
def test_a_domain_rule_chooses_among_the_domains_that_hold_it(
    rule: DomainRule | None, chosen: str
) -> None:
    assert plan_domains(2, ROOM, FREE, spill=False, rule=rule) == [chosen]


@pytest.mark.parametrize(
    ("choice", "order", "rack"),
    [
        pytest.param(DomainChoice.BEST_FIT, (), "b", id="best-fit"),
        pytest.param(DomainChoice.FIRST_FIT, ("c", "a", "b"), "c", id="first-fit"),
        pytest.param(DomainChoice.MOST_FREE, (), "c", id="most-free"),
    ],
)
def test_the_policys_domain_rule_steers_a_required_topology(
    choice: DomainChoice, order: tuple[str, ...], rack: str
) -> None:
    """As a multi-cluster manager's dispatch policy steers the cluster of a gang."""
    world = world_of(racks({"a": 2, "b": 1, "c": 3}))
    world.policy = SchedulerPolicy(
        domain_rules=(DomainRule(label="rack", choice=choice, order=order),)
    )
    res = world.submit(wl("gang").ns("q").gpus(8).topology(required="rack")).run()
    assert domains_used(world, res.admission("q/gang")) == {rack}
