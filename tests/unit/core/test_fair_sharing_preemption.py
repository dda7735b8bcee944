"""Fair-sharing preemption: borrowers even out their shares, and never ping-pong."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuemgr.core.model import Cohort, CohortName
from queuemgr.core.reasons import PreemptionReason
from queuemgr.core.victim_rules import REPEAT_VICTIM
from tests.builders import (
    World,
    lending_cohort,
    make_admitted,
    make_cq,
    make_nodes,
    make_workload,
)
from tests.unit.core.test_properties import SETTINGS


def _greedy_borrower(
    fair: bool, running: int = 8, arrivals: int = 8, *, b_waits_from: float = -100.0
) -> World:
    """An idle lender; a holds every GPU on borrowed quota, admitted at t = 0..7; b has
    as many jobs, all waiting since ``b_waits_from`` (by default, before a's were admitted)."""
    world = lending_cohort(lender=8, a=0, b=0, fair=fair, nodes=1)
    for i in range(running):
        job = make_workload(f"a{i}").ns("a").gpus(1).at(float(i)).build()
        world.running(make_admitted(job, "a", "default", {"n-0": 1}, at=float(i)))
    world.submit(
        *(make_workload(f"b{i}").ns("b").gpus(1).at(b_waits_from) for i in range(arrivals))
    )
    return world


def test_without_fair_sharing_the_late_borrower_waits() -> None:
    res = _greedy_borrower(fair=False).run(now=200.0)
    assert res.decisions.evicted == ()
    assert res.admitted_ids() == set()


def test_fair_sharing_evens_out_the_borrowers() -> None:
    res = _greedy_borrower(fair=True).run(now=200.0)
    assert all(e.reason is PreemptionReason.IN_COHORT_FAIR_SHARING for e in res.decisions.evicted)
    held_a = 8 - len(res.decisions.evicted)
    held_b = len(res.admitted_once_victims_stop(now=200.0))
    assert held_a + held_b == 8
    assert abs(held_a - held_b) <= 1  # equal weights: an even split, to one job
    # Most recently admitted victims go first.
    assert {e.victim.workload.name for e in res.decisions.evicted} == {
        f"a{i}" for i in range(8 - len(res.decisions.evicted), 8)
    }


@pytest.mark.parametrize(
    ("b_waits_from", "victims"),
    [
        (100.0, set()),  # a's runs all took room before b asked for any
        (4.0, {"a4", "a5", "a6", "a7"}),  # a4..a7 were admitted while b0 waited
        (4.5, {"a5", "a6", "a7"}),
    ],
    ids=["all-before", "half-after", "admitted-before-by-half-a-second"],
)
def test_fair_sharing_takes_only_runs_admitted_since_the_preemptor_waited(
    b_waits_from: float, victims: set[str]
) -> None:
    res = _greedy_borrower(fair=True, b_waits_from=b_waits_from).run(now=200.0)
    assert {e.victim.workload.name for e in res.decisions.evicted} == victims


def test_fair_sharing_spares_a_workload_preempted_three_times() -> None:
    world = _greedy_borrower(fair=True)
    world.admitted = [
        dataclasses.replace(
            a, workload=dataclasses.replace(a.workload, evictions=3 if i >= 2 else 0)
        )
        for i, a in enumerate(world.admitted)
    ]
    res = world.run(now=200.0)
    # Without the limit a4..a7 would go (test_fair_sharing_evens_out_the_borrowers).
    assert {e.victim.workload.name for e in res.decisions.evicted} <= {"a0", "a1"}
    assert res.decisions.evicted


def test_the_victims_do_not_take_it_back() -> None:
    first = _greedy_borrower(fair=True).run(now=200.0)
    victims = [e.victim.workload for e in first.decisions.evicted]
    second = first.next(*victims, finished=[w.id for w in victims]).run(now=201.0)
    assert second.decisions.evicted == ()


@SETTINGS
@given(
    running=st.integers(0, 8),
    arrivals=st.integers(0, 8),
    later=st.integers(0, 4),
)
def test_random_arrivals_never_cause_an_eviction_ping_pong(
    running: int, arrivals: int, later: int
) -> None:
    # Cycle after cycle, evicted workloads come back and new ones arrive; a workload
    # that preempted is never evicted by one of its own victims.
    res = _greedy_borrower(fair=True, running=running, arrivals=arrivals).run(now=200.0)
    preempted_by: dict[str, str] = {}
    now = 200.0
    for step in range(3):
        for e in res.decisions.evicted:
            assert preempted_by.get(e.preemptor) != e.victim.workload.id, "ping-pong"
            preempted_by[e.victim.workload.id] = e.preemptor
        victims = [e.victim.workload for e in res.decisions.evicted]
        fresh = [
            make_workload(f"late{step}-{i}").ns("ab"[i % 2]).gpus(1).at(now + i).build()
            for i in range(later)
        ]
        now += 1.0
        res = res.next(*victims, *fresh, finished=[w.id for w in victims]).run(now=now)


def _loans_older_than_dues(fair: bool, repeat: frozenset[str] = frozenset()) -> World:
    """a (nominal 4) runs four loans admitted at t=1..4 and, once the runs it then held
    within nominal quota finished, four runs within nominal quota at t=5..8: its newest
    runs are its due. b asks for two GPUs: by reclaim within its nominal 2, or by fair
    sharing beyond its nominal 0. The runs named in ``repeat`` were preempted 3 times."""
    b = make_cq("b").cohort("c").nominal(gpu=0 if fair else 2, cpu="96")
    world = World().cq(
        make_cq("lender").cohort("c").nominal(gpu=4, cpu="96"),
        make_cq("a").cohort("c").nominal(gpu=4, cpu="96"),
        b if fair else b.preempt(reclaim="Any"),
    )
    world.cohorts = [Cohort(name=CohortName("c"), fair_sharing=fair)]
    world.node(make_nodes("n", 1))
    world.derive_loans = False
    for i, name in enumerate(["L0", "L1", "L2", "L3", "n0", "n1", "n2", "n3"]):
        job = make_workload(name).ns("a").gpus(1).build()
        job = dataclasses.replace(job, evictions=REPEAT_VICTIM if name in repeat else 0)
        run = make_admitted(job, "a", "default", {"n-0": 1}, at=1.0 + i)
        loan = dataclasses.replace(run.admission, borrowing=name.startswith("L"))
        world.running(dataclasses.replace(run, admission=loan))
    world.submit(*(make_workload(f"b{i}").ns("b").gpus(1).at(-100.0) for i in range(2)))
    return world


@pytest.mark.parametrize(
    ("fair", "reason"),
    [
        (False, PreemptionReason.IN_COHORT_RECLAMATION),
        (True, PreemptionReason.IN_COHORT_FAIR_SHARING),
    ],
    ids=["reclaim", "fair-sharing"],
)
def test_a_peer_loses_its_loans_before_its_due(fair: bool, reason: PreemptionReason) -> None:
    # The newest runs would lose the least work, but they are a's due within its
    # nominal quota: taking them would leave a under nominal, to reclaim them back.
    res = _loans_older_than_dues(fair).run(now=200.0)
    assert {e.reason for e in res.decisions.evicted} == {reason}
    assert {e.victim.workload.name for e in res.decisions.evicted} == {"L2", "L3"}


def test_a_loan_preempted_three_times_goes_after_a_run_the_peer_is_due() -> None:
    # At most 3 preemptions of one workload outweighs which of a's runs is a loan: with
    # L1..L3 taken 3 times each, reclaim takes the loan L0 and then the newest due run.
    world = _loans_older_than_dues(False, repeat=frozenset({"L1", "L2", "L3"}))
    res = world.run(now=200.0)
    assert {e.victim.workload.name for e in res.decisions.evicted} == {"L0", "n3"}
