"""The exporter attached to the simulator: bounded labels, and decisions unchanged."""

from __future__ import annotations

from pathlib import Path

from queuemgr.core.reasons import Decisions
from queuemgr.core.snapshot import Snapshot
from queuemgr.metrics import SchedulerMetrics, label_values
from queuemgr.metrics.shape import base_units
from queuemgr.sim.engine import Engine
from queuemgr.spec.scenario import load_scenario
from tests.observability import queued, run, simulate


def test_no_label_carries_a_workload_name() -> None:
    m = SchedulerMetrics()
    engine = run(m)
    names = {sw.workload.name for sw in engine._arrivals}
    ids = {sw.workload.id for sw in engine._arrivals}
    assert len(names) > 60 and all(n.startswith("wl-") for n in names)
    pairs = set(label_values(m))
    assert pairs, "the run exported no labelled series"
    for key, val in pairs:
        assert val not in names and val not in ids, (key, val)
        assert not val.startswith("wl-"), (key, val)
    # Label values come from configuration and fixed code lists: a handful, not one per job.
    # (The cohort paths add a few: org, org/research, ops.)
    assert len({v for _, v in pairs}) < 75


def test_attaching_metrics_does_not_change_the_simulation() -> None:
    for until in (60.0, None):
        plain = simulate(until)
        m = SchedulerMetrics()
        engine = run(m, until=until)
        observed = engine.result
        assert observed.admitted == plain.admitted and observed.finished == plain.finished
        assert observed.queues == plain.queues
        assert observed.pending_at_end == plain.pending_at_end
        assert observed.invariant_violations == []
        total = m.registry.get_sample_value("queuemgr_admitted_workloads_total")
        assert total == plain.admitted
        finished = m.registry.get_sample_value(
            "queuemgr_finished_workloads_total", {"result": "Succeeded"}
        )
        assert (finished or 0) == plain.finished
        pending = sum(
            s.value
            for f in m.registry.collect()
            if f.name == "queuemgr_pending_workloads"
            for s in f.samples
        )
        assert pending == queued(engine) <= plain.pending_at_end


def test_preemptions_are_counted_and_gauges_follow_the_state_after_each_cycle() -> None:
    path = Path(__file__).resolve().parents[3] / "bench" / "scenarios" / "reclaim.yaml"
    sc = load_scenario(path)
    m = SchedulerMetrics()
    checked: list[float] = []

    def observer(now: float, snap: Snapshot, decisions: Decisions, took: float) -> None:
        m.observe_cycle(snap, decisions, took, now)
        # The engine has applied the cycle (evictions and admissions) by now.
        after = engine.cache.snapshot()
        for cq, per_flavor in after.usage.items():
            for flavor, vec in per_flavor.items():
                for res, amount in vec.items():
                    got = m.registry.get_sample_value(
                        "queuemgr_cluster_queue_resource_usage",
                        {"cluster_queue": cq, "flavor": flavor, "resource": res},
                    )
                    assert got == base_units(res, amount), (now, cq, flavor, res)
        running = sum(1 for _ in after.admitted)
        active = sum(
            s.value
            for f in m.registry.collect()
            if f.name == "queuemgr_admitted_active_workloads"
            for s in f.samples
        )
        assert active == running, now
        checked.append(now)

    engine = Engine(sc.config, sc.workloads, observer=observer)
    result = engine.run()
    assert checked and result.evictions > 0
    evicted = m.registry.get_sample_value(
        "queuemgr_evicted_workloads_total", {"reason": "Preempted"}
    )
    assert evicted == result.evictions
    preempted = {
        (s.labels["preemptor_cluster_queue"], s.labels["reason"]): s.value
        for f in m.registry.collect()
        if f.name == "queuemgr_preempted_workloads"
        for s in f.samples
        if s.name.endswith("_total")
    }
    assert sum(preempted.values()) == result.evictions
    assert preempted[("team-a", "InCohortReclamation")] >= 2
    names = {sw.workload.name for sw in sc.workloads} | {sw.workload.id for sw in sc.workloads}
    assert not {v for _, v in label_values(m)} & names
