"""Property tests over random cohort trees: the invariants every cycle must keep.

The flat-cohort properties of test_properties.py and test_preemption_properties.py,
on random trees of cohorts (depth 1 to 4, weights including 0, cohort quota of their
own, borrowing and lending limits at every level, fair sharing on some cohorts), with
random preemption policies on the ClusterQueues:

a. quota is never exceeded at any level, after one cycle and along several (a
   from-scratch checker of the tree's constraints, ``tree_quota_violations``);
b. a cycle is deterministic: the same snapshot gives equal decisions, and the pending
   workloads in another order give the same admissions, evictions and statuses;
c. a ClusterQueue within its nominal quota is never starved by borrowers anywhere in
   its tree: whenever its job alone would be admitted (or would claim room by
   preempting), it is, and before any borrower;
d. no preemption is reversed: test_tree_preemption_properties.py.

The generators and the checkers are in tree_scenarios.py.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from queuemgr.core.cycle import schedule
from queuemgr.core.model import (
    Workload,
)
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.snapshot import build_snapshot
from tests.builders import World, make_cq, make_nodes, random_borrower
from tests.builders import make_workload as wl
from tests.unit.core.test_properties import check_nodes
from tests.unit.core.tree_scenarios import (
    NOW,
    SETTINGS,
    Driver,
    Scenario,
    claimed,
    cohort_trees,
    run,
    scenarios,
    tree_quota_violations,
)


@settings(SETTINGS, max_examples=200)
@given(scenarios())
def test_quota_is_never_exceeded_at_any_level(sc: Scenario) -> None:
    assert not tree_quota_violations(sc.config, sc.admitted)  # the first cycle's admissions
    snap = sc.snapshot()
    decided = schedule(snap, NOW)
    evicted = {e.victim.workload.id for e in decided.evicted}
    event("evicted some" if evicted else "evicted none")
    assert evicted <= set(snap.admitted)
    held = [a for wid, a in snap.admitted.items() if wid not in evicted]
    held.extend(decided.admitted)
    found = tree_quota_violations(sc.config, held)
    assert not found, found
    check_nodes(sc.config, held)
    # The room preemptors claimed fits too, beside everything else.
    found = tree_quota_violations(sc.config, [*held, *claimed(decided.claims, NOW)])
    assert not found, found
    # And along several cycles, runs finishing, victims coming back, claims admitted.
    run(sc, 4, check=True)


# -- b. determinism ---------------------------------------------------------------------------


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_every_cycle_is_deterministic(sc: Scenario, rnd: random.Random) -> None:
    snap = sc.snapshot()
    decided = schedule(snap, NOW)
    assert schedule(snap, NOW) == decided
    shuffled = list(sc.pending)
    rnd.shuffle(shuffled)
    again = schedule(sc.snapshot(shuffled), NOW)
    assert again.admitted == decided.admitted
    assert again.evicted == decided.evicted
    assert again.claims == decided.claims
    assert dict(again.pending) == dict(decided.pending)
    # The incremental cache's snapshot decides the same.
    d = Driver(sc.config, sc.policy)
    for a in sc.admitted:
        d.cache.add_admitted(a)
    for w in shuffled:
        d.cache.add_pending(w)
    cached = schedule(d.snapshot(), NOW)
    assert cached.admitted == decided.admitted
    assert cached.evicted == decided.evicted


# -- c. no starvation of in-nominal work anywhere in the tree ---------------------------------


@st.composite
def starvation_worlds(draw: st.DrawFn) -> tuple[World, dict[str, int]]:
    """One tree; the owner (nominal quota, reclaim or not), an idle lender as big as the
    cluster, and borrowers b1, b2 (nominal 0) each in a random cohort of it."""
    cohorts = draw(cohort_trees(["h100"], one_root=True, fair=0))
    names = [c.name for c in cohorts]
    nodes = draw(st.integers(2, 4))
    nominal = draw(st.integers(2, 16))
    pods = min(draw(st.integers(1, 2)), nominal)
    size = min(draw(st.integers(1, 8)), nominal // pods) or 1
    reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
    world = World().node(make_nodes("n", nodes, flavor="h100"))
    world.cohort(*cohorts)
    owner = (
        make_cq("owner").cohort(draw(st.sampled_from(names))).flavor("h100").nominal(gpu=nominal)
    )
    if draw(st.integers(0, 3)) == 0:
        owner.lending_limit(gpu=draw(st.integers(0, nominal)))
    world.cq(
        owner.preempt(reclaim=reclaim),
        make_cq("lender")
        .cohort(draw(st.sampled_from(names)))
        .flavor("h100")
        .nominal(gpu=nodes * 8),
        make_cq("b1").cohort(draw(st.sampled_from(names))).flavor("h100").nominal(gpu=0),
        make_cq("b2").cohort(draw(st.sampled_from(names))).flavor("h100").nominal(gpu=0),
    )
    job = {
        "pods": pods,
        "size": size,
        "priority": draw(st.integers(0, 5)),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }
    event(f"owner reclaims: {reclaim}")
    return world, job


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(starvation_worlds())
def test_in_nominal_workload_is_not_starved_by_borrowers_anywhere_in_the_tree(
    case: tuple[World, dict[str, int]],
) -> None:
    """Borrowers fill the cluster; once capacity frees, the in-nominal job goes first.

    test_properties' test of the same name, on a tree: each cycle, the job alone on the
    same cluster (with the same claims) is the oracle for "enough capacity is free";
    whenever it would be admitted alone it must be admitted, before any borrower, even
    those of higher priority; whenever it would claim room by reclaiming, it must claim
    it; otherwise it must do neither. The borrowers preempt nobody, so every claim is
    the job's.
    """
    world, job = case
    rng = random.Random(job["seed"])
    config = world.config()
    driver = Driver(config, SchedulerPolicy(requeue_backoff_base=0.0))
    cache = driver.cache
    clock = 0.0

    def borrower(i: int) -> Workload:
        return random_borrower(rng, i, clock)

    for i in range(40):
        cache.add_pending(borrower(i))
    driver.apply(schedule(driver.snapshot(), clock), clock)
    clock = 1.0
    target = (
        wl("job")
        .ns("owner")
        .gang(job["pods"])
        .gpus(job["size"])
        .priority(job["priority"])
        .at(clock)
        .build()
    )
    cache.add_pending(target)
    counter = 40
    for cycle in range(400):
        clock += 1.0
        if cycle > 0:  # the first cycle sees the cluster the borrowers filled
            running = sorted(a.workload.id for a in cache.admitted())
            if running:
                cache.remove_admitted(rng.choice(running))
        for _ in range(rng.randint(0, 2) if cycle < 60 else 0):
            cache.add_pending(borrower(counter))  # borrowers arriving after the job
            counter += 1
        snap = driver.snapshot()
        waiting = cache.is_pending(target.id) and target.id not in driver.claims
        alone = schedule(
            dataclasses.replace(
                build_snapshot(config, admitted=snap.admitted.values(), pending=[target]),
                claims=snap.claims,
            ),
            clock,
        )
        decided = schedule(snap, clock)
        order = [a.workload.id for a in decided.admitted]
        claims = {c.workload.id for c in decided.claims}
        if target.id in alone.admitted_ids():
            assert order and order[0] == target.id, (order, decided.pending.get(target.id))
        else:
            assert target.id not in order
        if waiting:
            assert (target.id in claims) == (target.id in {c.workload.id for c in alone.claims}), (
                claims,
                decided.pending.get(target.id),
            )
        assert claims <= {target.id}, claims
        driver.apply(decided, clock)
        if not cache.is_pending(target.id):
            event("job waited " + ("0 cycles" if cycle == 0 else "1+ cycles"))
            return
    raise AssertionError("the in-nominal job never ran")
