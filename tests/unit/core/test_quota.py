"""Quota arithmetic: nominal, borrowing and lending limits, and the cohort pool."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from queuemgr.core.model import ClusterQueueName, FlavorName
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.quota import QuotaLedger, QuotaVerdict
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.verdicts import PendingReason
from tests.builders import ClusterQueueBuilder, World, make_admitted, make_cq, make_nodes
from tests.builders import make_workload as wl

H100 = FlavorName("h100")
FITS, LIMIT, EXHAUSTED, NOT_COVERED = (
    QuotaVerdict.FITS,
    QuotaVerdict.QUEUE_LIMIT,
    QuotaVerdict.COHORT_EXHAUSTED,
    QuotaVerdict.NOT_COVERED,
)


def ledger(queues: list[ClusterQueueBuilder], usage: dict[str, int]) -> QuotaLedger:
    """A ledger over ``queues`` (all on h100) with ``usage[cq]`` GPUs in use."""
    built = {q.name: q for q in (b.build() for b in queues)}
    topo = QuotaTopology(built)
    return QuotaLedger(topo, {ClusterQueueName(cq): {H100: {GPU: n}} for cq, n in usage.items()})


def q(name: str, nominal: int, cohort: str | None = "c") -> ClusterQueueBuilder:
    return make_cq(name).cohort(cohort).flavor("h100").nominal(gpu=nominal)


@dataclass
class Case:
    id: str
    queues: list[ClusterQueueBuilder]
    cq: str
    request: int
    verdict: QuotaVerdict
    borrowing: bool = False
    usage: dict[str, int] = field(default_factory=dict)


CASES = [
    # A borrowing limit caps how far above nominal a queue may go.
    Case("borrow-within-limit", [q("a", 4).borrowing_limit(gpu=2), q("b", 8)], "a", 6, FITS, True),
    Case("borrow-over-limit", [q("a", 4).borrowing_limit(gpu=2), q("b", 8)], "a", 7, LIMIT),
    Case("borrow-limit-zero", [q("a", 4).borrowing_limit(gpu=0), q("b", 8)], "a", 5, LIMIT),
    Case("no-borrow-limit", [q("a", 4), q("b", 8)], "a", 12, FITS, True),
    Case("no-borrow-limit-pool-bound", [q("a", 4), q("b", 8)], "a", 13, EXHAUSTED),
    Case("within-nominal", [q("a", 4), q("b", 8)], "a", 4, FITS, False),
    # A lending limit keeps nominal - lending_limit guaranteed, out of the pool.
    Case("lend-within-limit", [q("a", 0), q("b", 8).lending_limit(gpu=2)], "a", 2, FITS, True),
    Case("lend-over-limit", [q("a", 0), q("b", 8).lending_limit(gpu=2)], "a", 3, EXHAUSTED),
    Case(
        "lender-keeps-guaranteed",
        [q("a", 0), q("b", 8).lending_limit(gpu=2)],
        "b",
        6,
        FITS,
        False,
        {"a": 2},
    ),
    Case(
        "lender-lent-part-is-borrowed",
        [q("a", 0), q("b", 8).lending_limit(gpu=2)],
        "b",
        7,
        EXHAUSTED,
        usage={"a": 2},
    ),
    Case("no-lend-limit-all-lent", [q("a", 0), q("b", 8)], "b", 1, EXHAUSTED, usage={"a": 8}),
    # Without a cohort, nominal is a hard cap; a borrowing limit changes nothing.
    Case("no-cohort-fits", [q("a", 8, None)], "a", 2, FITS, False, {"a": 6}),
    Case("no-cohort-over", [q("a", 8, None)], "a", 3, LIMIT, usage={"a": 6}),
    Case("no-cohort-borrow-limit", [q("a", 8, None).borrowing_limit(gpu=4)], "a", 9, LIMIT),
    # Two borrowers share one pool.
    Case(
        "pool-shared",
        [q("a", 0), q("b", 0), q("l", 8)],
        "b",
        3,
        EXHAUSTED,
        usage={"a": 6},
    ),
    Case("pool-shared-fits", [q("a", 0), q("b", 0), q("l", 8)], "b", 2, FITS, True, {"a": 6}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_quota_check(case: Case) -> None:
    check = ledger(case.queues, case.usage).check(
        ClusterQueueName(case.cq), H100, {GPU: case.request}
    )
    assert check.verdict is case.verdict, check
    if check.fits:
        assert check.borrowing is case.borrowing
    else:
        assert check.resource == GPU
        assert check.requested == case.request


@pytest.mark.parametrize("case", [c for c in CASES if c.verdict is not FITS], ids=lambda c: c.id)
def test_one_gpu_less_fits(case: Case) -> None:
    """The failing verdicts sit exactly on the limit: one GPU less fits."""
    book = ledger(case.queues, case.usage)
    assert book.check(ClusterQueueName(case.cq), H100, {GPU: case.request - 1}).fits


def test_cohort_exhausted_message_names_resource_and_numbers() -> None:
    book = ledger([q("a", 64), q("b", 64)], {"a": 56, "b": 64})
    check = book.check(ClusterQueueName("a"), H100, {GPU: 32})
    assert check.verdict is EXHAUSTED
    assert check.describe(H100) == (
        "needs 32 nvidia.com/gpu on h100, queue has 8 free of 64, cohort lends 0"
    )
    # With an idle lender the message says how much the cohort still lends.
    book = ledger([q("a", 8), q("b", 16)], {"a": 8, "b": 4})
    check = book.check(ClusterQueueName("a"), H100, {GPU: 16})
    assert check.verdict is EXHAUSTED
    assert check.describe(H100) == (
        "needs 16 nvidia.com/gpu on h100, queue has 0 free of 8, cohort lends 12"
    )


def test_uncovered_resource() -> None:
    book = ledger([q("a", 8)], {})
    check = book.check(ClusterQueueName("a"), H100, {GPU: 1, ResourceName("memory"): 5})
    assert check.verdict is NOT_COVERED
    assert check.describe(H100) == "the queue has no memory quota on h100"


def test_ledger_add_is_an_overlay() -> None:
    base = {ClusterQueueName("a"): {H100: {GPU: 2}}}
    topo = QuotaTopology({q.name: q for q in [q("a", 4).build(), q("b", 4).build()]})
    book = QuotaLedger(topo, base)
    book.add(ClusterQueueName("a"), H100, {GPU: 4})
    assert book.usage(ClusterQueueName("a"), H100) == {GPU: 6}
    assert base == {"a": {"h100": {GPU: 2}}}
    # a now borrows 2 of b's 4: b may take only 2 more.
    assert book.check(ClusterQueueName("b"), H100, {GPU: 2}).fits
    assert not book.check(ClusterQueueName("b"), H100, {GPU: 3}).fits


# -- the same rules through schedule() ---------------------------------------------


def _world_with_usage(queues: list[ClusterQueueBuilder], used: dict[str, int]) -> World:
    """16 nodes of 8 h100 GPUs; ``used[cq]`` GPUs held by running 1-GPU-per-pod gangs."""
    world = World().cq(*queues).node(make_nodes("n", 16, flavor="h100"))
    node = 0
    for cq, gpus in used.items():
        for i in range(gpus // 8):
            w = wl(f"run-{i}").ns(cq).gpus(8).build()
            world.running(make_admitted(w, cq, "h100", {f"n-{node}": 1}))
            node += 1
    return world


def test_schedule_reports_cohort_exhausted_with_numbers() -> None:
    world = _world_with_usage([q("a", 64), q("b", 64)], {"a": 56, "b": 64})
    world.policy = SchedulerPolicy(reservation_depth=0)  # the quota's words alone
    res = world.submit(wl("big").ns("a").gang(4).gpus(8).at(1)).run()
    assert res.reason("a/big") is PendingReason.COHORT_EXHAUSTED
    assert res.message("a/big") == (
        "needs 32 nvidia.com/gpu on h100, queue has 8 free of 64, cohort lends 0"
    )


def test_schedule_reports_quota_exceeded_without_cohort() -> None:
    world = _world_with_usage([q("a", 16, None)], {"a": 8})
    res = world.submit(wl("w").ns("a").gang(2).gpus(8), wl("fits").ns("a").gpus(8).at(1)).run()
    assert res.reason("a/w") is PendingReason.QUOTA_EXCEEDED
    assert "needs 16 nvidia.com/gpu on h100, queue has 8 free of 16" in res.message("a/w")
    assert res.admitted_ids() == {"a/fits"}


def test_schedule_reports_quota_exceeded_over_borrowing_limit() -> None:
    world = _world_with_usage([q("a", 8).borrowing_limit(gpu=8), q("b", 64)], {"a": 8})
    res = world.submit(wl("w").ns("a").gang(2).gpus(8)).run()
    assert res.reason("a/w") is PendingReason.QUOTA_EXCEEDED
    res = world.submit(wl("x").ns("a").gpus(8)).run()
    assert res.admitted_ids() == {"a/x"}
    assert res.admission("a/x").borrowing
