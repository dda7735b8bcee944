"""One scheduling cycle: strategies, gang fit, inadmissibility, flavors, order, positions."""

from __future__ import annotations

import pytest

from queuemgr.core.cycle import schedule
from queuemgr.core.model import Taint, TaintEffect
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_flavor, make_nodes
from tests.builders import make_workload as wl

R = PendingReason


def _one_queue(strict: bool, *, nodes: int = 4) -> World:
    """Queue "s" (nominal 16) with 8 GPUs running, and an unrelated queue "o"."""
    world = World().node(make_nodes("n", nodes, flavor="h100"))
    world.cq(make_cq("s").strict(strict).flavor("h100").nominal(gpu=16))
    world.cq(make_cq("o").strict(strict).flavor("h100").nominal(gpu=8))
    running = wl("running").ns("s").gpus(8).build()
    return world.running(make_admitted(running, "s", "h100", {"n-0": 1}))


# -- StrictFIFO and BestEffortFIFO ----------------------------------------------


@pytest.mark.parametrize("strict", [True, False], ids=["StrictFIFO", "BestEffortFIFO"])
def test_big_head_blocks_only_under_strict_fifo(strict: bool) -> None:
    world = _one_queue(strict).submit(
        wl("big").ns("s").gang(2).gpus(8).at(1),  # head: needs 16, 8 free in quota
        wl("small").ns("s").gpus(4).at(2),
        wl("tiny").ns("s").gpus(1).at(3),
        wl("other").ns("o").gpus(4).at(4),  # another queue is never blocked
    )
    res = world.run()
    assert res.reason("s/big") is R.QUOTA_EXCEEDED
    assert "o/other" in res.admitted_ids()
    if strict:
        assert res.admitted_ids() == {"o/other"}
        for wid in ("s/small", "s/tiny"):
            assert res.reason(wid) is R.BLOCKED_BY_HEAD
            assert "s/big" in res.message(wid)
    else:
        assert res.admitted_ids() == {"s/small", "s/tiny", "o/other"}


@pytest.mark.parametrize("strict", [True, False], ids=["StrictFIFO", "BestEffortFIFO"])
def test_head_without_nodes_blocks_under_strict_fifo(strict: bool) -> None:
    world = World().node(make_nodes("n", 2, flavor="h100"))
    world.cq(make_cq("s").strict(strict).flavor("h100").nominal(gpu=64))
    running = wl("running").ns("s").gpus(8).build()
    world.running(make_admitted(running, "s", "h100", {"n-0": 1}))
    res = world.submit(
        wl("pair").ns("s").gang(2).gpus(8).priority(5),  # quota fits, one node free
        wl("small").ns("s").gpus(2).priority(1),
    ).run()
    assert res.reason("s/pair") is R.NO_NODE_FITS
    if strict:
        assert res.admitted_ids() == set()
        assert res.reason("s/small") is R.BLOCKED_BY_HEAD
    else:
        assert res.admitted_ids() == {"s/small"}


def test_inadmissible_head_does_not_block_strict_fifo() -> None:
    world = _one_queue(True).submit(
        wl("huge").ns("s").gang(4).gpus(8).priority(9),  # 32 > nominal 16: never fits
        wl("small").ns("s").gpus(4),
    )
    res = world.run()
    assert res.reason("s/huge") is R.INADMISSIBLE
    assert res.admitted_ids() == {"s/small"}


def test_strict_fifo_admits_in_order_until_the_first_miss() -> None:
    world = _one_queue(True).submit(*(wl(f"j{i}").ns("s").gpus(3).at(i) for i in range(5)))
    res = world.run()
    # 8 quota left: j0 and j1 fit, j2 does not; j3 and j4 wait behind j2.
    assert res.admitted_ids() == {"s/j0", "s/j1"}
    assert res.reason("s/j2") is R.QUOTA_EXCEEDED
    assert res.reason("s/j3") is R.BLOCKED_BY_HEAD
    assert res.reason("s/j4") is R.BLOCKED_BY_HEAD


# -- gang node fit -------------------------------------------------------------------


def test_fragmented_cluster_gives_no_node_fits() -> None:
    world = World().node(make_nodes("n", 4, flavor="h100"))
    world.cq(make_cq("a").flavor("h100").nominal(gpu=32))
    for i in range(4):  # 4 GPUs held on each node: 16 free, none with 8
        w = wl(f"r{i}").ns("a").gpus(4).build()
        world.running(make_admitted(w, "a", "h100", {f"n-{i}": 1}))
    res = world.submit(wl("gang").ns("a").gang(2).gpus(8)).run()
    assert res.reason("a/gang") is R.NO_NODE_FITS
    msg = res.message("a/gang")
    assert "needs 2 pods of {8 nvidia.com/gpu} on h100" in msg
    assert "free nodes hold 0 such pods" in msg
    assert "largest free node: 96 cpu, 4 nvidia.com/gpu)" in msg
    # The same gang fits as soon as one node is whole again.
    res = res.next(finished=["a/r0", "a/r1"]).run()
    assert res.admitted_ids() == {"a/gang"}


def test_gang_is_placed_whole_and_best_fit() -> None:
    world = World().node(make_nodes("n", 3, flavor="h100"))
    world.cq(make_cq("a").flavor("h100").nominal(gpu=24))
    half = wl("half").ns("a").gpus(4).build()
    world.running(make_admitted(half, "a", "h100", {"n-1": 1}))
    res = world.submit(wl("g").ns("a").gang(3).gpus(4)).run()
    placements = res.admission("a/g").placements
    assert sum(p.count for p in placements) == 3
    # Least free first: n-1 (4 free) takes one pod, then n-0 (ties by name) takes two.
    assert {p.node: p.count for p in placements} == {"n-1": 1, "n-0": 2}


def test_several_pod_sets_are_one_gang() -> None:
    world = World().node(make_nodes("n", 2, flavor="h100", cpu="16"))
    world.cq(make_cq("a").flavor("h100").nominal(gpu=16, cpu="64"))
    gang = wl("mpi").ns("a").pod_set("launcher", 1, cpu="4").pod_set("worker", 2, gpu=8, cpu="8")
    too_big = wl("x").ns("a").pod_set("launcher", 1, cpu="12").pod_set("worker", 2, gpu=8, cpu=8)
    res = world.submit(gang, too_big.at(1)).run()
    placed = {p.pod_set: 0 for p in res.admission("a/mpi").placements}
    for p in res.admission("a/mpi").placements:
        placed[p.pod_set] += p.count
    assert placed == {"launcher": 1, "worker": 2}
    # The second gang's launcher needs 12 cpu next to a worker's 8 on a 16-cpu node.
    assert res.reason("a/x") is R.INADMISSIBLE


# -- Inadmissible -----------------------------------------------------------------


def test_inadmissible_over_nominal_plus_borrowing_in_every_flavor() -> None:
    world = World().node(make_nodes("h", 4, flavor="h100"), make_nodes("a", 4, flavor="a100"))
    world.cq(
        make_cq("q")
        .cohort("c")
        .flavor("h100")
        .nominal(gpu=8)
        .borrowing_limit(gpu=4)
        .flavor("a100")
        .nominal(gpu=8)
        .borrowing_limit(gpu=6),
        make_cq("lender").cohort("c").flavor("h100").nominal(gpu=16).flavor("a100").nominal(gpu=16),
    )
    res = world.submit(wl("w").ns("q").gang(2).gpus(8), wl("ok").ns("q").gang(14).gpus(1)).run()
    assert res.reason("q/w") is R.INADMISSIBLE
    msg = res.message("q/w")
    assert "h100: needs 16 nvidia.com/gpu, quota allows at most 12" in msg
    assert "a100: needs 16 nvidia.com/gpu, quota allows at most 14" in msg
    assert res.admission("q/ok").flavor == "a100"  # 14 > 12 on h100


def test_inadmissible_when_no_cohort_and_over_nominal() -> None:
    world = World().node(make_nodes("n", 4, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=8).borrowing_limit(gpu=8))
    res = world.submit(wl("w").ns("q").gpus(9)).run()
    assert res.reason("q/w") is R.INADMISSIBLE


def test_inadmissible_pod_bigger_than_any_node() -> None:
    world = World().node(make_nodes("n", 4, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=64))
    res = world.submit(wl("w").ns("q").gpus(16)).run()
    assert res.reason("q/w") is R.INADMISSIBLE
    assert "h100: no set of empty nodes can hold the gang" in res.message("q/w")


def test_inadmissible_gang_bigger_than_the_flavor() -> None:
    world = World().node(make_nodes("n", 2, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=64))
    res = world.submit(wl("w").ns("q").gang(3).gpus(8)).run()
    assert res.reason("q/w") is R.INADMISSIBLE


def test_missing_local_queue_is_inadmissible_and_kept() -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=8))
    res = world.submit(
        wl("w1").ns("q").queue("nope").gpus(1),
        wl("w2").ns("q").queue("nope").gpus(1).at(1),
        wl("w3").ns("elsewhere").gpus(1),
    ).run()
    assert res.admitted_ids() == set()
    for wid in ("q/w1", "q/w2"):
        status = res.status(wid)
        assert status.reason is R.INADMISSIBLE
        assert status.cluster_queue is None
        assert status.message == "LocalQueue q/nope does not exist"
    assert res.status("q/w1").position_in_local_queue == 1
    assert res.status("q/w2").position_in_local_queue == 2
    assert res.status("elsewhere/w3").message == "LocalQueue elsewhere/default does not exist"


def test_local_queue_pointing_at_a_missing_cluster_queue() -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=8)).lq("q", "default", "q")
    world.lq("t", "default", "ghost")
    res = world.submit(wl("w").ns("t").gpus(1)).run()
    assert res.reason("t/w") is R.INADMISSIBLE


def test_namespace_not_allowed_is_inadmissible() -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(make_cq("q").namespaces("team-a").flavor("h100").nominal(gpu=8))
    world.lq("team-a", "default", "q").lq("team-b", "default", "q")
    res = world.submit(wl("a").ns("team-a").gpus(1), wl("b").ns("team-b").gpus(1)).run()
    assert res.admitted_ids() == {"team-a/a"}
    assert res.reason("team-b/b") is R.INADMISSIBLE
    assert "team-b" in res.message("team-b/b")


# -- flavors, selectors, taints -----------------------------------------------------


def _two_flavors(first_quota: int, first_nodes: int) -> World:
    world = World().node(
        make_nodes("h", first_nodes, flavor="h100"), make_nodes("a", 2, flavor="a100")
    )
    world.cq(make_cq("q").flavor("h100").nominal(gpu=first_quota).flavor("a100").nominal(gpu=16))
    return world


@pytest.mark.parametrize(
    ("first_quota", "first_nodes", "expected"),
    [(16, 2, "h100"), (8, 2, "a100"), (16, 1, "a100"), (0, 2, "a100")],
    ids=["first-fits", "first-quota-full", "first-nodes-full", "first-no-quota"],
)
def test_flavors_are_tried_in_order(first_quota: int, first_nodes: int, expected: str) -> None:
    world = _two_flavors(first_quota, first_nodes)
    running = wl("r").ns("q").gpus(8).build()
    world.running(make_admitted(running, "q", "h100", {"h-0": 1}))
    res = world.submit(wl("w").ns("q").gpus(8)).run()
    assert res.admission("q/w").flavor == expected


def test_node_selector_is_respected() -> None:
    world = World().node(
        make_nodes("east", 2, flavor="h100", labels={"zone": "east"}),
        make_nodes("west", 2, flavor="h100", labels={"zone": "west"}),
    )
    world.cq(make_cq("q").flavor("h100").nominal(gpu=64))
    res = world.submit(
        wl("w").ns("q").gang(2).gpus(8).selector({"zone": "west"}),
        wl("x").ns("q").gang(3).gpus(8).selector({"zone": "west"}).at(1),
        wl("y").ns("q").gang(3).gpus(8).selector({"zone": "north"}).at(2),
    ).run()
    assert {p.node for p in res.admission("q/w").placements} == {"west-0", "west-1"}
    assert res.reason("q/x") is R.INADMISSIBLE  # 3 pods, 2 west nodes
    assert res.reason("q/y") is R.INADMISSIBLE


def test_taints_and_tolerations() -> None:
    taint = Taint(key="dedicated", value="train", effect=TaintEffect.NO_SCHEDULE)
    world = World().node(
        make_nodes("t", 2, flavor="h100", taints=[taint]), make_nodes("u", 1, flavor="h100")
    )
    world.cq(make_cq("q").flavor("h100").nominal(gpu=64))
    res = world.submit(
        wl("plain").ns("q").gang(2).gpus(8),  # one untainted node: cannot fit
        wl("tol").ns("q").gang(2).gpus(8).tolerate("dedicated", "train").at(1),
        wl("wrong").ns("q").gang(2).gpus(8).tolerate("dedicated", "infer").at(2),
    ).run()
    assert res.reason("q/plain") is R.INADMISSIBLE
    assert res.reason("q/wrong") is R.INADMISSIBLE
    assert res.admitted_ids() == {"q/tol"}
    assert {p.node for p in res.admission("q/tol").placements} <= {"t-0", "t-1", "u-0"}


@pytest.mark.parametrize("on_nodes", [True, False], ids=["nodes-tainted", "flavor-only"])
def test_flavor_taints_need_tolerating(on_nodes: bool) -> None:
    taint = Taint(key="spot", effect=TaintEffect.NO_SCHEDULE)
    world = World().flavor(make_flavor("spot", taints=[taint]))
    world.node(make_nodes("s", 2, flavor="spot", taints=[taint] if on_nodes else []))
    world.cq(make_cq("q").flavor("spot").nominal(gpu=16))
    res = world.submit(wl("a").ns("q").gpus(8), wl("b").ns("q").gpus(8).tolerate("spot")).run()
    assert res.admitted_ids() == {"q/b"}
    assert res.reason("q/a") is R.INADMISSIBLE


# -- throughput and order ----------------------------------------------------------


def test_one_cycle_admits_many_workloads_of_one_queue() -> None:
    world = World().node(make_nodes("n", 2, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=16))
    res = world.submit(*(wl(f"j{i:02d}").ns("q").gpus(1).at(i) for i in range(20))).run()
    assert len(res.admitted_ids()) == 16
    assert res.admitted_ids() == {f"q/j{i:02d}" for i in range(16)}
    assert res.order() == [f"q/j{i:02d}" for i in range(16)]
    assert {res.reason(f"q/j{i}") for i in (16, 17, 18, 19)} == {R.QUOTA_EXCEEDED}


def test_nominal_fit_goes_before_borrowing_despite_priority() -> None:
    world = World().node(make_nodes("n", 4, flavor="h100"))
    world.cq(
        make_cq("a").cohort("c").flavor("h100").nominal(gpu=8),
        make_cq("b").cohort("c").flavor("h100").nominal(gpu=8),
    )
    full = wl("full").ns("a").gpus(8).build()
    world.running(make_admitted(full, "a", "h100", {"n-0": 1}))
    res = world.submit(
        wl("borrow").ns("a").gpus(8).priority(100).at(0),  # must borrow b's quota
        wl("own").ns("b").gpus(8).priority(0).at(9),  # within b's nominal
    ).run()
    assert res.admitted_ids() == {"b/own"}
    assert res.reason("a/borrow") is R.COHORT_EXHAUSTED


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (dict(priority=5, at=9), dict(priority=1, at=0)),
        (dict(priority=1, at=0), dict(priority=1, at=5)),
    ],
    ids=["higher-priority-first", "earlier-creation-first"],
)
@pytest.mark.parametrize("same_queue", [True, False], ids=["same-queue", "across-queues"])
def test_order_priority_then_creation(
    first: dict[str, int], second: dict[str, int], same_queue: bool
) -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(
        make_cq("a").flavor("h100").nominal(gpu=16), make_cq("b").flavor("h100").nominal(gpu=16)
    )
    other = "a" if same_queue else "b"
    res = world.submit(
        wl("second").ns(other).gpus(8).priority(second["priority"]).at(second["at"]),
        wl("first").ns("a").gpus(8).priority(first["priority"]).at(first["at"]),
    ).run()
    assert res.admitted_ids() == {"a/first"}
    assert res.reason(f"{other}/second") is R.NO_NODE_FITS


def test_name_breaks_ties() -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(make_cq("a").flavor("h100").nominal(gpu=8), make_cq("b").flavor("h100").nominal(gpu=8))
    res = world.submit(wl("z").ns("a").gpus(8), wl("a").ns("b").gpus(8)).run()
    assert res.admitted_ids() == {"a/z"}  # "a/z" < "b/a"


def test_positions_are_one_based_and_consistent() -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(make_cq("q").flavor("h100").nominal(gpu=8))
    world.lq("team-a", "main", "q").lq("team-b", "main", "q")
    jobs = [
        wl("a0").ns("team-a").queue("main").gpus(4).priority(3),
        wl("b0").ns("team-b").queue("main").gpus(8).priority(2),
        wl("a1").ns("team-a").queue("main").gpus(8).priority(1).at(1),
        wl("b1").ns("team-b").queue("main").gpus(2).priority(1).at(2),
        wl("a2").ns("team-a").queue("main").gpus(8).priority(0),
    ]
    res = world.submit(*jobs).run()
    # a0 takes 4; b1 (2 GPUs) fits as well; the rest wait.
    assert res.admitted_ids() == {"team-a/a0", "team-b/b1"}
    waiting = ["team-b/b0", "team-a/a1", "team-a/a2"]  # queue order
    assert [res.status(w).position_in_cluster_queue for w in waiting] == [1, 2, 3]
    assert res.status("team-b/b0").position_in_local_queue == 1
    assert res.status("team-a/a1").position_in_local_queue == 1
    assert res.status("team-a/a2").position_in_local_queue == 2
    assert all(res.status(w).cluster_queue == "q" for w in waiting)


def test_same_snapshot_same_decisions() -> None:
    world = _one_queue(False).submit(*(wl(f"j{i}").ns("s").gpus(i % 3 + 1) for i in range(12)))
    snap = world.snapshot()
    assert schedule(snap, 1.0) == schedule(snap, 1.0)
    assert all(a.admitted_at == 1.0 for a in schedule(snap, 1.0).admitted)


def test_namespace_verdict_is_not_shadowed_by_a_same_shape_failure() -> None:
    """A disallowed namespace is Inadmissible even after an equal gang failed on quota."""
    world = World().node(make_nodes("n", 4, flavor="h100"))
    world.cq(make_cq("q").namespaces("x").flavor("h100").nominal(gpu=8))
    world.lq("x", "default", "q").lq("y", "default", "q")
    running = wl("r").ns("x").gpus(4).build()
    world.running(make_admitted(running, "q", "h100", {"n-0": 1}))
    res = world.submit(
        wl("a").ns("x").gpus(8).at(0),  # quota: 4 free of 8
        wl("b").ns("y").gpus(8).at(1),  # same shape, namespace not allowed
        wl("c").ns("x").gpus(2).at(2),
    ).run()
    assert res.reason("x/a") is R.QUOTA_EXCEEDED
    assert res.reason("y/b") is R.INADMISSIBLE
    assert "'y' may not use ClusterQueue 'q'" in res.message("y/b")
    assert res.admitted_ids() == {"x/c"}
