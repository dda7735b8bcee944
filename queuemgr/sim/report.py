"""Turn a simulation into its outputs: JSON-lines events, a JSON summary, a table.

Why it exists: the engine counts; this module defines what the numbers mean
(the schemas in ``docs/simulate.md``), so that scripts comparing runs can
rely on them.

What must stay true: the summary keys documented in ``docs/simulate.md`` are
always present (``null`` when undefined, never missing); percentiles use the
nearest-rank method; GPU-seconds count finished runs only, so every counted
second lies inside the makespan window and utilisation is <= 1; the seconds
of preempted runs are lost, reported apart and never counted as delivered.
"""

from __future__ import annotations

import json
import math
import resource
import sys
from collections.abc import Mapping, Sequence
from typing import IO

from rich.console import Console
from rich.table import Table

from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import Config
from queuemgr.sim.engine import Event, SimResult


class EventWriter:
    """Writes one JSON object per line; ``victims`` is reserved for preemption."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.count = 0

    def __call__(self, event: Event) -> None:
        if event["event"] == "evicted":
            event.setdefault("victims", [])
        self.out.write(json.dumps(event, separators=(",", ":")))
        self.out.write("\n")
        self.count += 1


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def peak_memory_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def nominal_gpus(config: Config) -> dict[str, int]:
    return {
        name: sum(fq.nominal.get(GPU, 0) for fq in cq.flavors)
        for name, cq in config.cluster_queues.items()
    }


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2); None if undefined (no x, all zero)."""
    squares = math.fsum(v * v for v in values)
    if not values or squares == 0:
        return None
    return math.fsum(values) ** 2 / (len(values) * squares)


def summarize(
    result: SimResult,
    config: Config,
    *,
    tenants_assigned: Mapping[str, object] | None = None,
    unmatched_tenants: Mapping[str, int] | None = None,
) -> dict[str, object]:
    makespan = 0.0
    if result.first_submit is not None and result.last_finish is not None:
        makespan = result.last_finish - result.first_submit
    capacity = sum(n.allocatable.get(GPU, 0) for n in config.nodes.values() if n.schedulable)
    used = math.fsum(q.gpu_seconds for q in result.queues.values())
    lost = math.fsum(q.lost_gpu_seconds for q in result.queues.values())
    nominal = nominal_gpus(config)
    queues: dict[str, object] = {}
    for name, q in result.queues.items():
        waits = sorted(q.waits)
        queues[name] = {
            "admitted": q.admitted,
            "wait_p50_s": percentile(waits, 50),
            "wait_p95_s": percentile(waits, 95),
            "wait_max_s": waits[-1] if waits else None,
            "gpu_seconds": q.gpu_seconds,
            "borrowed_gpu_seconds": q.borrowed_gpu_seconds,
            "lost_gpu_seconds": q.lost_gpu_seconds,
        }
    shares = [q.gpu_seconds / nominal[n] for n, q in result.queues.items() if nominal.get(n, 0) > 0]
    summary: dict[str, object] = {
        "workloads": result.workloads,
        "admitted": result.admitted,
        "finished": result.finished,
        "inadmissible": result.inadmissible,
        "evictions": result.evictions,
        "preemptions": result.evictions,
        "wasted_preemptions": result.wasted_preemptions,
        "max_preemptions_per_workload": result.max_preemptions_per_workload,
        "lost_gpu_seconds": lost,
        "lost_gpu_share": lost / used if used > 0 else None,
        "lost_gpu_seconds_by_reason": dict(result.lost_by_reason),
        "pending_at_end": result.pending_at_end,
        "running_at_end": result.running_at_end,
        "not_submitted": result.not_submitted,
        "cycles": result.cycles,
        "end_time_s": result.end_time,
        "makespan_s": makespan,
        "gpu_utilization": used / (capacity * makespan) if capacity and makespan > 0 else None,
        "jain_fairness": jain_index(shares),
        "invariant_violations": len(result.invariant_violations),
        "invariant_checks": result.invariant_checks,
        "cluster_queues": queues,
        "wall_time_s": round(result.wall_time_s, 3),
        "peak_memory_mib": round(peak_memory_mib(), 1),
    }
    if tenants_assigned is not None:
        summary["tenants_assigned"] = dict(tenants_assigned)
    if unmatched_tenants:
        summary["unmatched_tenants"] = dict(sorted(unmatched_tenants.items()))
    return summary


def print_table(summary: Mapping[str, object], out: IO[str]) -> None:
    """A short human summary: one row per ClusterQueue, then the totals."""
    console = Console(file=out, highlight=False, soft_wrap=True)
    table = Table(title="queuemgr simulate")
    for col in ("ClusterQueue", "admitted", "wait p50 s", "wait p95 s", "wait max s"):
        table.add_column(col, justify="left" if col == "ClusterQueue" else "right")
    table.add_column("GPU-hours", justify="right")
    table.add_column("borrowed GPU-h", justify="right")
    queues = summary["cluster_queues"]
    assert isinstance(queues, Mapping)
    for name, q in queues.items():
        table.add_row(
            str(name),
            str(q["admitted"]),
            _num(q["wait_p50_s"]),
            _num(q["wait_p95_s"]),
            _num(q["wait_max_s"]),
            _num(q["gpu_seconds"] / 3600),
            _num(q["borrowed_gpu_seconds"] / 3600),
        )
    console.print(table)
    keys = (
        "workloads", "admitted", "finished", "inadmissible", "pending_at_end", "running_at_end",
        "not_submitted", "makespan_s", "gpu_utilization", "jain_fairness", "preemptions",
        "wasted_preemptions", "max_preemptions_per_workload", "lost_gpu_share",
        "invariant_violations", "wall_time_s", "peak_memory_mib",
    )  # fmt: skip
    console.print("  ".join(f"{k}={_num(summary.get(k))}" for k in keys))


def _num(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)
