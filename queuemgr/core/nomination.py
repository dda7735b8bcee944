"""Nomination: the key by which the cycle takes a ClusterQueue's head, and its flavor.

Why it exists: the cycle (core.cycle) takes heads from a heap by (class, share
after admission, priority, creation, namespace/name), where the class says
whether the head fits no quota now, fits within nominal quota or must borrow
(docs/scheduling.md, "Order"). Working that out, reusing it while nothing was
admitted, and ordering by decayed usage where the policy asks for it is this
module's job; admitting is not.

What must stay true: a key depends only on its own queue's usage and on the
cohort pool, read from the cycle's ledger; a nomination records the ledger
version its quota checks were made at, so the cycle can tell when they are
stale; memoised nominations are keyed on everything they depend on (queue,
shape, and the LocalQueue when usage ranks borrowers).
"""

from __future__ import annotations

import math

from queuemgr.core.model import ClusterQueue, ClusterQueueName, CohortName, FlavorName, Workload
from queuemgr.core.partial import smallest
from queuemgr.core.policy import Ordering
from queuemgr.core.queues import Rank
from queuemgr.core.quota import QuotaCheck, QuotaLedger
from queuemgr.core.snapshot import Snapshot

# Class 0 fits within nominal quota, 1 must borrow, -1 fits no quota now
# (taken first: it admits nothing, so it cannot change anyone else's fate).
NO_QUOTA = -1
NOMINAL = 0
BORROWING = 1

NO_SHARE: tuple[float, ...] = ()

# The share is exact (a Fraction) in the ledger; the heap orders by its float,
# which is monotone in the exact value and far cheaper to compare. Values
# closer than a float can tell apart tie, and ties fall to the next fields. In a
# tree of cohorts it is the path share (QuotaLedger.path_share): the shares of the
# queue's cohorts below the root, top down, then its own, so heads compare first
# by the shares of the subtrees they belong to (hierarchical fair sharing).
HeapKey = tuple[int, tuple[float, ...], int, float, str]


class Nomination:
    """The flavor picked for a head (None: no quota fits) and the checks behind it."""

    __slots__ = ("checks", "flavor", "keyed", "version")

    def __init__(
        self,
        flavor: FlavorName | None,
        checks: dict[FlavorName, QuotaCheck],
        version: int,
        keyed: int | None = None,
    ) -> None:
        self.flavor = flavor
        self.checks = checks
        self.version = version  # of the ledger the checks were made on
        # Of the ledger the heap key's share was computed on (Nominator.rekey renews it).
        self.keyed = version if keyed is None else keyed


HeapEntry = tuple[HeapKey, ClusterQueueName, Nomination]


class Nominator:
    """Keys and nominations of one cycle's heads, against the cycle's quota ledger."""

    def __init__(self, snapshot: Snapshot, ledger: QuotaLedger) -> None:
        self.snapshot = snapshot
        self.ledger = ledger
        config = snapshot.config
        # (queue, shape[, LocalQueue]) -> (ledger version, class, share, nomination)
        self._memo: dict[tuple[object, ...], tuple[int, int, tuple[float, ...], Nomination]] = {}
        # (namespace, LocalQueue) -> its usage share, for usage_rank.
        self._lq_share: dict[tuple[str, str], float] = {}
        # Cohort -> decayed usage of every LocalQueue under it (usage_path), made on demand.
        self._cohort_usage: dict[CohortName, float] | None = None
        # Ordering by usage: within these queues, and among these queues' borrowers.
        self.usage_within: set[ClusterQueueName] = set()
        self.usage_across: set[ClusterQueueName] = set()
        default = snapshot.policy.ordering
        if default is Ordering.USAGE or config.orderings:
            for name in config.cluster_queues:
                own, cohort = config.orderings.get(name, (None, None))
                if (own or cohort or default) is Ordering.USAGE:
                    self.usage_within.add(name)
                if (cohort or default) is Ordering.USAGE:
                    self.usage_across.add(name)

    def nominate(self, cq: ClusterQueue, w: Workload) -> HeapEntry:
        # Heads of one shape (and LocalQueue, when usage ranks borrowers) get the same
        # class, share and flavor until something is admitted: reuse them.
        memo_key: tuple[object, ...] | None = None
        if w.partial_pod_set is None:
            memo_key = (cq.name, w.shape)
            if cq.name in self.usage_across:
                memo_key = (cq.name, w.shape, w.namespace, w.queue)
            # Whether and why it may not borrow (its runtime, or its past): the checks
            # carry the reason, and each workload is told its own.
            memo_key = (*memo_key, cq.no_loan(w))
            hit = self._memo.get(memo_key)
            if hit is not None and hit[0] == self.ledger.version:
                _, cls, share, nomination = hit
                return ((cls, share, -w.priority, w.created_at, w.id), cq.name, nomination)
        request = w.total_requests
        checks: dict[FlavorName, QuotaCheck] = {}
        for fq in cq.flavors:
            check = self.ledger.check_for(cq, fq.flavor, w)
            checks[fq.flavor] = check
            if check.fits:
                cls, share = NOMINAL, NO_SHARE
                if check.borrowing:
                    cls = BORROWING
                    if cq.name in self.usage_across:
                        share = self.usage_path(cq, w)
                    else:
                        share = self.ledger.path_key(cq.name, (fq.flavor, request))
                nomination = Nomination(fq.flavor, checks, self.ledger.version)
                if memo_key is not None:
                    self._memo[memo_key] = (self.ledger.version, cls, share, nomination)
                return ((cls, share, -w.priority, w.created_at, w.id), cq.name, nomination)
        low = smallest(w) if w.partial_pod_set is not None else None
        if low is not None:
            # Partial admission: ranked by the least it would take. Version -1: the
            # full request's checks are made again when it is tried.
            ranked, _name, least = self.nominate(cq, low)
            if least.flavor is not None:
                return (ranked, cq.name, Nomination(least.flavor, checks, -1))
        nomination = Nomination(None, checks, self.ledger.version)
        if memo_key is not None:
            self._memo[memo_key] = (self.ledger.version, NO_QUOTA, NO_SHARE, nomination)
        return ((NO_QUOTA, NO_SHARE, -w.priority, w.created_at, w.id), cq.name, nomination)

    def rekey(
        self, cq: ClusterQueue, w: Workload, key: HeapKey, nomination: Nomination
    ) -> HeapEntry:
        """``w``'s entry with its share brought up to date, its nomination kept.

        In a cohort tree a borrower's share holds its cohorts' shares, which others'
        admissions raise; the quota checks behind the nomination are made again when it
        is tried (``Admitter.try_admit``), as for any nomination older than the ledger.
        """
        if (
            w.partial_pod_set is not None
            or cq.name in self.usage_across
            or nomination.flavor is None
        ):
            return self.nominate(cq, w)
        share = self.ledger.refresh_key(
            cq.name, (nomination.flavor, w.total_requests), key[1], nomination.keyed
        )
        renewed = Nomination(
            nomination.flavor, nomination.checks, nomination.version, self.ledger.version
        )
        return ((key[0], share, key[2], key[3], key[4]), cq.name, renewed)

    def usage_path(self, cq: ClusterQueue, w: Workload) -> tuple[float, ...]:
        """Decayed usage at every level, top down: of each of the queue's cohorts below
        the root (all the LocalQueues under it) per the cohort's weight, then of the
        workload's LocalQueue per its ClusterQueue's weight. Kueue's admission fair
        sharing stops at the LocalQueue; here a division that used more yields first."""
        below = self.snapshot.config.quota_topology.below_root.get(cq.name, ())
        if not below:
            return (self.usage_share(cq, w),)
        if self._cohort_usage is None:
            self._cohort_usage = self._cohort_usages()
        weights = self.snapshot.config.quota_topology.cohort_weight
        parts = []
        for c in below:
            used, weight = self._cohort_usage.get(c, 0.0), weights[c]
            parts.append((math.inf if used > 0 else 0.0) if weight == 0 else used / float(weight))
        return (*parts, self.usage_share(cq, w))

    def _cohort_usages(self) -> dict[CohortName, float]:
        """Decayed usage summed over every LocalQueue under each cohort: once a cycle."""
        config = self.snapshot.config
        chains = config.quota_topology.tree.chain
        out: dict[CohortName, float] = {}
        for (ns, name), used in self.snapshot.queue_usage.items():
            lq = config.local_queues.get((ns, name))
            cq = config.cluster_queues.get(lq.cluster_queue) if lq is not None else None
            if cq is None or cq.cohort is None:
                continue
            for c in chains[cq.cohort]:
                out[c] = out.get(c, 0.0) + used
        return out

    def usage_share(self, cq: ClusterQueue, w: Workload) -> float:
        """Decayed usage of w's LocalQueue per its ClusterQueue's weight."""
        used = self.snapshot.queue_usage.get((w.namespace, w.queue), 0.0)
        if cq.weight == 0:
            return math.inf if used > 0 else 0.0
        return used / float(cq.weight)

    def rank(self, name: ClusterQueueName) -> Rank | None:
        """How a queue's workloads are ordered: None for queue order, else by usage."""
        return self.usage_rank if name in self.usage_within else None

    def usage_rank(self, w: Workload) -> tuple[object, ...]:
        # The LocalQueue's key comes first, so each run (one LocalQueue) stays in order.
        # Its share depends on the LocalQueue alone (its route and decayed usage), so it
        # is worked out once per cycle, not once per workload the cursors rank.
        lq = (w.namespace, w.queue)
        share = self._lq_share.get(lq)
        if share is None:
            cq = self.snapshot.config.queue_for(w)
            queue = self.snapshot.config.cluster_queues[cq] if cq is not None else None
            share = self._lq_share[lq] = self.usage_share(queue, w) if queue is not None else 0.0
        return (share, w.namespace, w.queue, *w.order_key)
