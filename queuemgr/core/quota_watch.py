"""Whether one workload fits its queue's quota on one flavor, while usage changes.

Why it exists: reservation planning (core.reservations) walks the running
workloads' expected ends, giving back their quota one by one, and asks at each
end whether the gang fits; a ledger addition and a full check per step were a
large part of a busy cycle. The answer depends only on the queue's usage of the
requested resources on that flavor and on its cohorts' pool use of them (so on
the usage of every queue of its cohort tree), which this keeps as a few integers.

What must stay true: given the same changes, ``fits`` equals
``QuotaLedger.check_for(cq, flavor, w).fits`` on the ledger it was made from
(tests/unit/core/test_quota_reference.py), as long as no usage goes below zero
(a release gives back only what was held); the ledger is read once, when the watch
is made, and never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from queuemgr.core.model import ClusterQueue, ClusterQueueName, CohortName, FlavorName, Workload
from queuemgr.core.quota_topology import Key, lifted
from queuemgr.core.resources import ResourceName, Resources

if TYPE_CHECKING:
    from queuemgr.core.quota import QuotaLedger

_EMPTY_VEC: Resources = {}


class QuotaWatch:
    """``QuotaLedger.check_for(...).fits`` for one (queue, flavor, workload), kept current.

    It keeps the usage of its own queue and the pool use of its own cohorts, which
    ``fits`` reads, and of the queues and cohorts of its tree that keep a guarantee (a
    lending limit): a change anywhere else passes up the changed queue's chain as it is
    (what goes beyond a zero guarantee is all of it), so those need no state at all.
    Making a watch costs its chain, not the size of its tree.
    """

    __slots__ = (
        "_chain",
        "_flavor",
        "_guaranteed",
        "_limits",
        "_name",
        "_pool_used",
        "_root",
        "_topology",
        "_usage",
    )

    def __init__(self, ledger: QuotaLedger, cq: ClusterQueue, flavor: FlavorName, w: Workload):
        topo = self._topology = ledger.topology
        self._name = cq.name
        self._flavor = flavor
        lim = topo.limits.get((cq.name, flavor))
        self._chain = chain = topo.chain.get(cq.name)
        self._root = root = topo.root_of.get(cq.name)
        no_borrowing = not cq.may_borrow(w)
        # Per requested resource: (resource, request, the most the queue may then hold by
        # its own limits, guaranteed); None when it never fits (NOT_COVERED).
        self._limits: list[tuple[ResourceName, int, int, int]] | None = []
        for r, req in w.total_requests.items():
            if req <= 0:
                continue
            if lim is None or r not in lim.nominal:
                self._limits = None
                break
            nominal = lim.nominal[r]
            if chain is None:
                self._limits.append((r, req, nominal, 0))
            else:
                ceiling = min(nominal, lim.cap[r]) if no_borrowing else lim.cap[r]
                self._limits.append((r, req, ceiling, lim.guaranteed[r]))
        tracked = [r for r, *_ in self._limits or ()]
        # Usage of the tracked resources on the flavor: the queue's own, and that of the
        # queues of its tree that keep a guarantee, with each one's guarantee.
        peers = [cq.name]
        if root is not None:
            peers += [n for n in topo.guarded_queues.get(root, ()) if n != cq.name]
        self._usage: dict[ClusterQueueName, dict[ResourceName, int]] = {}
        self._guaranteed: dict[ClusterQueueName, Resources] = {}
        for name in peers:
            used = ledger.usage(name, flavor)
            self._usage[name] = {r: used.get(r, 0) for r in tracked}
            peer = topo.limits.get((name, flavor))
            self._guaranteed[name] = peer.guaranteed if peer is not None else _EMPTY_VEC
        # Pool use of the tracked resources on the flavor: the queue's own cohorts, and
        # the cohorts of its tree that keep a guarantee.
        self._pool_used: dict[CohortName, dict[Key, int]] = {}
        if root is not None and chain is not None:
            cohorts = {level.name for level in chain}
            cohorts.update(topo.guarded_cohorts.get(root, ()))
            for cohort in cohorts:
                pool_used = ledger.cohort_usage(cohort)
                self._pool_used[cohort] = {
                    (flavor, r): pool_used.get((flavor, r), 0) for r in tracked
                }

    def change(self, cq: ClusterQueueName, flavor: FlavorName, held: Resources, sign: int) -> None:
        """``cq`` now holds (sign 1) or has given back (sign -1) ``held`` on ``flavor``."""
        if flavor != self._flavor:
            return
        topo = self._topology
        usage = self._usage.get(cq)
        if usage is None and (self._root is None or topo.root_of.get(cq) != self._root):
            return  # neither the queue nor one of its tree: its quota is apart
        cohort = topo.cohort_of.get(cq)
        for r in self._limits or ():
            res = r[0]
            v = held.get(res, 0)
            if not v:
                continue
            if usage is not None:
                cur = usage[res]
                new = usage[res] = cur + sign * v
                # A pool holds what goes beyond the guarantee: max(0, usage - guaranteed).
                delta = lifted(cur, new, self._guaranteed[cq].get(res, 0))
            else:
                delta = sign * v  # a zero guarantee: all of it goes to the pool
            key = (flavor, res)
            name: CohortName | None = cohort
            # Each cohort passes what goes beyond its own guarantee up to its parent.
            while delta and name is not None:
                level = topo.levels[name]
                pool = self._pool_used.get(name)
                if pool is not None:
                    before = pool[key]
                    after = pool[key] = before + delta
                    delta = lifted(before, after, level.guaranteed.get(key, 0))
                name = level.parent

    @property
    def covered(self) -> bool:
        """Whether the flavor lists quota for every requested resource (else never fits)."""
        return self._limits is not None

    def fits(self) -> bool:
        limits = self._limits
        if limits is None:
            return False
        mine = self._usage[self._name]
        chain = self._chain
        pool_used: Mapping[CohortName, Mapping[Key, int]] = self._pool_used
        for r, req, ceiling, g in limits:
            cur = mine[r]
            u = cur + req
            if u > ceiling:
                return False
            if chain is None:
                continue
            key = (self._flavor, r)
            if len(chain) == 1 or self._name in self._topology.plain:
                top = chain[-1]  # no limit below the root: what it offers reaches us whole
                offered = top.subtree.get(key, 0) - pool_used[top.name][key]
            else:
                offered = self._topology.available(chain, key, pool_used)[0]
            # What the cohorts leave the queue: its guarantee, what they offer, and what
            # it already takes from its cohort.
            if u > g + offered + (cur - g if cur > g else 0):
                return False
        return True
