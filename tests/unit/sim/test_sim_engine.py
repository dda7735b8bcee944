"""The engine drives the core scheduler: borrowing, gangs, finishes, --until, invariants."""

from __future__ import annotations

import functools
import gc
import pickle
from pathlib import Path
from typing import Any

import pytest

from queuemgr.core.snapshot import Config
from queuemgr.sim.engine import Engine, Event
from queuemgr.sim.report import summarize
from queuemgr.spec.scenario import load_scenario, parse_scenario


def workload(name: str, ns: str, *, at: float, runtime: float, gpus: int, count: int = 1) -> Any:
    return {
        "name": name,
        "namespace": ns,
        "queue": "default",
        "submit_at": at,
        "runtime": runtime,
        "pod_sets": [{"name": "w", "count": count, "requests": {"nvidia.com/gpu": gpus}}],
    }


def cohort_scenario(workloads: list[Any]) -> dict[str, Any]:
    """Two queues of 8 GPUs each share one cohort over two 8-GPU nodes."""
    return {
        "flavors": [{"name": "gpu"}],
        "nodes": [{"name": "n", "count": 2, "flavor": "gpu", "allocatable": {"nvidia.com/gpu": 8}}],
        "cohorts": [{"name": "c"}],
        "cluster_queues": [
            {
                "name": q,
                "cohort": "c",
                "resources": [{"flavor": "gpu", "nominal": {"nvidia.com/gpu": 8}}],
            }
            for q in ("a", "b")
        ],
        "local_queues": [
            {"namespace": q, "name": "default", "cluster_queue": q} for q in ("a", "b")
        ],
        "workloads": workloads,
    }


def run(raw: dict[str, Any], until: float | None = None) -> tuple[list[Event], dict[str, Any]]:
    scenario = parse_scenario(raw)
    events: list[Event] = []
    engine = Engine(scenario.config, scenario.workloads, emit=events.append, policy=scenario.policy)
    result = engine.run(until=until)
    return events, summarize(result, scenario.config)


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["event"] == kind]


def test_idle_quota_is_borrowed_and_a_gang_is_admitted_whole() -> None:
    events, summary = run(
        cohort_scenario([workload("big", "a", at=0, runtime=100, gpus=8, count=2)])
    )
    (admitted,) = of(events, "admitted")
    assert admitted["workload"] == "a/big" and admitted["borrowing"] is True
    assert admitted["placement"] == {"n-0": 1, "n-1": 1}
    assert summary["cluster_queues"]["a"]["borrowed_gpu_seconds"] == 1600
    assert summary["invariant_violations"] == 0


def test_finishes_free_capacity_for_queued_work() -> None:
    events, summary = run(
        cohort_scenario(
            [
                workload("first", "a", at=0, runtime=100, gpus=8, count=2),
                workload("second", "b", at=10, runtime=50, gpus=8),
            ]
        )
    )
    kinds = [(e["t"], e["event"], e["workload"]) for e in events]
    assert kinds == [
        (0, "submitted", "a/first"),
        (0, "admitted", "a/first"),
        (10, "submitted", "b/second"),
        (100, "finished", "a/first"),
        (100, "admitted", "b/second"),
        (150, "finished", "b/second"),
    ]
    assert summary["cluster_queues"]["b"]["wait_max_s"] == 90
    assert summary["makespan_s"] == 150
    assert summary["gpu_utilization"] == (1600 + 400) / (16 * 150)
    assert summary["finished"] == 2 and summary["pending_at_end"] == 0
    assert summary["invariant_violations"] == 0


def test_inadmissible_is_reported_once_and_counted_pending() -> None:
    events, summary = run(
        cohort_scenario(
            [
                workload("huge", "a", at=0, runtime=10, gpus=8, count=3),
                workload("small", "a", at=5, runtime=10, gpus=1),
            ]
        )
    )
    (bad,) = of(events, "inadmissible")
    assert bad["workload"] == "a/huge" and "nvidia.com/gpu" in str(bad["reason"])
    assert summary["inadmissible"] == 1 and summary["pending_at_end"] == 1


def test_until_stops_early_and_counts_what_is_left() -> None:
    events, summary = run(
        cohort_scenario(
            [
                workload("long", "a", at=0, runtime=1000, gpus=8, count=2),
                workload("waits", "b", at=10, runtime=10, gpus=8),
                workload("later", "b", at=500, runtime=10, gpus=1),
            ]
        ),
        until=100,
    )
    assert max(float(e["t"]) for e in events) <= 100  # type: ignore[arg-type]
    assert summary["running_at_end"] == 1
    assert summary["pending_at_end"] == 1
    assert summary["not_submitted"] == 1
    assert summary["end_time_s"] == 100
    assert summary["invariant_violations"] == 0


@pytest.mark.parametrize(
    ("overrun", "end", "reason"),
    [
        pytest.param("evict", 40, "MaxRuntimeExceeded", id="evict-stops-at-the-limit"),
        pytest.param("extend", 100, None, id="extend-runs-to-the-end"),
    ],
)
def test_overrun_policy(overrun: str, end: float, reason: str | None) -> None:
    raw = cohort_scenario([workload("capped", "a", at=0, runtime=100, gpus=1)])
    raw["workloads"][0]["max_runtime"] = 40
    raw["scheduler"] = {"overrun_policy": overrun}
    events, _ = run(raw)
    (done,) = of(events, "finished")
    assert done["t"] == end and done["reason"] == reason


def test_same_timestamp_finishes_before_arrivals() -> None:
    events, _ = run(
        cohort_scenario(
            [
                workload("first", "a", at=0, runtime=10, gpus=8, count=2),
                workload("next", "b", at=10, runtime=10, gpus=8, count=2),
            ]
        )
    )
    at_ten = [(e["event"], e["workload"]) for e in events if e["t"] == 10]
    assert at_ten == [
        ("finished", "a/first"),
        ("submitted", "b/next"),
        ("admitted", "b/next"),
    ]


@pytest.mark.parametrize(
    "name", ["reclaim", "fair-sharing", "usage-ordering", "gang-starvation"], ids=str
)
def test_a_run_cut_into_pieces_and_pickled_between_them_decides_as_one_run(name: str) -> None:
    """What bench/policy_replay.py --checkpoint relies on to spread a replay over sittings."""
    scenario = load_scenario(Path(__file__).parents[3] / "bench" / "scenarios" / f"{name}.yaml")

    def engine(events: list[Event]) -> Engine:
        return Engine(
            scenario.config, scenario.workloads, emit=events.append, policy=scenario.policy
        )

    whole: list[Event] = []
    expected = summarize(engine(whole).run(), scenario.config)
    times = sorted({float(e["t"]) for e in whole})  # type: ignore[arg-type]
    cuts = [times[len(times) * k // 6] for k in range(1, 6)]
    pieces: list[Event] = []
    current = engine(pieces)
    for i, cut in enumerate(cuts):
        current.run(until=cut)
        current.emit = None  # a bound method of the caller's sink; set again after loading
        current = pickle.loads(pickle.dumps(current))
        current.emit = pieces.append
        if i % 2:
            # bench/what_if.py drops what a Config derives from a state saved by other
            # code; derived again, it must decide the same.
            for obj in gc.get_objects():
                if isinstance(obj, Config):
                    for attr, v in vars(Config).items():
                        if isinstance(v, functools.cached_property):
                            obj.__dict__.pop(attr, None)
    got = summarize(current.run(), scenario.config)
    assert len(cuts) == 5 and any(e["event"] == "evicted" for e in whole) == (
        name in ("reclaim", "fair-sharing")
    )
    assert pieces == whole
    # Each piece ends with a check of the whole state; time and memory are the machine's.
    apart = {"wall_time_s", "peak_memory_mib", "invariant_checks"}
    assert {k: v for k, v in got.items() if k not in apart} == {
        k: v for k, v in expected.items() if k not in apart
    }
