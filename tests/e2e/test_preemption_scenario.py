"""`bench/scenarios/reclaim.yaml` end to end: lent quota is reclaimed by preemption."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.scenarios import replay


def test_reclaim_evicts_only_borrowers_and_loses_nothing(tmp_path: Path) -> None:
    events, summary = replay("reclaim.yaml", tmp_path)
    train = next(e for e in events if e["workload"] == "team-a/train" and e["event"] == "admitted")
    # team-a's own quota comes back at once, not when team-b's 10-hour jobs end.
    assert train["t"] == 600.0
    assert train["borrowing"] is False
    # Only the jobs team-b runs on borrowed quota are taken; its nominal share is safe.
    assert sorted(train["victims"]) == ["team-b/sweep-2", "team-b/sweep-3"]
    evicted = [e for e in events if e["event"] == "evicted" and e["t"] == 600.0]
    assert {e["workload"] for e in evicted} == set(train["victims"])
    assert all(e["preemptor"] == "team-a/train" for e in evicted)
    assert all("InCohortReclamation" in e["reason"] for e in evicted)
    # Within the queue, priority decides: urgent evicts train.
    urgent = next(
        e for e in events if e["workload"] == "team-a/urgent" and e["event"] == "admitted"
    )
    assert urgent["victims"] == ["team-a/train"]
    # Every victim was requeued and finished in the end; nothing was lost.
    assert summary["finished"] == summary["workloads"] == 6
    assert summary["evictions"] == sum(e["event"] == "evicted" for e in events)
    assert summary["invariant_violations"] == 0
