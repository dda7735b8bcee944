"""Quota usage as a cycle sees it: per queue and flavor, and each cohort's use of its pool.

Why it exists: every quota question (a check, a fair share, a watch) reads the same
usage, and each admission of a cycle adds to it; keeping it, and lifting each
addition up the cohort tree, is the base of the quota ledger (``core.quota``),
apart from the questions asked of it (``core.quota_shares``, ``core.quota``).

What must stay true: the usage is a copy-on-write overlay over the snapshot's: a
cycle adds to it and the snapshot underneath is never touched; after any additions,
each cohort's pool use is the one core.quota's docstring defines, computed afresh
(tests/unit/core/test_quota_reference.py, test_quota_tree_reference.py);
``version`` counts additions and ``touched`` holds the version at which each
cohort's pool use last changed, so an answer memoised with either is dropped as
soon as what it was computed from moves.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from queuemgr.core.model import ClusterQueueName, CohortName, FlavorName
from queuemgr.core.quota_topology import Key, Level, QuotaTopology, lifted
from queuemgr.core.resources import ResourceName, Resources

_EMPTY: Mapping[Key, int] = {}
_EMPTY_VEC: Resources = {}


class QuotaUsage:
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
        # what a cohort offers below it (per (cohort, flavor, resource)). In a tree, the
        # queues of one group ask the same of their common cohorts hundreds of times
        # between additions.
        self._memo_version = 0
        # The version at which each cohort's pool use last changed: a queue's order key
        # holds the shares of its cohorts, stale only once one of them changed.
        self.touched: dict[CohortName, int] = {}
        # The same for a queue's own usage, and its shares asked since (share()).
        self._queue_touched: dict[ClusterQueueName, int] = {}
        self._offered: dict[tuple[CohortName, Key], tuple[int, CohortName, bool]] = {}
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
