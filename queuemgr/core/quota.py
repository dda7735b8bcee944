"""The cohort pool: nominal quota, borrowing and lending limits, and what fits.

Why it exists: quota is the first gate of admission, and its arithmetic
(Kueue's model) is easy to get subtly wrong, so it lives in one place.

What must stay true, for every ClusterQueue q, flavor f and resource r:

- ``guaranteed(q) = nominal(q) - lending_limit(q)``, or 0 with no lending limit;
- the cohort pool is ``sum_p (nominal(p) - guaranteed(p))``, and its use is
  ``sum_p max(0, usage(p) - guaranteed(p))``, which never exceeds the pool;
- ``usage(q) <= nominal(q) + borrowing_limit(q)`` when a borrowing limit is set;
- a queue without a cohort never goes above its nominal quota;
- a workload its queue does not let borrow (``ClusterQueue.may_borrow``) never
  takes it above its nominal quota.

The ledger is a copy-on-write overlay over the snapshot's usage: a cycle adds
to it and the snapshot underneath is never touched.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from queuemgr.core.model import (
    REPEAT_VICTIM,
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    NoLoan,
    Workload,
)
from queuemgr.core.resources import ResourceName, Resources, format_quantity

_NO_CAP = 1 << 62
_SHARE_MEMO = 1 << 16  # entries of QuotaTopology's share memo before it starts over
_Share = tuple[int, Fraction]
_NO_SHARE: _Share = (0, Fraction(0))


class QuotaVerdict(enum.Enum):
    FITS = "Fits"
    QUEUE_LIMIT = "QueueLimit"  # over nominal (no cohort) or nominal + borrowing limit
    COHORT_EXHAUSTED = "CohortExhausted"  # the queue may borrow, but the pool is used up
    NOT_COVERED = "NotCovered"  # the flavor lists no quota for a requested resource
    # It would have to borrow, and its queue lends only to shorter declared runtimes.
    BORROWING_RUNTIME = "BorrowingRuntimeLimit"
    # It would have to borrow, and it was preempted too often to borrow again.
    REPEAT_VICTIM = "PreemptedTooOften"


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaCheck:
    verdict: QuotaVerdict
    borrowing: bool = False
    resource: ResourceName | None = None
    requested: int = 0
    usage: int = 0
    nominal: int = 0
    cohort_lends: int = 0
    runtime_limit: float = 0.0  # BORROWING_RUNTIME: the longest max_runtime that borrows

    @property
    def fits(self) -> bool:
        return self.verdict is QuotaVerdict.FITS

    def describe(self, flavor: FlavorName) -> str:
        r = self.resource or ""
        if self.verdict is QuotaVerdict.NOT_COVERED:
            return f"the queue has no {r} quota on {flavor}"
        if self.verdict is QuotaVerdict.BORROWING_RUNTIME:
            return (
                f"needs {format_quantity(r, self.requested)} {r} on {flavor} beyond the "
                f"queue's nominal quota, and the queue borrows only for workloads that "
                f"declare a max_runtime of at most {self.runtime_limit:g} s"
            )
        if self.verdict is QuotaVerdict.REPEAT_VICTIM:
            free = max(0, self.nominal - self.usage)
            return (
                f"preempted {REPEAT_VICTIM} times, it borrows no more: it waits for its "
                f"queue's nominal quota (needs {format_quantity(r, self.requested)} {r} "
                f"on {flavor}, {format_quantity(r, free)} free of "
                f"{format_quantity(r, self.nominal)})"
            )

        def q(v: int) -> str:
            return format_quantity(r, v)

        free = max(0, self.nominal - self.usage)
        return (
            f"needs {q(self.requested)} {r} on {flavor}, queue has {q(free)} free of "
            f"{q(self.nominal)}, cohort lends {q(self.cohort_lends)}"
        )


_NO_LOAN_VERDICTS = {
    NoLoan.RUNTIME: QuotaVerdict.BORROWING_RUNTIME,
    NoLoan.REPEAT_VICTIM: QuotaVerdict.REPEAT_VICTIM,
}
_FITS = QuotaCheck(verdict=QuotaVerdict.FITS)
_FITS_BORROWING = QuotaCheck(verdict=QuotaVerdict.FITS, borrowing=True)
_EMPTY: Mapping[tuple[FlavorName, ResourceName], int] = {}
_EMPTY_VEC: Resources = {}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Limits:
    nominal: Mapping[ResourceName, int]
    cap: Mapping[ResourceName, int]  # nominal + borrowing limit, _NO_CAP if unset
    guaranteed: Mapping[ResourceName, int]


class QuotaTopology:
    """Static quota structure derived from the ClusterQueues; built once per config."""

    def __init__(self, cluster_queues: Mapping[ClusterQueueName, ClusterQueue]) -> None:
        self.cohort_of: dict[ClusterQueueName, CohortName | None] = {}
        self.limits: dict[tuple[ClusterQueueName, FlavorName], _Limits] = {}
        self.pool: dict[CohortName, dict[tuple[FlavorName, ResourceName], int]] = {}
        self.lendable: dict[CohortName, dict[ResourceName, int]] = {}
        self.members: dict[CohortName, list[ClusterQueueName]] = {}
        self.weight: dict[ClusterQueueName, Fraction] = {}
        self.flavor_limits: dict[ClusterQueueName, list[tuple[FlavorName, _Limits]]] = {}
        for name in sorted(cluster_queues):
            cq = cluster_queues[name]
            self.cohort_of[name] = cq.cohort
            self.weight[name] = cq.weight
            if cq.cohort is not None:
                self.members.setdefault(cq.cohort, []).append(name)
            pool = self.pool.setdefault(cq.cohort, {}) if cq.cohort is not None else None
            for fq in cq.flavors:
                guaranteed: dict[ResourceName, int] = {}
                cap: dict[ResourceName, int] = {}
                for r, nominal in fq.nominal.items():
                    lend = fq.lending_limit.get(r)
                    guaranteed[r] = 0 if lend is None else max(0, nominal - lend)
                    borrow = fq.borrowing_limit.get(r)
                    if cq.cohort is None:
                        cap[r] = nominal
                    else:
                        cap[r] = _NO_CAP if borrow is None else nominal + borrow
                    if pool is not None:
                        key = (fq.flavor, r)
                        pool[key] = pool.get(key, 0) + nominal - guaranteed[r]
                limits = _Limits(nominal=dict(fq.nominal), cap=cap, guaranteed=guaranteed)
                self.limits[(name, fq.flavor)] = limits
                self.flavor_limits.setdefault(name, []).append((fq.flavor, limits))
        for cohort, pool_map in self.pool.items():
            lendable = self.lendable.setdefault(cohort, {})
            for (_f, r), v in pool_map.items():
                lendable[r] = lendable.get(r, 0) + v
        # (queue, what it borrows) -> its share: see share_of.
        self._shares: dict[tuple[ClusterQueueName, tuple[tuple[ResourceName, int], ...]], _Share]
        self._shares = {}
        # (queue, flavor) -> (cohort, guaranteed quota) of a queue in a cohort (QuotaLedger.add).
        self.pooled: dict[tuple[ClusterQueueName, FlavorName], tuple[CohortName, Resources]] = {}
        for name, of in self.cohort_of.items():
            if of is None:
                continue
            for fq in cluster_queues[name].flavors:
                self.pooled[(name, fq.flavor)] = (of, self.limits[(name, fq.flavor)].guaranteed)

    def share_of(
        self, cq: ClusterQueueName, cohort: CohortName, borrowed: Mapping[ResourceName, int]
    ) -> _Share:
        """``cq``'s weighted dominant share when it borrows ``borrowed`` (per resource).

        The answer depends on nothing else (the weight and the cohort's lendable totals
        are static), so it is memoised: a busy cycle asks for the same few shares
        hundreds of thousands of times (the victim search's fairness test), and exact
        Fraction arithmetic was the costliest part of answering. The largest ratio is
        found by integer cross-multiplication, exact as comparing Fractions is, and a
        Fraction is built once, for the memo.
        """
        key = (cq, tuple(borrowed.items()))
        hit = self._shares.get(key)
        if hit is not None:
            return hit
        num, den = 0, 1  # the largest borrowed / lendable so far
        lendable = self.lendable.get(cohort, {})
        for r, b in borrowed.items():
            total = lendable.get(r, 0)
            if total > 0 and b * den > num * total:
                num, den = b, total
        weight = self.weight[cq]
        if num == 0:
            hit = _NO_SHARE
        elif weight == 0:
            hit = (1, Fraction(num, den))
        else:
            hit = (0, Fraction(num, den) / weight)
        if len(self._shares) >= _SHARE_MEMO:
            self._shares.clear()  # bounded: a long run meets ever new usage
        self._shares[key] = hit
        return hit

    def max_usage(
        self, cq: ClusterQueueName, flavor: FlavorName, r: ResourceName, *, borrows: bool = True
    ) -> int:
        """The most q could ever hold of r on f with an otherwise idle cohort
        (only its nominal quota for a workload that may not borrow)."""
        lim = self.limits.get((cq, flavor))
        if lim is None or r not in lim.nominal:
            return 0
        cohort = self.cohort_of[cq]
        if cohort is None or not borrows:
            return lim.nominal[r]
        return min(lim.cap[r], lim.guaranteed[r] + self.pool[cohort].get((flavor, r), 0))


class QuotaLedger:
    """Usage per queue and flavor, with each cohort's pool use, as a cycle overlay."""

    def __init__(
        self,
        topology: QuotaTopology,
        usage: Mapping[ClusterQueueName, Mapping[FlavorName, Resources]],
    ) -> None:
        self.topology = topology
        self._base = usage
        self.version = 0  # counts additions, so callers can tell whether a check still holds
        self._own: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
        self._pool_used: dict[CohortName, dict[tuple[FlavorName, ResourceName], int]] = {}
        for cq, per_flavor in usage.items():
            cohort = topology.cohort_of.get(cq)
            if cohort is None:
                continue
            used = self._pool_used.setdefault(cohort, {})
            for flavor, vec in per_flavor.items():
                lim = topology.limits.get((cq, flavor))
                for r, v in vec.items():
                    g = 0 if lim is None else lim.guaranteed.get(r, 0)
                    if v > g:
                        used[(flavor, r)] = used.get((flavor, r), 0) + v - g

    def usage(self, cq: ClusterQueueName, flavor: FlavorName) -> Mapping[ResourceName, int]:
        own = self._own.get(cq)
        if own is not None and flavor in own:
            return own[flavor]
        return self._base.get(cq, {}).get(flavor, {})

    def check_for(
        self, cq: ClusterQueue, flavor: FlavorName, w: Workload, request: Resources | None = None
    ) -> QuotaCheck:
        """``check`` of ``w`` (or its ``request``, a partial admission) in its queue ``cq``."""
        why = cq.no_loan(w)
        return self.check(
            cq.name,
            flavor,
            w.total_requests if request is None else request,
            no_loan=why,
            runtime_limit=cq.borrowing_max_runtime or 0.0,
        )

    def check(
        self,
        cq: ClusterQueueName,
        flavor: FlavorName,
        request: Resources,
        *,
        no_loan: NoLoan | None = None,
        runtime_limit: float = 0.0,
    ) -> QuotaCheck:
        """Whether ``request`` fits ``cq``'s quota on ``flavor`` now, and if it borrows.

        ``no_loan``, if given, is why the workload may not borrow (``ClusterQueue.no_loan``;
        ``runtime_limit`` is the queue's borrowing_max_runtime, for the words): it fits
        only within the nominal quota.
        """
        topo = self.topology
        lim = topo.limits.get((cq, flavor))
        cohort = topo.cohort_of.get(cq)
        used = self.usage(cq, flavor)
        if cohort is not None:
            pool_map = topo.pool[cohort]
            used_map = self._pool_used.get(cohort, _EMPTY)
        borrowing = False
        for r, req in request.items():
            if req <= 0:
                continue
            if lim is None or r not in lim.nominal:
                return QuotaCheck(verdict=QuotaVerdict.NOT_COVERED, resource=r, requested=req)
            cur = used.get(r, 0)
            u = cur + req
            nominal = lim.nominal[r]
            if cohort is None:
                if u > nominal:
                    return QuotaCheck(
                        verdict=QuotaVerdict.QUEUE_LIMIT,
                        resource=r,
                        requested=req,
                        usage=cur,
                        nominal=nominal,
                    )
                continue
            if u > nominal and no_loan is not None:
                # Kept to its nominal quota, that is what it waits for, whatever the pool.
                return QuotaCheck(
                    verdict=_NO_LOAN_VERDICTS[no_loan],
                    resource=r,
                    requested=req,
                    usage=cur,
                    nominal=nominal,
                    runtime_limit=runtime_limit,
                )
            g = lim.guaranteed[r]
            pool = pool_map.get((flavor, r), 0)
            pool_used = used_map.get((flavor, r), 0)
            # The most q may hold now: its cap, and what the pool leaves it.
            pool_cap = g + pool - pool_used + max(0, cur - g)
            limit = min(lim.cap[r], pool_cap)
            if u > limit:
                verdict = (
                    QuotaVerdict.QUEUE_LIMIT if u > lim.cap[r] else QuotaVerdict.COHORT_EXHAUSTED
                )
                lends = max(0, limit - cur - max(0, nominal - cur))
                return QuotaCheck(
                    verdict=verdict,
                    resource=r,
                    requested=req,
                    usage=cur,
                    nominal=nominal,
                    cohort_lends=lends,
                )
            if u > nominal:
                borrowing = True
        return _FITS_BORROWING if borrowing else _FITS

    def add(self, cq: ClusterQueueName, flavor: FlavorName, request: Resources) -> None:
        self.version += 1
        per_flavor = self._own.get(cq)
        if per_flavor is None:
            per_flavor = self._own[cq] = {}
        vec = per_flavor.get(flavor)
        if vec is None:
            vec = per_flavor[flavor] = dict(self._base.get(cq, {}).get(flavor, {}))
        topo = self.topology
        pooled = topo.pooled.get((cq, flavor))
        if pooled is None:
            cohort = topo.cohort_of.get(cq)
            if cohort is None:
                for r, req in request.items():
                    vec[r] = vec.get(r, 0) + req
                return
            pooled = (cohort, _EMPTY_VEC)  # a flavor the queue has no quota on
        cohort, guaranteed = pooled
        used = self._pool_used.get(cohort)
        if used is None:
            used = self._pool_used[cohort] = {}
        for r, req in request.items():
            cur = vec.get(r, 0)
            new = cur + req
            vec[r] = new
            # The pool holds what goes beyond the guarantee: max(0, usage - guaranteed).
            g = guaranteed.get(r, 0)
            delta = (new - g if new > g else 0) - (cur - g if cur > g else 0)
            if delta:
                key = (flavor, r)
                used[key] = used.get(key, 0) + delta

    def watch(self, cq: ClusterQueue, flavor: FlavorName, w: Workload) -> QuotaWatch:
        """``check_for(cq, flavor, w).fits`` from now on, followed through changes."""
        return QuotaWatch(self, cq, flavor, w)

    def share(
        self, cq: ClusterQueueName, extra: tuple[FlavorName, Resources] | None = None
    ) -> tuple[int, Fraction]:
        """Weighted dominant resource share, optionally after admitting ``extra``.

        Returned as ``(infinite, value)`` so that a zero weight that borrows
        sorts after every finite share, and comparisons stay exact.
        """
        topo = self.topology
        cohort = topo.cohort_of.get(cq)
        if cohort is None:
            return _NO_SHARE
        # What is borrowed per resource decides the share (with the queue's static
        # weight and its cohort's lendable totals): one integer pass, then the memo.
        borrowed: dict[ResourceName, int] = {}
        for flavor, lim in topo.flavor_limits.get(cq, ()):
            vec = self.usage(cq, flavor)
            nominal = lim.nominal
            if extra is not None and extra[0] == flavor:
                more = extra[1]
                for r, v in vec.items():
                    over = v + more.get(r, 0) - nominal.get(r, 0)
                    if over > 0:
                        borrowed[r] = borrowed.get(r, 0) + over
                for r, v in more.items():
                    if r not in vec:
                        over = v - nominal.get(r, 0)
                        if over > 0:
                            borrowed[r] = borrowed.get(r, 0) + over
            else:
                for r, v in vec.items():
                    over = v - nominal.get(r, 0)
                    if over > 0:
                        borrowed[r] = borrowed.get(r, 0) + over
        if not borrowed:
            return _NO_SHARE
        return topo.share_of(cq, cohort, borrowed)


class QuotaWatch:
    """Whether one workload fits its queue's quota on one flavor, while usage changes.

    Why it exists: reservation planning (core.reservations) walks the running
    workloads' expected ends, giving back their quota one by one, and asks at each
    end whether the gang fits; a ledger addition and a full check per step were a
    large part of a busy cycle. The answer depends only on the queue's usage of the
    requested resources on that flavor and on the cohort pool's use of them (so on
    the usage of every queue of the cohort), which this keeps as a few integers.

    What must stay true: given the same changes, ``fits`` equals
    ``QuotaLedger.check_for(cq, flavor, w).fits`` on the ledger it was made from
    (tests/unit/core/test_quota_reference.py); the ledger is read once, when the
    watch is made, and never changed.
    """

    __slots__ = ("_cohort", "_flavor", "_guaranteed", "_limits", "_name", "_pool_used", "_usage")

    def __init__(self, ledger: QuotaLedger, cq: ClusterQueue, flavor: FlavorName, w: Workload):
        topo = ledger.topology
        self._name = cq.name
        self._flavor = flavor
        lim = topo.limits.get((cq.name, flavor))
        cohort = self._cohort = topo.cohort_of.get(cq.name)
        no_borrowing = not cq.may_borrow(w)
        # Per requested resource: (resource, request, the most the queue may then hold by
        # its own limits, guaranteed, cohort pool); None when it never fits (NOT_COVERED).
        self._limits: list[tuple[ResourceName, int, int, int, int]] | None = []
        for r, req in w.total_requests.items():
            if req <= 0:
                continue
            if lim is None or r not in lim.nominal:
                self._limits = None
                break
            nominal = lim.nominal[r]
            if cohort is None:
                self._limits.append((r, req, nominal, 0, 0))
            else:
                ceiling = min(nominal, lim.cap[r]) if no_borrowing else lim.cap[r]
                pool = topo.pool[cohort].get((flavor, r), 0)
                self._limits.append((r, req, ceiling, lim.guaranteed[r], pool))
        tracked = [r for r, *_ in self._limits or ()]
        # Usage of the tracked resources on the flavor, of the queue and of its cohort
        # peers (whose usage moves the pool's use), with each one's guaranteed quota.
        self._usage: dict[ClusterQueueName, dict[ResourceName, int]] = {}
        self._guaranteed: dict[ClusterQueueName, Resources] = {}
        self._pool_used: dict[ResourceName, int] = {}
        for name in topo.members.get(cohort, [cq.name]) if cohort is not None else [cq.name]:
            used = ledger.usage(name, flavor)
            self._usage[name] = {r: used.get(r, 0) for r in tracked}
            peer = topo.limits.get((name, flavor))
            self._guaranteed[name] = peer.guaranteed if peer is not None else _EMPTY_VEC
        if cohort is not None:
            pool_used = ledger._pool_used.get(cohort, _EMPTY)
            self._pool_used = {r: pool_used.get((flavor, r), 0) for r in tracked}

    def change(self, cq: ClusterQueueName, flavor: FlavorName, held: Resources, sign: int) -> None:
        """``cq`` now holds (sign 1) or has given back (sign -1) ``held`` on ``flavor``."""
        if flavor != self._flavor:
            return
        usage = self._usage.get(cq)
        if usage is None:
            return  # neither the queue nor a cohort peer: its quota is apart
        pooled = self._cohort is not None
        g_of = self._guaranteed[cq]
        pool_used = self._pool_used
        for r, cur in usage.items():
            v = held.get(r, 0)
            if not v:
                continue
            new = usage[r] = cur + sign * v
            if pooled:
                # The pool holds what goes beyond the guarantee: max(0, usage - guaranteed).
                g = g_of.get(r, 0)
                pool_used[r] += (new - g if new > g else 0) - (cur - g if cur > g else 0)

    @property
    def covered(self) -> bool:
        """Whether the flavor lists quota for every requested resource (else never fits)."""
        return self._limits is not None

    def fits(self) -> bool:
        limits = self._limits
        if limits is None:
            return False
        mine = self._usage[self._name]
        pooled = self._cohort is not None
        for r, req, ceiling, g, pool in limits:
            cur = mine[r]
            u = cur + req
            if u > ceiling:
                return False
            # What the pool leaves the queue: its guarantee, the pool's free part, and
            # what it already takes from the pool.
            if pooled and u > g + pool - self._pool_used[r] + (cur - g if cur > g else 0):
                return False
        return True
