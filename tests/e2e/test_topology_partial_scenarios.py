"""`bench/scenarios/topology-packing.yaml` and `partial-admission.yaml` through `simulate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from queuemgr.cli.main import main

SCENARIOS = Path(__file__).resolve().parents[2] / "bench" / "scenarios"
TOPOLOGY = SCENARIOS / "topology-packing.yaml"
PARTIAL = SCENARIOS / "partial-admission.yaml"


def simulate(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    args = ["simulate", str(path), "--events", "-", "--summary", "/dev/null"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    summary = CliRunner().invoke(main, ["simulate", str(path), "--summary", "-"])
    assert summary.exit_code == 0, summary.stderr
    return events, json.loads(summary.stdout)


def admitted(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["workload"]: e for e in events if e["event"] == "admitted"}


def racks_of(event: dict[str, Any]) -> set[str]:
    return {node.split("-")[0] for node in event["placement"]}


# -- topology packing -------------------------------------------------------------


def test_best_fit_packing_keeps_a_whole_rack_for_the_big_gang() -> None:
    events, summary = simulate(TOPOLOGY)
    assert summary["invariant_violations"] == 0
    got = admitted(events)
    # Each gang in one rack, the smallest that holds it.
    assert {w: racks_of(e) for w, e in got.items()} == {
        "team/eval": {"d"},
        "team/finetune": {"c"},
        "team/sft": {"b"},
        "team/pretrain": {"a"},
    }
    # So the 32-GPU gang finds rack a whole and starts the moment it arrives.
    assert got["team/pretrain"]["t"] == 120.0


def test_spreading_the_small_gangs_makes_the_big_gang_wait(tmp_path: Path) -> None:
    raw = yaml.safe_load(TOPOLOGY.read_text())
    for w in raw["workloads"]:
        if w["name"] != "pretrain":
            for ps in w["pod_sets"]:
                del ps["topology"]
    spread = tmp_path / "spread.yaml"
    spread.write_text(yaml.safe_dump(raw))
    events, summary = simulate(spread)
    assert summary["invariant_violations"] == 0
    got = admitted(events)
    # Without topology the small gangs fill nodes by name: they land in rack a.
    assert "a" in racks_of(got["team/finetune"]) and "a" in racks_of(got["team/sft"])
    # No rack is whole at t=120; the gang waits until the last of them leaves rack a.
    assert got["team/pretrain"]["t"] == 3660.0
    assert racks_of(got["team/pretrain"]) == {"a"}


# -- partial admission --------------------------------------------------------------


def test_the_sweep_starts_with_the_workers_that_fit() -> None:
    events, summary = simulate(PARTIAL)
    assert summary["invariant_violations"] == 0
    got = admitted(events)
    sweep = got["team/sweep"]
    assert sweep["t"] == 60.0
    assert sweep["pods"] == {"workers": 2}  # 16 of 32 GPUs of quota were left
    assert sum(sweep["placement"].values()) == 2
    assert "pods" not in got["team/pretrain"]  # admitted whole


def test_never_below_min_count_and_only_admitted_pods_are_charged() -> None:
    events, summary = simulate(PARTIAL)
    got = admitted(events)
    ev = got["team/eval"]
    # min_count 2 did not fit while the sweep ran (t=60 .. 1860); then 2 of 3 workers.
    assert ev["t"] == 1860.0
    assert ev["pods"] == {"workers": 2}
    # GPU-seconds count the pods that ran: 16 x 3600 + 16 x 1800 + 16 x 600.
    assert summary["cluster_queues"]["team"]["gpu_seconds"] == 96000.0
