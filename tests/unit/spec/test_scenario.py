"""Scenario loading: strict validation with YAML paths, and node expansion."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from queuemgr.core.model import Ordering, QueueingStrategy, ReclaimWithinCohort, TaintEffect
from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.scenario import parse_scenario

BASE: dict[str, Any] = {
    "flavors": [{"name": "h100", "node_labels": {"gpu.product": "H100"}}],
    "nodes": [
        {
            "name": "gpu",
            "count": 3,
            "flavor": "h100",
            "labels": {"rack": "r1"},
            "allocatable": {"nvidia.com/gpu": 8, "cpu": 96, "memory": "1Ti"},
            "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
        }
    ],
    "cohorts": [{"name": "research"}],
    "cluster_queues": [
        {
            "name": "team-a",
            "cohort": "research",
            "weight": 0.5,
            "queueing_strategy": "StrictFIFO",
            "namespaces": ["team-a"],
            "resources": [
                {
                    "flavor": "h100",
                    "nominal": {"nvidia.com/gpu": 8, "cpu": 96},
                    "borrowing_limit": {"nvidia.com/gpu": 8},
                    "lending_limit": {"nvidia.com/gpu": 4},
                }
            ],
            "preemption": {"within_cluster_queue": "LowerPriority", "reclaim_within_cohort": "Any"},
        },
        {
            "name": "team-b",
            "resources": [{"flavor": "h100", "nominal": {"nvidia.com/gpu": 8, "cpu": "12"}}],
        },
    ],
    "local_queues": [{"namespace": "team-a", "name": "default", "cluster_queue": "team-a"}],
    "workloads": [
        {
            "name": "job",
            "namespace": "team-a",
            "queue": "default",
            "submit_at": 0.1,
            "runtime": 10,
            "max_runtime": 20,
            "priority": 5,
            "pod_sets": [
                {
                    "name": "workers",
                    "count": 2,
                    "requests": {"nvidia.com/gpu": 4, "cpu": "500m"},
                    "node_selector": {"rack": "r1"},
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                }
            ],
        }
    ],
    "scheduler": {"reservation_depth": 2},
}


def test_valid_scenario_builds_core_objects() -> None:
    s = parse_scenario(copy.deepcopy(BASE))
    cq = s.config.cluster_queues["team-a"]  # type: ignore[index]
    assert cq.weight == Fraction(1, 2)
    assert cq.queueing_strategy is QueueingStrategy.STRICT_FIFO
    assert cq.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
    assert cq.flavors[0].lending_limit == {"nvidia.com/gpu": 4}
    assert s.config.cluster_queues["team-b"].flavors[0].nominal["cpu"] == 12000  # type: ignore[index]
    (sw,) = s.workloads
    assert sw.runtime == 10 and sw.workload.created_at == 0.1 and sw.workload.max_runtime == 20
    assert sw.workload.pod_sets[0].requests["cpu"] == 500  # type: ignore[index]
    assert s.policy.reservation_depth == 2


def test_node_count_expands_names_and_merges_flavor_labels() -> None:
    s = parse_scenario(copy.deepcopy(BASE))
    assert list(s.config.nodes) == ["gpu-0", "gpu-1", "gpu-2"]
    node = s.config.nodes["gpu-1"]  # type: ignore[index]
    assert node.labels == {"rack": "r1", "gpu.product": "H100"}
    assert node.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert s.config.node_topology.flavor_of["gpu-1"] == "h100"  # type: ignore[index]


def test_single_node_keeps_its_name() -> None:
    raw = copy.deepcopy(BASE)
    del raw["nodes"][0]["count"]
    assert list(parse_scenario(raw).config.nodes) == ["gpu"]


def _set(path: list[Any], value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    target: Any = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return raw


def _without(path: list[Any]) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    target: Any = raw
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return raw


CASES = [
    pytest.param(
        _set(["cluster_queues", 0, "resources", 0, "borowing_limit"], {}),
        "cluster_queues[0].resources[0].borowing_limit: unknown field",
        id="unknown-field",
    ),
    pytest.param(
        _set(["cluster_queues", 1, "resources", 0, "nominal", "cpu"], "12x"),
        "cluster_queues[1].resources[0].nominal.cpu: bad quantity '12x'",
        id="bad-quantity",
    ),
    pytest.param(
        _set(["local_queues", 0, "cluster_queue"], "team-z"),
        "local_queues[0].cluster_queue: unknown cluster queue 'team-z'",
        id="dangling-local-queue",
    ),
    pytest.param(
        _set(["nodes", 0, "flavor"], "a100"),
        "nodes[0].flavor: unknown flavor 'a100'",
        id="unknown-flavor-on-node",
    ),
    pytest.param(
        _set(["workloads", 0, "runtime"], -5),
        "workloads[0].runtime: expected a non-negative number, got -5",
        id="negative-runtime",
    ),
    pytest.param(
        _set(["cluster_queues", 0, "cohort"], "nobody"),
        "cluster_queues[0].cohort: cohort 'nobody' is not declared",
        id="undeclared-cohort",
    ),
    pytest.param(
        _set(["cluster_queues", 1, "name"], "team-a"),
        "cluster_queues[1]: duplicate cluster queue 'team-a'",
        id="duplicate-name",
    ),
    pytest.param(
        _set(["workloads", 0, "queue"], "missing"),
        "workloads[0].queue: no local queue 'missing' in namespace 'team-a'",
        id="dangling-workload-queue",
    ),
    pytest.param(
        _set(["workloads", 0, "pod_sets", 0, "count"], "2"),
        "workloads[0].pod_sets[0].count: expected an integer",
        id="wrong-type",
    ),
    pytest.param(
        _set(["workloads", 0, "submit_at"], True),
        "workloads[0].submit_at: expected a number",
        id="bool-is-not-a-number",
    ),
    pytest.param(
        _set(["scheduler"], [1, 2]),
        "scheduler: expected a mapping",
        id="scheduler-not-a-mapping",
    ),
    pytest.param(
        _without(["nodes", 0, "allocatable"]),
        "nodes[0].allocatable: required field is missing",
        id="missing-field",
    ),
    pytest.param(
        _set(["cluster_queues", 1, "resources", 0, "borrowing_limit"], {"nvidia.com/gpu": 1}),
        "cluster_queues[1].resources[0].borrowing_limit: only a queue in a cohort",
        id="borrowing-limit-without-cohort",
    ),
    pytest.param(
        _set(["cluster_queues", 0, "weight"], -1),
        "cluster_queues[0].weight: expected a non-negative number",
        id="negative-weight",
    ),
    pytest.param(
        _set(["nodes", 0, "labels"], {"gpu.product": "A100"}),
        "nodes[0].labels.gpu.product: 'A100' conflicts with flavor 'h100'",
        id="label-conflicts-with-flavor",
    ),
]


@pytest.mark.parametrize(("raw", "message"), CASES)
def test_bad_scenarios_name_the_yaml_path(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert str(err.value).startswith(message), str(err.value)


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ScenarioError, match="scenario: expected a mapping"):
        parse_scenario([1, 2])


def test_workload_count_expands_names_and_submit_times() -> None:
    raw = copy.deepcopy(BASE)
    raw["workloads"][0].update(count=3, submit_every=2)
    names = [(sw.workload.name, sw.workload.created_at) for sw in parse_scenario(raw).workloads]
    assert names == [("job-0", 0.1), ("job-1", 2.1), ("job-2", 4.1)]


def test_ordering_on_a_cluster_queue_and_a_cohort() -> None:
    raw = copy.deepcopy(BASE)
    raw["cohorts"][0]["ordering"] = "usage"
    raw["cluster_queues"][0]["ordering"] = "fifo"
    config = parse_scenario(raw).config
    assert config.cohorts["research"].ordering is Ordering.USAGE  # type: ignore[index]
    assert config.cluster_queues["team-a"].ordering is Ordering.FIFO  # type: ignore[index]
    assert config.cluster_queues["team-b"].ordering is None  # type: ignore[index]


@pytest.mark.parametrize("where", ["cohorts", "cluster_queues"])
def test_a_bad_ordering_is_refused_naming_the_field(where: str) -> None:
    raw = copy.deepcopy(BASE)
    raw[where][0]["ordering"] = "random"
    expected = rf"{where}\[0\]\.ordering: expected one of fifo, usage"
    with pytest.raises(ScenarioError, match=expected):
        parse_scenario(raw)


def _tree(*cohorts: dict[str, Any]) -> dict[str, Any]:
    return _set(["cohorts"], [{"name": "research"}, *cohorts])


TREE_CASES = [
    pytest.param(
        _tree({"name": "org"}, {"name": "lab", "parent": "ghost"}),
        "cohorts: cohort lab: its parent ghost does not exist",
        id="dangling-parent",
    ),
    pytest.param(
        _set(
            ["cohorts"],
            [{"name": "research", "parent": "org"}, {"name": "org", "parent": "research"}],
        ),
        "cohorts: cohorts form a cycle: org -> research -> org",
        id="cycle",
    ),
    pytest.param(
        _tree(
            {
                "name": "org",
                "resources": [
                    {
                        "flavor": "h100",
                        "nominal": {"nvidia.com/gpu": 8},
                        "borrowing_limit": {"nvidia.com/gpu": 1},
                    }
                ],
            }
        ),
        "cohorts[1].resources[0].borrowing_limit: only a cohort with a parent can have",
        id="root-borrowing-limit",
    ),
    pytest.param(
        _tree({"name": "org", "weight": -2}),
        "cohorts[1].weight: expected a non-negative number",
        id="negative-cohort-weight",
    ),
    pytest.param(
        _tree({"name": "org", "parnt": "x"}),
        "cohorts[1].parnt: unknown field",
        id="unknown-cohort-field",
    ),
]


@pytest.mark.parametrize(("raw", "message"), TREE_CASES)
def test_bad_cohort_trees_name_the_path(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(raw)
    assert str(err.value).startswith(message), str(err.value)


def test_a_cohort_tree_with_quota_of_its_own() -> None:
    raw = _set(
        ["cohorts"],
        [
            {"name": "org", "resources": [{"flavor": "h100", "nominal": {"nvidia.com/gpu": 16}}]},
            {
                "name": "research",
                "parent": "org",
                "weight": 2,
                "resources": [
                    {
                        "flavor": "h100",
                        "nominal": {"nvidia.com/gpu": 0},
                        "borrowing_limit": {"nvidia.com/gpu": 8},
                        "lending_limit": {"nvidia.com/gpu": 4},
                    }
                ],
            },
        ],
    )
    config = parse_scenario(raw).config
    research = config.cohorts["research"]  # type: ignore[index]
    assert research.parent == "org" and research.weight == 2
    assert research.flavors[0].borrowing_limit == {"nvidia.com/gpu": 8}
    # research lends its whole subtree (team-a's 8 beyond its own 0), so its lending
    # limit may exceed its own nominal quota.
    assert research.flavors[0].lending_limit == {"nvidia.com/gpu": 4}
    topo = config.quota_topology
    assert topo.tree.path("research") == "org/research"  # type: ignore[arg-type]
