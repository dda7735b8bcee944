"""A ClusterQueue's ``resource_weights`` in a scenario or queues file: read exactly,
refused with the YAML path of the entry at fault; MIG and shared-GPU resource names
are ordinary resources."""

from __future__ import annotations

from typing import Any

import pytest

from queuemgr.core.model import ClusterQueueName
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.weights import ResourceWeight
from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.scenario import parse_scenario

MIG = "nvidia.com/mig-1g.10gb"


def _scenario(weights: object) -> dict[str, Any]:
    return {
        "flavors": [
            {"name": "full", "node_labels": {"mig": "none"}},
            {"name": "sliced", "node_labels": {"mig": "1g"}},
        ],
        "nodes": [
            {"name": "gpu", "flavor": "full", "allocatable": {"nvidia.com/gpu": 8}},
            {
                "name": "mig",
                "flavor": "sliced",
                "allocatable": {MIG: 7, "nvidia.com/mig-3g.40gb": 0},
            },
        ],
        "cohorts": [{"name": "c"}],
        "cluster_queues": [
            {
                "name": "team",
                "cohort": "c",
                "resources": [
                    {
                        "flavor": "full",
                        "nominal": {"nvidia.com/gpu": 8, "nvidia.com/gpu.shared": 4},
                    },
                    {"flavor": "sliced", "nominal": {MIG: 7}},
                ],
                "resource_weights": weights,
            }
        ],
    }


def test_weights_are_read_exactly_in_order() -> None:
    raw = [
        {"resource": MIG, "weight": "1/7"},
        {"resource": "nvidia.com/gpu.shared", "weight": "2/8", "counts_as": "nvidia.com/gpu"},
        {"resource": "example.com/fpga", "weight": 3},
    ]
    cq = parse_scenario(_scenario(raw)).config.cluster_queues[ClusterQueueName("team")]
    assert cq.resource_weights == (
        ResourceWeight(resource=ResourceName(MIG), numerator=1, denominator=7, counts_as=GPU),
        ResourceWeight(resource=ResourceName("nvidia.com/gpu.shared"), numerator=2, denominator=8),
        ResourceWeight(resource=ResourceName("example.com/fpga"), numerator=3, denominator=1),
    )


def test_no_weights_is_the_default() -> None:
    raw = _scenario([])
    del raw["cluster_queues"][0]["resource_weights"]
    cq = parse_scenario(raw).config.cluster_queues[ClusterQueueName("team")]
    assert cq.resource_weights == ()


@pytest.mark.parametrize(
    ("weights", "error"),
    [
        ({MIG: "1/7"}, "cluster_queues[0].resource_weights: expected a list"),
        ([{"resource": MIG}], "resource_weights[0].weight: required field is missing"),
        ([{"resource": MIG, "weight": 0.5}], "resource_weights[0].weight: expected N/D"),
        ([{"resource": MIG, "weight": "0"}], "resource_weights[0].weight: expected N/D"),
        ([{"resource": MIG, "weight": "1/0"}], "resource_weights[0].weight: expected N/D"),
        ([{"resource": MIG, "weight": True}], "resource_weights[0].weight: expected N/D"),
        ([{"resource": MIG, "weight": "1/10000000"}], "resource_weights[0].weight: expected N/D"),
        ([{"resource": "no good", "weight": 1}], "resource_weights[0].resource: bad resource name"),
        ([{"resource": MIG, "weight": 1, "counts_as": 7}], "resource_weights[0].counts_as: bad"),
        ([{"resource": MIG, "weight": 1, "per": 1}], "resource_weights[0].per: unknown field"),
        (
            [{"resource": "nvidia.com/gpu", "weight": "1/2"}],
            "[0]: nvidia.com/gpu cannot count as itself",
        ),
        (
            [{"resource": MIG, "weight": "1/7"}, {"resource": MIG, "weight": "1/8"}],
            f"resource_weights[1]: {MIG} is weighted twice",
        ),
        (
            [
                {"resource": MIG, "weight": "1/3", "counts_as": "nvidia.com/mig-3g.40gb"},
                {"resource": "nvidia.com/mig-3g.40gb", "weight": "3/7"},
            ],
            "resource_weights[0]: nvidia.com/mig-1g.10gb counts as nvidia.com/mig-3g.40gb, "
            "which is itself weighted",
        ),
    ],
    ids=[
        "mapping",
        "no-weight",
        "float",
        "zero",
        "zero-denominator",
        "bool",
        "huge",
        "bad-name",
        "bad-target",
        "unknown-field",
        "itself",
        "twice",
        "chain",
    ],
)
def test_bad_weights_name_the_yaml_path(weights: object, error: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(_scenario(weights))
    assert error in str(exc.value)
    assert str(exc.value).startswith("cluster_queues[0].resource_weights")
