"""A flavor's ``tolerations`` in a scenario or queues file, and ``--toleration``'s text:
read exactly, refused naming the YAML path (or the flag) and the value."""

from __future__ import annotations

from typing import Any

import pytest

from queuemgr.core.model import FlavorName, TaintEffect, Toleration
from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.objects import toleration_of_text
from queuemgr.spec.scenario import parse_scenario


def _scenario(tolerations: object) -> dict[str, Any]:
    return {
        "flavors": [
            {"name": "on-demand", "node_labels": {"pool": "on-demand"}},
            {
                "name": "spot",
                "node_labels": {"pool": "spot"},
                "taints": [{"key": "spot", "value": "true"}],
                "tolerations": tolerations,
            },
        ],
        "nodes": [
            {"name": "s", "flavor": "spot", "allocatable": {"nvidia.com/gpu": 8}},
        ],
        "cluster_queues": [
            {"name": "q", "resources": [{"flavor": "spot", "nominal": {"nvidia.com/gpu": 8}}]}
        ],
    }


def test_tolerations_are_read_in_order() -> None:
    raw = [
        {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"operator": "Exists", "effect": "NoExecute"},
        {"key": "zone", "value": "b"},  # operator Equal by default
    ]
    flavors = parse_scenario(_scenario(raw)).config.flavors
    assert flavors[FlavorName("spot")].tolerations == (
        Toleration(key="spot", value="true", effect=TaintEffect.NO_SCHEDULE),
        Toleration(key="nvidia.com/gpu", operator="Exists"),
        Toleration(operator="Exists", effect=TaintEffect.NO_EXECUTE),
        Toleration(key="zone", value="b"),
    )
    assert flavors[FlavorName("on-demand")].tolerations == ()  # none by default


@pytest.mark.parametrize(
    ("tolerations", "error"),
    [
        ({"key": "spot"}, "flavors[1].tolerations: expected a list, got a mapping"),
        (["spot"], "flavors[1].tolerations[0]: expected a mapping, got a string ('spot')"),
        (
            [{"key": "spot", "operator": "In"}],
            "flavors[1].tolerations[0].operator: expected Equal or Exists, got 'In'",
        ),
        (
            [{"key": "spot", "effect": "Never"}],
            "flavors[1].tolerations[0].effect: expected one of NoSchedule, PreferNoSchedule, "
            "NoExecute, got 'Never'",
        ),
        (
            [{"value": "true"}],
            "flavors[1].tolerations[0].key: operator Equal needs a key",
        ),
        (
            [{"key": "spot", "operator": "Exists", "value": "true"}],
            "flavors[1].tolerations[0].value: operator Exists takes no value",
        ),
        ([{"key": 7}], "flavors[1].tolerations[0].key: expected a string, got 7"),
        (
            [{"key": "spot", "seconds": 30}],
            "flavors[1].tolerations[0].seconds: unknown field (expected one of: effect, key,",
        ),
    ],
    ids=[
        "not-a-list",
        "not-a-mapping",
        "operator",
        "effect",
        "equal-without-key",
        "exists-with-value",
        "key-not-a-string",
        "unknown-field",
    ],
)
def test_bad_tolerations_name_the_yaml_path_and_value(tolerations: object, error: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_scenario(tolerations))
    assert str(caught.value).startswith(error), str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "spot=true:NoSchedule",
            Toleration(key="spot", value="true", effect=TaintEffect.NO_SCHEDULE),
        ),
        ("spot=true", Toleration(key="spot", value="true")),
        ("spot=", Toleration(key="spot", value="")),
        ("nvidia.com/gpu", Toleration(key="nvidia.com/gpu", operator="Exists")),
        (
            "nvidia.com/gpu:NoExecute",
            Toleration(key="nvidia.com/gpu", operator="Exists", effect=TaintEffect.NO_EXECUTE),
        ),
        (":PreferNoSchedule", Toleration(operator="Exists", effect=TaintEffect.PREFER_NO_SCHEDULE)),
    ],
)
def test_toleration_text(text: str, expected: Toleration) -> None:
    assert toleration_of_text(text, "--toleration") == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "--toleration '': expected KEY=VALUE[:EFFECT], KEY[:EFFECT] or :EFFECT"),
        (":", "--toleration ':': expected KEY=VALUE[:EFFECT], KEY[:EFFECT] or :EFFECT"),
        ("spot:", "--toleration 'spot:': expected KEY=VALUE[:EFFECT], KEY[:EFFECT] or :EFFECT"),
        ("=true", "--toleration '=true': KEY=VALUE needs a key"),
        ("=true:NoSchedule", "--toleration '=true:NoSchedule': KEY=VALUE needs a key"),
        (
            "spot=true:Sometimes",
            "--toleration 'spot=true:Sometimes': effect: expected one of NoSchedule, "
            "PreferNoSchedule, NoExecute, got 'Sometimes'",
        ),
        ("a=b:c:NoSchedule", "--toleration 'a=b:c:NoSchedule': effect: expected one of"),
    ],
)
def test_bad_toleration_text_names_the_flag_and_value(text: str, error: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        toleration_of_text(text, "--toleration")
    assert str(caught.value).startswith(error), str(caught.value)
