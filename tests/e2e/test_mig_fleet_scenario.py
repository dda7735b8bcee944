"""`bench/scenarios/mig-fleet.yaml` and its unweighted twin through `queuemgr simulate`:
with resource weights, inference's borrowed MIG slices count as the GPU of compute they
are, and research's idle GPUs are split; without them training takes every one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from queuemgr.core.resources import ResourceName
from queuemgr.spec.scenario import load_scenario
from tests.e2e.scenarios import SCENARIOS, replay

WEIGHTED, TWIN = "mig-fleet.yaml", "mig-fleet-unweighted.yaml"
SLICE = ResourceName("nvidia.com/mig-1g.10gb")


def test_the_twin_differs_only_by_the_weights() -> None:
    weighted = load_scenario(SCENARIOS / WEIGHTED)
    twin = load_scenario(SCENARIOS / TWIN)
    assert all(
        [(w.resource, w.numerator, w.denominator, w.counts_as) for w in q.resource_weights]
        == [(SLICE, 1, 7, "nvidia.com/gpu")]
        for q in weighted.config.cluster_queues.values()
    )
    stripped = {
        name: dataclasses.replace(q, resource_weights=())
        for name, q in weighted.config.cluster_queues.items()
    }
    assert stripped == twin.config.cluster_queues
    assert weighted.config.nodes == twin.config.nodes
    assert weighted.config.flavors == twin.config.flavors
    assert weighted.config.cohorts == twin.config.cohorts
    assert weighted.workloads == twin.workloads
    assert weighted.policy == twin.policy


def _gpus_held_at(events: list[dict[str, Any]], t: float) -> dict[str, int]:
    """GPUs (not slices) each queue holds just after the cycle at ``t``."""
    size = {"embed": 1, "finetune": 2}
    held: dict[str, int] = {}
    for e in events:
        if e["t"] > t:
            break
        group = e["workload"].split("/")[1].rsplit("-", 1)[0]
        if group not in size:
            continue
        step = {"admitted": 1, "finished": -1, "evicted": -1}.get(e["event"], 0)
        held[e["cluster_queue"]] = held.get(e["cluster_queue"], 0) + step * size[group]
    return held


def _mean_wait(events: list[dict[str, Any]], group: str) -> float:
    submitted = {e["workload"]: e["t"] for e in events if e["event"] == "submitted"}
    waits = [
        e["t"] - submitted[e["workload"]]
        for e in events
        if e["event"] == "admitted" and f"/{group}-" in e["workload"]
    ]
    return sum(waits) / len(waits)


@pytest.mark.parametrize(
    ("name", "inference", "training", "embed_wait", "finetune_wait"),
    [
        pytest.param(WEIGHTED, 12, 20, 4320, 4800, id="weighted"),
        pytest.param(TWIN, 8, 24, 7200, 3600, id="unweighted"),
    ],
)
def test_research_idle_gpus_go_by_compute_only_with_the_weights(
    tmp_path: Path,
    name: str,
    inference: int,
    training: int,
    embed_wait: float,
    finetune_wait: float,
) -> None:
    events, summary = replay(name, tmp_path)
    assert summary["invariant_violations"] == 0
    assert summary["finished"] == summary["workloads"] == 92
    assert summary["evictions"] == 0
    # research lends its 8 GPUs: split 4/4 with the weights, all to training without.
    assert _gpus_held_at(events, 1800) == {"inference": inference, "training": training}
    assert _mean_wait(events, "embed") == embed_wait
    assert _mean_wait(events, "finetune") == finetune_wait
    # Slices are quota of their own in both: inference's 24 replicas start at once.
    assert _mean_wait(events, "replica") == 0
