"""The quota ledger's incremental answers equal the plain definitions, recomputed.

Why it exists: ``QuotaLedger.add`` keeps the cohort pool's use incrementally and
``QuotaLedger.share`` answers from a memo with integer comparisons; both are hot in
the victim search. Here random cohorts and random sequences of additions check
them against the definitions of core.quota's docstring computed from scratch with
Fractions, and ``QuotaWatch`` against the ledger's own checks, so a speed-up can
never change a fit or a fair-sharing order.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from queuemgr.core.model import ClusterQueue, ClusterQueueName, FlavorName, Workload
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.resources import CPU, GPU, ResourceName
from tests.builders import make_cq, make_workload

FLAVORS = (FlavorName("a"), FlavorName("b"))
RESOURCES = (GPU, CPU)
NAMES = [ClusterQueueName(f"q{i}") for i in range(4)]


WORKLOADS: list[Workload] = [
    make_workload("one").gpus(1).build(),
    make_workload("gang").gang(4).gpus(2).cpu("1").max_runtime(50).build(),
    make_workload("long").gang(2).gpus(3).max_runtime(500).build(),
    make_workload("mem").gpus(1).memory("1Gi").build(),  # no queue has memory quota
]


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[dict[ClusterQueueName, ClusterQueue], list[tuple[int, int, int, int]]]:
    queues: dict[ClusterQueueName, ClusterQueue] = {}
    for name in NAMES:
        b = make_cq(name).cohort(draw(st.sampled_from(["c", "c", "d", None])))
        b.borrowing_max_runtime(draw(st.sampled_from([None, 100.0])))
        b.weight(draw(st.sampled_from([Fraction(1), Fraction(0), Fraction(3, 2), Fraction(2)])))
        for flavor in draw(st.sampled_from([FLAVORS[:1], FLAVORS, FLAVORS[1:]])):
            b.flavor(flavor).nominal(
                gpu=draw(st.integers(0, 8)), cpu=draw(st.sampled_from(["0", "4", "16"]))
            )
            if draw(st.booleans()):
                b.lending_limit(gpu=draw(st.integers(0, 8)))
        queues[name] = b.build()
    # (queue, flavor, gpus, millicores): each added in turn; negative gives back (at most
    # what is held).
    adds = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(NAMES) - 1),
                st.integers(0, 1),
                st.integers(-6, 12),
                st.integers(-4000, 9000),
            ),
            max_size=12,
        )
    )
    return queues, adds


def reference_share(
    topo: QuotaTopology,
    usage: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]],
    cq: ClusterQueueName,
) -> tuple[int, Fraction]:
    cohort = topo.cohort_of[cq]
    if cohort is None:
        return (0, Fraction(0))
    borrowed: dict[ResourceName, int] = {}
    for flavor, lim in topo.flavor_limits.get(cq, ()):
        for r, v in usage.get(cq, {}).get(flavor, {}).items():
            if v - lim.nominal.get(r, 0) > 0:
                borrowed[r] = borrowed.get(r, 0) + v - lim.nominal.get(r, 0)
    lendable = topo.lendable.get(cohort, {})
    best = max(
        (Fraction(b, lendable[r]) for r, b in borrowed.items() if lendable.get(r, 0) > 0),
        default=Fraction(0),
    )
    weight = topo.weight[cq]
    if best == 0:
        return (0, best)
    return (1, best) if weight == 0 else (0, best / weight)


def reference_pool_used(
    topo: QuotaTopology,
    usage: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]],
    cohort: str,
    flavor: FlavorName,
    r: ResourceName,
) -> int:
    total = 0
    for cq, per_flavor in usage.items():
        if topo.cohort_of.get(cq) != cohort:
            continue
        lim = topo.limits.get((cq, flavor))
        g = 0 if lim is None else lim.guaranteed.get(r, 0)
        total += max(0, per_flavor.get(flavor, {}).get(r, 0) - g)
    return total


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_ledger_matches_definitions(
    world: tuple[dict[ClusterQueueName, ClusterQueue], list[tuple[int, int, int, int]]],
) -> None:
    queues, adds = world
    topo = QuotaTopology(queues)
    ledger = QuotaLedger(topo, {})
    usage: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
    watches = []
    for n, (i, f, gpus, millicores) in enumerate(adds):
        cq, flavor = NAMES[i], FLAVORS[f]
        # A negative amount gives back, never more than is held: usage is never negative.
        held = usage.get(cq, {}).get(flavor, {})
        request = {GPU: max(gpus, -held.get(GPU, 0)), CPU: max(millicores, -held.get(CPU, 0))}
        if n == len(adds) // 2:  # watch from here on, through the other half
            watches = [
                (queues[name], fl, w, ledger.watch(queues[name], fl, w))
                for name in NAMES
                for fl in FLAVORS
                for w in WORKLOADS
            ]
        ledger.add(cq, flavor, request)
        for q, fl, w, watch in watches:
            if n % 2:
                watch.change(cq, flavor, request, 1)
            else:  # the same, as a release of its opposite
                watch.change(cq, flavor, {r: -v for r, v in request.items()}, -1)
            assert watch.fits() == ledger.check_for(q, fl, w).fits
        vec = usage.setdefault(cq, {}).setdefault(flavor, {})
        for r, v in request.items():
            vec[r] = vec.get(r, 0) + v
        for name in NAMES:
            assert ledger.share(name) == reference_share(topo, usage, name)
            extra = {GPU: 1, CPU: 500}
            with_extra = {q: {fl: dict(v) for fl, v in per.items()} for q, per in usage.items()}
            more = with_extra.setdefault(name, {}).setdefault(FLAVORS[0], {})
            for r, v in extra.items():
                more[r] = more.get(r, 0) + v
            assert ledger.share(name, (FLAVORS[0], extra)) == reference_share(
                topo, with_extra, name
            )
        for cohort in ("c", "d"):
            for flavor in FLAVORS:
                for r in RESOURCES:
                    got = ledger._pool_used.get(cohort, {}).get((flavor, r), 0)
                    assert got == reference_pool_used(topo, usage, cohort, flavor, r)
