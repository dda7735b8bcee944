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
  state of a service with a 100,000-workload backlog;
- then each of ``--busy`` cycles is woken by the cancel of a running workload
  of the first ClusterQueue: the cycle admits into the room it freed, in one
  cohort, as a cluster whose runs end does all the time;
- then ``queuemgr why`` runs as a user runs it (a new process, on the same
  database, while the service runs) for a few of the pending workloads: its
  wall time, start-up included;
- last, the service stops and a new one starts on the same database, as at a
  failover or an upgrade: the config, every reason and the status board are
  there already. Its start to its first cycle done is timed too.

Every cycle is split into its phases from the loop's CycleReport (wall
milliseconds), with the CPU time of the loop's thread.

    python bench/service_scale.py                 # 100,000 pending, 7 steady cycles
    python bench/service_scale.py --pending 10000
    python bench/service_scale.py --queues 1000 --nodes 10000   # the issue's large case
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
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

from queuemgr.core.model import WorkloadId
from queuemgr.store.database import create_engine
from queuemgr.store.transitions import cancel_workload

WHY_SAMPLES = ("w0", "w1", "w{mid}", "w{last}")  # the oldest, and across the backlog


def fill(url: str, pending: int, queues: int, out: Any) -> None:
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
                    f"ns-{rng.randrange(queues):04d}",
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


def cancel_one_running(engine: Any) -> None:
    """Cancel the oldest running workload of the first ClusterQueue: the next cycle admits
    into its room, in one cohort, as a cluster where runs end does all the time."""
    with engine.begin() as conn:
        name = conn.execute(
            sa.text(
                "SELECT namespace || '/' || name FROM workloads WHERE state = 'Admitted'"
                " AND cluster_queue = (SELECT min(name) FROM cluster_queues)"
                " ORDER BY admitted_at, id LIMIT 1"
            )
        ).scalar()
        if name is None:
            raise SystemExit("no running workload to cancel")
        cancel_workload(conn, WorkloadId(name), message="service_scale: a busy cycle")


def time_why(url: str, engine: Any, pending: int) -> list[tuple[str, float]]:
    """Wall seconds of ``queuemgr why`` for a few pending workloads, as a user runs it."""
    out = []
    env = {**os.environ, "QUEUEMGR_DATABASE_URL": url}
    for pattern in WHY_SAMPLES:
        name = pattern.format(mid=pending // 2, last=pending - 1)
        with engine.connect() as conn:
            ns = conn.execute(
                sa.text("SELECT namespace FROM workloads WHERE name = :n AND state = 'Pending'"),
                {"n": name},
            ).scalar()
        if ns is None:
            continue  # admitted by now, or Inadmissible: not what this times
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "queuemgr", "why", name, "-n", ns, "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        took = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"queuemgr why {ns}/{name} failed: {done.stderr.strip()[-500:]}")
        out.append((f"{ns}/{name}", took))
    return out


def print_cycles(kind: str, reports: list[Any], label: Any) -> None:
    """One row per cycle, then the best and the median of their totals."""
    totals = []
    for r in reports:
        line, total = phase_line(label(r), r, 0.0)
        totals.append(total)
        print(line)
    if any(totals):
        best, median = best_median(totals)
        print(f"{kind} cycle: best {best * 1000:.0f} ms, median {median * 1000:.0f} ms")


def phase_line(label: str, report: Any, fallback: float) -> tuple[str, float]:
    """One table row (milliseconds) and the cycle's total wall seconds."""
    phases = getattr(report, "phases", None) or {}
    cpu = sum((getattr(report, "cpu", None) or {}).values())
    total = sum(phases.values()) or fallback
    ph = "".join(f"{phases.get(p, 0.0) * 1000:>10.0f}" for p in PHASES)
    # Rows the cycle wrote: workloads' reasons and messages, status board rows.
    written = (
        f"{getattr(report, 'statuses_written', 0):>10}{getattr(report, 'board_written', 0):>8}"
    )
    return f"{label:<24}{total * 1000:>10.0f}{ph}{cpu * 1000:>10.0f}{written}", total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--steady", type=int, default=7, help="steady-state cycles to time")
    parser.add_argument(
        "--busy", type=int, default=3, help="cycles woken by a cancel that frees room (3)"
    )
    parser.add_argument("--queues", type=int, default=100, help="ClusterQueues (default 100)")
    parser.add_argument("--nodes", type=int, default=1_000, help="8-GPU nodes (default 1,000)")
    args = parser.parse_args()
    for name in ("pending", "steady", "busy", "queues", "nodes"):
        value = getattr(args, name)
        least = 0 if name == "busy" else 1
        if not least <= value <= 1_000_000:
            parser.error(f"--{name} {value}: must be between {least} and 1,000,000")
    with tempfile.TemporaryDirectory() as tmp, scratch_database("scale") as url:
        print(server_description(url), f"| load average before: {load_average()}")
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(yaml.safe_dump(gpu_cluster(queues=args.queues, nodes=args.nodes)))
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(target=fill, args=(url, args.pending, args.queues, out))
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
            busy = []
            for _ in range(args.busy):
                n = len(log.reports)
                cancel_one_running(engine)
                wait_until(lambda n=n: len(log.reports) > n, 600, "a cycle")
                busy.append(log.reports[n])
                time.sleep(1.0)
            peak = peak_rss_mib()
            rss_now = current_rss_mib()
            whys = time_why(url, engine, args.pending)
        finally:
            service.stop()
        # A restart: the config, the reasons and the status board are in the store,
        # as after any failover or upgrade.
        try:
            started = time.monotonic()
            again, again_log = start_service(url, cluster, first_cycle_timeout=1800)
            warm = time.monotonic() - started
            restart = again_log.reports[0]
            again.stop()
        finally:
            engine.dispose()
    print(
        f"{args.pending} pending, {args.queues} ClusterQueues, {args.nodes} nodes; after the first "
        f"cycle: {states}"
    )
    print(
        f"{'cycle':<24}{'total ms':>10}"
        + "".join(f"{p:>10}" for p in PHASES)
        + f"{'loop cpu':>10}{'statuses':>10}{'board':>8}"
    )
    line, _ = phase_line(f"first (cold), {len(first.admitted)} adm.", first, cold)
    print(line)
    print_cycles("steady", steady, lambda r: f"steady, {len(r.admitted)} admitted")
    print_cycles("busy", busy, lambda r: f"busy, {len(r.finished)} fin. {len(r.admitted)} adm.")
    line, _ = phase_line(f"after a restart, {len(restart.admitted)} adm.", restart, warm)
    print(line)
    print(
        f"service start to first cycle done: {cold:.1f} s at the first start (it creates the"
        f" cluster file's config), {warm:.1f} s at a restart"
    )
    for wid, took in whys:
        print(f"queuemgr why {wid}: {took:.2f} s (a new process, start-up included)")
    if whys:
        best, median = best_median([t for _, t in whys])
        print(f"queuemgr why: best {best:.2f} s, median {median:.2f} s")
    print(
        f"RSS: {rss_before:.0f} MiB before the service started, {rss_now:.0f} MiB at the end, "
        f"peak {peak:.0f} MiB | load average after: {load_average()}"
    )


if __name__ == "__main__":
    main()
