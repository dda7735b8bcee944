"""`bench/scenarios/fair-sharing.yaml` end to end: fair sharing converges without waste."""

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


def test_fair_sharing_evens_out_the_borrowers_by_turnover_without_evicting_old_runs(
    tmp_path: Path,
) -> None:
    events, summary = replay("fair-sharing.yaml", tmp_path)
    evicted = [e for e in events if e["event"] == "evicted"]
    # team-b's first job is within its nominal quota: it reclaims at once, taking team-a's
    # most recently admitted borrower. The next three borrow: team-a's runs were all
    # admitted before they waited, so fair sharing evicts none of them.
    assert [(e["t"], e["workload"]) for e in evicted] == [(600.0, "team-a/tune-2")]
    assert "InCohortReclamation" in evicted[0]["reason"]
    # As team-a's short jobs end, team-b (the lower share) gets the freed GPUs first ...
    admitted = {e["workload"]: e["t"] for e in events if e["event"] == "admitted"}
    assert admitted["team-b/train-1"] == 3603.0 and admitted["team-b/train-2"] == 3604.0
    # ... until both hold equal weighted shares: 8 nominal + 16 borrowed each.
    assert _held_gpus(events, until=3604.0) == {"team-a": 24, "team-b": 24}
    # Then team-b's fourth job waits for team-b's own to end, and team-a's requeued job
    # comes back on freed GPUs; nothing is evicted again.
    assert admitted["team-b/train-3"] == 7800.0
    assert admitted["team-a/tune-2"] > 7800.0
    assert summary["evictions"] == 1
    assert summary["finished"] == summary["workloads"] == 10
    assert summary["invariant_violations"] == 0
