"""Phase 5 of a cycle, admit: one workload at a time, on quota and whole-gang placement.

Why it exists: ``cycle`` decides the order in which workloads are tried (claims,
the largest first, the two passes over the heads); this decides what one try
does: the first flavor of the queue where both quota and a node placement fit,
held back if it would delay a reservation, shrunk for partial admission, and
otherwise preempting when the queue may. It owns the cycle's working state (the
quota ledger and node pool as admissions change them, and what was admitted,
held, evicted and claimed), which ``cycle.Cycle`` extends with the order.

What must stay true: a gang is admitted whole or not at all; nothing admitted
takes quota or node capacity that is not free; whether a preemption may take
room a reservation counts on is decided once, when its victims are chosen
(``_around_reservations``), and its admission is then unguarded on both of its
paths (see ``cycle``); a verdict is memoised per (queue, shape) only when it holds for the
shape, since usage only grows within a cycle.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from queuemgr.core.admissibility import inadmissible
from queuemgr.core.backfill import Backfill
from queuemgr.core.claims import Claim
from queuemgr.core.loans import NoLoan
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    PodSetPlacement,
    WithinClusterQueue,
    Workload,
    WorkloadId,
)
from queuemgr.core.nomination import Nomination, Nominator
from queuemgr.core.partial import largest_partial
from queuemgr.core.placement import NodePool
from queuemgr.core.policy import PreemptorAdmission
from queuemgr.core.preemption import Preemption, Preemptor
from queuemgr.core.quota import QuotaCheck, QuotaLedger, QuotaVerdict
from queuemgr.core.reasons import (
    Eviction,
    describe_fit_failure,
)
from queuemgr.core.resources import Resources
from queuemgr.core.shapes import ShapeId
from queuemgr.core.snapshot import Snapshot
from queuemgr.core.verdicts import PendingReason, Verdict
from queuemgr.core.victim_rules import may_preempt


def per_workload(cq: ClusterQueue, w: Workload, verdict: Verdict) -> bool:
    """Whether ``verdict`` holds for ``w`` alone, not for its shape in ``cq``: a refusal
    that only ``w``'s being kept to its nominal quota explains (``ClusterQueue.no_loan``),
    since one of the same shape declaring a shorter runtime, or preempted less often,
    may borrow."""
    return verdict.reason in _NOT_BORROWING_REASONS and not cq.may_borrow(w)


_NOT_BORROWING_REASONS = frozenset(
    {
        PendingReason.BORROWING_RUNTIME_LIMIT,
        PendingReason.PREEMPTED_TOO_OFTEN,
        PendingReason.INADMISSIBLE,
    }
)

# The pending reason of a quota refusal; any other refusal is QuotaExceeded.
_QUOTA_REASONS = {
    QuotaVerdict.COHORT_EXHAUSTED: PendingReason.COHORT_EXHAUSTED,
    QuotaVerdict.BORROWING_RUNTIME: PendingReason.BORROWING_RUNTIME_LIMIT,
    QuotaVerdict.REPEAT_VICTIM: PendingReason.PREEMPTED_TOO_OFTEN,
}


class Stale:
    """The nominated flavor or class changed since the head was queued."""


STALE = Stale()
NOT_PREEMPTED = Stale()  # a distinct sentinel: preemption found no way in


class Admitter:
    """The working state of one cycle and the admission of one workload (phase 5)."""

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.snapshot = snapshot
        self.now = now
        config = snapshot.config
        self.ledger = QuotaLedger(config.quota_topology, snapshot.usage)
        self.pool = NodePool(
            config.node_topology,
            snapshot.node_free,
            snapshot.node_index,
            snapshot.policy.domain_rules,
        )
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
        # Queues below a cohort that has a parent: their order keys hold cohort shares
        # that other queues' admissions move (core.cycle re-keys them when stale).
        self._below_root = config.quota_topology.below_root
        self._deep = frozenset(n for n, below in self._below_root.items() if below)
        # Verdicts of the heads actually tried; the rest of a failed shape's
        # run shares ``_memo``, and a blocked StrictFIFO queue shares ``_blocked``.
        self.verdicts: dict[WorkloadId, Verdict] = {}
        self._memo: dict[tuple[ClusterQueueName, ShapeId], Verdict] = {}
        # The same per shape and reason, for the workloads kept from borrowing
        # (per_workload, ClusterQueue.no_loan): the others of the shape are still tried.
        self._no_loan: dict[tuple[ClusterQueueName, ShapeId, NoLoan], Verdict] = {}
        self._blocked: dict[ClusterQueueName, Verdict] = {}
        self._node_fail: dict[tuple[FlavorName, object, bool], Verdict] = {}
        # Cohorts that share fairly: those with a fair-sharing cohort at or above them.
        self._fair_cohorts = frozenset(config.quota_topology.fair_scope)
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
    ) -> Verdict | Stale | None:
        """Admit ``w`` and return None, or return why it cannot be admitted now.

        ``STALE`` means the nomination no longer holds (a cohort peer took
        the pool since): the caller nominates again and requeues the head.
        """
        # Quota checks made at nomination still hold if nothing was admitted since.
        known = nomination.checks if nomination.version == self.ledger.version else {}
        first_quota: tuple[FlavorName, QuotaCheck] | None = None
        node_verdict: Verdict | None = None
        nominated_checked = False
        for fq in cq.flavors:
            check = known.get(fq.flavor) or self.ledger.check_for(cq, fq.flavor, w)
            if not check.fits:
                if first_quota is None:
                    first_quota = (fq.flavor, check)
                continue
            if not nominated_checked:
                if fq.flavor != nomination.flavor or (
                    known is not nomination.checks
                    and check.borrowing != nomination.checks[fq.flavor].borrowing
                ):
                    return STALE
                nominated_checked = True
            # A queue with an admission check may plan on nodes an autoscaler adds.
            virtual = bool(cq.admission_checks)
            fail_key = (fq.flavor, w.shape, virtual)
            failed = self._node_fail.get(fail_key)
            if failed is None:
                # Nothing admitted and no reservation made since the same shape and
                # limit was held back: it would be placed and held back the same way.
                held_key = (cq.name, fq.flavor, w.shape, w.max_runtime)
                held = self.backfill.held_back(held_key, self.ledger.version)
                if held is not None:
                    return held
                placements = self.pool.place(fq.flavor, w.pod_sets, virtual=virtual)
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
                reason=_QUOTA_REASONS.get(check.verdict, PendingReason.QUOTA_EXCEEDED),
                detail=partial(check.describe, flavor),
            )
        if not per_workload(cq, w, verdict):
            self._memo[(cq.name, w.shape)] = verdict
        if (
            verdict.reason is not PendingReason.INADMISSIBLE
            and may_preempt(cq, self._fair_cohorts)
            and not self._beyond_any_victim(cq, w)
        ):
            outcome = self._preempt(cq, w)
            if outcome is not NOT_PREEMPTED:
                return outcome  # admitted (None), or waiting for its victims to stop
        return verdict

    def _preempt(self, cq: ClusterQueue, w: Workload) -> Verdict | Stale | None:
        """Evict for ``w`` if a minimal set of victims lets it in.

        None once admitted; a ``Preempting`` verdict when it waits for its victims;
        ``NOT_PREEMPTED`` when no set of victims would let it in.
        """
        # The same shape and limit refused since nothing changed: refused again (a busy
        # tenant offers thousands of one shape a cycle, each a whole victim search).
        key = (cq.name, None, w.shape, w.max_runtime)
        again = self.backfill.held_back(key, self.ledger.version)
        if again is not None:
            return again
        found = None
        if self.backfill.guards:
            if self.preemptor.hopeless(cq, w):
                return NOT_PREEMPTED  # neither search below could succeed: spare both
            # Victims whose going leaves it room off the reserved capacity, if there are.
            with self.backfill.held(self.pool):
                found = self.preemptor.find(cq, w, loans_only=True)
        if found is None:
            found = self.preemptor.find(cq, w)
        if found is None:
            return NOT_PREEMPTED
        placements, refused = self._around_reservations(cq, w, found)
        if refused is not None:
            self.preemptor.undo(found)
            self.backfill.remember(key, self.ledger.version, refused)
            return refused
        found = replace(found, placements=placements)
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

    def _around_reservations(
        self, cq: ClusterQueue, w: Workload, found: Preemption
    ) -> tuple[tuple[PodSetPlacement, ...], Verdict | None]:
        """Where the preemptor goes, or why it may not evict for a reservation's sake.

        Its victims free room that a reservation may count on. It is placed around the
        reserved capacity when it can be; if it cannot, a preemptor within its nominal
        quota (reclaim, or priority) outranks the reservation, and one that would
        borrow (fair sharing) does not evict at all: its admission would be refused on
        the ordinary path, and a borrower's preemption must not delay a gang that
        waits for the same capacity.
        """
        if not self.backfill.guards:
            return found.placements, None
        trial = self._admission(cq, w, found.flavor, found.placements, found.borrowing)
        refused = self.backfill.delays(trial)
        if refused is None:
            return found.placements, None
        around = self.backfill.around(self.pool, found.flavor, w)
        if around is not None:
            trial = self._admission(cq, w, found.flavor, around, found.borrowing)
            if self.backfill.delays(trial) is None:
                return around, None
        if not found.borrowing:
            return found.placements, None
        return found.placements, refused

    def _beyond_any_victim(self, cq: ClusterQueue, w: Workload) -> bool:
        """Whether no set of victims could let ``w`` in, so no search is made.

        A workload kept to its nominal quota (``ClusterQueue.no_loan``) that fits no
        flavor's nominal quota now, in a queue that may not preempt its own runs: taking
        other queues' runs leaves its queue's usage as it is, so it would still not fit.
        On the Philly replay such searches, for workloads preempted 3 times, were 84 %
        of a busy cycle's time. A partial workload is searched for: fewer pods may fit.
        """
        if cq.may_borrow(w) or w.partial_pod_set is not None:
            return False
        if cq.preemption.within_cluster_queue is not WithinClusterQueue.NEVER:
            return False
        return not any(self.preemptor.within_nominal(cq, w, fq.flavor) for fq in cq.flavors)

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
        admitted = self._admission(cq, w, flavor, placements, borrowing)
        if guarded:
            refused = self.backfill.check(admitted)
            if refused is not None:
                return refused
        self._take(admitted, w.total_requests if request is None else request)
        self.admitted.append(admitted)
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
        held = self._admission(cq, w, flavor, placements, borrowing)
        self._take(held, w.total_requests)
        self.backfill.record(held)
        return held

    def _admission(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        placements: tuple[PodSetPlacement, ...],
        borrowing: bool,
    ) -> AdmittedWorkload:
        admission = Admission(
            workload=w.id,
            cluster_queue=cq.name,
            flavor=flavor,
            placements=placements,
            borrowing=borrowing,
        )
        return AdmittedWorkload(workload=w, admission=admission, admitted_at=self.now)

    def _take(self, a: AdmittedWorkload, request: Resources) -> None:
        """Charge ``a``'s quota and nodes in this cycle's overlays; the planners count it."""
        self.ledger.add(a.admission.cluster_queue, a.admission.flavor, request)
        self.pool.take(a.admission.placements, a.workload.pod_sets)
        self.planned.append(a)
