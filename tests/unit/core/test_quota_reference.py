"""The quota ledger's incremental answers equal the plain definitions, recomputed.

Why it exists: ``QuotaLedger.add`` keeps the cohort pool's use incrementally and
``QuotaLedger.share`` answers from a memo with integer comparisons; both are hot in
the victim search. Here random cohorts and random sequences of additions check
them against the definitions of core.quota's docstring computed from scratch with
Fractions, so a speed-up can never change a fit or a fair-sharing order.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from queuemgr.core.model import ClusterQueue, ClusterQueueName, FlavorName
from queuemgr.core.quota import QuotaLedger, QuotaTopology
from queuemgr.core.resources import CPU, GPU, ResourceName
from tests.builders import make_cq

FLAVORS = (FlavorName("a"), FlavorName("b"))
RESOURCES = (GPU, CPU)
NAMES = [ClusterQueueName(f"q{i}") for i in range(4)]


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[dict[ClusterQueueName, ClusterQueue], list[tuple[int, int, int, int]]]:
    queues: dict[ClusterQueueName, ClusterQueue] = {}
    for name in NAMES:
        b = make_cq(name).cohort(draw(st.sampled_from(["c", "c", "d", None])))
        b.weight(draw(st.sampled_from([Fraction(1), Fraction(0), Fraction(3, 2), Fraction(2)])))
        for flavor in draw(st.sampled_from([FLAVORS[:1], FLAVORS, FLAVORS[1:]])):
            b.flavor(flavor).nominal(
                gpu=draw(st.integers(0, 8)), cpu=draw(st.sampled_from(["0", "4", "16"]))
            )
            if draw(st.booleans()):
                b.lending_limit(gpu=draw(st.integers(0, 8)))
        queues[name] = b.build()
    # (queue, flavor, gpus, millicores): each added in turn; negative gives back.
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
    for i, f, gpus, millicores in adds:
        cq, flavor = NAMES[i], FLAVORS[f]
        request = {GPU: gpus, CPU: millicores}
        ledger.add(cq, flavor, request)
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
