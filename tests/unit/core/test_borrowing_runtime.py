"""borrowing_max_runtime: a queue borrows only for workloads declaring a short enough run."""

from __future__ import annotations

import dataclasses

import pytest

from queuemgr.core.loans import REPEAT_VICTIM
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload

HOUR = 3600.0


def _world(limit: float | None = HOUR) -> World:
    """b (nominal 8) already runs 8 GPUs; a (nominal 8) lends its idle 8 to the cohort."""
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96").borrowing_max_runtime(limit),
    )
    world.node(make_nodes("n", 2))
    mine = make_workload("own").ns("b").gpus(8).build()
    return world.running(make_admitted(mine, "b", "default", {"n-0": 1}, at=0.0))


@pytest.mark.parametrize(
    ("limit", "declared", "borrows"),
    [
        pytest.param(None, None, True, id="no-limit-any-workload-borrows"),
        pytest.param(HOUR, None, False, id="declares-no-runtime"),
        pytest.param(HOUR, 2 * HOUR, False, id="declares-longer"),
        pytest.param(HOUR, HOUR, True, id="declares-exactly-the-limit"),
        pytest.param(HOUR, 60.0, True, id="declares-shorter"),
    ],
)
def test_only_a_short_enough_declared_runtime_borrows(
    limit: float | None, declared: float | None, borrows: bool
) -> None:
    job = make_workload("job").ns("b").gpus(8).max_runtime(declared).at(1.0)
    res = _world(limit).submit(job).run(now=2.0)
    assert ("b/job" in res.admitted_ids()) is borrows
    if not borrows:
        assert res.reason("b/job") is PendingReason.BORROWING_RUNTIME_LIMIT
        assert "max_runtime of at most 3600 s" in res.message("b/job")


def test_the_limit_does_not_touch_a_workload_within_nominal_quota() -> None:
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=8, cpu="96"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96").borrowing_max_runtime(HOUR),
    )
    world.node(make_nodes("n", 2))
    res = world.submit(make_workload("long").ns("b").gpus(8).at(1.0)).run(now=2.0)
    assert res.admitted_ids() == {"b/long"}


def test_a_short_workload_of_the_same_shape_borrows_past_a_refused_long_one() -> None:
    # Same gang shape, only the declared runtime differs: the long head's refusal must
    # not be taken for its whole shape (nor its nomination reused for the short one).
    long = make_workload("long").ns("b").gpus(8).max_runtime(10 * HOUR).at(1.0)
    short = make_workload("short").ns("b").gpus(8).max_runtime(HOUR).at(2.0)
    res = _world().submit(long, short).run(now=3.0)
    assert res.admitted_ids() == {"b/short"}
    assert res.reason("b/long") is PendingReason.BORROWING_RUNTIME_LIMIT


def test_past_its_nominal_quota_a_workload_that_may_not_borrow_is_inadmissible_alone() -> None:
    # b's nominal is 8: a 16-GPU gang can only ever run by borrowing. Declaring no
    # runtime it never may (Inadmissible); the same gang declaring an hour borrows.
    world = World().cq(
        make_cq("a").cohort("c").nominal(gpu=16, cpu="192"),
        make_cq("b").cohort("c").nominal(gpu=8, cpu="96").borrowing_max_runtime(HOUR),
    )
    world.node(make_nodes("n", 3))
    forever = make_workload("forever").ns("b").gang(2).gpus(8).at(1.0)
    hour = make_workload("hour").ns("b").gang(2).gpus(8).max_runtime(HOUR).at(2.0)
    res = world.submit(forever, hour).run(now=3.0)
    assert res.admitted_ids() == {"b/hour"}
    assert res.reason("b/forever") is PendingReason.INADMISSIBLE
    assert "it may borrow only if it declares a max_runtime of at most 3600 s" in res.message(
        "b/forever"
    )
    assert list(res.decisions.inadmissible) == ["b/forever"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("repeat", "long", id="repeat-victim-first"),
        pytest.param("long", "repeat", id="long-runtime-first"),
    ],
)
def test_each_workload_kept_from_loans_is_told_its_own_reason(first: str, second: str) -> None:
    # Both may only use b's nominal quota, which b's own run holds, for different
    # reasons: one was preempted 3 times, the other declares more than the queue lends
    # for. The second of the shape must not be told the first one's reason.
    made = {
        "repeat": make_workload("repeat").ns("b").gpus(8).max_runtime(60.0),
        "long": make_workload("long").ns("b").gpus(8).max_runtime(10 * HOUR),
    }
    jobs = [
        dataclasses.replace(made[name].at(float(i)).build(), evictions=REPEAT_VICTIM)
        if name == "repeat"
        else made[name].at(float(i)).build()
        for i, name in enumerate((first, second), start=1)
    ]
    res = _world().submit(*jobs).run(now=3.0)
    assert res.admitted_ids() == set()
    assert res.reason("b/repeat") is PendingReason.PREEMPTED_TOO_OFTEN
    assert "preempted 3 times" in res.message("b/repeat")
    assert res.reason("b/long") is PendingReason.BORROWING_RUNTIME_LIMIT
    assert "preempted" not in res.message("b/long")
