"""Scenario fields of pod sets for topology and partial admission, and their errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.scenario import parse_scenario

BASE: dict[str, Any] = {
    "flavors": [{"name": "h100"}],
    "nodes": [
        {
            "name": "gpu",
            "count": 2,
            "flavor": "h100",
            "labels": {"rack": "r1"},
            "allocatable": {"nvidia.com/gpu": 8},
        }
    ],
    "cluster_queues": [
        {"name": "team", "resources": [{"flavor": "h100", "nominal": {"nvidia.com/gpu": 16}}]}
    ],
    "local_queues": [{"namespace": "team", "name": "default", "cluster_queue": "team"}],
    "workloads": [
        {
            "name": "job",
            "namespace": "team",
            "queue": "default",
            "runtime": 10,
            "pod_sets": [
                {
                    "name": "workers",
                    "count": 4,
                    "requests": {"nvidia.com/gpu": 4},
                    "topology": {"required": "rack"},
                    "min_count": 2,
                },
                {"name": "launcher", "count": 1, "requests": {"nvidia.com/gpu": 1}},
            ],
        }
    ],
}


def _pod_set(index: int, **fields: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    ps = raw["workloads"][0]["pod_sets"][index]
    for key, value in fields.items():
        if value is None:
            ps.pop(key, None)
        else:
            ps[key] = value
    return raw


def test_the_fields_reach_the_core_pod_set() -> None:
    (sw,) = parse_scenario(copy.deepcopy(BASE)).workloads
    workers, launcher = sw.workload.pod_sets
    assert workers.topology_required == "rack" and workers.topology_preferred is None
    assert workers.min_count == 2
    assert launcher.topology is None and launcher.min_count is None


def test_preferred_and_a_namespaced_label_key() -> None:
    raw = _pod_set(0, topology={"preferred": "nvidia.com/nvlink-domain"})
    (sw,) = parse_scenario(raw).workloads
    ps = sw.workload.pod_sets[0]
    assert ps.topology_preferred == "nvidia.com/nvlink-domain"
    assert ps.topology_required is None


P = "workloads[0].pod_sets[0]"

CASES = [
    pytest.param(
        _pod_set(0, topology="rack"), f"{P}.topology: expected a mapping", id="topology-not-a-map"
    ),
    pytest.param(
        _pod_set(0, topology={}),
        f"{P}.topology: expected exactly one of required, preferred",
        id="topology-empty",
    ),
    pytest.param(
        _pod_set(0, topology={"required": "rack", "preferred": "zone"}),
        f"{P}.topology: expected exactly one of required, preferred",
        id="topology-both",
    ),
    pytest.param(
        _pod_set(0, topology={"requird": "rack"}),
        f"{P}.topology.requird: unknown field",
        id="topology-typo",
    ),
    pytest.param(
        _pod_set(0, topology={"required": ""}),
        f"{P}.topology.required: expected a non-empty string",
        id="topology-empty-key",
    ),
    pytest.param(
        _pod_set(0, topology={"preferred": 3}),
        f"{P}.topology.preferred: expected a non-empty string",
        id="topology-key-not-a-string",
    ),
    pytest.param(
        _pod_set(0, min_count=0), f"{P}.min_count: expected an integer >= 1", id="min-count-zero"
    ),
    pytest.param(
        _pod_set(0, min_count=5),
        f"{P}.min_count: expected at most count (4), got 5",
        id="min-count-above-count",
    ),
    pytest.param(
        _pod_set(0, min_count="2"), f"{P}.min_count: expected an integer", id="min-count-string"
    ),
    pytest.param(
        _pod_set(0, min_count=True), f"{P}.min_count: expected an integer", id="min-count-bool"
    ),
    pytest.param(
        _pod_set(1, min_count=1),
        "workloads[0].pod_sets[1].min_count: only one pod set of a workload may set min_count, "
        "and workloads[0].pod_sets[0] ('workers') already does",
        id="two-partial-pod-sets",
    ),
]


@pytest.mark.parametrize(("raw", "message"), CASES)
def test_bad_fields_name_the_yaml_path(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert str(err.value).startswith(message), str(err.value)
