"""A ClusterQueue's ``admission_checks`` in a scenario or queues file and on ``cq
create/edit``: names in order, each once; bad input names the YAML path or the flag."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main
from queuemgr.core.model import ClusterQueue, ClusterQueueName
from queuemgr.spec.checks import ScenarioError
from queuemgr.spec.scenario import parse_scenario

NOWHERE = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1"


def _scenario(checks: object) -> dict[str, Any]:
    return {
        "flavors": [{"name": "h100", "node_labels": {"gpu": "h100"}}],
        "nodes": [{"name": "n", "flavor": "h100", "allocatable": {"nvidia.com/gpu": 8}}],
        "cluster_queues": [
            {
                "name": "team",
                "resources": [{"flavor": "h100", "nominal": {"nvidia.com/gpu": 8}}],
                "admission_checks": checks,
            }
        ],
    }


def test_checks_are_read_in_order() -> None:
    raw = _scenario(["provisioning-request", "budget"])
    cq = parse_scenario(raw).config.cluster_queues[ClusterQueueName("team")]
    assert cq.admission_checks == ("provisioning-request", "budget")


def test_no_checks_is_the_default() -> None:
    raw = _scenario([])
    del raw["cluster_queues"][0]["admission_checks"]
    cq = parse_scenario(raw).config.cluster_queues[ClusterQueueName("team")]
    assert cq.admission_checks == ()


@pytest.mark.parametrize(
    ("checks", "error"),
    [
        ("provisioning-request", "cluster_queues[0].admission_checks: expected a list"),
        (["Not A Name"], "cluster_queues[0].admission_checks[0]: bad name"),
        (["a", "a"], "cluster_queues[0].admission_checks[1]: admission check 'a' is listed twice"),
    ],
    ids=["string", "bad-name", "twice"],
)
def test_bad_checks_name_the_yaml_path(checks: object, error: str) -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(_scenario(checks))
    assert error in str(exc.value)


def test_the_core_refuses_a_check_twice() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        ClusterQueue(name=ClusterQueueName("q"), flavors=(), admission_checks=("a", "a"))


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--admission-check", "Bad Name"), "--admission-check[0]: bad name"),
        (
            ("--admission-check", "a", "--admission-check", "a"),
            "admission check 'a' is listed twice",
        ),
        (
            ("--admission-check", "a", "--clear-admission-checks"),
            "--admission-check: cannot be combined with --clear-admission-checks",
        ),
    ],
    ids=["bad-name", "twice", "and-clear"],
)
def test_bad_flags_exit_2_before_the_database(flags: tuple[str, ...], words: str) -> None:
    result = CliRunner().invoke(
        main, ["cq", "create", "team", *flags], env={"QUEUEMGR_DATABASE_URL": NOWHERE}
    )
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split())
