"""Preemptions counted by the victim's queue, and the GPU-seconds of the runs they throw away."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from queuemgr.core.model import ClusterQueueName, WorkloadId
from queuemgr.core.reasons import Decisions, Eviction, PreemptionReason
from queuemgr.core.snapshot import Snapshot
from queuemgr.metrics import SchedulerMetrics
from queuemgr.sim.engine import Engine, Event
from queuemgr.spec.scenario import load_scenario
from tests.builders import Result, World, make_admitted, make_cq, make_nodes
from tests.builders import make_workload as wl
from tests.observability import lost_gpu_seconds

RECLAIM = Path(__file__).resolve().parents[3] / "bench" / "scenarios" / "reclaim.yaml"


def value(m: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def samples(
    m: SchedulerMetrics, family: str, *, zeros: bool = False
) -> dict[tuple[str, ...], float]:
    """The ``_total`` samples of a counter family (non-zero ones unless ``zeros``), by labels."""
    return {
        tuple(s.labels.values()): s.value
        for f in m.registry.collect()
        if f.name == family
        for s in f.samples
        if s.name.endswith("_total") and (zeros or s.value)
    }


def reclaim_world(*, admitted_at: float) -> World:
    """b runs a 16-GPU gang, 8 of them borrowed from a; a wants its 8 back."""
    borrower = wl("borrow").ns("b").gpus(8).gang(2).build()
    return (
        World()
        .cq(
            make_cq("a").cohort("c").nominal(gpu=8).preempt(reclaim="Any"),
            make_cq("b").cohort("c").nominal(gpu=8),
        )
        .node(make_nodes("n", 2, flavor="default", gpu=8))
        .running(make_admitted(borrower, "b", "default", {"n-0": 1, "n-1": 1}, at=admitted_at))
        .submit(wl("mine").ns("a").gpus(8).at(90))
    )


def with_evictions(res: Result, *evictions: Eviction) -> Decisions:
    return dataclasses.replace(res.decisions, admitted=(), evicted=evictions)


def eviction(
    name: str, cq: str, *, gpus: int, pods: int, placed: int, at: float, reason: PreemptionReason
) -> Eviction:
    """A victim of queue ``cq``: ``placed`` of its ``pods`` pods of ``gpus`` GPUs, since ``at``."""
    w = wl(name).ns(cq).gpus(gpus).gang(pods).build()
    return Eviction(
        victim=make_admitted(w, cq, "default", {"n-0": placed}, at=at),
        preemptor=WorkloadId("x/preemptor"),
        preemptor_cluster_queue=ClusterQueueName("x"),
        reason=reason,
    )


def test_a_cycles_reclamation_counts_the_victims_queue_and_its_lost_gpu_seconds() -> None:
    res = reclaim_world(admitted_at=40.0).run(now=100.0)
    assert res.evicted_ids() == {"b/borrow"}  # the setup preempts, else this test means nothing
    m = SchedulerMetrics()
    m.observe_cycle(res.snapshot, res.decisions, 0.001, now=100.0)
    assert samples(m, "queuemgr_preemptions") == {("b", "InCohortReclamation"): 1}
    # The victim held 2 x 8 GPUs for the 60 s between its admission and this cycle.
    assert samples(m, "queuemgr_preempted_gpu_seconds") == {("b",): 16 * 60.0}
    # The Kueue-named counters see the same preemption, from the preemptor's side.
    assert samples(m, "queuemgr_preempted_workloads") == {("a", "InCohortReclamation"): 1}
    assert value(m, "queuemgr_evicted_workloads_total", reason="Preempted") == 1


def test_a_cycle_without_evictions_exports_every_queues_series_at_zero() -> None:
    # At 0 before the first preemption, so rate() sees that one too.
    res = reclaim_world(admitted_at=40.0).run(now=100.0)
    m = SchedulerMetrics()
    m.count_cycle(res.snapshot, with_evictions(res), 0.001, now=100.0)
    reasons = [r.value for r in PreemptionReason]
    want = {(cq, r): 0.0 for cq in ("a", "b") for r in reasons}
    assert samples(m, "queuemgr_preemptions", zeros=True) == want
    assert samples(m, "queuemgr_preempted_gpu_seconds", zeros=True) == {("a",): 0, ("b",): 0}
    # A queue configured later gets its series from its first cycle on.
    later = reclaim_world(admitted_at=40.0).cq(make_cq("z").nominal(gpu=1)).run(now=100.0)
    m.count_cycle(later.snapshot, with_evictions(later), 0.001, now=101.0)
    assert value(m, "queuemgr_preempted_gpu_seconds_total", cluster_queue="z") == 0
    assert value(m, "queuemgr_preemptions_total", cluster_queue="z", reason=reasons[0]) == 0


@pytest.mark.parametrize("reason", list(PreemptionReason), ids=lambda r: r.value)
def test_every_preemption_reason_of_the_core_is_its_own_label(reason: PreemptionReason) -> None:
    res = reclaim_world(admitted_at=40.0).run(now=100.0)
    e = eviction("v", "team-v", gpus=2, pods=1, placed=1, at=10.0, reason=reason)
    m = SchedulerMetrics()
    m.count_cycle(res.snapshot, with_evictions(res, e), 0.001, now=100.0)
    assert samples(m, "queuemgr_preemptions") == {("team-v", reason.value): 1}
    assert samples(m, "queuemgr_preempted_workloads") == {("x", reason.value): 1}


def test_gpu_seconds_count_the_placed_pods_and_add_up_over_cycles() -> None:
    res = reclaim_world(admitted_at=40.0).run(now=100.0)
    # A partial admission: 3 of 4 pods placed, 2 GPUs each, admitted at t=50.
    partial = eviction(
        "part", "q", gpus=2, pods=4, placed=3, at=50.0, reason=PreemptionReason.IN_CLUSTER_QUEUE
    )
    cpu_only = Eviction(
        victim=make_admitted(wl("cpu").ns("q").cpu("4").build(), "q", "default", {"n-0": 1}),
        preemptor=WorkloadId("x/preemptor"),
        preemptor_cluster_queue=ClusterQueueName("x"),
        reason=PreemptionReason.IN_CLUSTER_QUEUE,
    )
    m = SchedulerMetrics()
    m.count_cycle(res.snapshot, with_evictions(res, partial, cpu_only), 0.001, now=100.0)
    assert value(m, "queuemgr_preempted_gpu_seconds_total", cluster_queue="q") == 6 * 50.0
    assert value(m, "queuemgr_preemptions_total", cluster_queue="q", reason="InClusterQueue") == 2
    other = eviction(
        "other", "q", gpus=8, pods=1, placed=1, at=190.0, reason=PreemptionReason.IN_CLUSTER_QUEUE
    )
    m.count_cycle(res.snapshot, with_evictions(res, other), 0.001, now=200.0)
    assert value(m, "queuemgr_preempted_gpu_seconds_total", cluster_queue="q") == 300.0 + 80.0
    assert value(m, "queuemgr_preemptions_total", cluster_queue="q", reason="InClusterQueue") == 3


def test_an_admission_stamped_after_the_cycle_adds_no_negative_seconds() -> None:
    # admitted_at can come from another replica's clock, a little ahead of this one's.
    res = reclaim_world(admitted_at=40.0).run(now=100.0)
    ahead = eviction(
        "ahead", "q", gpus=8, pods=1, placed=1, at=100.5, reason=PreemptionReason.IN_CLUSTER_QUEUE
    )
    m = SchedulerMetrics()
    m.count_cycle(res.snapshot, with_evictions(res, ahead), 0.001, now=100.0)
    assert value(m, "queuemgr_preempted_gpu_seconds_total", cluster_queue="q") == 0.0
    assert value(m, "queuemgr_preemptions_total", cluster_queue="q", reason="InClusterQueue") == 1


def test_a_simulated_reclaim_is_counted_as_the_engines_events_tell() -> None:
    sc = load_scenario(RECLAIM)
    m = SchedulerMetrics()
    events: list[Event] = []

    def observer(now: float, snap: Snapshot, decisions: Decisions, took: float) -> None:
        m.observe_cycle(snap, decisions, took, now)

    result = Engine(sc.config, sc.workloads, emit=events.append, observer=observer).run()
    evicted = [e for e in events if e["event"] == "evicted"]
    assert result.evictions == len(evicted) >= 2
    # The engine's own account: who was evicted, and why (its message ends "(<reason>)").
    told = Counter(
        (str(e["cluster_queue"]), str(e["reason"]).rsplit("(", 1)[1].rstrip(")")) for e in evicted
    )
    counted = samples(m, "queuemgr_preemptions")
    assert counted == dict(told)
    assert counted[("team-b", "InCohortReclamation")] >= 2
    assert sum(samples(m, "queuemgr_preempted_workloads").values()) == result.evictions
    lost = {cq: v for (cq,), v in samples(m, "queuemgr_preempted_gpu_seconds").items()}
    assert lost == pytest.approx(lost_gpu_seconds(events, sc.workloads))
    # Two borrowed 8-GPU sweeps ran for about 600 s before team-a took its quota back.
    assert lost["team-b"] >= 2 * 8 * 590
