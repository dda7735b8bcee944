"""A flavor's tolerations through the command line and apply: set, shown, edited, cleared,
audited, refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.conftest import QUEUES, Invoke, flavor_doc, no_traceback

pytestmark = pytest.mark.integration

SPOT = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
GPU_EXISTS = {"key": "nvidia.com/gpu", "operator": "Exists", "value": "", "effect": None}


def test_create_edit_describe_clear_and_audit(cli: Invoke) -> None:
    r = cli(
        "flavor",
        "create",
        "spot",
        "--label",
        "pool=spot",
        "--taint",
        "spot=true:NoSchedule",
        "--toleration",
        "spot=true:NoSchedule",
        "--toleration",
        "nvidia.com/gpu",
    )
    assert r.exit_code == 0, r.output
    assert flavor_doc(cli, "spot")["tolerations"] == [SPOT, GPU_EXISTS]
    described = cli("flavor", "describe", "spot").stdout
    assert "Tolerations:" in described
    assert "spot=true:NoSchedule,nvidia.com/gpu" in described
    listed = cli("flavor", "list").stdout
    assert "TOLERATIONS" in listed and "nvidia.com/gpu" in listed

    r = cli("flavor", "edit", "spot", "--toleration", ":NoExecute")  # replaces them all
    assert r.exit_code == 0 and "edited" in r.output, r.output
    assert flavor_doc(cli, "spot")["tolerations"] == [
        {"key": "", "operator": "Exists", "value": "", "effect": "NoExecute"}
    ]
    assert flavor_doc(cli, "spot")["taints"] != []  # edit changes only what it names
    r = cli("flavor", "edit", "spot", "--toleration", ":NoExecute")
    assert r.exit_code == 0 and "unchanged" in r.output, r.output
    assert cli("flavor", "edit", "spot", "--clear-tolerations").exit_code == 0
    assert flavor_doc(cli, "spot")["tolerations"] == []
    assert "Tolerations:   -" in cli("flavor", "describe", "spot").stdout

    history = cli("audit", "--object", "flavor/spot", "-o", "json")
    entries = json.loads(history.stdout)["entries"]  # newest first
    assert [len(e["after"]["tolerations"]) for e in entries] == [0, 1, 2]
    assert entries[0]["actor"].startswith("os:")


def test_editing_an_unknown_flavor_suggests_the_nearest(cli: Invoke, applied: Path) -> None:
    r = cli("flavor", "edit", "h10", "--toleration", "spot")
    assert r.exit_code == 1, r.output
    assert "'h100'" in r.output
    no_traceback(r)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--toleration", "spot:"), "--toleration 'spot:': expected KEY=VALUE[:EFFECT]"),
        (("--toleration", "=x"), "--toleration '=x': KEY=VALUE needs a key"),
        (("--toleration", "spot:Later"), "--toleration 'spot:Later': effect: expected one of"),
        (("--toleration", "spot", "--clear-tolerations"), "cannot be combined"),
    ],
    ids=["empty-effect", "no-key", "bad-effect", "set-and-clear"],
)
def test_bad_tolerations_exit_2_and_write_nothing(
    cli: Invoke, applied: Path, flags: tuple[str, ...], words: str
) -> None:
    before = cli("audit", "-o", "json").stdout
    r = cli("flavor", "edit", "h100", *flags)
    assert r.exit_code == 2, r.output
    assert words in r.output, r.output
    no_traceback(r)
    assert flavor_doc(cli, "h100")["tolerations"] == []
    assert cli("audit", "-o", "json").stdout == before


def test_apply_sets_tolerations_idempotently_and_refuses_bad_ones(
    cli: Invoke, applied: Path, tmp_path: Path
) -> None:
    tolerant = tmp_path / "tolerant.yaml"
    tolerant.write_text(
        QUEUES.replace(
            "  - name: a100\n    node_labels: {gpu: a100}\n",
            "  - name: a100\n    node_labels: {gpu: a100}\n    tolerations:\n"
            "      - {key: spot, operator: Equal, value: 'true', effect: NoSchedule}\n"
            "      - {key: nvidia.com/gpu, operator: Exists}\n",
        )
    )
    r = cli("apply", "-f", str(tolerant), "-o", "json")
    assert r.exit_code == 0, r.output
    (change,) = json.loads(r.stdout)["changes"]
    assert (change["kind"], change["name"], change["action"]) == (
        "ResourceFlavor",
        "a100",
        "update",
    )
    assert flavor_doc(cli, "a100")["tolerations"] == [SPOT, GPU_EXISTS]
    again = cli("apply", "-f", str(tolerant), "-o", "json")
    assert json.loads(again.stdout)["changes"] == []  # idempotent
    for bad, path in (
        ("operator: Exists}", "operator: Maybe}"),
        ("effect: NoSchedule}", "effect: Sometimes}"),
        (
            "{key: nvidia.com/gpu, operator: Exists}",
            "{key: nvidia.com/gpu, operator: Exists, value: x}",
        ),
    ):
        broken = tmp_path / "broken.yaml"
        broken.write_text(tolerant.read_text().replace(bad, path))
        r = cli("apply", "-f", str(broken))
        assert r.exit_code == 2, r.output
        assert "flavors[1].tolerations[" in r.output, r.output
        no_traceback(r)
    assert flavor_doc(cli, "a100")["tolerations"] == [SPOT, GPU_EXISTS]  # nothing written
