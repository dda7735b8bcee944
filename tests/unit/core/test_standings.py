"""Standings carried from the previous cycle equal the ones built afresh.

A queue's standing is carried (``core.standings``) when its queue object and
the verdicts, admissions and ETAs it is made from are what they were. These
tests drive random cycles through the incremental cache, with running
workloads that declare runtimes (so ETAs move) and a clock that advances, and
compare every row with what a memo-less evaluation of the same snapshot gives.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from queuemgr.core.cache import Cache
from queuemgr.core.cycle import schedule
from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, Workload
from queuemgr.core.queues import PendingQueue
from queuemgr.core.reasons import Decisions
from queuemgr.core.snapshot import Config, Snapshot
from queuemgr.core.standings import QueueStanding, StandingsMemo, said, standings
from queuemgr.core.verdicts import PendingReason, Verdict
from tests.builders import World, make_admitted, make_cq, make_nodes, two_flavor_world
from tests.builders import make_workload as wl

_Rows = list[tuple[ClusterQueueName | None, list[tuple[object, ...]]]]


def _config() -> Config:
    # Besides the cache's world, a StrictFIFO queue, whose blocked verdict is carried too.
    world = two_flavor_world()
    return world.cq(make_cq("s").strict().flavor("a100").nominal(gpu=4, cpu=32)).config()


def _workload(rng: random.Random, i: int, now: float) -> Workload:
    return (
        wl(f"w{i}")
        .ns(rng.choice(["x", "y", "z", "s", "ghost"]))
        .gang(rng.randint(1, 2))
        .gpus(rng.choice([1, 2, 4, 8]))
        .cpu(rng.choice(["1", "4"]))
        .priority(rng.randint(0, 1))
        .max_runtime(rng.choice([30.0, 120.0, None]))
        .at(now)
        .build()
    )


def _plain(standings: list[QueueStanding]) -> _Rows:
    # Verdicts compare by what they say: a lazy detail is a new function each cycle.
    return [
        (s.cluster_queue, [(*row[:5], said(row[5]), *row[6:]) for row in s.rows]) for s in standings
    ]


def _fresh(snapshot: Snapshot, now: float) -> _Rows:
    return _plain(schedule(dataclasses.replace(snapshot, memo=None), now).pending.by_queue())


def _run(seed: int, steps: int) -> tuple[int, int]:
    """Drive ``steps`` cycles; (standings carried, standings compared)."""
    rng = random.Random(seed)
    cache = Cache(_config())
    carried = compared = 0
    previous: dict[ClusterQueueName | None, QueueStanding] = {}
    running: list[tuple[float, AdmittedWorkload]] = []
    now, counter = 0.0, 0
    for _ in range(steps):
        now += rng.choice([1.0, 5.0, 40.0])
        for _ in range(rng.choice([0, 0, 1, 3])):
            cache.add_pending(_workload(rng, counter, now))
            counter += 1
        for end, a in list(running):
            if end <= now and rng.random() < 0.7:
                running.remove((end, a))
                cache.remove_admitted(a.workload.id)
        snapshot = cache.snapshot()
        decisions: Decisions = schedule(snapshot, now)
        standings = decisions.pending.by_queue()
        assert _plain(standings) == _fresh(snapshot, now)
        for s in standings:
            compared += 1
            carried += previous.get(s.cluster_queue) is s
        previous = {s.cluster_queue: s for s in standings}
        for a in decisions.admitted:
            cache.admit(a)
            runtime = a.workload.max_runtime
            running.append((now + (runtime if runtime is not None else 1e9), a))
    return carried, compared


@settings(deadline=None, max_examples=80)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40))
def test_carried_standings_equal_fresh_ones(seed: int, steps: int) -> None:
    _run(seed, steps)


def test_a_queue_that_changes_every_cycle_is_never_compared() -> None:
    # A busy queue's new object each cycle: its inputs are never worked out.
    cache = _one_node()
    cache.add_admitted(_running("short", 100.0))
    for i in range(3):
        cache.add_pending(wl(f"more{i}").ns("a").gpus(2).at(3.0 + i).build())
        snapshot = cache.snapshot()
        schedule(snapshot, 10.0 + i).pending.by_queue()
        memo = snapshot.memo
        assert memo is not None and isinstance(memo.standings, StandingsMemo)
        assert memo.standings.members["a"][1] is None
        assert "a" not in memo.standings.blocks


def test_quiet_cycles_carry_most_standings() -> None:
    # Not vacuous: over many random runs, standings are carried, and often.
    carried = compared = 0
    for seed in range(20):
        c, n = _run(seed, 30)
        carried, compared = carried + c, compared + n
    assert carried > compared // 4, (carried, compared)


def _one_node() -> Cache:
    world = World().node(make_nodes("n", 1, flavor="h100"))
    world.cq(
        make_cq("a").cohort("c").flavor("h100").nominal(gpu=8, cpu=96),
        make_cq("b").cohort("c").flavor("h100").nominal(gpu=8, cpu=96),
    )
    cache = Cache(world.config())
    # b's gang takes the node's reservation; a's small workload waits with a plain
    # verdict, its ETA from the running jobs' declared ends.
    cache.add_pending(wl("big").ns("b").gpus(8).max_runtime(60).at(1.0).build())
    cache.add_pending(wl("small").ns("a").gpus(2).max_runtime(60).at(2.0).build())
    return cache


def _running(name: str, ends: float) -> AdmittedWorkload:
    w = wl(name).ns("b").gpus(8).max_runtime(ends).build()
    return make_admitted(w, "b", "h100", {"n-0": 1}, at=0.0)


def test_a_standing_whose_eta_alone_moved_is_built_again() -> None:
    # The node is held by b's job; a's workload waits for it with the same verdict,
    # but the job that holds it is replaced by a longer one: only the ETA moves.
    cache = _one_node()
    cache.add_admitted(_running("short", 100.0))
    schedule(cache.snapshot(), 9.0).pending.by_queue()
    first = schedule(cache.snapshot(), 10.0).pending.by_queue()
    assert [row[4] for row in first[0].rows] == [100.0]
    cache.remove_admitted("b/short")
    cache.add_admitted(_running("long", 200.0))
    second = schedule(cache.snapshot(), 11.0).pending.by_queue()
    assert second[0] is not first[0]
    assert [row[4] for row in second[0].rows] == [200.0]


def test_a_quiet_cycle_carries_the_standing() -> None:
    cache = _one_node()
    cache.add_admitted(_running("short", 100.0))
    schedule(cache.snapshot(), 10.0).pending.by_queue()  # a's queue object is new
    # It lasted a cycle: its inputs are worked out from now on, and then compared.
    first = schedule(cache.snapshot(), 15.0).pending.by_queue()
    again = schedule(cache.snapshot(), 20.0).pending.by_queue()
    assert again[0] is first[0]
    # Overdue: the job declared 100 s and still runs, so the ETA is unknown; the
    # standing changes once, then is carried as the clock moves.
    late = schedule(cache.snapshot(), 150.0).pending.by_queue()
    assert late[0] is not first[0]
    assert [row[4] for row in late[0].rows] == [None]
    assert schedule(cache.snapshot(), 160.0).pending.by_queue()[0] is late[0]


def test_a_class_eta_alone_that_moved_rebuilds_the_standing() -> None:
    # Driven directly: no head was tried, every workload has its shape's verdict, and
    # only the ETA the cycle gives their class moves between two calls.
    cq = make_cq("a").nominal(gpu=8, cpu=96).build()
    queue = PendingQueue.of([wl(f"w{i}").ns("a").gpus(2).at(float(i)).build() for i in range(3)])
    shape = queue[0].shape
    verdict = Verdict(reason=PendingReason.NO_NODE_FITS, detail="waits for a node")
    memo = StandingsMemo(object())
    at = [100.0]

    def run(now: float) -> QueueStanding:
        return standings(
            queues={cq.name: queue},
            unroutable=(),
            cluster_queues={cq.name: cq},
            verdicts={},
            shape_verdicts={(cq.name, shape): verdict},
            blocked={},
            admitted=frozenset(),
            ranks={},
            resolve=lambda w, name: verdict,
            eta=lambda w, name, v: at[0],
            eta_for=lambda w, name: at[0],
            memo=memo,
            now=now,
        )[0]

    run(1.0)
    first = run(2.0)  # the queue object lasted a cycle: its inputs are kept from now on
    assert run(3.0) is first
    at[0] = 200.0
    moved = run(4.0)
    assert moved is not first and [row[4] for row in moved.rows] == [200.0] * 3
