"""Namespace label selectors in Kubernetes' two forms, and what they match."""

from __future__ import annotations

import pytest

from queuemgr.k8s.selectors import LabelSelector, Requirement


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        pytest.param("", {}, True, id="empty-matches-all"),
        pytest.param("queuemgr.io/managed=true", {"queuemgr.io/managed": "true"}, True, id="eq"),
        pytest.param(
            "queuemgr.io/managed==true", {"queuemgr.io/managed": "false"}, False, id="eqeq-miss"
        ),
        pytest.param("tier!=prod", {}, True, id="neq-absent"),
        pytest.param("tier!=prod", {"tier": "prod"}, False, id="neq-present"),
        pytest.param("team in (a, b)", {"team": "b"}, True, id="in"),
        pytest.param("team notin (a,b)", {"team": "a"}, False, id="notin"),
        pytest.param("gpu", {"gpu": ""}, True, id="exists"),
        pytest.param("!legacy", {"legacy": "1"}, False, id="does-not-exist"),
        pytest.param("a=1,team in (x,y),!z", {"a": "1", "team": "y"}, True, id="and"),
        pytest.param(
            "a=1,team in (x,y),!z", {"a": "1", "team": "y", "z": ""}, False, id="and-miss"
        ),
    ],
)
def test_parse_and_match(text: str, labels: dict[str, str], matches: bool) -> None:
    selector = LabelSelector.parse(text)
    assert selector.matches(labels) is matches
    assert LabelSelector.from_json(selector.as_json()) == selector


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a=1,,b", id="empty-part"),
        pytest.param("team in (a", id="unbalanced"),
        pytest.param("team in ()", id="empty-set"),
        pytest.param("bad key!=1=2", id="bad-key"),
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="label selector"):
        LabelSelector.parse(text)


def test_json_form() -> None:
    selector = LabelSelector.from_json(
        {
            "matchLabels": {"queuemgr.io/managed": "true"},
            "matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}],
        }
    )
    assert selector.match_expressions == (Requirement(key="team", operator="In", values=("a",)),)
    assert selector.matches({"queuemgr.io/managed": "true", "team": "a"})
    assert not selector.matches({"queuemgr.io/managed": "true"})
    with pytest.raises(ValueError, match="unknown operator"):
        LabelSelector.from_json({"matchExpressions": [{"key": "a", "operator": "Like"}]})
