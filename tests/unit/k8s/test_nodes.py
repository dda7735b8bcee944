"""Node objects as the core's nodes: allocatable in exact units, taints, and who takes pods."""

from __future__ import annotations

from typing import Any

import pytest

from queuemgr.core.model import Taint, TaintEffect
from queuemgr.k8s.nodes import NodeError, node_from_k8s


def _node(**over: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "metadata": {"name": "gpu-0", "labels": {"gpu": "h100", "rack": "r1"}},
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": "95500m",
                "memory": "1031921868Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
                "ephemeral-storage": "100Gi",
                "hugepages-2Mi": "0",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for key, value in over.items():
        node[key] = {**node[key], **value}
    return node


def test_allocatable_in_exact_units_and_only_what_pods_request_by_name() -> None:
    n = node_from_k8s(_node())
    assert n.name == "gpu-0" and n.labels == {"gpu": "h100", "rack": "r1"}
    assert n.allocatable == {"cpu": 95_500, "memory": 1031921868 * 1024, "nvidia.com/gpu": 8}
    assert n.schedulable and n.taints == ()


@pytest.mark.parametrize(
    ("over", "schedulable"),
    [
        pytest.param({"spec": {"unschedulable": True}}, False, id="cordoned"),
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            False,
            id="not-ready",
        ),
        pytest.param({"status": {"conditions": []}}, False, id="no-ready-condition"),
        pytest.param({"spec": {"unschedulable": False}}, True, id="uncordoned"),
    ],
)
def test_a_cordoned_or_unready_node_takes_no_new_pods(
    over: dict[str, Any], schedulable: bool
) -> None:
    assert node_from_k8s(_node(**over)).schedulable is schedulable


def test_taints_keep_key_value_and_effect() -> None:
    taints = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
    ]
    n = node_from_k8s(_node(spec={"taints": taints}))
    assert n.taints == (
        Taint(key="nvidia.com/gpu", value="", effect=TaintEffect.NO_SCHEDULE),
        Taint(key="dedicated", value="ml", effect=TaintEffect.NO_EXECUTE),
    )


@pytest.mark.parametrize(
    ("over", "named"),
    [
        pytest.param(
            {"status": {"allocatable": {"nvidia.com/gpu": "lots"}}},
            "status.allocatable.nvidia.com/gpu",
            id="bad-quantity",
        ),
        pytest.param(
            {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}},
            "spec.taints[0].effect",
            id="bad-effect",
        ),
        pytest.param({"metadata": {"name": ""}}, "metadata.name", id="no-name"),
    ],
)
def test_a_node_queuemgr_cannot_read_names_the_field(over: dict[str, Any], named: str) -> None:
    with pytest.raises(NodeError, match=named.replace(".", r"\.").replace("[", r"\[")):
        node_from_k8s(_node(**over))
