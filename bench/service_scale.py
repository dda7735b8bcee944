"""The service at 100,000 pending workloads: peak memory and the time of one cycle.

Why it exists: the issue asks for the service's memory (peak RSS) at 100,000
pending workloads and the time one cycle takes at that size. A separate
process first writes the backlog (100 ClusterQueues in cohorts of 10, 1,000
nodes of 8 GPUs; 70 % 1-GPU jobs, 30 % gangs of 1 to 8 pods of 8 GPUs, all
running for an hour), so this process's memory is the service's. Then the
real service starts here (simulated backend) and:

- its first cycle is the cold one: it reads all 100,000 rows, admits what
  fits (about 2,500) and writes every other workload's first pending reason;
- each later cycle is woken by one more submission (1 s apart): the steady
  state of a service with a 100,000-workload backlog.

Every cycle is split into its phases from the loop's CycleReport (wall
milliseconds), with the CPU time of the loop's thread.

    python bench/service_scale.py                 # 100,000 pending, 7 steady cycles
    python bench/service_scale.py --pending 10000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from servicebench import (
    PHASES,
    best_median,
    bulk_submit,
    count_states,
    current_rss_mib,
    gpu_cluster,
    gpu_job,
    load_average,
    peak_rss_mib,
    scratch_database,
    server_description,
    start_service,
    wait_until,
)

from queuemgr.store.database import create_engine

QUEUES, NODES = 100, 1_000


def fill(url: str, pending: int, out: Any) -> None:
    """In a child process: write the backlog in transactions of 10,000."""
    rng = random.Random(1)
    engine = create_engine(url)
    start = time.time() - pending * 1e-3
    for first in range(0, pending, 10_000):
        ws = []
        for i in range(first, min(pending, first + 10_000)):
            gpus, pods = (1, 1) if rng.random() < 0.7 else (8, rng.choice((1, 2, 4, 8)))
            ws.append(
                gpu_job(
                    f"ns-{rng.randrange(QUEUES):04d}",
                    f"w{i}",
                    gpus=gpus,
                    pods=pods,
                    runtime=3600.0,
                    created_at=start + i * 1e-3,
                    priority=rng.choice((0, 0, 0, 100)),
                )
            )
        with engine.begin() as conn:
            bulk_submit(conn, ws, notify=False)
    engine.dispose()
    out.put(pending)


def phase_line(label: str, report: Any, fallback: float) -> tuple[str, float]:
    """One table row (milliseconds) and the cycle's total wall seconds."""
    phases = getattr(report, "phases", None) or {}
    cpu = sum((getattr(report, "cpu", None) or {}).values())
    total = sum(phases.values()) or fallback
    ph = "".join(f"{phases.get(p, 0.0) * 1000:>10.0f}" for p in PHASES)
    return f"{label:<24}{total * 1000:>10.0f}{ph}{cpu * 1000:>10.0f}", total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--steady", type=int, default=7, help="steady-state cycles to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, scratch_database("scale") as url:
        print(server_description(url), f"| load average before: {load_average()}")
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(yaml.safe_dump(gpu_cluster(queues=QUEUES, nodes=NODES)))
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(target=fill, args=(url, args.pending, out))
        child.start()
        out.get()
        child.join()
        engine = create_engine(url)
        rss_before = current_rss_mib()
        started = time.monotonic()
        service, log = start_service(url, cluster, first_cycle_timeout=1800)
        try:
            cold = time.monotonic() - started
            first = log.reports[0]
            time.sleep(1.0)
            states = count_states(engine)
            steady = []
            for i in range(args.steady):
                n = len(log.reports)
                with engine.begin() as conn:
                    bulk_submit(
                        conn,
                        [
                            gpu_job(
                                "ns-0000",
                                f"late-{i}",
                                gpus=1,
                                runtime=3600.0,
                                created_at=time.time(),
                            )
                        ],
                    )
                wait_until(lambda n=n: len(log.reports) > n, 600, "a cycle")
                steady.append(log.reports[n])
                time.sleep(1.0)
            peak = peak_rss_mib()
            rss_now = current_rss_mib()
        finally:
            service.stop()
            engine.dispose()
    print(
        f"{args.pending} pending, {QUEUES} ClusterQueues, {NODES} nodes; after the first "
        f"cycle: {states}"
    )
    print(
        f"{'cycle':<24}{'total ms':>10}" + "".join(f"{p:>10}" for p in PHASES) + f"{'loop cpu':>10}"
    )
    line, _ = phase_line(f"first (cold), {len(first.admitted)} adm.", first, cold)
    print(line)
    totals = []
    for r in steady:
        line, total = phase_line(f"steady, {len(r.admitted)} admitted", r, 0.0)
        totals.append(total)
        print(line)
    if any(totals):
        best, median = best_median(totals)
        print(f"steady cycle: best {best * 1000:.0f} ms, median {median * 1000:.0f} ms")
    print(f"service start to first cycle done: {cold:.1f} s")
    print(
        f"RSS: {rss_before:.0f} MiB before the service started, {rss_now:.0f} MiB at the end, "
        f"peak {peak:.0f} MiB | load average after: {load_average()}"
    )


if __name__ == "__main__":
    main()
