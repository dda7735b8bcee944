"""A ClusterQueue's resource weights fold MIG slices and shared GPUs into GPUs in its
dominant share (docs/scheduling.md, "Resource weights"), and nowhere else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    Node,
    NodeName,
)
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.quota_topology import NO_SHARE, QuotaTopology
from queuemgr.core.resources import CPU, GPU, ResourceName
from queuemgr.core.weights import ResourceWeight, ShareFold, weights_problem
from tests.builders import FLAVOR_LABEL, World, make_admitted, make_cq, make_nodes
from tests.builders import make_workload as wl
from tests.unit.core.test_properties import SETTINGS

MIG = ResourceName("nvidia.com/mig-1g.10gb")
MIG3 = ResourceName("nvidia.com/mig-3g.40gb")
SHARED = ResourceName("nvidia.com/gpu.shared")
FULL, SLICED = FlavorName("full"), FlavorName("sliced")


def weight(r: ResourceName, n: int, d: int = 1, to: ResourceName = GPU) -> ResourceWeight:
    return ResourceWeight(resource=r, numerator=n, denominator=d, counts_as=to)


ONE_SEVENTH = weight(MIG, 1, 7)


def _fleet_queue(name: str, *, gpu: int = 0, mig: int = 0, cpu: int = 0) -> ClusterQueue:
    """A queue of cohort c with quota on a full-GPU flavor (GPUs, cpu) and a MIG flavor."""
    return (
        make_cq(name)
        .cohort("c")
        .flavor("full")
        .nominal(gpu=gpu, cpu=cpu)
        .flavor("sliced")
        .nominal(**{MIG: mig, MIG3: 0, SHARED: 0})
        .build()
    )


def _topology(
    weights: tuple[ResourceWeight, ...], lender: dict[ResourceName, int]
) -> QuotaTopology:
    """A lender holding ``lender`` (GPUs and cpu on full, the rest on sliced) and the
    borrower ``q`` (nominal 0) with ``weights``."""
    on_full = {r: v for r, v in lender.items() if r in (GPU, CPU)}
    on_sliced = {r: v for r, v in lender.items() if r not in (GPU, CPU)}
    lend = make_cq("lender").cohort("c").flavor("full").nominal(**on_full)
    lend = lend.flavor("sliced").nominal(**on_sliced)
    q = dataclasses.replace(_fleet_queue("q"), resource_weights=weights)
    queues = {ClusterQueueName("lender"): lend.build(), ClusterQueueName("q"): q}
    return QuotaTopology(queues)


@dataclass
class FoldCase:
    id: str
    weights: tuple[ResourceWeight, ...]
    lender: dict[ResourceName, int]
    used: dict[ResourceName, int]  # what q holds, all borrowed (its nominal is 0)
    share: Fraction
    unweighted: Fraction = field(default=Fraction(-1))  # the share without the weights


FOLD_CASES = [
    # 28 slices and 32 GPUs lendable: 14 slices are 2 GPUs of 36.
    FoldCase(
        "mig-1/7", (ONE_SEVENTH,), {GPU: 32, MIG: 28}, {MIG: 14}, Fraction(2, 36), Fraction(1, 2)
    ),
    # Slices and GPUs borrowed together add up in GPU units.
    FoldCase(
        "mig-and-gpu",
        (ONE_SEVENTH,),
        {GPU: 32, MIG: 28},
        {GPU: 2, MIG: 14},
        Fraction(4, 36),
        Fraction(1, 2),
    ),
    # Without weights the share is the largest dimension, exactly as before.
    FoldCase(
        "no-weights", (), {GPU: 32, MIG: 28}, {GPU: 2, MIG: 14}, Fraction(1, 2), Fraction(1, 2)
    ),
    # A weight on a resource the queue does not borrow changes only the denominator.
    FoldCase(
        "gpu-only", (ONE_SEVENTH,), {GPU: 32, MIG: 28}, {GPU: 9}, Fraction(9, 36), Fraction(9, 32)
    ),
    # A dimension that is not folded still dominates when it is larger: 48 of 96 cpus
    # (in millicores, as the quota holds them).
    FoldCase(
        "cpu-dominates",
        (ONE_SEVENTH,),
        {GPU: 32, MIG: 28, CPU: 96},
        {MIG: 28, CPU: 48_000},
        Fraction(1, 2),
        Fraction(1, 1),
    ),
    # Time-sliced GPUs with 4 replicas: one shared GPU is a quarter of a GPU.
    FoldCase(
        "shared-1/4",
        (weight(SHARED, 1, 4),),
        {GPU: 8, SHARED: 32},
        {SHARED: 16},
        Fraction(4, 16),
        Fraction(1, 2),
    ),
    # Two weights onto one target, with different denominators (exact, lcm 7*2).
    FoldCase(
        "two-profiles",
        (ONE_SEVENTH, weight(MIG3, 1, 2)),
        {GPU: 8, MIG: 14, MIG3: 4},
        {MIG: 7, MIG3: 2},
        Fraction(2, 12),
        Fraction(1, 2),
    ),
    # The target need not be a GPU: slices counted in 3g.40gb units (a 1g is 1/3 of one).
    FoldCase(
        "other-target",
        (weight(MIG, 1, 3, MIG3),),
        {MIG: 6, MIG3: 2},
        {MIG: 3},
        Fraction(1, 4),
        Fraction(1, 2),
    ),
    # A weight above one: a resource may count as more than its target.
    FoldCase(
        "weight-above-one",
        (weight(SHARED, 3, 2),),
        {GPU: 2, SHARED: 2},
        {SHARED: 1},
        Fraction(3, 10),
        Fraction(1, 2),
    ),
    # Nothing lendable in the target alone: the folded denominator is the slices'.
    FoldCase(
        "target-has-none", (ONE_SEVENTH,), {MIG: 14}, {MIG: 7}, Fraction(1, 2), Fraction(1, 2)
    ),
]


@pytest.mark.parametrize("case", FOLD_CASES, ids=[c.id for c in FOLD_CASES])
def test_share_folds_weighted_resources_into_their_target(case: FoldCase) -> None:
    for weights, want in ((case.weights, case.share), ((), case.unweighted)):
        topo = _topology(weights, case.lender)
        usage = {
            ClusterQueueName("q"): {
                FULL: {r: v for r, v in case.used.items() if r in (GPU, CPU)},
                SLICED: {r: v for r, v in case.used.items() if r not in (GPU, CPU)},
            }
        }
        infinite, share = QuotaLedger(topo, usage).share(ClusterQueueName("q"))
        assert (infinite, share) == (0, want), (weights, share)


def test_nothing_borrowed_is_no_share_whatever_the_weights() -> None:
    topo = _topology((ONE_SEVENTH,), {GPU: 32, MIG: 28})
    ledger = QuotaLedger(topo, {ClusterQueueName("q"): {}})
    assert ledger.share(ClusterQueueName("q")) == NO_SHARE


@dataclass
class BadCase:
    id: str
    weights: tuple[ResourceWeight, ...]
    index: int
    words: str


BAD_CASES = [
    BadCase("itself", (weight(GPU, 1, 2),), 0, "nvidia.com/gpu cannot count as itself"),
    BadCase(
        "twice", (ONE_SEVENTH, weight(MIG, 1, 8)), 1, "nvidia.com/mig-1g.10gb is weighted twice"
    ),
    BadCase(
        "chain",
        (weight(SHARED, 1, 4, MIG3), weight(MIG3, 3, 7)),
        0,
        "counts as nvidia.com/mig-3g.40gb, which is itself weighted",
    ),
    BadCase(
        "cycle",
        (weight(MIG, 1, 3, MIG3), weight(MIG3, 3, 1, MIG)),
        0,
        "which is itself weighted",
    ),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=[c.id for c in BAD_CASES])
def test_bad_weights_are_refused_naming_the_entry(case: BadCase) -> None:
    problem = weights_problem(case.weights)
    assert problem is not None
    assert problem[0] == case.index
    assert case.words in problem[1]
    with pytest.raises(ValueError, match=rf"team: resource_weights\[{case.index}\]: "):
        ClusterQueue(name=ClusterQueueName("team"), flavors=(), resource_weights=case.weights)


@pytest.mark.parametrize(
    ("field_", "value"),
    [
        ("numerator", 0),
        ("numerator", -1),
        ("denominator", 0),
        ("denominator", True),
        ("numerator", 0.5),
    ],
    ids=[
        "numerator-zero",
        "numerator-negative",
        "denominator-zero",
        "denominator-bool",
        "numerator-float",
    ],
)
def test_weight_terms_are_positive_integers(field_: str, value: object) -> None:
    terms: dict[str, object] = {"numerator": 1, "denominator": 7, field_: value}
    with pytest.raises(
        ValueError, match=f"{field_} of nvidia.com/mig-1g.10gb must be a positive integer"
    ):
        ResourceWeight(resource=MIG, **terms)  # type: ignore[arg-type]


def test_a_weight_reads_as_the_command_line_writes_it() -> None:
    assert str(ONE_SEVENTH) == "nvidia.com/mig-1g.10gb=1/7:nvidia.com/gpu"
    assert ONE_SEVENTH.fraction == Fraction(1, 7)


@given(
    weights=st.lists(
        st.tuples(
            st.sampled_from([MIG, MIG3, SHARED]),
            st.integers(min_value=1, max_value=9),
            st.integers(min_value=1, max_value=9),
        ),
        max_size=3,
        unique_by=lambda t: t[0],
    ),
    amounts=st.dictionaries(
        st.sampled_from([GPU, CPU, MIG, MIG3, SHARED]), st.integers(min_value=0, max_value=10**6)
    ),
)
@SETTINGS
def test_fold_is_the_exact_weighted_sum(
    weights: list[tuple[ResourceName, int, int]], amounts: dict[ResourceName, int]
) -> None:
    """The fold is every amount times one integer scale, a weighted one moved to its
    target times N/D: the same as summing Fractions, never rounded."""
    fold = ShareFold.of([weight(r, n, d) for r, n, d in weights])
    if fold is None:
        assert not weights
        return
    got = fold.apply(amounts)
    want: dict[ResourceName, Fraction] = {}
    by = {r: Fraction(n, d) for r, n, d in weights}
    for r, v in amounts.items():
        target = GPU if r in by else r
        want[target] = want.get(target, Fraction(0)) + v * by.get(r, Fraction(1))
    assert {r: Fraction(v, fold.scale) for r, v in got.items()} == want
    assert all(type(v) is int for v in got.values())
    assert not any(r in by for r in got)


# -- what it changes in a cycle ----------------------------------------------------


def _mig_nodes(count: int) -> list[Node]:
    return [
        Node(name=NodeName(f"mig-{i}"), labels={FLAVOR_LABEL: "sliced"}, allocatable={MIG: 7})
        for i in range(count)
    ]


def _fleet(weighted: bool, *, fair: bool = False) -> World:
    """Four 8-GPU nodes and four nodes of seven 1g.10gb slices; an idle lender holds 8
    GPUs and the 28 slices of quota, serve and train (nominal 0) borrow. serve holds 21
    slices (three GPUs of compute), with the weights on both queues or on neither."""
    weights = (ONE_SEVENTH,) if weighted else ()
    world = World().node(make_nodes("full", 4, flavor="full", cpu="0"), _mig_nodes(4))
    lender = make_cq("lender").cohort("c").flavor("full").nominal(gpu=8).flavor("sliced")
    world.cq(lender.nominal(**{MIG: 28}))
    for name in ("serve", "train"):
        world.cq(dataclasses.replace(_fleet_queue(name), resource_weights=weights))
    world.cohorts = [Cohort(name=CohortName("c"), fair_sharing=fair)]
    for i in range(3):
        slices = wl(f"slices-{i}").ns("serve").pod_set("main", 1, **{MIG: 7}).build()
        world.running(make_admitted(slices, "serve", "sliced", {f"mig-{i}": 1}))
    return world


@pytest.mark.parametrize(
    ("weighted", "first"), [(True, "serve"), (False, "train")], ids=["weighted", "unweighted"]
)
def test_the_free_gpu_goes_to_the_queue_holding_less_compute(weighted: bool, first: str) -> None:
    """train borrows 4 GPUs, serve 21 slices. After one more GPU, serve's share is
    (1 + 21/7) / (8 + 28/7) = 1/3 with the weights, train's 5/12; without them serve's
    is 21/28 = 3/4 (its slices dominate) and train's 5/8, so train went first though
    it holds more compute."""
    world = _fleet(weighted)
    run = wl("run").ns("train").gpus(4).build()
    world.running(make_admitted(run, "train", "full", {"full-0": 1}))
    world.submit(wl("next").ns("serve").gpus(1).at(5), wl("next").ns("train").gpus(1).at(5))
    res = world.run()
    assert res.order() == [
        f"{first}/next",
        *(f"{q}/next" for q in ("serve", "train") if q != first),
    ]


@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "unweighted"])
def test_fair_sharing_preemption_compares_weighted_shares(weighted: bool) -> None:
    """train borrows the lender's 8 GPUs with two runs admitted after serve's 1-GPU job
    started waiting. With the weights, serve after admission (1 + 3) / 12 is no more
    than train after losing a run (4 / 12): fair sharing takes the run. Without them
    serve's share is 3/4 (its slices) and train's would fall to 1/2: nothing is taken."""
    world = _fleet(weighted, fair=True)
    for i in range(2):
        run = wl(f"run-{i}").ns("train").gpus(4).build()
        world.running(make_admitted(run, "train", "full", {f"full-{i}": 1}, at=10.0))
    world.submit(wl("next").ns("serve").gpus(1).at(5))
    res = world.run(now=20.0)
    evicted = {e.victim.workload.id for e in res.decisions.evicted}
    assert len(evicted) == (1 if weighted else 0), evicted
    assert all(wid.startswith("train/run-") for wid in evicted)
    assert ("serve/next" in res.admitted_once_victims_stop(now=20.0)) is weighted


def test_quota_is_not_weighted() -> None:
    """The weights are for fairness only: 21 slices are three GPUs' worth, but a queue
    with no GPU quota left still cannot take a GPU, and slices fit by their own quota."""
    world = _fleet(True)
    world.running(
        make_admitted(wl("run").ns("train").gpus(8).build(), "train", "full", {"full-0": 1})
    )
    world.submit(
        wl("gpu").ns("serve").gpus(1).at(5),
        wl("slices").ns("serve").pod_set("main", 1, **{MIG: 7}).at(5),
    )
    res = world.run()
    assert res.order() == ["serve/slices"]
