"""The exporter turns one cycle's snapshot and decisions into the metrics of issue 6."""

from __future__ import annotations

import dataclasses
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from queuemgr.metrics import SchedulerMetrics, serve
from queuemgr.metrics.shape import MAX_PRIORITY_CLASSES, SeriesFrame
from tests.builders import Result, World, make_cohort, make_cq, make_nodes
from tests.builders import make_workload as wl

GPU = "nvidia.com/gpu"


def observe(result: Result, metrics: SchedulerMetrics | None = None) -> SchedulerMetrics:
    m = metrics or SchedulerMetrics(version="test")
    m.observe_cycle(result.snapshot, result.decisions, 0.004, now=100.0)
    return m


def value(m: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_pending_is_counted_per_local_queue_and_reason_with_zeros_for_the_rest() -> None:
    res = (
        World()
        .cq(make_cq("a").nominal(gpu=8).namespaces("a"))
        .lq("a", "default", "a")
        .lq("ghost", "default", "a")  # a refuses namespace "ghost"
        .node(make_nodes("n", 1, flavor="default"))
        .submit(wl("first").ns("a").gpus(8), wl("second").ns("a").gpus(8).at(1))
        .submit(wl("lost").ns("ghost").gpus(1))
        .run()
    )
    m = observe(res)
    labels = {"cluster_queue": "a", "local_queue": "default", "namespace": "a"}
    assert value(m, "queuemgr_pending_workloads", **labels, reason="QuotaExceeded") == 1
    assert value(m, "queuemgr_pending_workloads", **labels, reason="NoNodeFits") == 0
    # Unroutable workloads have no ClusterQueue: the label is empty.
    lost = {"cluster_queue": "", "local_queue": "default", "namespace": "ghost"}
    assert value(m, "queuemgr_pending_workloads", **lost, reason="Inadmissible") == 1
    assert value(m, "queuemgr_admitted_active_workloads", cluster_queue="a") == 1
    assert value(m, "queuemgr_admitted_workloads_total") == 1
    assert value(m, "queuemgr_admission_attempts_total", result="success") == 1
    assert value(m, "queuemgr_admission_attempts_total", result="inadmissible") == 0
    assert value(m, "queuemgr_admission_cycle_duration_seconds_count") == 1


def test_a_workload_backing_off_after_a_preemption_is_pending_as_backing_off() -> None:
    res = (
        World()
        .cq(make_cq("a").nominal(gpu=8).namespaces("a"))
        .lq("a", "default", "a")
        .node(make_nodes("n", 1, flavor="default"))
        .submit(wl("running").ns("a").gpus(8))
        .run()
    )
    held_out = wl("victim").ns("a").gpus(4).build()  # in no snapshot until its requeue time
    m = SchedulerMetrics(version="test")
    m.set_gauges(res.snapshot, res.decisions, backing_off=[held_out])
    labels = {"cluster_queue": "a", "local_queue": "default", "namespace": "a"}
    assert value(m, "queuemgr_pending_workloads", **labels, reason="BackingOff") == 1
    m.set_gauges(res.snapshot, res.decisions)  # its backoff is over: no longer counted so
    assert value(m, "queuemgr_pending_workloads", **labels, reason="BackingOff") == 0


def test_quota_and_usage_are_in_base_units_and_limits_only_where_set() -> None:
    res = (
        World()
        .cq(
            make_cq("a").cohort("c").nominal(gpu=8, cpu=16, memory="64Gi").borrowing_limit(gpu=4),
            make_cq("b").cohort("c").nominal(gpu=8, cpu=16, memory="64Gi").lending_limit(gpu=2),
        )
        .node(make_nodes("n", 2, flavor="default", gpu=8, cpu="32", memory="128Gi"))
        .submit(wl("job").ns("a").gpus(2).cpu("1500m").memory("1Gi").gang(2))
        .run()
    )
    m = observe(res)
    q = {"cluster_queue": "a", "flavor": "default"}
    assert value(m, "queuemgr_cluster_queue_resource_usage", **q, resource=GPU) == 4
    assert value(m, "queuemgr_cluster_queue_resource_usage", **q, resource="cpu") == 3.0
    usage_mem = value(m, "queuemgr_cluster_queue_resource_usage", **q, resource="memory")
    assert usage_mem == 2 * 2**30
    assert value(m, "queuemgr_cluster_queue_nominal_quota", **q, resource="cpu") == 16.0
    assert value(m, "queuemgr_cluster_queue_borrowing_limit", **q, resource=GPU) == 4
    assert value(m, "queuemgr_cluster_queue_lending_limit", **q, resource=GPU) is None
    b = {"cluster_queue": "b", "flavor": "default", "resource": GPU}
    assert value(m, "queuemgr_cluster_queue_lending_limit", **b) == 2
    assert value(m, "queuemgr_cluster_queue_resource_usage", **b) == 0


def test_free_capacity_per_flavor_and_the_largest_block_show_fragmentation() -> None:
    res = (
        World()
        .cq(make_cq("a").nominal(gpu=16))
        .node(make_nodes("n", 2, flavor="default", gpu=8))
        .submit(wl("six").ns("a").gpus(6))
        .run()
    )
    m = observe(res)
    assert value(m, "queuemgr_node_free", flavor="default", resource=GPU) == 10
    assert value(m, "queuemgr_node_largest_free", flavor="default", resource=GPU) == 8
    res2 = res.next(wl("six-more").ns("a").gpus(6).at(1)).run(now=1)
    observe(res2, m)
    assert value(m, "queuemgr_node_free", flavor="default", resource=GPU) == 4
    # 4 GPUs free, but never more than 2 on one node: a 4-GPU pod cannot start.
    assert value(m, "queuemgr_node_largest_free", flavor="default", resource=GPU) == 2


def test_weighted_share_is_borrowed_over_the_cohorts_lendable_quota() -> None:
    res = (
        World()
        .cq(make_cq("a").cohort("c").nominal(gpu=8), make_cq("b").cohort("c").nominal(gpu=8))
        .node(make_nodes("n", 2, flavor="default", gpu=8))
        .submit(wl("big").ns("a").gpus(6).gang(2))
        .run()
    )
    m = observe(res)
    # a holds 12 of its nominal 8: it borrows 4 of the cohort's 16 lendable GPUs.
    assert value(m, "queuemgr_cluster_queue_weighted_share", cluster_queue="a") == 0.25
    assert value(m, "queuemgr_cluster_queue_weighted_share", cluster_queue="b") == 0


def test_wait_time_is_labelled_by_a_bounded_priority_class() -> None:
    res = (
        World()
        .cq(make_cq("a").nominal(gpu=8))
        .node(make_nodes("n", 1, flavor="default"))
        .submit(wl("p0").ns("a").gpus(1).at(40), wl("p7").ns("a").gpus(1).priority(7).at(70))
        .submit(wl("p9").ns("a").gpus(1).priority(9).at(10))
        .run()
    )
    m = observe(res, SchedulerMetrics(priority_classes={0: "default", 7: "high"}))
    hist = "queuemgr_admission_wait_time_seconds"
    assert value(m, f"{hist}_sum", cluster_queue="a", priority_class="default") == 60.0
    assert value(m, f"{hist}_sum", cluster_queue="a", priority_class="high") == 30.0
    assert value(m, f"{hist}_sum", cluster_queue="a", priority_class="other") == 90.0
    with pytest.raises(ValueError, match="priority classes"):
        SchedulerMetrics(priority_classes={i: f"c{i}" for i in range(MAX_PRIORITY_CLASSES + 1)})


def test_a_victim_admitted_again_waited_since_its_eviction_not_since_its_creation() -> None:
    victim = dataclasses.replace(wl("v").ns("a").gpus(1).at(10).build(), evictions=1, queued_at=95)
    res = World().cq(make_cq("a").nominal(gpu=8)).node(make_nodes("n", 1)).submit(victim).run()
    m = observe(res)  # at now=100
    hist = "queuemgr_admission_wait_time_seconds"
    assert value(m, f"{hist}_sum", cluster_queue="a", priority_class="default") == 5.0
    assert value(m, f"{hist}_count", cluster_queue="a", priority_class="default") == 1


def test_series_of_a_queue_that_is_gone_are_removed() -> None:
    both = World().cq(make_cq("a").nominal(gpu=8), make_cq("b").nominal(gpu=8))
    m = observe(both.node(make_nodes("n", 1)).submit(wl("x").ns("b").gpus(1)).run())
    assert value(m, "queuemgr_cluster_queue_nominal_quota", cluster_queue="b",
                 flavor="default", resource=GPU) == 8  # fmt: skip
    only_a = World().cq(make_cq("a").nominal(gpu=8)).node(make_nodes("n", 1))
    observe(only_a.submit(wl("y").ns("a").gpus(1)).run(), m)
    gauges = {"queuemgr_cluster_queue_nominal_quota", "queuemgr_admitted_active_workloads",
              "queuemgr_pending_workloads", "queuemgr_cluster_queue_weighted_share"}  # fmt: skip
    left = [
        s
        for family in m.registry.collect()
        if family.name in gauges
        for s in family.samples
        if s.labels.get("cluster_queue") == "b"
    ]
    assert left == []


def test_pending_demand_sums_every_waiting_workload_of_each_shape() -> None:
    res = (
        World()
        .cq(make_cq("a").nominal(gpu=8, cpu=64).namespaces("a"))
        .lq("a", "default", "a")
        .node(make_nodes("n", 1, flavor="default"))
        .submit(wl("fits").ns("a").gpus(8).cpu("500m"))
        .submit(*(wl(f"one-{i}").ns("a").gpus(8).cpu("500m").at(1 + i) for i in range(3)))
        .submit(*(wl(f"pair-{i}").ns("a").gang(2).gpus(4).cpu(2).at(9 + i) for i in range(2)))
        .run()
    )
    m = observe(res)
    assert [a.workload.id for a in res.decisions.admitted] == ["a/fits"]
    series = {"cluster_queue": "a", "flavor": "default"}
    pending = "queuemgr_cluster_queue_resource_pending"
    # 3 x 8 + 2 x 2 x 4 GPUs, and 3 x 0.5 + 2 x 2 x 2 cores: the admitted one is not pending.
    assert value(m, pending, **series, resource=GPU) == 40
    assert value(m, pending, **series, resource="cpu") == 9.5
    labels = {"cluster_queue": "a", "local_queue": "default", "namespace": "a"}
    assert value(m, "queuemgr_pending_workloads", **labels, reason="QuotaExceeded") == 5


def test_a_series_is_published_when_it_changes_and_again_after_it_was_removed() -> None:
    gauge = Gauge("g", "a test gauge", ["k"], registry=CollectorRegistry())
    frame = SeriesFrame(gauge)

    def cycle(**values: float) -> dict[str, float]:
        for k, v in values.items():
            frame.set(v, k)
        frame.commit()
        return {s.labels["k"]: s.value for f in gauge.collect() for s in f.samples}

    assert cycle(x=1, y=2) == {"x": 1, "y": 2}
    assert cycle(x=1, y=3) == {"x": 1, "y": 3}  # y moved, x as it was
    assert cycle(x=1) == {"x": 1}  # y is gone
    assert cycle(x=1, y=3) == {"x": 1, "y": 3}  # y is back, with the value it had
    assert cycle() == {}


def test_event_labels_fall_into_bounded_code_lists() -> None:
    m = SchedulerMetrics()
    m.observe_finished("Succeeded")
    m.observe_finished("Succeeded", 3)  # a cycle's finishes, counted at once
    m.observe_finished("team-a/job-17 crashed")  # free text must not become a label
    m.observe_eviction("PodsReadyTimeout")
    m.observe_eviction("InCohortReclamation", preemptor_cq="team-b")
    m.observe_eta_error(predicted_start=100.0, actual_start=160.0)
    m.set_leader("replica-0", True)
    m.set_leader("replica-1", False)
    assert value(m, "queuemgr_finished_workloads_total", result="Other") == 1
    assert value(m, "queuemgr_finished_workloads_total", result="Succeeded") == 4
    assert value(m, "queuemgr_evicted_workloads_total", reason="PodsReadyTimeout") == 1
    assert value(m, "queuemgr_evicted_workloads_total", reason="Preempted") == 1
    preempted = {"preemptor_cluster_queue": "team-b", "reason": "InCohortReclamation"}
    assert value(m, "queuemgr_preempted_workloads_total", **preempted) == 1
    assert value(m, "queuemgr_eta_error_seconds_sum") == 60.0
    assert value(m, "queuemgr_leader", replica="replica-0") == 1
    assert value(m, "queuemgr_leader", replica="replica-1") == 0


def test_registries_are_isolated_and_render_has_every_family() -> None:
    a, b = SchedulerMetrics(version="1.2.3"), SchedulerMetrics()
    a.set_leader("r", True)
    assert b.registry.get_sample_value("queuemgr_leader", {"replica": "r"}) is None
    names = {f.name for f in text_string_to_metric_families(a.render().decode())}
    expected = {
        "queuemgr_pending_workloads", "queuemgr_admitted_active_workloads",
        "queuemgr_admitted_workloads", "queuemgr_evicted_workloads",
        "queuemgr_preempted_workloads", "queuemgr_finished_workloads",
        "queuemgr_preemptions", "queuemgr_preempted_gpu_seconds",
        "queuemgr_cluster_queue_nominal_quota", "queuemgr_cluster_queue_borrowing_limit",
        "queuemgr_cluster_queue_lending_limit", "queuemgr_cluster_queue_resource_usage",
        "queuemgr_cluster_queue_resource_pending", "queuemgr_cluster_queue_weighted_share",
        "queuemgr_node_free", "queuemgr_node_largest_free",
        "queuemgr_admission_wait_time_seconds", "queuemgr_admission_cycle_duration_seconds",
        "queuemgr_admission_attempts", "queuemgr_eta_error_seconds", "queuemgr_leader",
        "queuemgr_build_info",
    }  # fmt: skip
    assert expected <= names
    assert value(a, "queuemgr_build_info", version="1.2.3") == 1


def test_serve_exposes_metrics_on_loopback() -> None:
    m = SchedulerMetrics()
    m.set_leader("r", True)
    server, thread = serve(m, port=0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'queuemgr_leader{replica="r"} 1.0' in body
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_cohort_tree_is_exported_per_level_with_paths() -> None:
    # org holds 4 GPUs itself; research (team-a 4, team-b 4) lends to prod (team-c 8).
    world = World().node(make_nodes("n", 4))
    world.cohort(
        make_cohort("org", nominal={"gpu": 4}),
        make_cohort("research", "org", weight=2),
        make_cohort("prod", "org"),
    )
    world.cq(
        make_cq("team-a").cohort("research").nominal(gpu=4),
        make_cq("team-b").cohort("research").nominal(gpu=4),
        make_cq("team-c").cohort("prod").nominal(gpu=8),
        make_cq("alone").nominal(gpu=1),
    )
    world.submit(*(wl(f"a{i}").ns("team-a").gpus(2) for i in range(6)))
    m = observe(world.run())
    info = "queuemgr_cluster_queue_info"
    assert value(m, info, cluster_queue="team-a", cohort="org/research") == 1
    assert value(m, info, cluster_queue="alone", cohort="") == 1
    research = {"cohort": "org/research", "parent": "org", "flavor": "default", "resource": GPU}
    org = {"cohort": "org", "parent": "", "flavor": "default", "resource": GPU}
    assert value(m, "queuemgr_cohort_subtree_quota", **research) == 8
    assert value(m, "queuemgr_cohort_subtree_quota", **org) == 20
    # team-a holds 12: its own 4, team-b's 4, and 4 from org; research is the one borrowing.
    assert value(m, "queuemgr_cohort_resource_usage", **research) == 12
    assert value(m, "queuemgr_cohort_resource_usage", **org) == 12
    share = value(m, "queuemgr_cohort_weighted_share", cohort="org/research", parent="org")
    assert share == pytest.approx(4 / 20 / 2)
    assert value(m, "queuemgr_cohort_weighted_share", cohort="org/prod", parent="org") == 0
