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

Preemption outranks reservations on both of its paths: the admission at the
moment of eviction (``same_cycle``) and the claimed admission of a later cycle
(``after_victims_stop``) are both unguarded, so a workload never preempts for
room the guards would then refuse it.

Whether a workload could ever be admitted is core.admissibility's question;
reservations and backfill are core.backfill's.

What must stay true: same snapshot, same decisions; a gang is admitted whole
or not at all; nothing admitted takes quota or node capacity that is not free.
Because a cycle only ever adds usage, a shape that failed in a queue fails
again for the rest of the cycle, and that verdict is reused.
"""

from __future__ import annotations

import heapq
from functools import partial

from queuemgr.core.admissibility import inadmissible, unroutable_verdict
from queuemgr.core.backfill import Backfill, largest_pending
from queuemgr.core.claims import Claim, placement_fits
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    PodSetPlacement,
    QueueingStrategy,
    ShapeId,
    Workload,
    WorkloadId,
)
from queuemgr.core.nomination import BORROWING, NO_QUOTA, NOMINAL, HeapEntry, Nomination, Nominator
from queuemgr.core.partial import largest_partial
from queuemgr.core.placement import NodePool
from queuemgr.core.policy import PreemptorAdmission
from queuemgr.core.preemption import Preemptor, may_preempt, preempts_within
from queuemgr.core.queues import Cursor
from queuemgr.core.quota import QuotaCheck, QuotaLedger, QuotaVerdict
from queuemgr.core.reasons import (
    Decisions,
    Eviction,
    PendingStatuses,
    blocked_by_head,
    describe_fit_failure,
)
from queuemgr.core.resources import Resources
from queuemgr.core.snapshot import Snapshot
from queuemgr.core.verdicts import PendingReason, Verdict


class _Stale:
    """The nominated flavor or class changed since the head was queued."""


_STALE = _Stale()
# Reasons for which waiting for capacity to free up is what a reservation plans.
_RESERVABLE = frozenset(
    {PendingReason.NO_NODE_FITS, PendingReason.QUOTA_EXCEEDED, PendingReason.COHORT_EXHAUSTED}
)
_NOT_PREEMPTED = _Stale()  # a distinct sentinel: preemption found no way in
# Verdicts that speak of this one workload, not of its shape in its queue: the
# next of its shape is tried (a preemptor holds its claim as if admitted).
_PER_WORKLOAD = frozenset(
    {
        PendingReason.WAITING_FOR_RESERVATION,
        PendingReason.NOMINAL_DEMAND_WAITING,
        PendingReason.PREEMPTING,
    }
)


def _nominal_demand_waiting(cq: ClusterQueue) -> Verdict:
    return Verdict(
        reason=PendingReason.NOMINAL_DEMAND_WAITING,
        detail=(
            f"preempted before, it does not borrow again while in-nominal demand of cohort "
            f"{cq.cohort} waits for that capacity"
        ),
    )


class _Cycle:
    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.now = now
        config = snapshot.config
        self.ledger = QuotaLedger(config.quota_topology, snapshot.usage)
        self.pool = NodePool(config.node_topology, snapshot.node_free, snapshot.node_index)
        self.admitted: list[AdmittedWorkload] = []
        # What the planners count as starting now: the admissions and the held claims.
        self.planned: list[AdmittedWorkload] = []
        self.log: list[AdmittedWorkload | Eviction] = []
        self.claims: list[Claim] = []
        self.released: list[WorkloadId] = []
        # Decided before the order reached them (claims, largest first): skipped there.
        self.decided: set[WorkloadId] = set()
        # (cohort, flavor) where in-nominal demand was left waiting in the first pass.
        self._waiting: set[tuple[CohortName, FlavorName]] = set()
        # Heads the first pass set aside, per queue.
        self._set_aside: dict[ClusterQueueName, list[Workload]] = {}
        # Verdicts of the heads actually tried; the rest of a failed shape's
        # run shares ``_memo``, and a blocked StrictFIFO queue shares ``_blocked``.
        self.verdicts: dict[WorkloadId, Verdict] = {}
        self._memo: dict[tuple[ClusterQueueName, ShapeId], Verdict] = {}
        self._blocked: dict[ClusterQueueName, Verdict] = {}
        self._node_fail: dict[tuple[FlavorName, object], Verdict] = {}
        self._fair_cohorts = frozenset(c.name for c in config.cohorts.values() if c.fair_sharing)
        self.preemptor = Preemptor(
            admitted=snapshot.admitted,
            cluster_queues=config.cluster_queues,
            ledger=self.ledger,
            pool=self.pool,
            fair_cohorts=self._fair_cohorts,
            now=now,
        )
        self.evictions: list[Eviction] = []
        self.backfill = Backfill(snapshot, now)
        self.nominator = Nominator(snapshot, self.ledger)

    # -- phase 5: admit ---------------------------------------------------
    def try_admit(
        self, cq: ClusterQueue, w: Workload, nomination: Nomination
    ) -> Verdict | _Stale | None:
        """Admit ``w`` and return None, or return why it cannot be admitted now.

        ``_STALE`` means the nomination no longer holds (a cohort peer took
        the pool since): the caller nominates again and requeues the head.
        """
        request = w.total_requests
        # Quota checks made at nomination still hold if nothing was admitted since.
        known = nomination.checks if nomination.version == self.ledger.version else {}
        first_quota: tuple[FlavorName, QuotaCheck] | None = None
        node_verdict: Verdict | None = None
        nominated_checked = False
        for fq in cq.flavors:
            check = known.get(fq.flavor) or self.ledger.check(cq.name, fq.flavor, request)
            if not check.fits:
                if first_quota is None:
                    first_quota = (fq.flavor, check)
                continue
            if not nominated_checked:
                if fq.flavor != nomination.flavor or (
                    known is not nomination.checks
                    and check.borrowing != nomination.checks[fq.flavor].borrowing
                ):
                    return _STALE
                nominated_checked = True
            fail_key = (fq.flavor, w.shape)
            failed = self._node_fail.get(fail_key)
            if failed is None:
                # Nothing admitted and no reservation made since the same shape and
                # limit was held back: it would be placed and held back the same way.
                held_key = (cq.name, fq.flavor, w.shape, w.max_runtime)
                held = self.backfill.held_back(held_key, self.ledger.version)
                if held is not None:
                    return held
                placements = self.pool.place(fq.flavor, w.pod_sets)
                if placements is not None:
                    admitted = self._admit(cq, w, fq.flavor, placements, check.borrowing)
                    if admitted is not None:
                        # Its best fit lands on reserved capacity: try around it.
                        around = self.backfill.around(self.pool, fq.flavor, w)
                        if around is not None and around != placements:
                            again = self._admit(cq, w, fq.flavor, around, check.borrowing)
                            if again is None:
                                return None
                        self.backfill.remember(held_key, self.ledger.version, admitted)
                    return admitted
                assert self.pool.last_failure is not None
                failed = Verdict(
                    reason=PendingReason.NO_NODE_FITS,
                    detail=partial(describe_fit_failure, fq.flavor, self.pool.last_failure),
                )
                self._node_fail[fail_key] = failed
            node_verdict = node_verdict or failed
        shrunk = None
        if w.partial_pod_set is not None:
            shrunk = largest_partial(self.ledger, self.pool, cq, w)
        if shrunk is not None:
            flavor, placements, borrowing, reduced = shrunk
            return self._admit(cq, w, flavor, placements, borrowing, request=reduced)
        verdict = self._inadmissible(cq, w) or node_verdict
        if verdict is None:
            assert first_quota is not None
            flavor, check = first_quota
            verdict = Verdict(
                reason=(
                    PendingReason.COHORT_EXHAUSTED
                    if check.verdict is QuotaVerdict.COHORT_EXHAUSTED
                    else PendingReason.QUOTA_EXCEEDED
                ),
                detail=partial(check.describe, flavor),
            )
        self._memo[(cq.name, w.shape)] = verdict
        if verdict.reason is not PendingReason.INADMISSIBLE and may_preempt(cq, self._fair_cohorts):
            outcome = self._preempt(cq, w)
            if outcome is not _NOT_PREEMPTED:
                return outcome  # admitted (None), or waiting for its victims to stop
        return verdict

    def _preempt(self, cq: ClusterQueue, w: Workload) -> Verdict | _Stale | None:
        """Evict for ``w`` if a minimal set of victims lets it in.

        None once admitted; a ``Preempting`` verdict when it waits for its victims;
        ``_NOT_PREEMPTED`` when no set of victims would let it in.
        """
        found = self.preemptor.find(cq, w)
        if found is None:
            return _NOT_PREEMPTED
        self.evictions.extend(found.evictions)
        self.log.extend(found.evictions)
        # Evictions free capacity, so failures seen so far may not hold any more.
        self._node_fail.clear()
        if self.snapshot.policy.preemptor_admission is PreemptorAdmission.SAME_CYCLE:
            # Priority and reclaim rules outrank backfill reservations.
            self._admit(cq, w, found.flavor, found.placements, found.borrowing, guarded=False)
            self.backfill.record(self.admitted[-1])
            return None
        # w starts once its victims have stopped. Until then the capacity it needs, the
        # victims' and whatever else was free, is held for it: a workload admitted into
        # it now would only be preempted in turn when w comes back (a ping-pong).
        held = self._hold(cq, w, found.flavor, found.placements, found.borrowing)
        victims = tuple(e.victim.workload.id for e in found.evictions)
        claim = Claim(workload=w, admission=held.admission, victims=victims, made_at=self.now)
        self.claims.append(claim)
        return Verdict(
            reason=PendingReason.PREEMPTING,
            detail=partial(claim.describe, frozenset(victims)),
        )

    def _inadmissible(self, cq: ClusterQueue, w: Workload) -> Verdict | None:
        return inadmissible(self.snapshot.config, cq, w)

    def _admit(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        placements: tuple[PodSetPlacement, ...],
        borrowing: bool,
        *,
        guarded: bool = True,
        request: Resources | None = None,
    ) -> Verdict | None:
        """Admit, unless that would delay a reservation (then say which).

        ``request`` is what the placements hold when fewer than all pods are placed
        (partial admission); by default the workload's total.
        """
        admission = Admission(
            workload=w.id,
            cluster_queue=cq.name,
            flavor=flavor,
            placements=placements,
            borrowing=borrowing,
        )
        admitted = AdmittedWorkload(workload=w, admission=admission, admitted_at=self.now)
        if guarded:
            refused = self.backfill.check(admitted)
            if refused is not None:
                return refused
        self.ledger.add(cq.name, flavor, w.total_requests if request is None else request)
        self.pool.take(admission.placements, w.pod_sets)
        self.admitted.append(admitted)
        self.planned.append(admitted)
        self.log.append(admitted)
        return None

    def _hold(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        placements: tuple[PodSetPlacement, ...],
        borrowing: bool,
    ) -> AdmittedWorkload:
        """Take ``w``'s quota and nodes for the rest of the cycle without admitting it."""
        admission = Admission(
            workload=w.id,
            cluster_queue=cq.name,
            flavor=flavor,
            placements=placements,
            borrowing=borrowing,
        )
        self.ledger.add(cq.name, flavor, w.total_requests)
        self.pool.take(admission.placements, w.pod_sets)
        held = AdmittedWorkload(workload=w, admission=admission, admitted_at=self.now)
        self.planned.append(held)
        self.backfill.record(held)
        return held

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
            verdict: Verdict | _Stale | None
            if not defer and w.evictions and self._lends_reclaimed(cq, nomination):
                verdict = _nominal_demand_waiting(cq)
            else:
                verdict = self.try_admit(cq, w, nomination)
            if verdict is _STALE:
                heapq.heappush(heap, self.nominator.nominate(cq, w))
                continue
            assert not isinstance(verdict, _Stale)
            if verdict is None:
                cur.advance()
            elif verdict.reason in _PER_WORKLOAD:
                # Another of its shape may end sooner (max_runtime), never was
                # preempted, or find victims too: keep the shape.
                self.verdicts[w.id] = verdict
                cur.advance()
            else:
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

    def _note_waiting(self, cq: ClusterQueue, w: Workload) -> None:
        """Record in-nominal demand of ``cq``'s cohort left waiting for capacity."""
        if cq.cohort is None:
            return
        for fq in cq.flavors:
            if self.preemptor.within_nominal(cq, w, fq.flavor):
                self._waiting.add((cq.cohort, fq.flavor))

    def _lends_reclaimed(self, cq: ClusterQueue, nomination: Nomination) -> bool:
        """Whether borrowing on the nominated flavor takes room in-nominal demand waits for."""
        return (
            cq.cohort is not None
            and nomination.flavor is not None
            and (cq.cohort, nomination.flavor) in self._waiting
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
    cycle = _Cycle(snapshot, now)
    cycle.run()
    return cycle.decisions()
