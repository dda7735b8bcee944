"""A flavor's tolerations: a pod set placed on the flavor tolerates them beside its own."""

from __future__ import annotations

import pickle

import pytest

from queuemgr.core.model import (
    FlavorName,
    NodeName,
    PodSet,
    ResourceFlavor,
    Taint,
    TaintEffect,
    Toleration,
)
from queuemgr.core.node_topology import NodeTopology
from queuemgr.core.resources import GPU
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_cq, make_flavor, make_nodes
from tests.builders import make_workload as wl

R = PendingReason
SPOT = Taint(key="spot", value="true", effect=TaintEffect.NO_SCHEDULE)
EVICT = Taint(key="maintenance", effect=TaintEffect.NO_EXECUTE)
TOLERATE_SPOT = Toleration(key="spot", operator="Exists")


def _spot_world(*tolerations: Toleration, taint: Taint = SPOT) -> World:
    """Flavor "spot" (these tolerations) with two nodes carrying ``taint``."""
    world = World().flavor(make_flavor("spot", tolerations=tolerations))
    world.node(make_nodes("s", 2, flavor="spot", taints=[taint]))
    return world.cq(make_cq("q").flavor("spot").nominal(gpu=16))


def test_a_tainted_node_of_the_flavor_is_usable_only_with_the_flavors_toleration() -> None:
    without = _spot_world().submit(wl("a").ns("q").gang(2).gpus(8)).run()
    assert without.admitted_ids() == set()
    assert without.reason("q/a") is R.INADMISSIBLE

    res = _spot_world(TOLERATE_SPOT).submit(wl("a").ns("q").gang(2).gpus(8)).run()
    assert res.admitted_ids() == {"q/a"}
    assert {p.node for p in res.admission("q/a").placements} == {"s-0", "s-1"}


@pytest.mark.parametrize(
    ("toleration", "fits"),
    [
        pytest.param(Toleration(key="spot", value="true"), True, id="equal"),
        pytest.param(Toleration(key="spot", value="false"), False, id="equal-other-value"),
        pytest.param(Toleration(key="other", operator="Exists"), False, id="other-key"),
        pytest.param(Toleration(operator="Exists"), True, id="exists-every-key"),
        pytest.param(
            Toleration(key="spot", operator="Exists", effect=TaintEffect.NO_EXECUTE),
            False,
            id="other-effect",
        ),
    ],
)
def test_the_flavors_toleration_matches_as_a_pods_would(toleration: Toleration, fits: bool) -> None:
    res = _spot_world(toleration).submit(wl("a").ns("q").gpus(8)).run()
    assert (res.admitted_ids() == {"q/a"}) is fits


def test_the_flavors_and_the_pod_sets_tolerations_add_up() -> None:
    """Each tolerates one of the node's two taints: only together do they fit."""
    world = World().flavor(make_flavor("spot", tolerations=[TOLERATE_SPOT]))
    world.node(make_nodes("s", 1, flavor="spot", taints=[SPOT, EVICT]))
    world.cq(make_cq("q").flavor("spot").nominal(gpu=16))
    res = world.submit(
        wl("mine").ns("q").gpus(4).tolerate("maintenance"),
        wl("bare").ns("q").gpus(4).at(1),
    ).run()
    assert res.admitted_ids() == {"q/mine"}
    assert res.reason("q/bare") is R.INADMISSIBLE


def test_a_flavor_tolerates_its_own_taints() -> None:
    """Taints set on the flavor (Kueue's nodeTaints) and tolerated by it: its nodes are
    its own, whatever the pods say."""
    world = World().flavor(make_flavor("spot", taints=[SPOT], tolerations=[TOLERATE_SPOT]))
    world.node(make_nodes("s", 1, flavor="spot"))
    world.cq(make_cq("q").flavor("spot").nominal(gpu=8))
    assert world.submit(wl("a").ns("q").gpus(8)).run().admitted_ids() == {"q/a"}


def test_one_flavors_tolerations_do_not_reach_another_flavors_nodes() -> None:
    """Both flavors' nodes carry the taint; only "tolerant" tolerates it, so the
    workload skips the first flavor of its queue and lands on the second."""
    world = World().flavor(make_flavor("strict"))
    world.flavor(make_flavor("tolerant", tolerations=[TOLERATE_SPOT]))
    world.node(
        make_nodes("a", 1, flavor="strict", taints=[SPOT]),
        make_nodes("b", 1, flavor="tolerant", taints=[SPOT]),
    )
    world.cq(make_cq("q").flavor("strict").nominal(gpu=8).flavor("tolerant").nominal(gpu=8))
    res = world.submit(wl("x").ns("q").gpus(8)).run()
    admission = res.admission("q/x")
    assert admission.flavor == "tolerant"
    assert {p.node for p in admission.placements} == {"b-0"}


def test_node_topology_candidates_differ_by_flavor_for_one_pod_set() -> None:
    """The candidate cache is per flavor: one pod set, two answers."""
    flavors = {
        FlavorName("strict"): make_flavor("strict"),
        FlavorName("tolerant"): make_flavor("tolerant", tolerations=[TOLERATE_SPOT]),
    }
    nodes = {
        n.name: n
        for n in make_nodes("a", 1, flavor="strict", taints=[SPOT])
        + make_nodes("b", 1, flavor="tolerant", taints=[SPOT])
    }
    topology = NodeTopology(flavors, nodes)
    ps = PodSet(name="main", count=1, requests={GPU: 1})
    assert [c.nodes for c in topology.candidates(FlavorName("tolerant"), ps)] == [
        (NodeName("b-0"),)
    ]
    assert topology.candidates(FlavorName("strict"), ps) == []


def test_a_flavor_pickled_before_tolerations_existed_loads_without_them() -> None:
    flavor = ResourceFlavor(name=FlavorName("h100"), node_labels={"gpu": "h100"}, taints=(SPOT,))
    # The fields as they were before tolerations (and autoscale, after them).
    old_state = flavor.__getstate__()[:-2]
    loaded = ResourceFlavor.__new__(ResourceFlavor)
    loaded.__setstate__(old_state)
    assert loaded == flavor and loaded.tolerations == ()
    tolerant = ResourceFlavor(name=FlavorName("spot"), tolerations=(TOLERATE_SPOT,))
    assert pickle.loads(pickle.dumps(tolerant)) == tolerant
    with pytest.raises(ValueError, match="a flavor has 5 fields"):
        ResourceFlavor.__new__(ResourceFlavor).__setstate__([*tolerant.__getstate__(), 1])
