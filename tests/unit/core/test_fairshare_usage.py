"""Decayed usage (Admission Fair Sharing) and the `usage` ordering."""

from __future__ import annotations

import dataclasses
import math

import pytest

from queuemgr.core.cycle import schedule
from queuemgr.core.fairshare import UsageTracker, alpha, decayed
from queuemgr.core.policy import Ordering, SchedulerPolicy
from queuemgr.core.resources import GPU, ResourceName
from tests.builders import World, make_cq, make_nodes, make_workload

DAY = 86400.0


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [
        pytest.param(0.0, 0.0, id="no-time"),
        pytest.param(DAY, 0.5, id="one-half-life"),
        pytest.param(2 * DAY, 0.75, id="two-half-lives"),
    ],
)
def test_alpha(elapsed: float, expected: float) -> None:
    assert math.isclose(alpha(elapsed, DAY), expected)


def test_usage_moves_toward_what_is_held_and_decays_after() -> None:
    assert math.isclose(decayed(0.0, 16.0, DAY, DAY), 8.0)
    t = UsageTracker(half_life=DAY, weights={GPU: 1.0})
    t.advance(0.0)
    t.hold(("a", "q"), {GPU: 16}, 1)
    t.advance(DAY)
    assert math.isclose(t.usage()[("a", "q")], 8.0)
    t.hold(("a", "q"), {GPU: 16}, -1)
    t.advance(2 * DAY)
    assert math.isclose(t.usage()[("a", "q")], 4.0)  # halves each half-life once idle


def test_resource_weights_choose_what_counts() -> None:
    t = UsageTracker(half_life=DAY, weights={ResourceName("cpu"): 0.001})
    t.advance(0.0)
    t.hold(("a", "q"), {GPU: 8, ResourceName("cpu"): 64000}, 1)
    t.advance(DAY)
    assert math.isclose(t.usage()[("a", "q")], 32.0)  # 64 cores, GPUs weigh nothing


def test_a_non_positive_half_life_is_refused() -> None:
    with pytest.raises(ValueError, match="usage_half_life"):
        UsageTracker(half_life=0)


def _two_tenants(ordering: Ordering) -> World:
    world = World().cq(make_cq("shared").nominal(gpu=4, cpu="48"))
    world.lq("tenant-a", "default", "shared").lq("tenant-b", "default", "shared")
    world.node(make_nodes("n", 1, gpu=4))
    for ns in ("tenant-a", "tenant-b"):
        world.submit(*(make_workload(f"j{i}").ns(ns).gpus(1).at(5.0) for i in range(4)))
    world.policy = SchedulerPolicy(ordering=ordering)
    return world


@pytest.mark.parametrize(
    ("ordering", "first"),
    [
        pytest.param(Ordering.FIFO, "tenant-a", id="fifo-by-name-on-a-tie"),
        pytest.param(Ordering.USAGE, "tenant-b", id="usage-favours-the-idle-tenant"),
    ],
)
def test_ordering_within_a_queue(ordering: Ordering, first: str) -> None:
    world = _two_tenants(ordering)
    snap = dataclasses.replace(world.snapshot(), queue_usage={("tenant-a", "default"): 100.0})
    decided = schedule(snap, 10.0)
    assert {a.workload.namespace for a in decided.admitted} == {first}
    # Positions follow the same order: the other tenant's jobs come after.
    positions = {wid: s.position_in_cluster_queue for wid, s in decided.pending.items()}
    assert sorted(positions.values()) == [1, 2, 3, 4]
