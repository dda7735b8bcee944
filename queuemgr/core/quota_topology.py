"""The static shape of quota: each ClusterQueue's limits and each cohort's subtree.

Why it exists: quota checks run hundreds of thousands of times a cycle, and what
they read of the config (limits, guarantees, the chain of cohorts above a queue,
the lendable totals that fair shares divide by) never changes between configs, so
it is derived once here (``Config.quota_topology``) and the ledger only adds usage.

What must stay true, for every node n (a ClusterQueue or a cohort), flavor f and
resource r (Kueue's hierarchical cohorts):

- ``subtree(q) = nominal(q)`` for a ClusterQueue; for a cohort c,
  ``subtree(c) = own nominal(c) + sum over children k of (subtree(k) - guaranteed(k))``;
- ``guaranteed(n) = max(0, subtree(n) - lending_limit(n))``, or 0 with no lending limit:
  what n keeps for itself and never lends to its parent;
- with one level of cohorts and no cohort quota, ``subtree(cohort)`` is the flat
  model's pool, so every answer is the flat model's;
- a fair share divides by what its tree can lend per resource (summed over flavors:
  the root's subtree quota plus what cohorts below keep from their parents) at every
  level, so shares of different levels are in the same units;
- a ClusterQueue's ``resource_weights`` fold its borrowing and that denominator
  alike (``core.weights``) in its own share only; cohorts' shares are never folded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from queuemgr.core.cohort_tree import CohortTree
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    FlavorQuota,
)
from queuemgr.core.resources import ResourceName, Resources
from queuemgr.core.weights import ShareFold

NO_CAP = 1 << 62
_SHARE_MEMO = 1 << 16  # entries of the share memo before it starts over
Share = tuple[int, Fraction]
NO_SHARE: Share = (0, Fraction(0))
Key = tuple[FlavorName, ResourceName]


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """A ClusterQueue's limits on one flavor."""

    nominal: Mapping[ResourceName, int]
    cap: Mapping[ResourceName, int]  # nominal + borrowing limit, NO_CAP if unset
    guaranteed: Mapping[ResourceName, int]


@dataclass(frozen=True, kw_only=True, slots=True)
class Level:
    """A cohort as the queues below it see it, per (flavor, resource)."""

    name: CohortName
    subtree: Mapping[Key, int]
    guaranteed: Mapping[Key, int]
    # The most it may take from its parent beyond what it lends it; absent: no limit.
    borrow: Mapping[Key, int]
    parent: CohortName | None


class QuotaTopology:
    """Static quota structure derived from the ClusterQueues and cohorts; built once per config."""

    def __init__(
        self,
        cluster_queues: Mapping[ClusterQueueName, ClusterQueue],
        cohorts: Mapping[CohortName, Cohort] | None = None,
    ) -> None:
        known = dict(cohorts or {})
        for cq in cluster_queues.values():
            if cq.cohort is not None and cq.cohort not in known:
                known[cq.cohort] = Cohort(name=cq.cohort)
        self.tree = CohortTree(known)
        self.cohort_of: dict[ClusterQueueName, CohortName | None] = {}
        self.limits: dict[tuple[ClusterQueueName, FlavorName], Limits] = {}
        self.weight: dict[ClusterQueueName, Fraction] = {}
        self.flavor_limits: dict[ClusterQueueName, list[tuple[FlavorName, Limits]]] = {}
        # The queues whose own share counts some resource in another's units.
        self.folds: dict[ClusterQueueName, ShareFold] = {}
        subtree: dict[CohortName, dict[Key, int]] = {name: {} for name in known}
        for name in sorted(known):
            _add_own(subtree[name], known[name].flavors)
        for qn in sorted(cluster_queues):
            cq = cluster_queues[qn]
            self.cohort_of[qn] = cq.cohort
            self.weight[qn] = cq.weight
            fold = ShareFold.of(cq.resource_weights)
            if fold is not None:
                self.folds[qn] = fold
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
                        cap[r] = NO_CAP if borrow is None else nominal + borrow
                        key = (fq.flavor, r)
                        pool = subtree[cq.cohort]
                        pool[key] = pool.get(key, 0) + nominal - guaranteed[r]
                limits = Limits(nominal=dict(fq.nominal), cap=cap, guaranteed=guaranteed)
                self.limits[(qn, fq.flavor)] = limits
                self.flavor_limits.setdefault(qn, []).append((fq.flavor, limits))
        # Children before parents: a cohort's subtree is whole before it is lent upward.
        self.levels: dict[CohortName, Level] = {}
        roots = sorted(n for n in known if known[n].parent is None)
        for name in [*self.tree.deepest_first(), *roots]:
            cohort = known[name]
            guaranteed_c, borrow_c = _toward_parent(cohort.flavors, subtree[name])
            self.levels[name] = Level(
                name=name,
                subtree=subtree[name],
                guaranteed=guaranteed_c,
                borrow=borrow_c,
                parent=cohort.parent,
            )
            if cohort.parent is not None:
                up = subtree[cohort.parent]
                for key, v in subtree[name].items():
                    up[key] = up.get(key, 0) + v - guaranteed_c.get(key, 0)
        self.cohort_weight = {name: c.weight for name, c in known.items()}
        # The pool each cohort offers those below it: its subtree quota.
        self.pool: dict[CohortName, Mapping[Key, int]] = {
            n: lv.subtree for n, lv in self.levels.items()
        }
        # What a tree can lend, per resource, summed over flavors: the fair shares'
        # denominator at every level. Its root's pool, and what each cohort below keeps
        # from its parent (a lending limit) but lends among its own subtree: without
        # that part, a tree whose loans all come from such a cohort would have nothing
        # to divide by, every share would be 0, and fair sharing would take back and
        # forth. With one level of cohorts it is the flat model's pool.
        self.lendable: dict[CohortName, dict[ResourceName, int]] = {}
        for name, level in self.levels.items():
            root = self.tree.root(name)
            lendable = self.lendable.setdefault(root, {})
            counted = level.subtree if level.parent is None else level.guaranteed
            for (_f, r), v in counted.items():
                lendable[r] = lendable.get(r, 0) + v
        # Each queue's cohorts, from its own up to the root, and the tree it lends in.
        self.chain: dict[ClusterQueueName, tuple[Level, ...]] = {}
        self.root_of: dict[ClusterQueueName, CohortName | None] = {}
        # Its cohorts below the root, top down: two queues' shares are compared at the
        # first place these differ (their lowest common ancestor's children).
        self.below_root: dict[ClusterQueueName, tuple[CohortName, ...]] = {}
        self.members: dict[CohortName, list[ClusterQueueName]] = {}  # per root: its whole tree
        for qn, of in self.cohort_of.items():
            if of is None:
                self.root_of[qn] = None
                continue
            names = self.tree.chain[of]
            self.chain[qn] = tuple(self.levels[c] for c in names)
            self.root_of[qn] = names[-1]
            self.below_root[qn] = tuple(reversed(names[:-1]))
            self.members.setdefault(names[-1], []).append(qn)
        # A queue with resource weights divides its folded borrowing by its root's
        # lendable totals folded the same way.
        self.folded_lendable: dict[ClusterQueueName, dict[ResourceName, int]] = {
            qn: fold.apply(self.lendable.get(top, {}))
            for qn, fold in self.folds.items()
            if (top := self.root_of.get(qn)) is not None
        }
        # Per root: the queues and cohorts that keep a guarantee (a lending limit) on some
        # flavor and resource. Only at those does a change of usage not pass upward as it
        # is, so a QuotaWatch follows only them (and its own chain).
        self.guarded_queues: dict[CohortName, list[ClusterQueueName]] = {}
        self.guarded_cohorts: dict[CohortName, list[CohortName]] = {}
        for root, members in self.members.items():
            self.guarded_queues[root] = [
                qn
                for qn in members
                if any(
                    v for _f, lim in self.flavor_limits.get(qn, ()) for v in lim.guaranteed.values()
                )
            ]
        for name, level in self.levels.items():
            if any(level.guaranteed.values()):
                root = self.tree.root(name)
                self.guarded_cohorts.setdefault(root, []).append(name)
        # Queues in a tree with no guarantee on the way up, theirs or a cohort's: what
        # they add reaches every cohort above them as it is (QuotaLedger.path_share).
        self.unguarded: frozenset[ClusterQueueName] = frozenset(
            qn
            for qn, chain in self.chain.items()
            if not any(any(lim.guaranteed.values()) for _f, lim in self.flavor_limits.get(qn, ()))
            and not any(any(level.guaranteed.values()) for level in chain)
        )
        # Queues with no guarantee and no borrowing limit at any cohort below the root:
        # what the root offers reaches them whole (QuotaTopology.available's walk adds
        # nothing), so a check reads the root alone.
        self.plain: frozenset[ClusterQueueName] = frozenset(
            qn
            for qn, chain in self.chain.items()
            if not any(any(lv.guaranteed.values()) or lv.borrow for lv in chain[:-1])
        )
        # A cohort under a fair-sharing one is fair too; its scope is the highest such.
        self.fair_scope: dict[CohortName, CohortName] = {}
        for name, names in self.tree.chain.items():
            fair = [c for c in names if known[c].fair_sharing]
            if fair:
                self.fair_scope[name] = fair[-1]
        # (queue, flavor) -> (cohort, guaranteed quota) of a queue in a cohort (QuotaLedger.add).
        self.pooled: dict[tuple[ClusterQueueName, FlavorName], tuple[CohortName, Resources]] = {}
        for qn, of in self.cohort_of.items():
            if of is None:
                continue
            for fq in cluster_queues[qn].flavors:
                self.pooled[(qn, fq.flavor)] = (of, self.limits[(qn, fq.flavor)].guaranteed)
        self._shares: dict[tuple[bool, str, tuple[tuple[ResourceName, int], ...]], Share] = {}

    def node_share(
        self, name: str, root: CohortName, borrowed: Mapping[ResourceName, int], *, cohort: bool
    ) -> Share:
        """A node's weighted dominant share when it borrows ``borrowed`` (per resource).

        ``name`` is a ClusterQueue's, or a cohort's when ``cohort``. A ClusterQueue's
        resource weights fold ``borrowed`` and the lendable totals first. The answer depends
        on nothing else (the weight and the root's lendable totals are static), so it is
        memoised: a busy cycle asks for the same few shares hundreds of thousands of
        times (the victim search's fairness test). The largest ratio is found by integer
        cross-multiplication, exact as comparing Fractions is, and a Fraction is built
        once, for the memo.
        """
        key = (cohort, name, tuple(borrowed.items()))
        hit = self._shares.get(key)
        if hit is not None:
            return hit
        num, den = 0, 1  # the largest borrowed / lendable so far
        lendable = self.lendable.get(root, {})
        fold = None if cohort else self.folds.get(ClusterQueueName(name))
        if fold is not None:
            # Its resource weights: a weighted resource counts in its target's units,
            # in what it borrows and in what the tree lends alike (core.weights).
            borrowed = fold.apply(borrowed)
            lendable = self.folded_lendable.get(ClusterQueueName(name), {})
        for r, b in borrowed.items():
            total = lendable.get(r, 0)
            if total > 0 and b * den > num * total:
                num, den = b, total
        weight = (
            self.cohort_weight[CohortName(name)] if cohort else self.weight[ClusterQueueName(name)]
        )
        if num == 0:
            hit = NO_SHARE
        elif weight == 0:
            hit = (1, Fraction(num, den))
        else:
            hit = (0, Fraction(num, den) / weight)
        if len(self._shares) >= _SHARE_MEMO:
            self._shares.clear()  # bounded: a long run meets ever new usage
        self._shares[key] = hit
        return hit

    def share_of(
        self, cq: ClusterQueueName, root: CohortName, borrowed: Mapping[ResourceName, int]
    ) -> Share:
        """``cq``'s own weighted dominant share when it borrows ``borrowed``."""
        return self.node_share(cq, root, borrowed, cohort=False)

    def common_depth(self, a: ClusterQueueName, b: ClusterQueueName) -> int:
        """How many cohorts below the root ``a`` and ``b`` share: the index, in their
        path shares, of their lowest common ancestor's children."""
        pa, pb = self.below_root.get(a, ()), self.below_root.get(b, ())
        n = 0
        for x, y in zip(pa, pb, strict=False):
            if x != y:
                break
            n += 1
        return n

    def available(
        self, chain: tuple[Level, ...], key: Key, used: Mapping[CohortName, Mapping[Key, int]]
    ) -> tuple[int, CohortName, bool]:
        """What the first cohort of ``chain`` can give below it beyond its members'
        guarantees, with each cohort's usage ``used``; the cohort whose limit binds; and
        whether that is its borrowing limit (else its tree has nothing more to lend).

        Kueue's recursion: a root offers its subtree quota less its usage; a cohort below
        offers what it keeps unused of its guarantee, plus what its parent offers, capped
        by what its borrowing limit still allows it to take from the parent.
        """
        top = chain[-1]
        avail = top.subtree.get(key, 0) - used.get(top.name, _EMPTY).get(key, 0)
        binding, at_limit = top.name, False
        for level in reversed(chain[:-1]):
            u = used.get(level.name, _EMPTY).get(key, 0)
            g = level.guaranteed.get(key, 0)
            b = level.borrow.get(key)
            if b is not None:
                room = level.subtree.get(key, 0) - g - (u - g if u > g else 0) + b
                if room < avail:
                    avail, binding, at_limit = room, level.name, True
            if g > u:
                avail += g - u
        return avail, binding, at_limit

    def max_usage(
        self, cq: ClusterQueueName, flavor: FlavorName, r: ResourceName, *, borrows: bool = True
    ) -> int:
        """The most q could ever hold of r on f with an otherwise idle tree
        (only its nominal quota for a workload that may not borrow)."""
        lim = self.limits.get((cq, flavor))
        if lim is None or r not in lim.nominal:
            return 0
        chain = self.chain.get(cq)
        if chain is None or not borrows:
            return lim.nominal[r]
        avail, _, _ = self.available(chain, (flavor, r), {})
        return min(lim.cap[r], lim.guaranteed[r] + avail)


_EMPTY: Mapping[Key, int] = {}


def lifted(cur: int, new: int, guaranteed: int) -> int:
    """How much more (or less) goes beyond ``guaranteed`` when a use moves from ``cur`` to
    ``new``: what a queue or cohort passes on to the pool above it."""
    return (new - guaranteed if new > guaranteed else 0) - (
        cur - guaranteed if cur > guaranteed else 0
    )


def _add_own(into: dict[Key, int], flavors: tuple[FlavorQuota, ...]) -> None:
    for fq in flavors:
        for r, v in fq.nominal.items():
            into[(fq.flavor, r)] = into.get((fq.flavor, r), 0) + v


def _toward_parent(
    flavors: tuple[FlavorQuota, ...], subtree: Mapping[Key, int]
) -> tuple[dict[Key, int], dict[Key, int]]:
    """A cohort's guaranteed quota (subtree less its lending limit) and borrowing limits."""
    guaranteed: dict[Key, int] = {}
    borrow: dict[Key, int] = {}
    for fq in flavors:
        for r, lend in fq.lending_limit.items():
            key = (fq.flavor, r)
            guaranteed[key] = max(0, subtree.get(key, 0) - lend)
        for r, b in fq.borrowing_limit.items():
            borrow[(fq.flavor, r)] = b
    return guaranteed, borrow
