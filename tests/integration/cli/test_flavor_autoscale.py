"""A flavor's autoscale through the command line and apply: set, shown, edited, cleared,
audited, refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.conftest import QUEUES, Invoke, flavor_doc, no_traceback

pytestmark = pytest.mark.integration

TEMPLATE = {
    "max_nodes": 4,
    "node": {"allocatable": {"nvidia.com/gpu": 8, "cpu": 96_000}, "labels": {"zone": "a"}},
}


def test_create_edit_describe_clear_and_audit(cli: Invoke) -> None:
    r = cli(
        "flavor",
        "create",
        "spot",
        "--label",
        "pool=spot",
        "--autoscale",
        "4:nvidia.com/gpu=8,cpu=96",
        "--autoscale-label",
        "zone=a",
    )
    assert r.exit_code == 0, r.output
    assert flavor_doc(cli, "spot")["autoscale"] == TEMPLATE
    described = cli("flavor", "describe", "spot").stdout
    assert "up to 4 nodes of cpu=96000,nvidia.com/gpu=8 (zone=a)" in described

    r = cli("flavor", "edit", "spot", "--autoscale", "6:nvidia.com/gpu=4")  # replaces it
    assert r.exit_code == 0 and "edited" in r.output, r.output
    assert flavor_doc(cli, "spot")["autoscale"] == {
        "max_nodes": 6,
        "node": {"allocatable": {"nvidia.com/gpu": 4}, "labels": {}},
    }
    r = cli("flavor", "edit", "spot", "--autoscale", "6:nvidia.com/gpu=4")
    assert r.exit_code == 0 and "unchanged" in r.output, r.output
    assert cli("flavor", "edit", "spot", "--clear-autoscale").exit_code == 0
    assert flavor_doc(cli, "spot")["autoscale"] is None
    assert "Autoscale:" in cli("flavor", "describe", "spot").stdout

    history = cli("audit", "--object", "flavor/spot", "-o", "json")
    entries = json.loads(history.stdout)["entries"]  # newest first
    assert [(e["after"]["autoscale"] or {}).get("max_nodes") for e in entries] == [None, 6, 4]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--autoscale", "4"), "--autoscale '4': expected MAX_NODES:RESOURCE=QTY"),
        (("--autoscale", "0:nvidia.com/gpu=8"), "MAX_NODES at least 1"),
        (("--autoscale", "99999999999:nvidia.com/gpu=8"), "at most 10000"),
        (("--autoscale", "9" * 5000 + ":nvidia.com/gpu=8"), "at most 10000"),
        (("--autoscale", "2:nvidia.com/gpu"), "expected MAX_NODES:RESOURCE=QTY"),
        (("--autoscale-label", "zone=a"), "--autoscale-label: needs --autoscale"),
        (("--autoscale", "2:cpu=1", "--clear-autoscale"), "cannot be combined"),
    ],
    ids=[
        "no-vector",
        "zero",
        "too-many",
        "too-many-digits",
        "no-quantity",
        "label-alone",
        "set-and-clear",
    ],
)
def test_bad_autoscale_exits_2_and_writes_nothing(
    cli: Invoke, applied: Path, flags: tuple[str, ...], words: str
) -> None:
    before = cli("audit", "-o", "json").stdout
    r = cli("flavor", "edit", "h100", *flags)
    assert r.exit_code == 2, r.output
    assert words in r.output, r.output
    no_traceback(r)
    assert flavor_doc(cli, "h100")["autoscale"] is None
    assert cli("audit", "-o", "json").stdout == before


def test_apply_sets_autoscale_idempotently_and_refuses_a_bad_one(
    cli: Invoke, applied: Path, tmp_path: Path
) -> None:
    scaled = tmp_path / "scaled.yaml"
    scaled.write_text(
        QUEUES.replace(
            "  - name: a100\n    node_labels: {gpu: a100}\n",
            "  - name: a100\n    node_labels: {gpu: a100}\n    autoscale:\n"
            "      max_nodes: 4\n"
            "      node: {allocatable: {nvidia.com/gpu: 8, cpu: 96}, labels: {zone: a}}\n",
        )
    )
    r = cli("apply", "-f", str(scaled), "-o", "json")
    assert r.exit_code == 0, r.output
    (change,) = json.loads(r.stdout)["changes"]
    assert (change["kind"], change["name"], change["action"]) == (
        "ResourceFlavor",
        "a100",
        "update",
    )
    assert flavor_doc(cli, "a100")["autoscale"] == TEMPLATE
    again = cli("apply", "-f", str(scaled), "-o", "json")
    assert json.loads(again.stdout)["changes"] == []  # idempotent
    for bad, worse, path in (
        ("max_nodes: 4", "max_nodes: 0", "flavors[1].autoscale.max_nodes"),
        ("{allocatable:", "{allocated:", "flavors[1].autoscale.node"),
    ):
        broken = tmp_path / "broken.yaml"
        broken.write_text(scaled.read_text().replace(bad, worse))
        r = cli("apply", "-f", str(broken))
        assert r.exit_code == 2, r.output
        assert path in r.output, r.output
        no_traceback(r)
    assert flavor_doc(cli, "a100")["autoscale"] == TEMPLATE  # nothing written
