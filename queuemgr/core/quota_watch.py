"""Whether one workload fits its queue's quota on one flavor, while usage changes.

Why it exists: reservation planning (core.reservations) walks the running
workloads' expected ends, giving back their quota one by one, and asks at each
end whether the gang fits; a ledger addition and a full check per step were a
large part of a busy cycle. The answer depends only on the queue's usage of the
requested resources on that flavor and on its cohorts' pool use of them (so on
the usage of every queue of its cohort tree), which this keeps as a few integers.

What must stay true: given the same changes, ``fits`` equals
``QuotaLedger.check_for(cq, flavor, w).fits`` on the ledger it was made from
(tests/unit/core/test_quota_reference.py); the ledger is read once, when the
watch is made, and never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from queuemgr.core.model import ClusterQueue, ClusterQueueName, CohortName, FlavorName, Workload
from queuemgr.core.quota_topology import Key
from queuemgr.core.resources import ResourceName, Resources

if TYPE_CHECKING:
    from queuemgr.core.quota import QuotaLedger

_EMPTY_VEC: Resources = {}


class QuotaWatch:
    """``QuotaLedger.check_for(...).fits`` for one (queue, flavor, workload), kept current."""

    __slots__ = (
        "_chain",
        "_cohort_of",
        "_flavor",
        "_guaranteed",
        "_limits",
        "_name",
        "_pool_used",
        "_topology",
        "_usage",
    )

    def __init__(self, ledger: QuotaLedger, cq: ClusterQueue, flavor: FlavorName, w: Workload):
        topo = self._topology = ledger.topology
        self._name = cq.name
        self._flavor = flavor
        lim = topo.limits.get((cq.name, flavor))
        self._chain = chain = topo.chain.get(cq.name)
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
        # Usage of the tracked resources on the flavor, of the queue and of every queue of
        # its cohort tree (whose usage moves the pools' use), with each one's guarantee.
        root = topo.root_of.get(cq.name)
        peers = topo.members.get(root, [cq.name]) if root is not None else [cq.name]
        self._usage: dict[ClusterQueueName, dict[ResourceName, int]] = {}
        self._guaranteed: dict[ClusterQueueName, Resources] = {}
        self._cohort_of: dict[ClusterQueueName, CohortName | None] = {}
        for name in peers:
            used = ledger.usage(name, flavor)
            self._usage[name] = {r: used.get(r, 0) for r in tracked}
            peer = topo.limits.get((name, flavor))
            self._guaranteed[name] = peer.guaranteed if peer is not None else _EMPTY_VEC
            self._cohort_of[name] = topo.cohort_of.get(name)
        # Each cohort of the tree: its pool use of the tracked resources on the flavor.
        self._pool_used: dict[CohortName, dict[Key, int]] = {}
        if root is not None:
            for cohort in topo.tree.subtree(root):
                pool_used = ledger.cohort_usage(cohort)
                self._pool_used[cohort] = {
                    (flavor, r): pool_used.get((flavor, r), 0) for r in tracked
                }

    def change(self, cq: ClusterQueueName, flavor: FlavorName, held: Resources, sign: int) -> None:
        """``cq`` now holds (sign 1) or has given back (sign -1) ``held`` on ``flavor``."""
        if flavor != self._flavor:
            return
        usage = self._usage.get(cq)
        if usage is None:
            return  # neither the queue nor a peer of its tree: its quota is apart
        cohort = self._cohort_of[cq]
        g_of = self._guaranteed[cq]
        for r, cur in usage.items():
            v = held.get(r, 0)
            if not v:
                continue
            new = usage[r] = cur + sign * v
            if cohort is None:
                continue
            # A pool holds what goes beyond the guarantee: max(0, usage - guaranteed),
            # and each cohort passes what goes beyond its own guarantee up to its parent.
            g = g_of.get(r, 0)
            delta = (new - g if new > g else 0) - (cur - g if cur > g else 0)
            key = (flavor, r)
            name: CohortName | None = cohort
            while delta and name is not None:
                pool = self._pool_used[name]
                before = pool[key]
                after = pool[key] = before + delta
                level = self._topology.levels[name]
                g = level.guaranteed.get(key, 0)
                delta = (after - g if after > g else 0) - (before - g if before > g else 0)
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
            if len(chain) == 1:
                offered = chain[0].subtree.get(key, 0) - pool_used[chain[0].name][key]
            else:
                offered = self._topology.available(chain, key, pool_used)[0]
            # What the cohorts leave the queue: its guarantee, what they offer, and what
            # it already takes from its cohort.
            if u > g + offered + (cur - g if cur > g else 0):
                return False
        return True
