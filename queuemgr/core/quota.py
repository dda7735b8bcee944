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

The ledger is a copy-on-write overlay over the snapshot's usage: a cycle adds
to it and the snapshot underneath is never touched.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from queuemgr.core.loans import REPEAT_VICTIM, NoLoan
from queuemgr.core.model import ClusterQueue, ClusterQueueName, CohortName, FlavorName, Workload
from queuemgr.core.quota_topology import NO_SHARE, Key, Level, QuotaTopology, Share, lifted
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
_EMPTY_VEC: Resources = {}
_SHARES_MEMO = 1 << 16  # entries of a ledger's cohort-share memo before it starts over
# A memoised share: (the stamp it holds for, the exact share, its float for the heap).
_Entry = tuple[int, Share, float]


def _entry(stamp: int, share: Share) -> _Entry:
    infinite, exact = share
    return (stamp, share, math.inf if infinite else float(exact))


_NO_ENTRY: _Entry = (-1, NO_SHARE, 0.0)


class QuotaLedger:
    """Usage per queue and flavor, with each cohort's use of its pool, as a cycle overlay."""

    def __init__(
        self,
        topology: QuotaTopology,
        usage: Mapping[ClusterQueueName, Mapping[FlavorName, Resources]],
    ) -> None:
        self.topology = topology
        self._base = usage
        self.version = 0  # counts additions, so callers can tell whether a check still holds
        # Answers that hold until the next addition, shared by every queue that asks:
        # what a cohort offers below it (per (cohort, flavor, resource)), and a cohort's
        # share with a given addition (path_share). In a tree, the queues of one group
        # ask the same of their common cohorts hundreds of times between additions.
        self._memo_version = 0
        # The version at which each cohort's pool use last changed: a queue's order key
        # holds the shares of its cohorts, stale only once one of them changed.
        self.touched: dict[CohortName, int] = {}
        # The same for a queue's own usage, and its shares asked since (share()).
        self._queue_touched: dict[ClusterQueueName, int] = {}
        self._shares: dict[tuple[object, ...], _Entry] = {}
        self._offered: dict[tuple[CohortName, Key], tuple[int, CohortName, bool]] = {}
        # (cohort, flavor, addition) -> (the cohort's touched version, its share then).
        self._cohort_shares: dict[tuple[object, ...], _Entry] = {}
        self._own: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
        # Per cohort: what its members hold beyond their guarantees (what it lends them).
        self._pool_used: dict[CohortName, dict[Key, int]] = {}
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
        for name in topology.tree.deepest_first():
            level = topology.levels[name]
            mine = self._pool_used.get(name)
            if not mine:
                continue
            assert level.parent is not None
            up = self._pool_used.setdefault(level.parent, {})
            for key, v in mine.items():
                g = level.guaranteed.get(key, 0)
                if v > g:
                    up[key] = up.get(key, 0) + v - g

    def usage(self, cq: ClusterQueueName, flavor: FlavorName) -> Mapping[ResourceName, int]:
        own = self._own.get(cq)
        if own is not None and flavor in own:
            return own[flavor]
        return self._base.get(cq, {}).get(flavor, {})

    def cohort_usage(self, cohort: CohortName) -> Mapping[Key, int]:
        """What ``cohort``'s members hold beyond their guarantees, per (flavor, resource)."""
        return self._pool_used.get(cohort, _EMPTY)

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

    def add(self, cq: ClusterQueueName, flavor: FlavorName, request: Resources) -> None:
        self.version += 1
        self._queue_touched[cq] = self.version
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
        for level in topo.chain.get(cq, ()):
            self.touched[level.name] = self.version
        used = self._pool_used.get(cohort)
        if used is None:
            used = self._pool_used[cohort] = {}
        deep = topo.levels[cohort].parent is not None
        if deep and cq in topo.unguarded:
            # No guarantee on the way up (and usage is never negative): every cohort of
            # the chain takes the addition as it is.
            pools = [self._pool_used.setdefault(level.name, {}) for level in topo.chain[cq]]
            for r, req in request.items():
                vec[r] = vec.get(r, 0) + req
                if req:
                    key = (flavor, r)
                    for pool in pools:
                        pool[key] = pool.get(key, 0) + req
            return
        for r, req in request.items():
            cur = vec.get(r, 0)
            new = cur + req
            vec[r] = new
            # The pool holds what goes beyond the guarantee: max(0, usage - guaranteed).
            delta = lifted(cur, new, guaranteed.get(r, 0))
            if delta:
                key = (flavor, r)
                if deep:
                    for name, step in self._lifts(cohort, key, delta):
                        pool = self._pool_used.setdefault(name, {})
                        pool[key] = pool.get(key, 0) + step
                else:
                    used[key] = used.get(key, 0) + delta

    def _fresh(self) -> None:
        if self._memo_version != self.version:
            self._memo_version = self.version
            self._offered.clear()

    def _available(self, chain: tuple[Level, ...], key: Key) -> tuple[int, CohortName, bool]:
        """``QuotaTopology.available`` on this ledger, memoised until the next addition."""
        self._fresh()
        memo_key = (chain[0].name, key)
        hit = self._offered.get(memo_key)
        if hit is None:
            hit = self._offered[memo_key] = self.topology.available(chain, key, self._pool_used)
        return hit

    def _lifts(self, cohort: CohortName, key: Key, delta: int) -> Iterator[tuple[CohortName, int]]:
        """Where ``delta`` more pool use at ``cohort`` lands: at it, and at each cohort
        above it what moves beyond the one below's guarantee, while anything does. Each
        step is worked out before it is yielded, so a caller may apply it or not."""
        levels = self.topology.levels
        name: CohortName | None = cohort
        while delta and name is not None:
            level = levels[name]
            cur = self._pool_used.get(name, _EMPTY).get(key, 0)
            onward = lifted(cur, cur + delta, level.guaranteed.get(key, 0))
            yield name, delta
            delta, name = onward, level.parent

    def watch(self, cq: ClusterQueue, flavor: FlavorName, w: Workload) -> QuotaWatch:
        """``check_for(cq, flavor, w).fits`` from now on, followed through changes."""
        return QuotaWatch(self, cq, flavor, w)

    def _borrowed(
        self, cq: ClusterQueueName, extra: tuple[FlavorName, Resources] | None
    ) -> dict[ResourceName, int]:
        """What ``cq`` holds beyond its nominal quota per resource, summed over flavors."""
        borrowed: dict[ResourceName, int] = {}
        for flavor, lim in self.topology.flavor_limits.get(cq, ()):
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
        return borrowed

    def share(
        self, cq: ClusterQueueName, extra: tuple[FlavorName, Resources] | None = None
    ) -> Share:
        """Weighted dominant resource share, optionally after admitting ``extra``.

        Returned as ``(infinite, value)`` so that a zero weight that borrows
        sorts after every finite share, and comparisons stay exact.
        """
        topo = self.topology
        root = topo.root_of.get(cq)
        if root is None:
            return NO_SHARE
        return self._share_entry(cq, root, extra)[1]

    def _share_entry(
        self, cq: ClusterQueueName, root: CohortName, extra: tuple[FlavorName, Resources] | None
    ) -> _Entry:
        # It moves only with the queue's own usage: memoised until that changes.
        stamp = self._queue_touched.get(cq, -1)
        key: tuple[object, ...] = (cq,) if extra is None else (cq, extra[0], *extra[1].items())
        hit = self._shares.get(key)
        if hit is not None and hit[0] == stamp:
            return hit
        if len(self._shares) >= _SHARES_MEMO:
            self._shares.clear()
        # What is borrowed per resource decides the share (with the queue's static
        # weight and its root's lendable totals): one integer pass, then the memo.
        borrowed = self._borrowed(cq, extra)
        share = self.topology.share_of(cq, root, borrowed) if borrowed else NO_SHARE
        hit = self._shares[key] = _entry(stamp, share)
        return hit

    def path_share(
        self, cq: ClusterQueueName, extra: tuple[FlavorName, Resources] | None = None
    ) -> tuple[Share, ...]:
        """The shares of ``cq``'s cohorts below the root, top down, then its own, with
        ``extra`` admitted: Kueue's hierarchical fair sharing compares two queues by the
        shares of their lowest common ancestor's children (``QuotaTopology.common_depth``)."""
        return tuple(e[1] for e in self._path_entries(cq, extra))

    def path_key(
        self, cq: ClusterQueueName, extra: tuple[FlavorName, Resources] | None = None
    ) -> tuple[float, ...]:
        """``path_share`` as floats, for the cycle's heap (core.nomination): monotone in
        the exact shares, an infinite share (a zero weight that borrows) as +inf."""
        return tuple(e[2] for e in self._path_entries(cq, extra))

    def refresh_key(
        self,
        cq: ClusterQueueName,
        extra: tuple[FlavorName, Resources],
        old: tuple[float, ...],
        since: int,
    ) -> tuple[float, ...]:
        """``path_key(cq, extra)`` given ``old``, the key computed at ledger version
        ``since``: only the cohorts whose pool use moved since are looked at again (the
        queue's own share moves only with its own admissions, which nominate anew)."""
        topo = self.topology
        below = topo.below_root.get(cq)
        root = topo.root_of.get(cq)
        if not below or root is None or cq not in topo.unguarded or len(old) != len(below) + 1:
            return self.path_key(cq, extra)
        touched = self.touched
        out = list(old)
        for i, name in enumerate(below):
            if touched.get(name, -1) > since:
                out[i] = self._cohort_entry(name, root, extra)[2]
        return tuple(out)

    def _cohort_entry(
        self, name: CohortName, root: CohortName, added: tuple[FlavorName, Resources] | None
    ) -> _Entry:
        """Cohort ``name``'s share with ``added`` more pool use, memoised until its own
        pool use moves (``touched``)."""
        stamp = self.touched.get(name, -1)
        memo_key: tuple[object, ...] = (
            (name,) if added is None else (name, added[0], *added[1].items())
        )
        hit = self._cohort_shares.get(memo_key)
        if hit is None or hit[0] != stamp:
            if len(self._cohort_shares) >= _SHARES_MEMO:
                self._cohort_shares.clear()  # bounded: cohorts times the additions asked about
            hit = self._cohort_shares[memo_key] = _entry(
                stamp, self._cohort_share(name, root, added)
            )
        return hit

    def _path_entries(
        self, cq: ClusterQueueName, extra: tuple[FlavorName, Resources] | None
    ) -> list[_Entry]:
        topo = self.topology
        root = topo.root_of.get(cq)
        if root is None:
            return [_NO_ENTRY]
        below = topo.below_root[cq]
        if not below:
            return [self._share_entry(cq, root, extra)]
        # What ``extra`` adds to each cohort's pool use on its flavor, lifted up the chain.
        deltas: dict[CohortName, Mapping[ResourceName, int]] = {}
        if extra is not None and cq in topo.unguarded:
            # No guarantee on the way up: the addition reaches every cohort as it is.
            deltas = dict.fromkeys(below, extra[1])
        elif extra is not None:
            flavor, more = extra
            lim = topo.limits.get((cq, flavor))
            vec = self.usage(cq, flavor)
            first = topo.chain[cq][0].name
            lifting: dict[CohortName, dict[ResourceName, int]] = {}
            for r, v in more.items():
                cur = vec.get(r, 0)
                d = lifted(cur, cur + v, 0 if lim is None else lim.guaranteed.get(r, 0))
                for name, step in self._lifts(first, (flavor, r), d):
                    lifting.setdefault(name, {})[r] = step
            deltas = dict(lifting)
        out: list[_Entry] = []
        on = extra[0] if extra is not None else None
        for name in below:
            extra_here = deltas.get(name)
            added = None if extra_here is None or on is None else (on, extra_here)
            out.append(self._cohort_entry(name, root, added))
        out.append(self._share_entry(cq, root, extra))
        return out

    def _cohort_share(
        self, name: CohortName, root: CohortName, extra: tuple[FlavorName, Resources] | None
    ) -> Share:
        """Cohort ``name``'s share, with ``extra`` more pool use on one flavor."""
        level = self.topology.levels[name]
        used = self._pool_used.get(name, _EMPTY)
        borrowed: dict[ResourceName, int] = {}
        for key, v in used.items():
            if extra is not None and key[0] == extra[0]:
                v += extra[1].get(key[1], 0)
            over = v - level.subtree.get(key, 0)
            if over > 0:
                borrowed[key[1]] = borrowed.get(key[1], 0) + over
        if extra is not None:
            flavor, more = extra
            for r, v in more.items():
                if (flavor, r) not in used:
                    over = v - level.subtree.get((flavor, r), 0)
                    if over > 0:
                        borrowed[r] = borrowed.get(r, 0) + over
        if not borrowed:
            return NO_SHARE
        return self.topology.node_share(name, root, dict(sorted(borrowed.items())), cohort=True)
