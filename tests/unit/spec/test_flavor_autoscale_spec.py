"""A flavor's ``autoscale`` in a scenario or queues file, and ``--autoscale``'s text: read
exactly, refused naming the YAML path (or the flag); a scenario's queue with an admission
check plans on the nodes the flavor may still grow by."""

from __future__ import annotations

from typing import Any

import pytest

from queuemgr.core.model import FlavorAutoscale, FlavorName, NodeTemplate
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.objects import autoscale_of_text
from queuemgr.spec.scenario import parse_scenario


def _scenario(autoscale: object) -> dict[str, Any]:
    return {
        "flavors": [{"name": "h100", "node_labels": {"gpu": "h100"}, "autoscale": autoscale}],
        "nodes": [{"name": "n", "flavor": "h100", "allocatable": {"nvidia.com/gpu": 8}}],
        "cluster_queues": [
            {
                "name": "q",
                "admission_checks": ["provisioning-request"],
                "resources": [{"flavor": "h100", "nominal": {"nvidia.com/gpu": 32}}],
            }
        ],
    }


def test_autoscale_is_read() -> None:
    raw = {"max_nodes": 3, "node": {"allocatable": {"nvidia.com/gpu": 8}, "labels": {"z": "a"}}}
    config = parse_scenario(_scenario(raw)).config
    assert config.flavors[FlavorName("h100")].autoscale == FlavorAutoscale(
        max_nodes=3, node=NodeTemplate(allocatable={GPU: 8}, labels={"z": "a"})
    )
    assert sorted(config.virtual_nodes) == ["h100~1", "h100~2"]
    assert parse_scenario(_scenario(None)).config.virtual_nodes == {}


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"max_nodes": 0, "node": {"allocatable": {"cpu": 1}}}, "flavors[0].autoscale.max_nodes"),
        (
            {"max_nodes": 10**11, "node": {"allocatable": {"cpu": 1}}},
            "flavors[0].autoscale.max_nodes",
        ),
        ({"max_nodes": 2}, "flavors[0].autoscale"),
        ({"max_nodes": 2, "node": {"allocatable": {}}}, "flavors[0].autoscale.node.allocatable"),
        (
            {"max_nodes": 2, "node": {"allocatable": {"cpu": 1}, "x": 1}},
            "flavors[0].autoscale.node",
        ),
        ([1], "flavors[0].autoscale"),
    ],
    ids=["zero", "too-many", "no-node", "no-capacity", "unknown-key", "not-a-mapping"],
)
def test_bad_autoscale_is_named(raw: object, path: str) -> None:
    with pytest.raises(ScenarioError, match=path.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(_scenario(raw))


def test_the_flag_text() -> None:
    got = autoscale_of_text("5:nvidia.com/gpu=8,cpu=96", {"z": "a"}, "--autoscale")
    assert got == FlavorAutoscale(
        max_nodes=5,
        node=NodeTemplate(allocatable={GPU: 8, ResourceName("cpu"): 96_000}, labels={"z": "a"}),
    )
    for bad in ("5", "x:cpu=1", "0:cpu=1", "2:cpu", "2:=1"):
        with pytest.raises(ScenarioError, match="--autoscale"):
            autoscale_of_text(bad, {}, "--autoscale")
