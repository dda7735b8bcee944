"""Property tests for preemption: the cycle's invariants hold with evictions in play."""

from __future__ import annotations

import dataclasses

from hypothesis import event, given
from hypothesis import strategies as st

from queuemgr.core.cycle import schedule
from queuemgr.core.model import PreemptionPolicy, ReclaimWithinCohort, WithinClusterQueue
from queuemgr.core.reasons import PreemptionReason
from queuemgr.core.snapshot import Config
from tests.unit.core.test_properties import (
    SETTINGS,
    Scenario,
    check_gangs,
    check_nodes,
    check_quota,
    scenarios,
)


@st.composite
def preempting(draw: st.DrawFn) -> Scenario:
    sc = draw(scenarios())
    cqs = {
        name: dataclasses.replace(
            cq,
            preemption=PreemptionPolicy(
                within_cluster_queue=draw(st.sampled_from(list(WithinClusterQueue))),
                reclaim_within_cohort=draw(st.sampled_from(list(ReclaimWithinCohort))),
            ),
        )
        for name, cq in sc.config.cluster_queues.items()
    }
    config = Config.of(
        flavors=sc.config.flavors.values(),
        cohorts=sc.config.cohorts.values(),
        cluster_queues=cqs.values(),
        local_queues=sc.config.local_queues.values(),
        nodes=sc.config.nodes.values(),
    )
    # Pending work gets higher priorities than what runs, so that there is something to take.
    pending = [
        dataclasses.replace(w, priority=w.priority + draw(st.integers(0, 3))) for w in sc.pending
    ]
    return Scenario(config=config, admitted=sc.admitted, pending=pending)


@SETTINGS
@given(preempting())
def test_evictions_keep_quota_nodes_and_gangs(sc: Scenario) -> None:
    snap = sc.snapshot()
    decided = schedule(snap, 1.0)
    evicted = {e.victim.workload.id for e in decided.evicted}
    event("evicted some" if evicted else "evicted none")
    assert evicted <= set(snap.admitted)
    assert not evicted & decided.admitted_ids()
    assert not decided.admitted_ids() & set(decided.pending)  # admitted is never pending
    assert len(evicted) == len(decided.evicted)  # nobody is evicted twice
    held = [a for wid, a in snap.admitted.items() if wid not in evicted]
    held.extend(decided.admitted)
    check_quota(sc.config, held)
    check_nodes(sc.config, held)
    check_gangs(sc.config, decided)
    assert schedule(snap, 1.0) == decided


@SETTINGS
@given(preempting())
def test_every_eviction_follows_its_queues_rule(sc: Scenario) -> None:
    snap = sc.snapshot()
    decided = schedule(snap, 1.0)
    # The preemptor is admitted at once, or (after_victims_stop, the default) claims the room.
    preemptors = {a.workload.id: a.workload for a in decided.admitted}
    preemptors.update({c.workload.id: c.workload for c in decided.claims})
    for e in decided.evicted:
        preemptor = preemptors[e.preemptor]
        cq = sc.config.cluster_queues[e.preemptor_cluster_queue]
        victim = e.victim.workload
        if e.reason is PreemptionReason.IN_CLUSTER_QUEUE:
            assert e.victim.admission.cluster_queue == cq.name
            rule = cq.preemption.within_cluster_queue
            assert rule is not WithinClusterQueue.NEVER
            assert victim.priority < preemptor.priority or (
                rule is WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
                and victim.priority == preemptor.priority
                and victim.created_at > preemptor.created_at
            )
        else:
            victim_cq = sc.config.cluster_queues[e.victim.admission.cluster_queue]
            assert victim_cq.name != cq.name and victim_cq.cohort == cq.cohort is not None
            rule_r = cq.preemption.reclaim_within_cohort
            assert rule_r is not ReclaimWithinCohort.NEVER
            if rule_r is ReclaimWithinCohort.LOWER_PRIORITY:
                assert victim.priority < preemptor.priority
