"""Resource weights through the command line and apply: set, shown, cleared, refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.conftest import QUEUES, Invoke, no_traceback

pytestmark = pytest.mark.integration

MIG = "nvidia.com/mig-1g.10gb"


def _weights(cli: Invoke, name: str) -> list[dict[str, object]]:
    shown = cli("cq", "describe", name, "-o", "json")
    assert shown.exit_code == 0, shown.output
    weights: list[dict[str, object]] = json.loads(shown.stdout)["resource_weights"]
    return weights


def test_cq_create_edit_describe_and_clear(cli: Invoke, applied: Path) -> None:
    create = (
        "cq",
        "create",
        "team-c",
        "--cohort",
        "research",
        "--nominal",
        "h100:nvidia.com/gpu=8",
    )
    r = cli(*create, "--resource-weight", f"{MIG}=1/7")
    assert r.exit_code == 0, r.output
    assert _weights(cli, "team-c") == [
        {"resource": MIG, "numerator": 1, "denominator": 7, "counts_as": "nvidia.com/gpu"}
    ]
    assert f"{MIG} = 1/7 nvidia.com/gpu" in cli("cq", "describe", "team-c").stdout
    # Another flag keeps them; new ones replace them all, a target named explicitly.
    assert cli("cq", "edit", "team-c", "--weight", "2").exit_code == 0
    assert len(_weights(cli, "team-c")) == 1
    r = cli(
        "cq",
        "edit",
        "team-c",
        "--resource-weight",
        "nvidia.com/gpu.shared=1/4:nvidia.com/gpu",
        "--resource-weight",
        f"{MIG}=2/14",
    )
    assert r.exit_code == 0, r.output
    assert [(w["resource"], w["numerator"], w["denominator"]) for w in _weights(cli, "team-c")] == [
        ("nvidia.com/gpu.shared", 1, 4),
        (MIG, 2, 14),  # kept as written
    ]
    assert cli("cq", "edit", "team-c", "--clear-resource-weights").exit_code == 0
    assert _weights(cli, "team-c") == []
    assert "Resource weights" in cli("cq", "describe", "team-c").stdout
    history = cli("audit", "--object", "clusterqueue/team-c", "-o", "json")
    afters = [len(e["after"]["resource_weights"]) for e in json.loads(history.stdout)["entries"]]
    assert afters == [0, 2, 1, 1]  # newest first


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--resource-weight", f"{MIG}"), "expected RES=N/D or RES=N/D:TARGET"),
        (("--resource-weight", f"{MIG}=0/7"), f"'{MIG}=0/7': expected N/D with positive integers"),
        (("--resource-weight", f"{MIG}=1/0"), "expected N/D with positive integers"),
        (("--resource-weight", f"{MIG}=0.25"), "got '0.25'"),
        (("--resource-weight", f"{MIG}=-1/7"), "got '-1/7'"),
        (("--resource-weight", "bad name=1/7"), "bad resource name 'bad name'"),
        (("--resource-weight", f"{MIG}=1/7:"), "expected RES=N/D or RES=N/D:TARGET"),
        (("--resource-weight", "nvidia.com/gpu=1/2"), "nvidia.com/gpu cannot count as itself"),
        (
            ("--resource-weight", f"{MIG}=1/7", "--resource-weight", f"{MIG}=1/8"),
            f"--resource-weight '{MIG}=1/8': {MIG} is weighted twice",
        ),
        (
            ("--resource-weight", f"{MIG}=1/3:x.io/y", "--resource-weight", "x.io/y=1/2"),
            "which is itself weighted",
        ),
        (
            ("--resource-weight", f"{MIG}=1/7", "--clear-resource-weights"),
            "cannot be combined with --clear-resource-weights",
        ),
    ],
    ids=[
        "no-weight",
        "zero",
        "zero-denominator",
        "decimal",
        "negative",
        "bad-resource",
        "empty-target",
        "itself",
        "twice",
        "chain",
        "set-and-clear",
    ],
)
def test_bad_weights_exit_2_naming_the_flag_and_value(
    cli: Invoke, applied: Path, flags: tuple[str, ...], words: str
) -> None:
    r = cli("cq", "edit", "team-a", *flags)
    assert r.exit_code == 2, r.output
    assert "--resource-weight" in r.output and words in r.output, r.output
    no_traceback(r)
    assert _weights(cli, "team-a") == []  # nothing written


def test_apply_sets_weights_audits_them_and_refuses_bad_ones(
    cli: Invoke, applied: Path, tmp_path: Path
) -> None:
    weighted = tmp_path / "weighted.yaml"
    weighted.write_text(
        QUEUES.replace(
            "  - name: team-b\n    cohort: research\n",
            "  - name: team-b\n    cohort: research\n    resource_weights:\n"
            f"      - {{resource: {MIG}, weight: 1/7}}\n"
            "      - {resource: nvidia.com/gpu.shared, weight: 1/4, counts_as: nvidia.com/gpu}\n",
        )
    )
    r = cli("apply", "-f", str(weighted), "-o", "json")
    assert r.exit_code == 0, r.output
    (change,) = json.loads(r.stdout)["changes"]
    fields = change["fields"]  # flattened paths, as the diff names them
    assert fields["resource_weights"] == {"before": [], "after": None}
    assert fields["resource_weights[0].denominator"] == {"before": None, "after": 7}
    assert fields["resource_weights[1].resource"]["after"] == "nvidia.com/gpu.shared"
    again = cli("apply", "-f", str(weighted), "-o", "json")
    assert json.loads(again.stdout)["changes"] == []  # idempotent
    for bad, words in (
        ("weight: 1/7}", "weight: 0}"),
        ("weight: 1/7}", "weight: 0.5}"),
        (
            "weight: 1/4, counts_as: nvidia.com/gpu}",
            "weight: 1/4, counts_as: nvidia.com/gpu.shared}",
        ),
    ):
        broken = tmp_path / "broken.yaml"
        broken.write_text(weighted.read_text().replace(bad, words))
        r = cli("apply", "-f", str(broken))
        assert r.exit_code == 2, r.output
        assert "cluster_queues[1].resource_weights[" in r.output, r.output
        no_traceback(r)
