"""Borrowing queues share an idle cohort by weighted dominant resource share."""

from __future__ import annotations

from fractions import Fraction

import pytest

from queuemgr.core.model import ClusterQueueName, FlavorName
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.resources import CPU, GPU
from queuemgr.core.snapshot import admitted_requests
from tests.builders import World, make_cq, make_nodes
from tests.builders import make_workload as wl


def _borrowers(weights: dict[str, int], jobs: int | dict[str, int] = 40, pool: int = 24) -> World:
    """An idle lender with ``pool`` GPUs and borrowers with nominal 0 and many 1-GPU jobs."""
    world = World().node(make_nodes("n", pool // 8 + 2, flavor="h100"))
    world.cq(make_cq("lender").cohort("c").flavor("h100").nominal(gpu=pool))
    for name, weight in weights.items():
        world.cq(make_cq(name).cohort("c").weight(weight).flavor("h100").nominal(gpu=0))
        # Interleaved creation times: arrival order favours nobody.
        n = jobs if isinstance(jobs, int) else jobs[name]
        world.submit(*(wl(f"j{i:02d}").ns(name).gpus(1).at(i) for i in range(n)))
    return world


@pytest.mark.parametrize(
    ("weights", "pool"),
    [
        ({"a": 1, "b": 1}, 24),
        ({"a": 1, "b": 1, "c": 1}, 24),
        ({"a": 2, "b": 1}, 24),
        ({"a": 3, "b": 1}, 32),
        ({"a": 1, "b": 2, "c": 5}, 32),
    ],
    ids=["1:1", "1:1:1", "2:1", "3:1", "1:2:5"],
)
def test_idle_pool_split_by_weight(weights: dict[str, int], pool: int) -> None:
    res = _borrowers(weights, pool=pool).run()
    got = res.gpus_by_cq()
    assert sum(got.values()) == pool  # the whole idle pool is used
    assert "lender" not in got
    total_weight = sum(weights.values())
    for name, weight in weights.items():
        fair = Fraction(pool * weight, total_weight)
        assert abs(got[name] - fair) <= 1, (name, got)
    assert all(a.admission.borrowing for a in res.decisions.admitted)


def test_weight_order_is_visible_in_admission_order() -> None:
    """After each admission the lowest weighted share goes next: 2:1 interleaves a,a,b."""
    res = _borrowers({"a": 2, "b": 1}, pool=12).run()
    queues = [wid.split("/")[0] for wid in res.order()]
    for k in range(3, len(queues) + 1, 3):
        prefix = queues[:k]
        assert prefix.count("a") == 2 * prefix.count("b"), prefix


def test_zero_weight_borrows_only_what_others_leave() -> None:
    world = _borrowers({"a": 1, "z": 0}, jobs={"a": 6, "z": 20}, pool=16)
    res = world.run()
    # a has 6 jobs only; z (weight 0) gets the rest, and only after a is done.
    assert res.gpus_by_cq() == {"a": 6, "z": 10}
    order = [wid.split("/")[0] for wid in res.order()]
    assert order[:6] == ["a"] * 6


def test_drf_equalises_dominant_shares() -> None:
    """A GPU-heavy tenant and a CPU-heavy one end with equal dominant shares."""
    world = World().node(make_nodes("n", 6, flavor="h100", gpu=8, cpu="64"))
    world.cq(make_cq("lender").cohort("c").flavor("h100").nominal(gpu=16, cpu="128"))
    for name in ("gpu-heavy", "cpu-heavy"):
        world.cq(make_cq(name).cohort("c").flavor("h100").nominal(gpu=0, cpu=0))
    world.submit(*(wl(f"g{i:02d}").ns("gpu-heavy").gpus(2).cpu("8").at(i) for i in range(20)))
    world.submit(*(wl(f"c{i:02d}").ns("cpu-heavy").gpus(1).cpu("16").at(i) for i in range(20)))
    res = world.run()
    used: dict[str, dict[str, int]] = {}
    for a in res.decisions.admitted:
        vec = used.setdefault(a.admission.cluster_queue, {})
        for r, v in admitted_requests(a).items():
            vec[r] = vec.get(r, 0) + v
    share = {
        cq: max(Fraction(vec.get(GPU, 0), 16), Fraction(vec.get(CPU, 0), 128_000))
        for cq, vec in used.items()
    }
    # Each job adds 1/8 to its tenant's dominant share; they end within one job.
    assert share["gpu-heavy"] > Fraction(1, 2)
    assert abs(share["gpu-heavy"] - share["cpu-heavy"]) <= Fraction(1, 8), share
    # The dominant resources are the expected ones.
    assert Fraction(used["gpu-heavy"][GPU], 16) > Fraction(used["gpu-heavy"][CPU], 128_000)
    assert Fraction(used["cpu-heavy"][CPU], 128_000) > Fraction(used["cpu-heavy"][GPU], 16)


def test_share_is_weighted_dominant_borrowed_fraction() -> None:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(make_cq("lender").cohort("c").flavor("h100").nominal(gpu=16, cpu="100"))
    world.cq(make_cq("a").cohort("c").weight(2).flavor("h100").nominal(gpu=2, cpu="10"))
    config = world.config()
    gpu_cpu = {GPU: 6, CPU: 20_000}
    book = QuotaLedger(
        config.quota_topology, {ClusterQueueName("a"): {FlavorName("h100"): gpu_cpu}}
    )
    # Borrowed: 4 GPUs of 18 lendable, 10 cpu of 110 lendable; weight 2.
    assert book.share(ClusterQueueName("a")) == (0, Fraction(4, 18) / 2)
    assert book.share(ClusterQueueName("a"), (FlavorName("h100"), {GPU: 2})) == (
        0,
        Fraction(6, 18) / 2,
    )
    assert book.share(ClusterQueueName("lender")) == (0, Fraction(0))
