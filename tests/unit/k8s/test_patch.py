"""JSON Patches built against the object: parents created once, keys escaped, no-ops empty."""

from __future__ import annotations

from typing import Any

import pytest

from queuemgr.k8s.patch import Patch, guard, pointer, remove_value, set_value
from tests.unit.k8s.helpers import apply_patch


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        pytest.param(("spec", "suspend"), "/spec/suspend", id="plain"),
        pytest.param(
            ("metadata", "labels", "queuemgr.io/queue-name"),
            "/metadata/labels/queuemgr.io~1queue-name",
            id="slash",
        ),
        pytest.param(("a~b",), "/a~0b", id="tilde"),
        pytest.param(("items", 3, "x"), "/items/3/x", id="index"),
    ],
)
def test_pointer(tokens: tuple[Any, ...], expected: str) -> None:
    assert pointer(tokens) == expected


@pytest.mark.parametrize(
    ("doc", "tokens", "value", "ops"),
    [
        pytest.param(
            {"spec": {"suspend": False}},
            ("spec", "suspend"),
            True,
            [{"op": "add", "path": "/spec/suspend", "value": True}],
            id="replace-existing",
        ),
        pytest.param({"spec": {"suspend": True}}, ("spec", "suspend"), True, [], id="unchanged"),
        pytest.param(
            {"spec": {}},
            ("spec", "runPolicy", "suspend"),
            True,
            [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}],
            id="missing-parent",
        ),
        pytest.param(
            {"spec": {"runPolicy": None}},
            ("spec", "runPolicy", "suspend"),
            True,
            [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}],
            id="null-parent",
        ),
        pytest.param(
            {"spec": {"jobs": [{"t": {}}, {"t": {}}]}},
            ("spec", "jobs", 1, "t", "nodeSelector"),
            {"a": "b"},
            [{"op": "add", "path": "/spec/jobs/1/t/nodeSelector", "value": {"a": "b"}}],
            id="into-list-item",
        ),
    ],
)
def test_set_value(
    doc: dict[str, Any], tokens: tuple[Any, ...], value: Any, ops: list[Any]
) -> None:
    patch = set_value(doc, tokens, value)
    assert patch.as_json() == ops
    assert bool(patch) == bool(ops)
    patched = apply_patch(doc, patch.as_json())
    here: Any = patched
    for t in tokens:
        here = here[t]
    assert here == value


def test_values_are_copies() -> None:
    value = {"a": "b"}
    patch = set_value({}, ("x", "y"), value)
    value["a"] = "changed"
    assert patch.as_json()[0]["value"] == {"y": {"a": "b"}}
    patch.as_json()[0]["value"]["y"]["a"] = "mutated"
    assert patch.as_json()[0]["value"] == {"y": {"a": "b"}}


def test_remove_only_what_exists_and_guard() -> None:
    doc = {"metadata": {"annotations": {"k/x": "1"}}}
    assert not remove_value(doc, ("metadata", "annotations", "other"))
    assert not remove_value(doc, ("metadata", "labels", "k/x"))
    removed = remove_value(doc, ("metadata", "annotations", "k/x"))
    assert apply_patch(doc, removed.as_json()) == {"metadata": {"annotations": {}}}
    combined = guard(("metadata", "annotations", "k/x"), "1") + removed
    assert [o["op"] for o in combined.as_json()] == ["test", "remove"]
    assert Patch() + Patch() == Patch()
