"""Random small clusters: the independent checker finds no violation, no workload is lost."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuemgr.sim.engine import Engine
from queuemgr.spec.scenario import parse_scenario


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n_queues = draw(st.integers(1, 3))
    in_cohort = draw(st.booleans())
    queues = []
    for q in range(n_queues):
        quota: dict[str, Any] = {
            "flavor": "gpu",
            "nominal": {"nvidia.com/gpu": draw(st.integers(0, 16))},
        }
        if in_cohort and draw(st.booleans()):
            quota["borrowing_limit"] = {"nvidia.com/gpu": draw(st.integers(0, 8))}
        if in_cohort and draw(st.booleans()):
            quota["lending_limit"] = {
                "nvidia.com/gpu": draw(st.integers(0, quota["nominal"]["nvidia.com/gpu"]))
            }
        cq: dict[str, Any] = {
            "name": f"q{q}",
            "resources": [quota],
            "queueing_strategy": draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
            "weight": draw(st.sampled_from([0, 0.5, 1, 2])),
        }
        if in_cohort:
            cq["cohort"] = "c"
        queues.append(cq)
    workloads = [
        {
            "name": f"w{i}",
            "namespace": f"q{draw(st.integers(0, n_queues - 1))}",
            "queue": "default",
            "submit_at": draw(st.integers(0, 20)),
            "runtime": draw(st.integers(0, 30)),
            "priority": draw(st.integers(0, 2)),
            "pod_sets": [
                {
                    "name": "p",
                    "count": draw(st.integers(1, 3)),
                    "requests": {"nvidia.com/gpu": draw(st.sampled_from([1, 2, 4, 8]))},
                }
            ],
        }
        for i in range(draw(st.integers(1, 15)))
    ]
    return {
        "flavors": [{"name": "gpu"}],
        "nodes": [
            {
                "name": "n",
                "count": draw(st.integers(1, 4)),
                "flavor": "gpu",
                "allocatable": {"nvidia.com/gpu": draw(st.sampled_from([4, 8]))},
            }
        ],
        "cohorts": [{"name": "c"}] if in_cohort else [],
        "cluster_queues": queues,
        "local_queues": [
            {"namespace": f"q{q}", "name": "default", "cluster_queue": f"q{q}"}
            for q in range(n_queues)
        ],
        "workloads": workloads,
    }


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.one_of(st.none(), st.integers(0, 40)))
def test_no_violation_and_nothing_lost(raw: dict[str, Any], until: int | None) -> None:
    scenario = parse_scenario(raw)
    result = Engine(scenario.config, scenario.workloads).run(until=until)
    assert result.invariant_violations == []
    assert result.admitted == result.finished + result.running_at_end
    left = result.pending_at_end + result.not_submitted
    assert result.finished + result.running_at_end + left == result.workloads
    if until is None:
        assert result.running_at_end == 0 and result.not_submitted == 0
