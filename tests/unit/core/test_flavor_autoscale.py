"""A flavor's autoscale: node fit may place a gang on nodes the autoscaler will add
(``max_nodes`` minus the flavor's existing nodes, of the flavor's node template), but only
for a ClusterQueue with an admission check (the check provisions them)."""

from __future__ import annotations

import dataclasses
import pickle

from queuemgr.core.cache import Cache
from queuemgr.core.model import (
    FlavorAutoscale,
    FlavorName,
    NodeName,
    NodeTemplate,
    ResourceFlavor,
)
from queuemgr.core.node_topology import virtual_nodes
from queuemgr.core.resources import GPU
from queuemgr.core.verdicts import PendingReason
from tests.builders import FLAVOR_LABEL, World, make_cq, make_flavor, make_nodes, resources
from tests.builders import make_workload as wl

R = PendingReason
CHECK = "provisioning-request"


def _h100(max_nodes: int = 4) -> ResourceFlavor:
    return dataclasses.replace(
        make_flavor("h100"),
        autoscale=FlavorAutoscale(
            max_nodes=max_nodes,
            node=NodeTemplate(allocatable=resources(gpu=8, cpu="96"), labels={"zone": "a"}),
        ),
    )


def _world(*, checked: bool, max_nodes: int = 4) -> World:
    """One existing 8-GPU node of an h100 flavor that may grow to ``max_nodes``."""
    world = World().flavor(_h100(max_nodes))
    world.node(make_nodes("n", 1, flavor="h100"))
    cq = make_cq("q").flavor("h100").nominal(gpu=64).build()
    if checked:
        cq = dataclasses.replace(cq, admission_checks=(CHECK,))
    return world.cq(cq)


def test_the_virtual_nodes_are_what_the_flavor_may_still_grow_by() -> None:
    config = _world(checked=True).config()
    virtual = virtual_nodes(config.flavors, config.nodes)
    assert sorted(virtual) == ["h100~1", "h100~2", "h100~3"]  # 4 at most, 1 exists
    flavor, node = virtual[NodeName("h100~1")]
    assert flavor == "h100"
    assert node.labels == {"zone": "a", FLAVOR_LABEL: "h100"}
    assert node.allocatable[GPU] == 8
    # Not a node of the flavor for anyone but those who ask for virtual nodes.
    topo = config.node_topology
    assert set(topo.flavor_of) == {"n-0"}
    assert [c.virtual for c in topo.classes] == [False, True]
    # The flavor's existing nodes at the maximum already: no virtual node.
    full = _world(checked=True, max_nodes=1).config()
    assert virtual_nodes(full.flavors, full.nodes) == {}


def test_a_gang_too_big_for_the_nodes_is_admitted_onto_virtual_nodes_with_a_check() -> None:
    gang = wl("big").ns("q").gang(3).gpus(8)
    res = _world(checked=True).submit(gang).run()
    assert res.admitted_ids() == {"q/big"}
    placed = {p.node: p.count for p in res.admission("q/big").placements}
    # The existing node first, then the virtual ones, best fit by name.
    assert placed == {"n-0": 1, "h100~1": 1, "h100~2": 1}

    without = _world(checked=False).submit(gang).run()
    assert without.admitted_ids() == set()
    assert without.reason("q/big") is R.INADMISSIBLE


def test_no_more_than_max_nodes() -> None:
    res = _world(checked=True).submit(wl("huge").ns("q").gang(5).gpus(8)).run()
    assert res.admitted_ids() == set()
    assert res.reason("q/huge") is R.INADMISSIBLE


def test_a_gang_that_fits_the_existing_nodes_stays_on_them() -> None:
    res = _world(checked=True).submit(wl("small").ns("q").gpus(8)).run()
    assert {p.node for p in res.admission("q/small").placements} == {"n-0"}


def test_virtual_capacity_once_taken_is_held_by_the_cache() -> None:
    """Admitted on virtual nodes, a gang holds them: the next one gets the rest only."""
    world = _world(checked=True)
    first = world.submit(wl("a").ns("q").gang(3).gpus(8)).run()
    (admitted,) = first.decisions.admitted
    cache = Cache(world.config())
    cache.add_admitted(admitted)
    free = cache.snapshot().node_free
    assert free[NodeName("h100~1")][GPU] == 0 and free[NodeName("h100~3")][GPU] == 8
    again = _world(checked=True).running(admitted)
    res = again.submit(wl("b").ns("q").gang(2).gpus(8).at(1)).run()
    assert res.admitted_ids() == set()  # one virtual node is left, not two
    res = _world(checked=True).running(admitted).submit(wl("c").ns("q").gpus(8).at(2)).run()
    assert {p.node for p in res.admission("q/c").placements} == {"h100~3"}


def test_the_decision_is_deterministic() -> None:
    def run() -> object:
        world = _world(checked=True)
        return world.submit(wl("big").ns("q").gang(3).gpus(8), wl("x").ns("q").at(1)).run()

    first, second = run(), run()
    assert first.decisions == second.decisions  # type: ignore[attr-defined]


def test_a_flavor_pickled_before_autoscale_loads_without_it() -> None:
    flavor = _h100()
    assert pickle.loads(pickle.dumps(flavor)) == flavor
    old = ResourceFlavor.__new__(ResourceFlavor)
    old.__setstate__([FlavorName("old"), {}, (), ()])
    assert old.autoscale is None
