"""One scheduling cycle: ``schedule(snapshot, now) -> Decisions``, a pure function.

Why it exists: this is the scheduler. The simulator and the service both call
it and do nothing but apply what it returns.

The phases (after Kueue's ``pkg/scheduler``):

0. claims (core.claims): the room each earlier preemptor claimed is held for
   it before anything else; one whose victims have all stopped is admitted
   there at once, the others keep waiting on it;
1. heads: each ClusterQueue offers its first pending workload, in queue order;
2. snapshot: quota and node overlays over the snapshot, which stays untouched;
3. nominate (core.nomination): each head gets the first flavor whose quota it
   fits, and so a class (fits within nominal, or must borrow) and a weighted
   dominant share;
4. order: heads are taken from a heap by (class, share after admission,
   priority, creation, namespace/name). A key depends on its own queue's
   usage, which changes only when that queue admits (and then it offers a
   new head anyway); a cohort peer can only take the pool away, which the
   admit phase notices as a stale nomination and requeues with a fresh key;
5. admit: the first flavor, in the queue's order, where both quota and a whole
   gang placement fit; the queue then offers its next workload, so one cycle
   admits everything that fits (not one head per queue);
6. requeue: every workload left gets a reason, a message and its positions.

Phases 4 and 5 run twice. The first pass takes only heads that fit their
ClusterQueue's nominal quota (or fit no quota, and may preempt); a head that
would borrow is set aside, shape and all, and its queue offers the next,
unless a head set aside could preempt that one by priority (then it is set
aside too, so the queue's priority order still holds). The second pass takes
the borrowers. So a cycle never lends room that in-nominal
demand takes back later in the same cycle, and a workload preempted before is
not lent that room again while in-nominal demand of its cohort still waits.

Whether a preemption may take room a reservation counts on is decided when its
victims are chosen (core.admitter: around the reserved capacity if it can; else
a preemptor within nominal quota outranks the reservation and a borrowing one
evicts nobody); the admission that follows, at the moment of eviction
(``same_cycle``) or on the claim in a later cycle (``after_victims_stop``), is
unguarded, so a workload never preempts for room the guards would then refuse it.

Whether a workload could ever be admitted is core.admissibility's question;
reservations and backfill are core.backfill's.

What must stay true: same snapshot, same decisions; a gang is admitted whole
or not at all; nothing admitted takes quota or node capacity that is not free.
Because a cycle only ever adds usage, a shape that failed in a queue fails
again for the rest of the cycle, and that verdict is reused, except a refusal to
borrow for a declared runtime beyond the queue's ``borrowing_max_runtime``: one of
the same shape declaring less may still borrow.
"""

from __future__ import annotations

import heapq
from functools import lru_cache, partial

from queuemgr.core.admissibility import unroutable_verdict
from queuemgr.core.admitter import STALE, Admitter, Stale, per_workload
from queuemgr.core.backfill import largest_pending
from queuemgr.core.claims import placement_fits
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    QueueingStrategy,
    Workload,
)
from queuemgr.core.nomination import BORROWING, NO_QUOTA, NOMINAL, HeapEntry, Nomination
from queuemgr.core.queues import Cursor
from queuemgr.core.reasons import (
    Decisions,
    PendingStatuses,
    blocked_by_head,
)
from queuemgr.core.snapshot import Snapshot
from queuemgr.core.standings import carried
from queuemgr.core.verdicts import PendingReason, Verdict
from queuemgr.core.victim_rules import preempts_within

# Reasons for which waiting for capacity to free up is what a reservation plans.
_RESERVABLE = frozenset(
    {
        PendingReason.NO_NODE_FITS,
        PendingReason.QUOTA_EXCEEDED,
        PendingReason.COHORT_EXHAUSTED,
        PendingReason.BORROWING_RUNTIME_LIMIT,
        PendingReason.PREEMPTED_TOO_OFTEN,
    }
)
# Verdicts that speak of this one workload, not of its shape in its queue: the
# next of its shape is tried (a preemptor holds its claim as if admitted).
_PER_WORKLOAD = frozenset(
    {
        PendingReason.WAITING_FOR_RESERVATION,
        PendingReason.NOMINAL_DEMAND_WAITING,
        PendingReason.PREEMPTING,
    }
)


@lru_cache(maxsize=1024)
def _nominal_demand_waiting(cohort: CohortName | None) -> Verdict:
    """One verdict per cohort, shared: a busy cycle gives it to thousands of workloads
    (16 % of a cycle's time on the Philly trace with preemption on went to building it)."""
    return Verdict(
        reason=PendingReason.NOMINAL_DEMAND_WAITING,
        detail=(
            f"preempted before, it does not borrow again while in-nominal demand of cohort "
            f"{cohort} waits for that capacity"
        ),
    )


class Cycle(Admitter):
    """The order of one cycle: claims, the largest first, then the two passes over the heads."""

    # -- phase 0: claims ----------------------------------------------------
    def hold_claims(self) -> None:
        """Hold every standing claim; admit on it those whose victims have all stopped."""
        snapshot = self.snapshot
        config = snapshot.config
        claims = sorted(snapshot.claims.values(), key=lambda c: c.workload.order_key)
        for claim in claims:
            w, adm = claim.workload, claim.admission
            cq = config.cluster_queues.get(adm.cluster_queue)
            check = None
            if cq is not None and config.queue_for(w) == cq.name and not self._inadmissible(cq, w):
                # Capacity only, not whether ``w`` may borrow (borrowing_max_runtime): the
                # claim took its room before anything its queue admitted after it in that
                # cycle, so if the queue is over its nominal quota now, those borrow, not it.
                check = self.ledger.check(cq.name, adm.flavor, w.total_requests)
            if (
                cq is None
                or check is None
                or not check.fits
                or not placement_fits(self.pool, w, adm)
            ):
                # The promised room is gone (config or nodes changed): it queues as any other.
                self.released.append(w.id)
                continue
            self.decided.add(w.id)
            if any(v in snapshot.stopping for v in claim.victims):
                self._hold(cq, w, adm.flavor, adm.placements, check.borrowing)
                self.verdicts[w.id] = Verdict(
                    reason=PendingReason.PREEMPTING,
                    detail=partial(claim.describe, snapshot.stopping),
                )
            else:
                # Unguarded, as a same-cycle preemptor's admission is: see the docstring.
                self._admit(cq, w, adm.flavor, adm.placements, check.borrowing, guarded=False)

    # -- phases 1, 4, 5 ---------------------------------------------------
    def run(self) -> None:
        config = self.snapshot.config
        if self.snapshot.claims:
            self.hold_claims()
        heap: list[HeapEntry] = []
        cursors: dict[ClusterQueueName, Cursor] = {}
        for name in sorted(self.snapshot.pending):
            cq = config.cluster_queues.get(name)
            if cq is None:
                continue
            cur = Cursor(self.snapshot.pending[name], self.nominator.rank(name))
            cursors[name] = cur
            head = cur.head()
            if head is not None:
                heapq.heappush(heap, self.nominator.nominate(cq, head))
        if self.snapshot.policy.largest_reservations:
            self._largest_first(cursors)
        deferred = self._drain(heap, cursors, defer=True)
        for name in sorted(deferred):
            cur = cursors[name]
            cur.resume()
            head = cur.head()
            if head is not None:
                heapq.heappush(heap, self.nominator.nominate(config.cluster_queues[name], head))
        self._drain(heap, cursors, defer=False)

    def _drain(
        self, heap: list[HeapEntry], cursors: dict[ClusterQueueName, Cursor], *, defer: bool
    ) -> set[ClusterQueueName]:
        """Take heads off ``heap`` until it is empty; returns the queues with heads set aside.

        With ``defer``, a head that must borrow is set aside for the second pass.
        """
        config = self.snapshot.config
        deferred: set[ClusterQueueName] = set()
        while heap:
            key, name, nomination = heapq.heappop(heap)
            cur = cursors[name]
            cq = config.cluster_queues[name]
            w = cur.head()
            assert w is not None
            if w.id in self.decided:
                cur.advance()
                head = cur.head()
                if head is not None:
                    heapq.heappush(heap, self.nominator.nominate(cq, head))
                continue
            if (
                key[0] == BORROWING
                and not defer  # the first pass sets every borrower aside, whatever its key
                and nomination.version != self.ledger.version
                and name in self._deep
                and self._key_moved(name, nomination.keyed)
            ):
                # In a tree, a borrower's key holds its cohorts' shares, which others'
                # admissions since raised: the key is a lower bound. Its fresh key goes
                # first only if no other lower bound is below it, else back in the heap.
                fresh = self.nominator.rekey(cq, w, key, nomination)
                if heap and fresh[0] > heap[0][0]:
                    heapq.heappush(heap, fresh)
                    continue
                key, name, nomination = fresh
            if defer and (key[0] == BORROWING or self._would_preempt(cq, w)):
                deferred.add(name)
                self._set_aside.setdefault(name, []).append(w)
                if cq.queueing_strategy is QueueingStrategy.STRICT_FIFO:
                    continue  # nothing passes its head: the queue waits for the second pass
                cur.defer_shape()
                head = cur.head()
                if head is not None:
                    heapq.heappush(heap, self.nominator.nominate(cq, head))
                continue
            verdict: Verdict | Stale | None
            why = cq.no_loan(w)
            refused = self._no_loan.get((name, w.shape, why)) if why is not None else None
            if refused is not None:
                # Usage only grows within a cycle: it is refused as the last one was.
                self.verdicts[w.id] = refused
                cur.advance()
                head = cur.head()
                if head is not None:
                    heapq.heappush(heap, self.nominator.nominate(cq, head))
                continue
            if not defer and w.evictions and self._lends_reclaimed(cq, nomination):
                verdict = _nominal_demand_waiting(self._tree_of(cq))
            else:
                verdict = self.try_admit(cq, w, nomination)
            if verdict is STALE:
                heapq.heappush(heap, self.nominator.nominate(cq, w))
                continue
            assert not isinstance(verdict, Stale)
            if verdict is None:
                cur.advance()
            elif verdict.reason in _PER_WORKLOAD:
                # Another of its shape may end sooner (max_runtime), never was
                # preempted, or find victims too: keep the shape.
                self.verdicts[w.id] = verdict
                cur.advance()
            else:
                alone = per_workload(cq, w, verdict)
                if alone:
                    assert why is not None  # per_workload: only a workload kept from loans
                    self._no_loan[(name, w.shape, why)] = verdict
                if key[0] in (NOMINAL, NO_QUOTA) and verdict.reason in _RESERVABLE:
                    self._note_waiting(cq, w)
                if verdict.reason is not PendingReason.INADMISSIBLE:
                    verdict = self.backfill.reserve(cq, w, verdict, self.planned, self.evictions)
                self.verdicts[w.id] = verdict
                strict = cq.queueing_strategy is QueueingStrategy.STRICT_FIFO
                if strict and verdict.reason is not PendingReason.INADMISSIBLE:
                    self._blocked[name] = blocked_by_head(w.id)
                    cur.clear()
                    continue
                if alone:
                    cur.advance()  # one of its shape declaring a shorter runtime may borrow
                else:
                    # Usage only grows within a cycle, so the shape fails again.
                    cur.drop_shape()
            head = cur.head()
            if head is not None:
                heapq.heappush(heap, self.nominator.nominate(cq, head))
        return deferred

    def _would_preempt(self, cq: ClusterQueue, w: Workload) -> bool:
        """Whether a head of ``cq`` set aside in the first pass may preempt ``w`` by priority.

        Then ``w`` waits for the second pass too: admitted first, it would only be
        evicted by that head in the next cycle, a priority inversion that ping-pongs.
        """
        rule = cq.preemption.within_cluster_queue
        heads = self._set_aside.get(cq.name)
        return bool(heads) and any(preempts_within(rule, w, head) for head in heads or ())

    def _key_moved(self, name: ClusterQueueName, version: int) -> bool:
        """Whether one of ``name``'s cohorts below the root changed since ``version``."""
        touched = self.ledger.touched
        # A loop, not any() over a generator: asked once per stale borrower popped.
        for c in self._below_root[name]:  # noqa: SIM110
            if touched.get(c, -1) > version:
                return True
        return False

    def _tree_of(self, cq: ClusterQueue) -> CohortName | None:
        """The root of ``cq``'s cohort tree: a loan may come from anywhere in it."""
        return self.snapshot.config.quota_topology.root_of.get(cq.name)

    def _note_waiting(self, cq: ClusterQueue, w: Workload) -> None:
        """Record in-nominal demand of ``cq``'s cohort tree left waiting for capacity."""
        root = self._tree_of(cq)
        if root is None:
            return
        for fq in cq.flavors:
            if self.preemptor.within_nominal(cq, w, fq.flavor):
                self._waiting.add((root, fq.flavor))

    def _lends_reclaimed(self, cq: ClusterQueue, nomination: Nomination) -> bool:
        """Whether borrowing on the nominated flavor takes room in-nominal demand waits for."""
        root = self._tree_of(cq)
        return (
            root is not None
            and nomination.flavor is not None
            and (root, nomination.flavor) in self._waiting
        )

    def _largest_first(self, cursors: dict[ClusterQueueName, Cursor]) -> None:
        """Try the policy's ``largest_reservations`` largest pending workloads first.

        Each is admitted if it fits now; one that cannot start gets a reservation
        before anything else is admitted, so the capacity drained for it in earlier
        cycles is still there to count on. Those admitted here, or waiting for the
        victims they preempted, are decided. This knob outranks the in-nominal
        first pass, as it outranks the fair-share order: that is what it is for.
        """
        config = self.snapshot.config
        strict_heads = {  # only a StrictFIFO queue's head may start there
            name: head
            for name, cur in cursors.items()
            if config.cluster_queues[name].queueing_strategy is QueueingStrategy.STRICT_FIFO
            and (head := cur.head()) is not None
        }
        picked = largest_pending(
            self.snapshot,
            config.cluster_queues,
            strict_heads,
            lambda cq, w: self._inadmissible(cq, w) is not None,
            self.snapshot.policy.largest_reservations,
        )
        for cq, w in picked:
            if w.id in self.decided:
                continue
            _key, _name, nomination = self.nominator.nominate(cq, w)
            verdict = self.try_admit(cq, w, nomination)
            if verdict is None:
                self.decided.add(w.id)
            elif not isinstance(verdict, Verdict):
                continue  # cannot happen with a fresh nomination; its turn will tell
            elif verdict.reason is PendingReason.PREEMPTING:
                self.decided.add(w.id)
                self.verdicts[w.id] = verdict
            elif verdict.reason in _RESERVABLE:
                # Kept even if its shape is dropped before its turn; if it gets one, its
                # verdict then carries this reservation again.
                self.verdicts[w.id] = self.backfill.reserve_largest(
                    cq, w, verdict, self.planned, self.evictions
                )

    def _eta(self, w: Workload, cq_name: ClusterQueueName) -> float | None:
        return self.backfill.eta(w, cq_name, self.planned, self.evictions)

    # -- phase 6: requeue -------------------------------------------------
    def decisions(self) -> Decisions:
        config = self.snapshot.config
        for w in self.snapshot.unroutable:
            self.verdicts[w.id] = unroutable_verdict(config, w)
        statuses = PendingStatuses(
            ranks={name: self.nominator.usage_rank for name in self.nominator.usage_within},
            queues=self.snapshot.pending,
            unroutable=self.snapshot.unroutable,
            verdicts=self.verdicts,
            shape_verdicts=self._memo,
            blocked=self._blocked,
            admitted=frozenset(a.workload.id for a in self.admitted),
            eta_for=self._eta,
            cluster_queues=config.cluster_queues,
            memo=carried(self.snapshot.memo, config),
            now=self.now,
        )
        return Decisions(
            admitted=tuple(self.admitted),
            pending=statuses,
            evicted=tuple(self.evictions),
            reservations=tuple(self.backfill.reservations.values()),
            claims=tuple(self.claims),
            released_claims=tuple(self.released),
            log=tuple(self.log),
        )


def schedule(snapshot: Snapshot, now: float) -> Decisions:
    """Decide which pending workloads to admit now, where, and why the rest wait."""
    cycle = Cycle(snapshot, now)
    cycle.run()
    return cycle.decisions()
