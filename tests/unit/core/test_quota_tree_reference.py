"""The quota ledger on cohort trees equals Kueue's hierarchical recursion, recomputed.

Why it exists: ``QuotaTopology`` derives each cohort's subtree quota and guarantee
once, ``QuotaLedger.add`` lifts pool use up the tree incrementally, and ``check``,
``QuotaWatch`` and ``max_usage`` answer from those. Here random cohort trees (depth 1
to 4, cohort quota of their own, borrowing and lending limits at every level) and
random sequences of additions and give-backs check them against the definitions of
core.quota_topology's docstring computed from scratch, node by node, in this file
alone (no import of the topology's numbers):

- ``subtree(q) = nominal(q)``; ``subtree(c) = own(c) + sum over children k of
  (subtree(k) - guaranteed(k))``;
- ``guaranteed(n) = max(0, subtree(n) - lending_limit(n))``, 0 without a lending limit;
- ``use(q) = usage(q)``; ``use(c) = sum over children k of max(0, use(k) - guaranteed(k))``;
- ``available(root) = subtree(root) - use(root)``; below a root,
  ``available(n) = max(0, guaranteed(n) - use(n)) + min(available(parent(n)),
  subtree(n) - guaranteed(n) - max(0, use(n) - guaranteed(n)) + borrowing_limit(n))``,
  the ``min`` only where n sets a borrowing limit;
- a request fits a queue of a cohort iff it is covered (every resource asked for is
  listed in the queue's nominal quota on the flavor) and each amount is at most
  ``available(q)``; a queue without a cohort fits iff ``usage + request <= nominal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    FlavorQuota,
    Workload,
)
from queuemgr.core.quota import QuotaLedger, QuotaVerdict
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.resources import CPU, GPU, MEMORY, ResourceName
from tests.builders import make_workload
from tests.unit.core.tree_scenarios import tree_shapes

FLAVORS = (FlavorName("a"), FlavorName("b"))
RESOURCES = (GPU, CPU)
COHORT_NAMES = [CohortName(n) for n in ("org", "rnd", "prd", "ml", "cv", "x1", "x2", "x3")]

# What each queue and flavor is asked after every addition (MEMORY is never covered).
PROBES: list[dict[ResourceName, int]] = [
    {GPU: 1},
    {GPU: 4, CPU: 2000},
    {CPU: 1500},
    {GPU: 9},
    {GPU: 0},
    {GPU: 1, MEMORY: 1},
]
# What the watches follow (check_for: the queue's borrowing_max_runtime applies).
WORKLOADS: list[Workload] = [
    make_workload("one").gpus(1).build(),
    make_workload("gang").gang(3).gpus(2).cpu("1").max_runtime(50).build(),
    make_workload("long").gang(2).gpus(3).max_runtime(500).build(),
    make_workload("cpu").cpu("3").build(),
    make_workload("mem").gpus(1).memory("1Gi").build(),
]

Key = tuple[FlavorName, ResourceName]
Usage = dict[tuple[ClusterQueueName, FlavorName], dict[ResourceName, int]]


@dataclass
class Tree:
    flavors: tuple[FlavorName, ...]
    cohorts: dict[CohortName, Cohort]
    queues: dict[ClusterQueueName, ClusterQueue]
    # (queue index, flavor index, gpu delta, millicores delta); give-backs are clamped
    # so that usage never goes below zero.
    adds: list[tuple[int, int, int, int]] = field(default_factory=list)


def _amounts(
    draw: st.DrawFn, gpu: st.SearchStrategy[int], cpu: st.SearchStrategy[int]
) -> dict[ResourceName, int]:
    out: dict[ResourceName, int] = {}
    if draw(st.integers(0, 2)):  # mostly listed
        out[GPU] = draw(gpu)
    if draw(st.booleans()):
        out[CPU] = draw(cpu)
    return out


def _maybe(draw: st.DrawFn, values: dict[ResourceName, int]) -> dict[ResourceName, int]:
    return values if draw(st.integers(0, 2)) == 0 else {}


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    flavors = FLAVORS[: draw(st.integers(1, 2))]
    parents = draw(tree_shapes(COHORT_NAMES))
    cohorts: dict[CohortName, Cohort] = {}
    small = st.integers(0, 8)
    millis = st.sampled_from([0, 1000, 2500, 8000])
    for name, parent in parents.items():
        own = []
        for f in flavors:
            if draw(st.integers(0, 2)) == 0:
                continue
            own.append(
                FlavorQuota(
                    flavor=f,
                    nominal=_maybe(draw, _amounts(draw, small, millis)),
                    borrowing_limit=_maybe(draw, _amounts(draw, small, millis)),
                    lending_limit=_maybe(draw, _amounts(draw, st.integers(0, 12), millis)),
                )
            )
        cohorts[name] = Cohort(name=name, parent=parent, flavors=tuple(own))
    queues: dict[ClusterQueueName, ClusterQueue] = {}
    for i in range(draw(st.integers(3, 6))):
        qname = ClusterQueueName(f"q{i}")
        cohort = draw(st.sampled_from([None, *parents]))
        quotas = []
        for f in draw(st.permutations(flavors))[: draw(st.integers(1, len(flavors)))]:
            nominal = _amounts(draw, st.integers(0, 8), st.sampled_from([0, 2000, 4000, 16000]))
            quotas.append(
                FlavorQuota(
                    flavor=f,
                    nominal=nominal,
                    borrowing_limit=_maybe(draw, _amounts(draw, small, millis)),
                    lending_limit=_maybe(draw, _amounts(draw, st.integers(0, 10), millis)),
                )
            )
        queues[qname] = ClusterQueue(
            name=qname,
            flavors=tuple(quotas),
            cohort=cohort,
            borrowing_max_runtime=draw(st.sampled_from([None, 100.0])),
        )
    adds = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(queues) - 1),
                st.integers(0, len(flavors) - 1),
                st.integers(-6, 9),
                st.sampled_from([-4000, -1000, 0, 0, 500, 2000, 6000]),
            ),
            max_size=14,
        )
    )
    return Tree(flavors=flavors, cohorts=cohorts, queues=queues, adds=adds)


# -- the reference: Kueue's recursion, from the config and the usage alone ---------------


class Reference:
    """Subtree quota, guarantee, use and available capacity of every node, per key."""

    def __init__(self, tree: Tree, usage: Usage) -> None:
        self.tree = tree
        self.usage = usage
        self.child_cohorts: dict[CohortName, list[CohortName]] = {c: [] for c in tree.cohorts}
        self.members: dict[CohortName, list[ClusterQueueName]] = {c: [] for c in tree.cohorts}
        for c in tree.cohorts.values():
            if c.parent is not None:
                self.child_cohorts[c.parent].append(c.name)
        for q in tree.queues.values():
            if q.cohort is not None:
                self.members[q.cohort].append(q.name)
        self._memo: dict[tuple[str, CohortName, Key], int] = {}

    # A queue -----------------------------------------------------------------
    def _quota(self, q: ClusterQueueName, f: FlavorName) -> FlavorQuota | None:
        return next((fq for fq in self.tree.queues[q].flavors if fq.flavor == f), None)

    def q_nominal(self, q: ClusterQueueName, key: Key) -> int:
        fq = self._quota(q, key[0])
        return 0 if fq is None else fq.nominal.get(key[1], 0)

    def q_guaranteed(self, q: ClusterQueueName, key: Key) -> int:
        fq = self._quota(q, key[0])
        lend = None if fq is None else fq.lending_limit.get(key[1])
        return 0 if lend is None else max(0, self.q_nominal(q, key) - lend)

    def q_use(self, q: ClusterQueueName, key: Key) -> int:
        return self.usage.get((q, key[0]), {}).get(key[1], 0)

    def q_borrowing_limit(self, q: ClusterQueueName, key: Key) -> int | None:
        fq = self._quota(q, key[0])
        return None if fq is None else fq.borrowing_limit.get(key[1])

    # A cohort ----------------------------------------------------------------
    def _own(self, c: CohortName, key: Key, what: str) -> int | None:
        for fq in self.tree.cohorts[c].flavors:
            if fq.flavor == key[0]:
                amounts: Mapping[ResourceName, int] = getattr(fq, what)
                return amounts.get(key[1])
        return None

    def subtree(self, c: CohortName, key: Key) -> int:
        memo = ("subtree", c, key)
        if memo not in self._memo:
            total = self._own(c, key, "nominal") or 0
            for k in self.child_cohorts[c]:
                total += self.subtree(k, key) - self.guaranteed(k, key)
            for q in self.members[c]:
                total += self.q_nominal(q, key) - self.q_guaranteed(q, key)
            self._memo[memo] = total
        return self._memo[memo]

    def guaranteed(self, c: CohortName, key: Key) -> int:
        lend = self._own(c, key, "lending_limit")
        return 0 if lend is None else max(0, self.subtree(c, key) - lend)

    def use(self, c: CohortName, key: Key) -> int:
        memo = ("use", c, key)
        if memo not in self._memo:
            total = 0
            for k in self.child_cohorts[c]:
                total += max(0, self.use(k, key) - self.guaranteed(k, key))
            for q in self.members[c]:
                total += max(0, self.q_use(q, key) - self.q_guaranteed(q, key))
            self._memo[memo] = total
        return self._memo[memo]

    def available(self, c: CohortName, key: Key) -> int:
        memo = ("available", c, key)
        if memo not in self._memo:
            parent = self.tree.cohorts[c].parent
            s, u = self.subtree(c, key), self.use(c, key)
            if parent is None:
                out = s - u
            else:
                g = self.guaranteed(c, key)
                b = self._own(c, key, "borrowing_limit")
                up = self.available(parent, key)
                if b is not None:
                    up = min(up, s - g - max(0, u - g) + b)
                out = max(0, g - u) + up
            self._memo[memo] = out
        return self._memo[memo]

    def q_available(self, q: ClusterQueueName, key: Key) -> int:
        cohort = self.tree.queues[q].cohort
        assert cohort is not None
        n, g, u = self.q_nominal(q, key), self.q_guaranteed(q, key), self.q_use(q, key)
        up = self.available(cohort, key)
        b = self.q_borrowing_limit(q, key)
        if b is not None:
            up = min(up, n - g - max(0, u - g) + b)
        return max(0, g - u) + up

    # Answers -----------------------------------------------------------------
    def covered(
        self, q: ClusterQueueName, f: FlavorName, request: Mapping[ResourceName, int]
    ) -> bool:
        fq = self._quota(q, f)
        return all(fq is not None and r in fq.nominal for r, v in request.items() if v > 0)

    def fits(
        self,
        q: ClusterQueueName,
        f: FlavorName,
        request: Mapping[ResourceName, int],
        *,
        no_loan: bool = False,
    ) -> bool:
        if not self.covered(q, f, request):
            return False
        for r, req in request.items():
            if req <= 0:
                continue
            key = (f, r)
            used, nominal = self.q_use(q, key), self.q_nominal(q, key)
            if self.tree.queues[q].cohort is None or no_loan:
                if used + req > nominal:
                    return False
                if self.tree.queues[q].cohort is None:
                    continue
            if req > self.q_available(q, key):
                return False
        return True


# -- the test -----------------------------------------------------------------------------


def _compare(
    tree: Tree, ledger: QuotaLedger, usage: Usage, topo: QuotaTopology, *, fresh: bool = False
) -> None:
    ref = Reference(tree, usage)
    for q in tree.queues:
        for f in tree.flavors:
            for request in PROBES:
                check = ledger.check(q, f, request)
                want = ref.fits(q, f, request)
                assert check.fits == want, (q, f, request, check, usage)
                # The first resource that fails names the verdict: a covered request is
                # never NOT_COVERED, and one reported so is not covered.
                not_covered = check.verdict is QuotaVerdict.NOT_COVERED
                if ref.covered(q, f, request) or not_covered:
                    assert not_covered != ref.covered(q, f, request), (q, f, request, check)
            for w in WORKLOADS:
                cq = tree.queues[q]
                want = ref.fits(q, f, w.total_requests, no_loan=cq.no_loan(w) is not None)
                assert ledger.check_for(cq, f, w).fits == want, (q, f, w.name, usage)
    for c in tree.cohorts:
        got = ledger.cohort_usage(c)
        for f in tree.flavors:
            for r in RESOURCES:
                assert got.get((f, r), 0) == ref.use(c, (f, r)), (c, f, r, dict(got), usage)
    if not fresh:
        return
    # A ledger built from the same usage at once (the snapshot's path) agrees.
    nested: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
    for (q, f), vec in usage.items():
        nested.setdefault(q, {})[f] = dict(vec)
    built = QuotaLedger(topo, nested)
    for c in tree.cohorts:
        for f in tree.flavors:
            for r in RESOURCES:
                assert built.cohort_usage(c).get((f, r), 0) == ref.use(c, (f, r)), (c, f, r)
    for q in tree.queues:
        for f in tree.flavors:
            for request in PROBES:
                assert built.check(q, f, request).fits == ref.fits(q, f, request), (q, f, request)


@settings(max_examples=200, deadline=None)
@given(trees())
def test_ledger_matches_the_hierarchical_recursion(tree: Tree) -> None:
    topo = QuotaTopology(tree.queues, tree.cohorts)
    # On an idle tree, the most a queue could hold is its available capacity, capped.
    idle = Reference(tree, {})
    for q, cq in tree.queues.items():
        for f in tree.flavors:
            for r in (*RESOURCES, MEMORY):
                fq = cq.quota(f)
                if fq is None or r not in fq.nominal:
                    want = 0
                elif cq.cohort is None:
                    want = fq.nominal[r]
                else:
                    cap = fq.nominal[r] + fq.borrowing_limit[r] if r in fq.borrowing_limit else None
                    avail = idle.q_available(q, (f, r))
                    want = avail if cap is None else min(cap, avail)
                assert topo.max_usage(q, f, r) == want, (q, f, r)
                nominal = fq.nominal.get(r, 0) if fq is not None else 0
                assert topo.max_usage(q, f, r, borrows=False) == nominal, (q, f, r)

    ledger = QuotaLedger(topo, {})
    usage: Usage = {}
    names = list(tree.queues)
    watches = []
    _compare(tree, ledger, usage, topo)
    for n, (i, fi, gpus, millis) in enumerate(tree.adds):
        q, f = names[i], tree.flavors[fi]
        vec = usage.setdefault((q, f), {})
        request = {GPU: max(gpus, -vec.get(GPU, 0)), CPU: max(millis, -vec.get(CPU, 0))}
        if n == len(tree.adds) // 2:  # watch from here on, through the other half
            watches = [
                (tree.queues[name], fl, w, ledger.watch(tree.queues[name], fl, w))
                for name in names
                for fl in tree.flavors
                for w in WORKLOADS
            ]
        ledger.add(q, f, request)
        for r, v in request.items():
            vec[r] = vec.get(r, 0) + v
        for cq, fl, w, watch in watches:
            if n % 2:
                watch.change(q, f, request, 1)
            else:  # the same, as a release of its opposite
                watch.change(q, f, {r: -v for r, v in request.items()}, -1)
            assert watch.fits() == ledger.check_for(cq, fl, w).fits, (cq.name, fl, w.name)
        _compare(tree, ledger, usage, topo, fresh=n == len(tree.adds) - 1)
