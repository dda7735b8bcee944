"""borrowing_max_runtime: a queue borrows only for workloads declaring a short enough run."""

from __future__ import annotations

import pytest

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

