"""`bench/scenarios/fair-sharing.yaml` end to end: fair-sharing preemption converges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.scenarios import replay


def _held_gpus(events: list[dict[str, Any]], until: float) -> dict[str, int]:
    """8-GPU jobs running per ClusterQueue after the events up to ``until``, in GPUs."""
    running: dict[str, str] = {}
    for e in events:
        if e["t"] > until:
            break
        if e["event"] == "admitted":
            running[e["workload"]] = e["cluster_queue"]
        elif e["event"] in ("evicted", "finished"):
            running.pop(e["workload"], None)
    out: dict[str, int] = {}
    for cq in running.values():
        out[cq] = out.get(cq, 0) + 8
    return out


def test_fair_sharing_evens_out_the_borrowers_then_stops(tmp_path: Path) -> None:
    events, summary = replay("fair-sharing.yaml", tmp_path)
    evicted = [e for e in events if e["event"] == "evicted"]
    # team-b's first job is within its nominal quota (reclaim); the next two borrow, and
    # fair sharing takes team-a's most recently admitted borrowed jobs for them.
    assert [(e["t"], e["workload"]) for e in evicted] == [
        (600.0, "team-a/sweep-5"),
        (601.0, "team-a/sweep-4"),
        (602.0, "team-a/sweep-3"),
    ]
    assert "InCohortReclamation" in evicted[0]["reason"]
    assert all("InCohortFairSharing" in e["reason"] for e in evicted[1:])
    # Converged: equal weights, equal GPUs (8 nominal + 16 borrowed each) ...
    assert _held_gpus(events, until=602.0) == {"team-a": 24, "team-b": 24}
    # ... and no eviction ever after: team-b's fourth job waits for its own to end rather
    # than take more, and team-a's requeued jobs come back on freed GPUs, evicting nothing.
    train3 = next(
        e for e in events if e["workload"] == "team-b/train-3" and e["event"] == "admitted"
    )
    assert train3["t"] == 7800.0 and not train3.get("victims")
    back = [e for e in events if e["event"] == "admitted" and e["t"] > 602.0]
    assert {e["workload"] for e in back} >= {"team-a/sweep-3", "team-a/sweep-4", "team-a/sweep-5"}
    assert all(not e.get("victims") for e in back)
    assert summary["evictions"] == 3
    assert summary["finished"] == summary["workloads"] == 10
    assert summary["invariant_violations"] == 0
