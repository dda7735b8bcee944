"""Fair shares on the quota ledger: each queue's and each cohort's weighted dominant share.

Why it exists: the cycle orders borrowers (core.nomination) and the victim search
weighs loans (core.preemption) by the share a queue, and each cohort above it, would
have with a workload admitted or a victim gone. Those are asked again and again
between two additions, so they are answered from the usage (``core.quota_usage``)
with integer arithmetic and memoised until what they depend on moves.

What must stay true: a share is exact, ``(infinite, value)``, so that a zero weight
that borrows sorts after every finite share; its float (``path_key``) is monotone in
it; a memoised share is used only while its stamp holds (the queue's own usage for
its share, a cohort's pool use for the cohort's), so every answer equals one computed
afresh (tests/unit/core/test_quota_reference.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from queuemgr.core.model import ClusterQueueName, CohortName, FlavorName
from queuemgr.core.quota_topology import NO_SHARE, Key, QuotaTopology, Share, lifted
from queuemgr.core.quota_usage import QuotaUsage
from queuemgr.core.resources import ResourceName, Resources

_EMPTY: Mapping[Key, int] = {}
_SHARES_MEMO = 1 << 16  # entries of a ledger's cohort-share memo before it starts over
# A memoised share: (the stamp it holds for, the exact share, its float for the heap).
_Entry = tuple[int, Share, float]


def _entry(stamp: int, share: Share) -> _Entry:
    infinite, exact = share
    return (stamp, share, math.inf if infinite else float(exact))


_NO_ENTRY: _Entry = (-1, NO_SHARE, 0.0)


class QuotaShares(QuotaUsage):
    """The ledger's usage, with the fair shares it gives each queue and cohort."""

    def __init__(
        self,
        topology: QuotaTopology,
        usage: Mapping[ClusterQueueName, Mapping[FlavorName, Resources]],
    ) -> None:
        super().__init__(topology, usage)
        # A queue's share, and a cohort's with a given addition (path_share), kept until
        # the usage it was read from moves: in a tree, the queues of one group ask the
        # same of their common cohorts hundreds of times between additions.
        self._shares: dict[tuple[object, ...], _Entry] = {}
        # (cohort, flavor, addition) -> (the cohort's touched version, its share then).
        self._cohort_shares: dict[tuple[object, ...], _Entry] = {}

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
