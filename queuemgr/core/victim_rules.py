"""Who may be whose victim: the rules a victim search applies, one candidate at a time.

Why it exists: the search (``core.preemption``) is about order and minimal sets; these
rules say which admitted gangs are candidates at all, and the cycle and the admitter
ask the same questions (may this queue preempt; may this workload evict that one of its
own queue). Kueue's rules (``within_cluster_queue``, ``reclaim_within_cohort``) and ours
(fair sharing takes only recent loans; a workload taken ``REPEAT_VICTIM`` times is a
victim of last resort) live here side by side.

What must stay true: each rule depends only on its arguments, never on a ledger, so
the search may ask it in any order and memoise nothing about it.
"""

from __future__ import annotations

from collections.abc import Collection

from queuemgr.core.loans import REPEAT_VICTIM
from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    CohortName,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
)
from queuemgr.core.reasons import PreemptionReason

__all__ = ["REPEAT_VICTIM", "fair_victim", "loan_rank", "may_preempt", "preempts_within"]


def fair_victim(a: AdmittedWorkload, preemptor: Workload) -> bool:
    """Whether fair sharing may take ``a`` for ``preemptor`` (shares aside).

    Only a run its queue was lent: one admitted within its queue's nominal quota is
    that queue's due, and taking it for a borrower hands the room to one loan from
    under another's guarantee, which the victim's queue then reclaims (on Philly such
    runs were a third of the GPU-seconds fair sharing threw away). Only a run admitted
    since the preemptor started waiting: one admitted before
    took room nobody asked for, and evicting it throws its work away to undo no
    unfairness (on Philly, fair sharing without this lost a fifth of the GPU-seconds
    delivered, mostly runs of days). And not a workload already preempted
    ``REPEAT_VICTIM`` times: fairness is best effort, and a run taken again and again
    delivers nothing. Reclaim, the nominal-quota guarantee, has neither limit.
    """
    return (
        a.admission.borrowing
        and a.admitted_at >= preemptor.queued_since
        and a.workload.evictions < REPEAT_VICTIM
    )


def loan_rank(a: AdmittedWorkload, reason: PreemptionReason) -> int:
    """0 for a run of the preemptor's own queue or one a peer was lent, else 1.

    A queue's runs admitted within its nominal quota never hold more than that quota
    between them (each was admitted only while the whole queue fitted it), so when the
    queue borrows, its loans hold at least all it borrows.
    """
    return 0 if reason is PreemptionReason.IN_CLUSTER_QUEUE or a.admission.borrowing else 1


def may_preempt(cq: ClusterQueue, fair_cohorts: Collection[CohortName] = ()) -> bool:
    p = cq.preemption
    return (
        p.within_cluster_queue is not WithinClusterQueue.NEVER
        or p.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
        or (cq.cohort is not None and cq.cohort in fair_cohorts)
    )


def preempts_within(rule: WithinClusterQueue, victim: Workload, preemptor: Workload) -> bool:
    """Whether ``preemptor`` may evict ``victim`` of its own ClusterQueue under ``rule``."""
    if rule is WithinClusterQueue.NEVER:
        return False
    if victim.priority < preemptor.priority:
        return True
    return (
        rule is WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        and victim.priority == preemptor.priority
        and victim.created_at > preemptor.created_at
    )
