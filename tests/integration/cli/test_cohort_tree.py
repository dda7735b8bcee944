"""The cohort tree from the command line: create/edit with --parent, own quota, list,
describe, apply, and the errors that name the flag and the path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.integration.cli.conftest import Invoke
from tests.integration.controller.helpers import run_one_cycle

pytestmark = pytest.mark.integration


def _ok(cli: Invoke, *args: str) -> str:
    r = cli(*args)
    assert r.exit_code == 0, (args, r.output)
    return r.stdout


def test_a_tree_built_and_shown_from_the_command_line(cli: Invoke, applied: Path) -> None:
    _ok(cli, "cohort", "create", "org", "--flavor", "h100", "--nominal", "nvidia.com/gpu=16")
    _ok(cli, "cohort", "edit", "research", "--parent", "org", "--weight", "2")
    _ok(
        cli, "cohort", "edit", "research", "--flavor", "h100", "--nominal", "nvidia.com/gpu=0",
        "--borrowing-limit", "nvidia.com/gpu=8",
    )  # fmt: skip
    doc = json.loads(_ok(cli, "cohort", "describe", "research", "-o", "json"))
    assert doc["path"] == "org/research" and doc["parent"] == "org" and doc["weight"] == "2"
    assert doc["quota"] == [
        {
            "flavor": "h100",
            "nominal": "nvidia.com/gpu=0",
            "borrowing_limit": "nvidia.com/gpu=8",
            "lending_limit": None,
        }
    ]
    assert doc["cluster_queues"] == ["team-a", "team-b"]
    assert "org/research" in _ok(cli, "cq", "describe", "team-a")
    cqs = json.loads(_ok(cli, "cq", "list", "-o", "json"))["cluster_queues"]
    assert {q["name"]: q["cohort_path"] for q in cqs}["team-b"] == "org/research"
    described = _ok(cli, "cohort", "describe", "research")
    assert "Path:" in described and "org/research" in described
    assert "h100: nvidia.com/gpu=0 (borrows nvidia.com/gpu=8)" in described, described
    lqs = json.loads(_ok(cli, "queues", "-A", "-o", "json"))["local_queues"]
    assert {q["namespace"]: q["cohort"] for q in lqs}["team-a"] == "org/research"
    listing = _ok(cli, "cohort", "list")
    assert "org/research" in listing and "nvidia.com/gpu=16" in listing
    org = json.loads(_ok(cli, "cohort", "describe", "org", "-o", "json"))
    assert org["children"] == ["research"]
    # A parent with children is not deleted; moving the child to the root frees it.
    busy = cli("cohort", "delete", "org")
    assert busy.exit_code == 1 and "child cohorts: research" in busy.output
    bad = cli("cohort", "edit", "research", "--root")
    assert bad.exit_code == 2 and "only a cohort with a parent" in bad.output
    _ok(cli, "cohort", "edit", "research", "--flavor", "h100", "--remove-flavor")
    _ok(cli, "cohort", "edit", "research", "--root")
    _ok(cli, "cohort", "delete", "org")
    audit = _ok(cli, "audit", "--object", "cohort/research", "-o", "json")
    assert len(json.loads(audit)["entries"]) >= 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("cohort", "edit", "org", "--parent", "lab"),
            "--parent: cohorts form a cycle: lab -> org -> lab",
            id="cycle",
        ),
        pytest.param(
            ("cohort", "create", "x", "--parent", "orgg"),
            "cohort 'orgg' not found",
            id="unknown-parent",
        ),
        pytest.param(
            ("cohort", "edit", "org", "--parent", "org"),
            "--parent: cohorts form a cycle: org -> org",
            id="own-parent",
        ),
        pytest.param(
            ("cohort", "edit", "lab", "--flavor", "h100", "--lending-limit", "nvidia.com/gpu=2"),
            "--lending-limit nvidia.com/gpu: nvidia.com/gpu has no nominal quota",
            id="limit-without-nominal",
        ),
        pytest.param(
            ("cohort", "edit", "lab", "--nominal", "nvidia.com/gpu=2"),
            "--flavor: name the flavor",
            id="quota-without-flavor",
        ),
        pytest.param(
            ("cohort", "edit", "lab", "--weight", "-1"),
            "--weight: expected a non-negative number",
            id="negative-weight",
        ),
    ],
)
def test_bad_tree_edits_name_the_flag_and_write_nothing(
    cli: Invoke, applied: Path, args: tuple[str, ...], message: str
) -> None:
    _ok(cli, "cohort", "create", "org")
    _ok(cli, "cohort", "create", "lab", "--parent", "org")
    before = _ok(cli, "audit", "-o", "json")
    r = cli(*args)
    assert r.exit_code in (1, 2) and message in r.output, r.output
    if "not found" not in message:
        assert r.exit_code == 2
    assert _ok(cli, "audit", "-o", "json") == before


def test_apply_writes_parents_first_and_prunes_children_first(
    cli: Invoke, applied: Path, tmp_path: Path
) -> None:
    # The child comes first in the file: apply still writes its parent first.
    tree = applied.read_text().replace(
        "cohorts:\n",
        "cohorts:\n  - {name: team, parent: division}\n  - {name: division}\n",
        1,
    )
    assert tree != applied.read_text()
    path = tmp_path / "tree.yaml"
    path.write_text(tree)
    _ok(cli, "apply", "-f", str(path))
    doc = json.loads(_ok(cli, "cohort", "describe", "team", "-o", "json"))
    assert doc["path"] == "division/team"
    _ok(cli, "apply", "-f", str(applied), "--prune")
    names = [c["name"] for c in json.loads(_ok(cli, "cohort", "list", "-o", "json"))["cohorts"]]
    assert "team" not in names and "division" not in names


def test_why_names_the_cohort_path_and_the_level_that_blocks(
    cli: Invoke, applied: Path, engine: Engine
) -> None:
    # org holds 8 GPUs of its own, but research may borrow nothing from it: team-a
    # reaches its 16 and team-b's idle 8, and its fourth 8-GPU job waits on research.
    _ok(cli, "cohort", "create", "org", "--flavor", "h100", "--nominal", "nvidia.com/gpu=8")
    _ok(
        cli, "cohort", "edit", "research", "--parent", "org", "--flavor", "h100",
        "--nominal", "nvidia.com/gpu=0", "--borrowing-limit", "nvidia.com/gpu=0",
    )  # fmt: skip
    for i in range(4):
        _ok(cli, "submit", "-q", "default", "-n", "team-a", "--gpus", "8", "--name", f"w{i}")
    doc = json.loads(_ok(cli, "why", "w3", "-n", "team-a", "-o", "json"))
    assert doc["cohort"] == "org/research"
    assert doc["reason"] == "CohortExhausted", doc
    assert "cohort org/research is at its borrowing limit" in doc["message"], doc["message"]
    table = _ok(cli, "why", "w3", "-n", "team-a")
    assert "org/research" in table
    # One the next cycle admits names its queue's cohort too, and so does one that runs.
    doc = json.loads(_ok(cli, "why", "w0", "-n", "team-a", "-o", "json"))
    assert (doc["reason"], doc["cohort"]) == ("Admissible", "org/research"), doc
    run_one_cycle(engine)
    doc = json.loads(_ok(cli, "why", "w0", "-n", "team-a", "-o", "json"))
    assert (doc["state"], doc["cohort"]) == ("Admitted", "org/research"), doc
    assert "Cohort:        org/research" in _ok(cli, "why", "w0", "-n", "team-a")
