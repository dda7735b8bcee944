"""The cohort pool: nominal quota, borrowing and lending limits, and what fits.

Why it exists: quota is the first gate of admission, and its arithmetic
(Kueue's model, hierarchical cohorts included) is easy to get subtly wrong, so it
lives in one place; the static part is ``core.quota_topology``.

What must stay true, for every ClusterQueue q, cohort c, flavor f and resource r:

- ``guaranteed(q) = nominal(q) - lending_limit(q)``, or 0 with no lending limit;
- a cohort's pool is its subtree quota (``core.quota_topology``), and its use is
  ``sum over children k of max(0, usage(k) - guaranteed(k))``, where a child
  cohort's usage is its own pool use; at a root it never exceeds the pool;
- a cohort with a borrowing limit never takes more than that from its parent
  beyond what it lends it: ``use(c) - guaranteed(c) <= subtree(c) - guaranteed(c) + limit``;
- ``usage(q) <= nominal(q) + borrowing_limit(q)`` when a borrowing limit is set;
- a queue without a cohort never goes above its nominal quota;
- a workload its queue does not let borrow (``ClusterQueue.may_borrow``) never
  takes it above its nominal quota.

The ledger is built in layers: the usage it reads, a copy-on-write overlay over
the snapshot's (``core.quota_usage``), the fair shares read from that usage
(``core.quota_shares``), and here whether a request fits.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from queuemgr.core.loans import REPEAT_VICTIM, NoLoan
from queuemgr.core.model import ClusterQueue, ClusterQueueName, FlavorName, Workload
from queuemgr.core.quota_shares import QuotaShares
from queuemgr.core.quota_topology import Key
from queuemgr.core.quota_watch import QuotaWatch
from queuemgr.core.resources import ResourceName, Resources, format_quantity


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
    # COHORT_EXHAUSTED above the queue's own cohort, or at a borrowing limit: the path
    # of the cohort that binds, and whether its borrowing limit is what binds.
    blocker: tuple[str, bool] | None = None

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
        out = (
            f"needs {q(self.requested)} {r} on {flavor}, queue has {q(free)} free of "
            f"{q(self.nominal)}, cohort lends {q(self.cohort_lends)}"
        )
        if self.blocker is not None:
            path, at_limit = self.blocker
            out += (
                f"; cohort {path} is at its borrowing limit"
                if at_limit
                else f"; cohort {path} has nothing more to lend"
            )
        return out


_NO_LOAN_VERDICTS = {
    NoLoan.RUNTIME: QuotaVerdict.BORROWING_RUNTIME,
    NoLoan.REPEAT_VICTIM: QuotaVerdict.REPEAT_VICTIM,
}
_FITS = QuotaCheck(verdict=QuotaVerdict.FITS)
_FITS_BORROWING = QuotaCheck(verdict=QuotaVerdict.FITS, borrowing=True)
_EMPTY: Mapping[Key, int] = {}


class QuotaLedger(QuotaShares):
    """The cycle's quota: its usage and fair shares, and whether a request fits now."""

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
        chain = topo.chain.get(cq)
        used = self.usage(cq, flavor)
        borrowing = False
        for r, req in request.items():
            if req <= 0:
                continue
            if lim is None or r not in lim.nominal:
                return QuotaCheck(verdict=QuotaVerdict.NOT_COVERED, resource=r, requested=req)
            cur = used.get(r, 0)
            u = cur + req
            nominal = lim.nominal[r]
            if chain is None:
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
            if len(chain) == 1 or cq in topo.plain:
                # One level, or no limit below the root: the root pool's free part is
                # what reaches the queue, without the walk.
                level = chain[-1]
                key = (flavor, r)
                offered = level.subtree.get(key, 0) - self._pool_used.get(level.name, _EMPTY).get(
                    key, 0
                )
                binding, at_limit = level.name, False
            else:
                offered, binding, at_limit = self._available(chain, (flavor, r))
            # The most q may hold now: its cap, and what its cohorts leave it.
            pool_cap = g + offered + max(0, cur - g)
            limit = min(lim.cap[r], pool_cap)
            if u > limit:
                if u > lim.cap[r]:
                    verdict, blocker = QuotaVerdict.QUEUE_LIMIT, None
                else:
                    verdict = QuotaVerdict.COHORT_EXHAUSTED
                    far = at_limit or binding != chain[0].name
                    blocker = (topo.tree.path(binding), at_limit) if far else None
                lends = max(0, limit - cur - max(0, nominal - cur))
                return QuotaCheck(
                    verdict=verdict,
                    resource=r,
                    requested=req,
                    usage=cur,
                    nominal=nominal,
                    cohort_lends=lends,
                    blocker=blocker,
                )
            if u > nominal:
                borrowing = True
        return _FITS_BORROWING if borrowing else _FITS

    def watch(self, cq: ClusterQueue, flavor: FlavorName, w: Workload) -> QuotaWatch:
        """``check_for(cq, flavor, w).fits`` from now on, followed through changes."""
        return QuotaWatch(self, cq, flavor, w)
