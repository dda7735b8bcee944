"""Hierarchical cohorts: quota, reclaim, fair shares and reasons across a tree.

The org tree used throughout (GPUs, nominal per ClusterQueue):

    org ─┬─ research ─┬─ team-a (4)
         │            └─ team-b (4)
         └─ prod ─────┬─ team-c (8)
                      └─ team-d (8)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from queuemgr.core.cohort_tree import MAX_LEVELS, CohortTree, CohortTreeError, tree_error
from queuemgr.core.cycle import schedule
from queuemgr.core.model import ClusterQueueName, Cohort, CohortName, FlavorName, Ordering
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.reasons import PreemptionReason
from queuemgr.core.resources import GPU
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cohort, make_cq, make_nodes
from tests.builders import make_workload as wl

TEAMS = {
    "team-a": ("research", 4),
    "team-b": ("research", 4),
    "team-c": ("prod", 8),
    "team-d": ("prod", 8),
}


DEFAULT = FlavorName("default")


def _q(name: str) -> ClusterQueueName:
    return ClusterQueueName(name)


def _cq_flavor(name: str) -> tuple[ClusterQueueName, FlavorName]:
    return (ClusterQueueName(name), DEFAULT)


def org(
    *,
    research: Cohort | None = None,
    prod: Cohort | None = None,
    root: Cohort | None = None,
    reclaim: str = "Never",
    nodes: int = 8,
) -> World:
    world = World().node(make_nodes("n", nodes))
    world.cohort(
        root or make_cohort("org"),
        research or make_cohort("research", "org"),
        prod or make_cohort("prod", "org"),
    )
    for name, (cohort, gpus) in TEAMS.items():
        world.cq(make_cq(name).cohort(cohort).nominal(gpu=gpus).preempt(reclaim=reclaim))
    return world


def jobs(world: World, ns: str, count: int, *, gpus: int = 1, at: float = 0.0) -> World:
    return world.submit(*(wl(f"{ns}-{i:02d}").ns(ns).gpus(gpus).at(at) for i in range(count)))


# -- the tree itself --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        pytest.param({"a": None, "b": "a"}, None, id="a-forest"),
        pytest.param({"a": "ghost"}, "cohort a: its parent ghost does not exist", id="dangling"),
        pytest.param({"a": "a"}, "cohorts form a cycle: a -> a", id="self-parent"),
        pytest.param(
            {"a": "b", "b": "c", "c": "a", "d": None},
            "cohorts form a cycle: a -> b -> c -> a",
            id="three-cycle",
        ),
        pytest.param(
            {"x": "y", "y": "z", "z": "y"},
            "cohorts form a cycle: y -> z -> y",
            id="tail-into-cycle",
        ),
    ],
)
def test_tree_errors_name_the_path(parents: dict[str, str | None], message: str | None) -> None:
    typed = {CohortName(k): CohortName(v) if v else None for k, v in parents.items()}
    assert tree_error(typed) == message
    if message is not None:
        with pytest.raises(CohortTreeError, match=message.split(":")[0]):
            CohortTree({k: Cohort(name=k, parent=v) for k, v in typed.items()})


def test_a_tree_deeper_than_the_bound_is_refused_naming_its_path() -> None:
    chain = {CohortName(f"c{i:06d}"): CohortName(f"c{i + 1:06d}") for i in range(100_000)}
    chain[CohortName("c100000")] = None
    problem = tree_error(chain)
    assert problem is not None and problem.startswith(
        f"cohort c000000 is more than {MAX_LEVELS} levels deep: c000000 -> c000001 -> "
    )
    # Exactly MAX_LEVELS levels is a tree; a long cycle is refused too, however long.
    ok = {CohortName(f"d{i}"): CohortName(f"d{i + 1}") for i in range(MAX_LEVELS - 1)}
    ok[CohortName(f"d{MAX_LEVELS - 1}")] = None
    assert tree_error(ok) is None
    loop = {CohortName(f"e{i}"): CohortName(f"e{(i + 1) % 50_000}") for i in range(50_000)}
    assert tree_error(loop) is not None


def test_paths_depths_and_roots() -> None:
    tree = org().config().quota_topology.tree
    assert tree.path(CohortName("research")) == "org/research"
    assert tree.depth(CohortName("org")) == 0 and tree.depth(CohortName("prod")) == 1
    assert tree.root(CohortName("prod")) == "org"
    assert not tree.flat


# -- quota across levels ----------------------------------------------------------------


@dataclass(frozen=True)
class QuotaCase:
    research: Cohort
    prod: Cohort
    team_a_gets: int


QUOTA_CASES = {
    # team-a borrows team-b's 4 within research, then prod's 16 through org.
    "two-level-borrowing": QuotaCase(
        make_cohort("research", "org"), make_cohort("prod", "org"), 24
    ),
    "research-borrowing-limit": QuotaCase(
        make_cohort("research", "org", borrowing_limit={"gpu": 6}), make_cohort("prod", "org"), 14
    ),
    "research-borrows-nothing": QuotaCase(
        make_cohort("research", "org", borrowing_limit={"gpu": 0}), make_cohort("prod", "org"), 8
    ),
    # The middle level lends org only 6 of prod's 16: team-a reaches 8 + 6.
    "prod-lending-limit": QuotaCase(
        make_cohort("research", "org"), make_cohort("prod", "org", lending_limit={"gpu": 6}), 14
    ),
    "prod-lends-nothing": QuotaCase(
        make_cohort("research", "org"), make_cohort("prod", "org", lending_limit={"gpu": 0}), 8
    ),
    # research may borrow 10, prod lends 6: the tighter of the two levels wins.
    "both-limits": QuotaCase(
        make_cohort("research", "org", borrowing_limit={"gpu": 10}),
        make_cohort("prod", "org", lending_limit={"gpu": 6}),
        14,
    ),
}


@pytest.mark.parametrize("case", QUOTA_CASES.values(), ids=QUOTA_CASES.keys())
def test_borrowing_up_the_tree(case: QuotaCase) -> None:
    res = jobs(org(research=case.research, prod=case.prod), "team-a", 30).run()
    assert res.gpus_by_cq() == {"team-a": case.team_a_gets}
    # The ledger agrees: once team-a holds that, not one more GPU fits anywhere below.
    ledger = QuotaLedger(res.snapshot.config.quota_topology, {})
    ledger.add(*_cq_flavor("team-a"), {GPU: case.team_a_gets})
    assert not ledger.check(*_cq_flavor("team-a"), {GPU: 1}).fits


def test_reasons_name_the_level_that_blocks() -> None:
    research = make_cohort("research", "org", borrowing_limit={"gpu": 6})
    res = jobs(org(research=research), "team-a", 16).run()
    detail = res.status("team-a/team-a-15").message
    assert "cohort org/research is at its borrowing limit" in detail, detail
    prod = make_cohort("prod", "org", lending_limit={"gpu": 0})
    res = jobs(org(prod=prod), "team-a", 9).run()
    detail = res.status("team-a/team-a-08").message
    assert "cohort org has nothing more to lend" in detail, detail


def test_a_cohort_with_its_own_quota_and_no_queues() -> None:
    # shared holds 8 GPUs itself and has no ClusterQueue of its own; x (nominal 0) sits
    # two levels below it and reaches all 8 through its own cohort.
    world = World().node(make_nodes("n", 2))
    world.cohort(
        make_cohort("shared", nominal={"gpu": 8}),
        make_cohort("group", "shared"),
    )
    world.cq(make_cq("x").cohort("group").nominal(gpu=0))
    res = jobs(world, "x", 12).run()
    assert res.gpus_by_cq() == {"x": 8}
    assert res.reason("x/x-11") is PendingReason.COHORT_EXHAUSTED
    topo = res.snapshot.config.quota_topology
    assert topo.pool[CohortName("shared")][(_cq_flavor("x")[1], GPU)] == 8
    assert topo.max_usage(*_cq_flavor("x"), GPU) == 8


def test_a_cohort_lending_limit_keeps_its_own_quota_home() -> None:
    # shared lends its parent only 2 of its own 8: y, beside it under the root, gets 2.
    world = World().node(make_nodes("n", 2))
    world.cohort(
        make_cohort("root"),
        make_cohort("shared", "root", nominal={"gpu": 8}, lending_limit={"gpu": 2}),
        make_cohort("other", "root"),
    )
    world.cq(make_cq("y").cohort("other").nominal(gpu=0))
    assert jobs(world, "y", 12).run().gpus_by_cq() == {"y": 2}


# -- reclaim down the tree --------------------------------------------------------------


def test_reclaim_from_a_cousin_through_the_common_ancestor() -> None:
    # team-a (research) holds the whole tree, 20 of its 24 GPUs borrowed, some of them
    # prod's; team-c (prod) wants 8 of its nominal back, from its cousin through org.
    world = org(reclaim="Any")
    for i in range(12):
        run = wl(f"a{i:02d}").ns("team-a").gpus(2).build()
        world.running(make_admitted(run, "team-a", "default", {f"n-{i % 8}": 1}))
    jobs(world, "team-c", 1, gpus=8, at=1.0)
    res = world.run(now=2.0)
    evicted = res.evicted_ids()
    assert len(evicted) == 4 and all(e.startswith("team-a/") for e in evicted)
    assert {e.reason for e in res.decisions.evicted} == {PreemptionReason.IN_COHORT_RECLAMATION}
    assert {e.preemptor for e in res.decisions.evicted} == {"team-c/team-c-00"}


def test_the_nearest_borrower_is_reclaimed_first() -> None:
    # The tree is full: team-a (cousin, under research) borrows 8, team-d (sibling, under
    # prod) borrows 4. team-c takes back from its sibling first, though the cousin's runs
    # are younger and have done less work.
    world = org(reclaim="Any")
    for i in range(6):
        run = wl(f"a{i}").ns("team-a").gpus(2).build()
        world.running(make_admitted(run, "team-a", "default", {f"n-{i}": 1}, at=5.0))
    for i in range(6):
        run = wl(f"d{i}").ns("team-d").gpus(2).build()
        world.running(make_admitted(run, "team-d", "default", {f"n-{6 + i % 2}": 1}, at=1.0))
    jobs(world, "team-c", 1, gpus=4, at=6.0)
    res = world.run(now=7.0)
    evicted = res.evicted_ids()
    assert len(evicted) == 2 and all(e.startswith("team-d/") for e in evicted), evicted


# -- fair shares at every level ---------------------------------------------------------


def test_weights_split_an_idle_pool_between_subtrees_then_within() -> None:
    # org holds 12 GPUs itself; s1 (weight 2) and s2 (weight 1) hold none, nor do their
    # teams. The pool splits 8:4 between the subtrees, then 4:4 and 2:2 inside them.
    world = World().node(make_nodes("n", 4))
    world.cohort(
        make_cohort("org", nominal={"gpu": 12}),
        make_cohort("s1", "org", weight=2),
        make_cohort("s2", "org", weight=1),
    )
    for name, parent in (("a", "s1"), ("b", "s1"), ("c", "s2"), ("d", "s2")):
        world.cq(make_cq(name).cohort(parent).nominal(gpu=0))
        jobs(world, name, 12)
    res = world.run()
    assert res.gpus_by_cq() == {"a": 4, "b": 4, "c": 2, "d": 2}


def test_path_shares_compare_at_the_common_ancestor() -> None:
    config = org().config()
    topo: QuotaTopology = config.quota_topology
    assert topo.common_depth(*map(_q, ("team-a", "team-b"))) == 1  # siblings under research
    assert topo.common_depth(*map(_q, ("team-a", "team-c"))) == 0  # cousins under org
    ledger = QuotaLedger(topo, {})
    ledger.add(*_cq_flavor("team-a"), {GPU: 8})  # 4 beyond nominal: research borrows 0
    path = ledger.path_share(_q("team-a"))
    assert len(path) == 2 and path[0][1] == 0 and path[1][1] > 0
    ledger.add(*_cq_flavor("team-b"), {GPU: 4})  # research now takes 4 from prod
    assert ledger.path_share(_q("team-a"))[0][1] > 0


def test_a_borrower_s_stale_key_is_refreshed_after_a_cousin_s_admission() -> None:
    # product (under org, which holds 12 GPUs) has groups search and ads, one team each.
    # search-a holds 5, ads-a 3; 4 GPUs are free. Each admission raises product's share,
    # which the other group's key in the heap still holds at its old value: taken
    # unrefreshed, it would win at product's level although the cousin is behind at the
    # groups' level. The fair split of the 4: ads-a 3 (to 6), search-a 1 (to 6).
    world = World().node(make_nodes("n", 2, gpu=8))
    world.cohort(
        make_cohort("org", nominal={"gpu": 12}),
        make_cohort("product", "org"),
        make_cohort("search", "product"),
        make_cohort("ads", "product"),
    )
    world.cq(
        make_cq("search-a").cohort("search").nominal(gpu=0),
        make_cq("ads-a").cohort("ads").nominal(gpu=0),
    )
    for i in range(5):
        run = wl(f"s{i}").ns("search-a").gpus(1).build()
        world.running(make_admitted(run, "search-a", "default", {"n-0": 1}))
    for i in range(3):
        run = wl(f"a{i}").ns("ads-a").gpus(1).build()
        world.running(make_admitted(run, "ads-a", "default", {"n-1": 1}))
    jobs(world, "search-a", 4, at=1.0)
    jobs(world, "ads-a", 4, at=1.0)
    assert world.run(now=2.0).gpus_by_cq() == {"ads-a": 3, "search-a": 1}


@pytest.mark.parametrize(
    ("ordering_on", "first"),
    [
        pytest.param("org", "c", id="usage-at-every-level"),
        pytest.param(None, "b", id="fifo-by-default"),
    ],
)
def test_usage_ordering_compares_the_subtrees_history_first(
    ordering_on: str | None, first: str
) -> None:
    # One GPU is free (org's own). research's LocalQueues used 100 + 0, product's 30 + 40:
    # by usage, product (70) goes before research (100), then its lightest team, c;
    # Kueue's per-LocalQueue order would have picked b (0). Without the usage ordering,
    # the earliest workload goes first.
    world = World().node(make_nodes("n", 1))
    world.cohort(
        dataclasses.replace(
            make_cohort("org", nominal={"gpu": 1}),
            ordering=Ordering.USAGE if ordering_on == "org" else None,
        ),
        make_cohort("research", "org"),
        make_cohort("product", "org"),
    )
    for name, parent in (("a", "research"), ("b", "research"), ("c", "product"), ("d", "product")):
        world.cq(make_cq(name).cohort(parent).nominal(gpu=0))
    for i, name in enumerate(("b", "a", "d", "c")):
        world.submit(wl(f"{name}-job").ns(name).gpus(1).at(float(i)))
    usage = {("a", "default"): 100.0, ("b", "default"): 0.0}
    usage |= {("c", "default"): 30.0, ("d", "default"): 40.0}
    snap = dataclasses.replace(world.snapshot(), queue_usage=usage)
    decided = schedule(snap, 10.0)
    assert [a.admission.cluster_queue for a in decided.admitted] == [first]
