"""The victim search's shortcuts never change its answer.

``Preemptor`` leaves out early the peers and sizes it would skip anyway, and memoises
shares per ledger version (see the module's docstring). Here the same random worlds
(tests/worlds.py) run twice through the simulator: once with the real search, once with
``PlainPreemptor`` (tests/plain_search.py), the search written plainly. Both runs must
decide the same, event by event. Shown to fail when a shortcut is wrong: treating a
peer as done once one of its sizes is unfair to take (a smaller run may still be fair)
fails here, and so does a node bound that leaves out the room the victims free
(``NodePool.room_at_most`` without its ``released`` capacity).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings, target

from queuemgr.core import admitter
from queuemgr.core.policy import PreemptorAdmission, SchedulerPolicy
from queuemgr.sim.engine import Engine
from tests.plain_search import PlainPreemptor
from tests.worlds import Spec, build, specs


def _events(spec: Spec, policy: SchedulerPolicy) -> list[str]:
    config, workloads = build(spec)
    log: list[str] = []
    Engine(
        config, workloads, emit=lambda e: log.append(json.dumps(e, default=str)), policy=policy
    ).run()
    return log


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(SchedulerPolicy(), id="after-victims-stop"),
        pytest.param(
            SchedulerPolicy(preemptor_admission=PreemptorAdmission.SAME_CYCLE), id="same-cycle"
        ),
    ],
)
@settings(
    max_examples=400,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Fair sharing on in every world: its shortcuts are the ones worth checking.
@given(spec=specs().map(lambda spec: spec._replace(fair=True)))
def test_the_search_decides_as_the_plain_search(policy: SchedulerPolicy, spec: Spec) -> None:
    fast = _events(spec, policy)
    real = admitter.Preemptor
    admitter.Preemptor = PlainPreemptor  # type: ignore[misc]
    try:
        plain = _events(spec, policy)
    finally:
        admitter.Preemptor = real  # type: ignore[misc]
    evictions = sum('"evicted"' in e for e in plain)
    target(float(evictions), label="evictions")  # steer towards busy searches
    event(f"evictions: {'0' if evictions == 0 else '1-4' if evictions <= 4 else '5+'}")
    assert fast == plain, f"{evictions} evictions in the plain run; first difference at " + str(
        next(i for i, (x, y) in enumerate(zip(fast, plain, strict=False)) if x != y)
        if any(x != y for x, y in zip(fast, plain, strict=False))
        else min(len(fast), len(plain))
    )
