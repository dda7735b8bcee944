"""``largest_reservations``: the largest pending workloads are tried, and reserved, first.

A busy tenant's gang comes last in the fair-share order, so without this knob the
capacity drained for it goes to whoever comes first, and it is rarely among the
first blocked workloads that get a reservation.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuemgr.core.admissibility import inadmissible
from queuemgr.core.cycle import schedule
from queuemgr.core.model import Workload
from queuemgr.core.placement import NodePool
from queuemgr.core.policy import PreemptorAdmission, SchedulerPolicy
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.snapshot import Snapshot
from queuemgr.core.verdicts import PendingReason
from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.knobs import parse_policy
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload
from tests.unit.core.test_properties import (
    SETTINGS,
    Scenario,
    check_gangs,
    check_nodes,
    check_quota,
    scenarios,
)


def _two_tenants(*, running: bool) -> World:
    """``busy`` must borrow for its 16-GPU gang; ``light`` runs within its nominal quota.

    So in the fair-share order light's jobs go first. Two 8-GPU nodes; with
    ``running``, each holds a 4-GPU job declared to end at t=100 and t=300.
    """
    world = World().cq(
        make_cq("busy").cohort("c").nominal(gpu=8, cpu="192"),
        make_cq("light").cohort("c").nominal(gpu=24, cpu="192"),
    )
    world.node(make_nodes("n", 2))
    if running:
        for i, end in enumerate((100.0, 300.0)):
            job = make_workload(f"run{i}").ns("light").gpus(4).max_runtime(end).at(-9.0 + i)
            world.running(make_admitted(job.build(), "light", "default", {f"n-{i}": 1}, at=0.0))
    world.submit(make_workload("gang").ns("busy").gang(2).gpus(8).max_runtime(600.0).at(1.0))
    return world


@pytest.mark.parametrize(
    ("largest", "gang_starts"),
    [
        pytest.param(0, False, id="fair-share-order-fills-the-nodes-first"),
        pytest.param(1, True, id="the-largest-is-tried-first"),
    ],
)
def test_the_largest_gang_that_fits_now_is_admitted_first(largest: int, gang_starts: bool) -> None:
    world = _two_tenants(running=False)
    world.submit(*(make_workload(f"s{i}").ns("light").gpus(1).at(2.0 + i) for i in range(3)))
    world.policy = SchedulerPolicy(reservation_depth=1, largest_reservations=largest)
    res = world.run(now=10.0)
    assert ("busy/gang" in res.admitted_ids()) is gang_starts
    if gang_starts:
        # The nodes are the gang's: the small jobs wait for them.
        assert res.reason("light/s0") is PendingReason.NO_NODE_FITS
    else:
        assert {"light/s0", "light/s1", "light/s2"} <= res.admitted_ids()


@pytest.mark.parametrize(
    ("largest", "small_starts", "gang_start"),
    [
        # The small job goes first and the gang's reservation plans around it (t=1010).
        pytest.param(0, True, 1010.0, id="reserved-after-the-fair-share-order"),
        # The gang's reservation at t=300 comes first, and the small job would delay it.
        pytest.param(1, False, 300.0, id="reserved-before-anything-is-admitted"),
    ],
)
def test_a_blocked_largest_gang_reserves_before_others_are_admitted(
    largest: int, small_starts: bool, gang_start: float
) -> None:
    world = _two_tenants(running=True)
    world.submit(make_workload("small").ns("light").gpus(4).max_runtime(1000.0).at(2.0))
    world.policy = SchedulerPolicy(reservation_depth=1, largest_reservations=largest)
    res = world.run(now=10.0)
    assert ("light/small" in res.admitted_ids()) is small_starts
    (r,) = res.decisions.reservations
    assert (r.workload, r.start) == ("busy/gang", gang_start)
    assert res.status("busy/gang").eta == gang_start
    assert f"reserved from t={gang_start:g}" in res.message("busy/gang")
    if not small_starts:
        assert res.reason("light/small") is PendingReason.WAITING_FOR_RESERVATION


@pytest.mark.parametrize(
    ("extra", "reserved"),
    [
        # 64 GPUs never fit two 8-GPU nodes: Inadmissible, so never reserved.
        pytest.param(make_workload("huge").ns("busy").gang(8).gpus(8).at(0.0), "busy/gang",
                     id="an-inadmissible-one-is-skipped"),
        # Equal sizes: queue order (the earlier one) decides.
        pytest.param(make_workload("older").ns("busy").gang(2).gpus(8).max_runtime(600.0).at(0.5),
                     "busy/older", id="ties-in-queue-order"),
        pytest.param(make_workload("eight").ns("busy").gpus(8).max_runtime(600.0).at(0.0),
                     "busy/gang", id="most-gpus-first"),
    ],
)  # fmt: skip
def test_which_workload_is_the_largest(extra: object, reserved: str) -> None:
    world = _two_tenants(running=True).submit(extra)  # type: ignore[arg-type]
    world.policy = SchedulerPolicy(reservation_depth=0, largest_reservations=1)
    res = world.run(now=10.0)
    assert [r.workload for r in res.decisions.reservations] == [reserved]


@pytest.mark.parametrize(
    ("strict", "reserved"),
    [
        pytest.param(False, ["busy/gang"], id="best-effort-any-workload"),
        pytest.param(True, [], id="strict-fifo-only-its-head"),
    ],
)
def test_in_a_strict_fifo_queue_only_the_head_counts(strict: bool, reserved: list[str]) -> None:
    world = World().cq(make_cq("busy").nominal(gpu=32, cpu="192").strict(strict))
    world.node(make_nodes("n", 2))
    for i, end in enumerate((100.0, 300.0)):
        job = make_workload(f"run{i}").ns("busy").gpus(4).max_runtime(end).at(-9.0 + i)
        world.running(make_admitted(job.build(), "busy", "default", {f"n-{i}": 1}, at=0.0))
    # The head (8 GPUs, too small to count) is older than the gang, and blocked too.
    world.submit(make_workload("head").ns("busy").gpus(8).max_runtime(50.0).at(0.5))
    world.submit(make_workload("gang").ns("busy").gang(2).gpus(8).max_runtime(600.0).at(1.0))
    world.policy = SchedulerPolicy(reservation_depth=0, largest_reservations=1, largest_min_gpus=9)
    res = world.run(now=10.0)
    assert [r.workload for r in res.decisions.reservations] == reserved


@pytest.mark.parametrize(
    ("min_gpus", "reserved"),
    [
        pytest.param(0, ["busy/gang"], id="any-size"),
        pytest.param(16, ["busy/gang"], id="at-the-threshold"),
        pytest.param(17, [], id="below-the-threshold-none"),
    ],
)
def test_only_workloads_of_at_least_min_gpus_count(min_gpus: int, reserved: list[str]) -> None:
    world = _two_tenants(running=True)
    world.policy = SchedulerPolicy(
        reservation_depth=0, largest_reservations=1, largest_min_gpus=min_gpus
    )
    res = world.run(now=10.0)
    assert [r.workload for r in res.decisions.reservations] == reserved


def test_reservations_of_the_largest_do_not_use_up_the_depth() -> None:
    world = _two_tenants(running=True)
    world.submit(make_workload("eight").ns("light").gpus(8).max_runtime(50.0).at(2.0))
    world.policy = SchedulerPolicy(reservation_depth=1, largest_reservations=1)
    res = world.run(now=10.0)
    # The gang's (t=300), plus the first blocked of the fair-share order, planned around
    # it: the gang counts as holding both nodes from now until 300 + 600.
    assert {r.workload: r.start for r in res.decisions.reservations} == {
        "busy/gang": 300.0,
        "light/eight": 900.0,
    }


@pytest.mark.parametrize(
    "admission",
    [
        pytest.param(PreemptorAdmission.SAME_CYCLE, id="same-cycle"),
        pytest.param(PreemptorAdmission.AFTER_VICTIMS_STOP, id="after-victims-stop"),
    ],
)
def test_a_largest_gang_that_preempts_does_so_once(admission: PreemptorAdmission) -> None:
    world = World().cq(make_cq("a").nominal(gpu=16, cpu="192").preempt(within="LowerPriority"))
    world.node(make_nodes("n", 2))
    low = make_workload("low").ns("a").gang(2).gpus(8).priority(0).max_runtime(900.0).build()
    world.running(make_admitted(low, "a", "default", {"n-0": 1, "n-1": 1}))
    world.submit(make_workload("high").ns("a").gang(2).gpus(8).priority(10).at(1.0))
    world.submit(make_workload("small").ns("a").gpus(1).priority(10).at(2.0))
    world.policy = SchedulerPolicy(largest_reservations=1, preemptor_admission=admission)
    res = world.run(now=10.0)
    assert [e.victim.workload.id for e in res.decisions.evicted] == ["a/low"]
    if admission is PreemptorAdmission.SAME_CYCLE:
        assert "a/high" in res.admitted_ids()
    else:
        assert res.reason("a/high") is PendingReason.PREEMPTING
    # The capacity is the gang's (taken, or held while its victim stops).
    assert "a/small" not in res.admitted_ids()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        pytest.param({"largest_reservations": -1}, "largest_reservations", id="negative"),
        pytest.param({"largest_reservations": "two"}, "largest_reservations", id="not-a-number"),
        pytest.param({"largest_min_gpus": -8}, "largest_min_gpus", id="negative-min"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(raw: dict[str, object], error: str) -> None:
    with pytest.raises(ScenarioError, match=error):
        parse_policy(raw, "scheduler")


def test_the_knobs_parse() -> None:
    policy = parse_policy({"largest_reservations": 2, "largest_min_gpus": 9}, "scheduler")
    assert (policy.largest_reservations, policy.largest_min_gpus) == (2, 9)
    default = parse_policy({}, "scheduler")
    assert (default.largest_reservations, default.largest_min_gpus) == (0, 0)


# -- properties ---------------------------------------------------------------------


def _with_limits(sc: Scenario, rnd: random.Random) -> Scenario:
    """The scenario with declared limits, so that reservations have known starts."""

    def limit() -> float | None:
        return rnd.choice([None, 50.0, 100.0, 400.0])

    return Scenario(
        config=sc.config,
        admitted=[
            dataclasses.replace(a, workload=dataclasses.replace(a.workload, max_runtime=limit()))
            for a in sc.admitted
        ],
        pending=[dataclasses.replace(w, max_runtime=limit()) for w in sc.pending],
    )


def _largest(snap: Snapshot) -> Workload | None:
    """The largest pending workload that could ever be admitted, ties in queue order."""
    least = snap.policy.largest_min_gpus
    config = snap.config
    found: list[tuple[tuple[object, ...], Workload]] = []
    for name, queue in snap.pending.items():
        cq = config.cluster_queues[name]
        strict = cq.queueing_strategy.value == "StrictFIFO"
        for w in list(queue)[:1] if strict else queue:
            if w.gpus >= least and inadmissible(config, cq, w) is None:
                found.append(((-w.gpus, w.order_key), w))
    return min(found, key=lambda kw: kw[0])[1] if found else None


def _fits_now(snap: Snapshot, w: Workload) -> bool:
    config = snap.config
    cq = config.cluster_queues[config.queue_for(w) or ""]
    ledger = QuotaLedger(config.quota_topology, snap.usage)
    pool = NodePool(config.node_topology, snap.node_free)
    return any(
        ledger.check(cq.name, fq.flavor, w.total_requests).fits
        and pool.place(fq.flavor, w.pod_sets) is not None
        for fq in cq.flavors
    )


@SETTINGS
@given(
    scenarios(),
    st.integers(1, 3),
    st.sampled_from([0, 2, 9]),
    st.integers(0, 2),
    st.randoms(use_true_random=False),
)
def test_invariants_hold_and_the_largest_that_fits_is_admitted(
    sc: Scenario, largest: int, min_gpus: int, depth: int, rnd: random.Random
) -> None:
    sc = _with_limits(sc, rnd)
    policy = SchedulerPolicy(
        reservation_depth=depth, largest_reservations=largest, largest_min_gpus=min_gpus
    )
    snap = dataclasses.replace(sc.snapshot(), policy=policy)
    decided = schedule(snap, 1.0)
    held = [*snap.admitted.values(), *decided.admitted]
    check_quota(sc.config, held)
    check_nodes(sc.config, held)
    check_gangs(sc.config, decided)
    assert decided.admitted_ids() | set(decided.pending) == {w.id for w in sc.pending}
    # Deterministic, whatever order the pending workloads come in.
    shuffled = list(sc.pending)
    rnd.shuffle(shuffled)
    again = schedule(dataclasses.replace(sc.snapshot(shuffled), policy=policy), 1.0)
    assert again.admitted == decided.admitted
    assert again.reservations == decided.reservations
    # The largest is tried before anything else: if it fits now, it starts.
    first = _largest(snap)
    if first is not None and _fits_now(snap, first):
        assert first.id in decided.admitted_ids()
