"""The victim search written plainly: the specification its shortcuts are held to.

Every admitted workload of the flavor is a candidate, in the documented order
(core/preemption.py), and each is checked as it comes, with no memo and no early
pruning. It stays as simple as the rules, however slow. Used by
tests/unit/core/test_preemption_search.py (same decisions) and
bench/victim_search.py (how much the shortcuts save).
"""

from __future__ import annotations

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    FlavorName,
    ReclaimWithinCohort,
    Workload,
)
from queuemgr.core.preemption import Preemption, Preemptor
from queuemgr.core.reasons import Eviction, PreemptionReason
from queuemgr.core.resources import GPU
from queuemgr.core.victim_rules import REPEAT_VICTIM, fair_victim, preempts_within


class PlainPreemptor(Preemptor):
    """The search without shortcuts: the rules of core/preemption.py, one by one."""

    def _try_flavor(
        self, cq: ClusterQueue, w: Workload, flavor: FlavorName, loans_only: bool = False
    ) -> Preemption | None:
        reclaim = cq.preemption.reclaim_within_cohort
        in_nominal = self.within_nominal(cq, w, flavor)
        may_reclaim = reclaim is not ReclaimWithinCohort.NEVER and cq.cohort is not None
        may_reclaim = may_reclaim and in_nominal
        fair = (
            not may_reclaim and cq.cohort is not None and cq.cohort in self._fair and not in_nominal
        )
        candidates: list[tuple[AdmittedWorkload, PreemptionReason]] = []
        for a in self._admitted.values():
            if a.admission.flavor != flavor or a.workload.id in self.evicted:
                continue
            if a.admission.cluster_queue == cq.name:
                if preempts_within(cq.preemption.within_cluster_queue, a.workload, w):
                    candidates.append((a, PreemptionReason.IN_CLUSTER_QUEUE))
                continue
            peer = self._cqs.get(a.admission.cluster_queue)
            if not (may_reclaim or fair) or peer is None or peer.cohort != cq.cohort:
                continue
            young = peer.preemption.min_runtime
            if young > 0 and self._now - a.admitted_at < young:
                continue
            if loans_only and not a.admission.borrowing:
                continue
            if fair:
                if fair_victim(a, w):
                    candidates.append((a, PreemptionReason.IN_COHORT_FAIR_SHARING))
            elif reclaim is ReclaimWithinCohort.ANY or a.workload.priority < w.priority:
                candidates.append((a, PreemptionReason.IN_COHORT_RECLAMATION))
        candidates.sort(
            key=lambda item: (
                0 if self._plain_borrows(item[0]) else 1,
                item[0].workload.priority,
                item[0].workload.evictions >= REPEAT_VICTIM,
                0
                if item[1] is PreemptionReason.IN_CLUSTER_QUEUE or item[0].admission.borrowing
                else 1,
                item[0].held.get(GPU, 0) * (self._now - item[0].admitted_at),
                -item[0].admitted_at,
                item[0].workload.id,
            )
        )
        chosen: list[tuple[AdmittedWorkload, PreemptionReason]] = []
        mine = None
        for a, reason in candidates:
            if reason is not PreemptionReason.IN_CLUSTER_QUEUE and not self._plain_borrows(a):
                continue
            if reason is PreemptionReason.IN_COHORT_FAIR_SHARING:
                if mine is None:
                    mine = self._ledger.share(cq.name, (flavor, w.total_requests))
                gone = {r: -v for r, v in a.held.items()}
                theirs = self._ledger.share(a.admission.cluster_queue, (flavor, gone))
                if theirs < mine:
                    continue
            self._remove(a)
            chosen.append((a, reason))
            if self._fits(cq, w, flavor):
                break
        else:
            for a, _ in chosen:
                self._restore(a)
            return None
        for item in reversed(chosen[:-1]):
            self._restore(item[0])
            if self._fits(cq, w, flavor):
                chosen.remove(item)
            else:
                self._remove(item[0])
        check = self._ledger.check_for(cq, flavor, w)
        placements = self._pool.place(flavor, w.pod_sets)
        assert check.fits and placements is not None
        self.evicted.update(a.workload.id for a, _ in chosen)
        return Preemption(
            flavor=flavor,
            placements=placements,
            borrowing=check.borrowing,
            evictions=tuple(
                Eviction(victim=a, preemptor=w.id, preemptor_cluster_queue=cq.name, reason=r)
                for a, r in chosen
            ),
        )

    def _plain_borrows(self, a: AdmittedWorkload) -> bool:
        peer = self._cqs[a.admission.cluster_queue]
        quota = peer.quota(a.admission.flavor)
        assert quota is not None
        used = self._ledger.usage(peer.name, a.admission.flavor)
        return any(v > quota.nominal.get(r, 0) for r, v in used.items())
