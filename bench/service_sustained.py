"""Sustained admissions through the real service and Postgres: a paced stream, not a burst.

Why it exists: a burst admitted in one cycle measures one big transaction. A
cluster in use sees submissions arrive at a steady rate while runs finish, so
each cycle both frees room and fills it. This script offers ``--rate``
workloads per second for ``--seconds`` from a separate process, in batches
every 20 ms (one transaction and one NOTIFY each, as a busy API front end
would commit them), to the service running in this process (simulated backend,
100 ClusterQueues in cohorts of 10, 1,000 nodes of 16 GPUs). Runs last 0.5 to
1.5 s, so admissions and finishes interleave and the cluster never fills: the
figure is the service's speed, not capacity.

Figures, all read from the database after the run:

- achieved admissions/s: the stream's admissions over the time from its first
  submission to its last admission (the tail after the last submission
  included, so a service that keeps pace reads a little under the offer);
- sustained admissions/s: the admissions committed while the stream ran,
  after its first second, over that time (a service that keeps pace reads
  about the offer, less as its lag grows; one that falls behind reads what
  it can do);
- the loop's CPU per admission (its thread's CPU summed over the cycles,
  over the admissions): the service's cost, steadier than the rates on a
  shared machine; and the whole service process's CPU per admission (every
  thread: the loop, its commit writer, the listener, the leader's heartbeat);
  beside them the loop's, Postgres's and the submitter's CPU seconds and how
  busy the machine was, from the stream's start to its last admission;
- status board rows written per admission (``board/adm``): the rows the
  cycles' board writes touched (changed and removed), over the admissions; a
  board that rewrites the queue behind each admission reads far above 1;
- submit → admit latency p50/p99: the admitting UPDATE's clock (a
  row-level trigger in the scratch database logs it) minus the moment
  the submitter stamped the workload, just before its batch's transaction;
  the admission's commit follows within the same cycle, so this reads a few
  milliseconds short of what a client sees;
- still pending when the stream ended, and whether the submitter kept its pace
  (if Postgres or the machine cannot take the offer, the offered rate is not
  what was asked, and the line says so).

    python bench/service_sustained.py                          # 1000/s and 5000/s, 30 s, 2 rounds
    python bench/service_sustained.py --rates 2000 --seconds 10 --rounds 1
    python bench/service_sustained.py --notify   # the admission log NOTIFYs, as before
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
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
    gpu_cluster,
    gpu_job,
    install_admission_log,
    load_average,
    machine_busy,
    percentile,
    postgres_cpu,
    scratch_database,
    server_description,
    start_service,
    wait_until,
)

from queuemgr.store.database import create_engine

QUEUES, NODES, GPUS_PER_NODE, TICK = 100, 1_000, 16, 0.02


def paced_submitter(url: str, rate: int, seconds: float, seed: int, out: Any) -> None:
    """In a child process: every TICK, commit the workloads due by now; send the pace kept."""
    engine = create_engine(url)
    rng = random.Random(seed)
    total = int(rate * seconds)
    sent = 0
    start = time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        if due > sent:
            now = time.time()
            batch = [
                gpu_job(
                    f"ns-{rng.randrange(QUEUES):04d}",
                    f"s{i}",
                    gpus=1,
                    runtime=rng.uniform(0.5, 1.5),
                    created_at=now,
                )
                for i in range(sent, due)
            ]
            with engine.begin() as conn:
                bulk_submit(conn, batch)
            sent = due
        time.sleep(max(0.0, start + (sent / rate) - time.monotonic() + TICK / 2))
    out.put((total, time.monotonic() - start, time.process_time()))
    engine.dispose()


_LATENCIES = sa.text("""
SELECT extract(epoch FROM a.at - w.created_at) AS latency, extract(epoch FROM a.at) AS at
FROM bench_admissions a JOIN workloads w ON w.id = a.workload_id
""")
_FIRST_SUBMIT = sa.text("SELECT extract(epoch FROM min(created_at)) FROM workloads")


def one_round(rate: int, seconds: float, seed: int, tmp: Path, notify: bool) -> dict[str, Any]:
    with scratch_database("sustained") as url:
        cluster = tmp / "cluster.yaml"
        cluster.write_text(
            yaml.safe_dump(gpu_cluster(queues=QUEUES, nodes=NODES, gpus_per_node=GPUS_PER_NODE))
        )
        engine = create_engine(url)
        install_admission_log(engine, notify=notify)
        service, log = start_service(url, cluster)
        try:
            cycles0 = len(log.reports)
            ctx = mp.get_context("spawn")
            out = ctx.Queue()
            child = ctx.Process(target=paced_submitter, args=(url, rate, seconds, seed, out))
            busy0, pg0, own0 = machine_busy(), postgres_cpu(), time.process_time()
            child.start()
            total, took, submitter_cpu = out.get()
            child.join()
            pending_at_end = total - log.admitted()
            wait_until(lambda: log.admitted() >= total, 600, "the stream's admissions", 0.01)
            busy1, pg1, own1 = machine_busy(), postgres_cpu(), time.process_time()
            cycles = len(log.reports) - cycles0
            with log.lock:
                phases = log.phases(cycles0)
                cpu = sum(log.phases(cycles0, "cpu").values())
                biggest = max((len(r.admitted) for r in log.reports[cycles0:]), default=0)
                board = sum(r.board_written for r in log.reports[cycles0:])
            with engine.connect() as conn:
                rows = conn.execute(_LATENCIES).all()
                first = float(conn.execute(_FIRST_SUBMIT).scalar_one())
        finally:
            service.stop()
            engine.dispose()
    latencies = [float(r.latency) * 1000 for r in rows]
    last = max(float(r.at) for r in rows)
    window = (first + 1.0, first + took)  # the stream's time after its first second
    during = sum(1 for r in rows if window[0] <= float(r.at) <= window[1])
    return {
        "offered": total / took,
        "achieved": len(rows) / (last - first),
        "sustained": during / (window[1] - window[0]),
        "cpu_us": cpu / max(1, len(rows)) * 1e6,
        "loop_cpu": cpu,
        "service_us": (own1 - own0) / max(1, len(rows)) * 1e6,
        "pg_cpu": pg1 - pg0,
        "submitter_cpu": submitter_cpu,
        "busy": (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]),
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "max": max(latencies),
        "pending_at_end": pending_at_end,
        "cycles": cycles,
        "biggest": biggest,
        "board": board / max(1, len(rows)),
        "phases": phases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--notify", action="store_true", help="the admission log also NOTIFYs each admission"
    )
    args = parser.parse_args()
    # Bounded, and written so that NaN fails too: a round holds rate x seconds rows.
    for name, value, least, most in (
        ("--seconds", args.seconds, 2, 600),
        ("--rounds", args.rounds, 1, 20),
    ):
        if not least <= value <= most:
            parser.error(f"{name} {value}: must be {least} to {most}")
    for rate in args.rates:
        if not 1 <= rate <= 100_000:
            parser.error(f"--rates {rate}: must be 1 to 100000 workloads/s")
    with tempfile.TemporaryDirectory() as tmp, scratch_database("probe") as probe:
        print(server_description(probe), f"| load average before: {load_average()}")
        print(
            f"{QUEUES} ClusterQueues, {NODES} nodes x {GPUS_PER_NODE} GPUs, "
            f"1-GPU runs of 0.5-1.5 s, {args.seconds:g} s per round"
        )
        print(
            f"{'asked/s':>8}{'offered/s':>10}{'admitted/s':>11}{'sustained/s':>12}"
            f"{'CPU us/adm':>11}{'svc us/adm':>11}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'max ms':>9}{'behind':>8}{'cycles':>8}{'max/cyc':>8}{'board/adm':>10}"
            + "".join(f"{p + ' s':>11}" for p in PHASES)
            + f"{'loop CPU s':>11}{'pg CPU s':>9}{'submit s':>9}{'busy %':>7}"
            + f"{'load avg':>17}"
        )
        for rate in args.rates:
            achieved, sustained, cpus, p99s = [], [], [], []
            for r in range(args.rounds):
                res = one_round(rate, args.seconds, r, Path(tmp), args.notify)
                achieved.append(res["achieved"])
                sustained.append(res["sustained"])
                cpus.append(res["cpu_us"])
                p99s.append(res["p99"])
                print(
                    f"{rate:>8}{res['offered']:>10.0f}{res['achieved']:>11.0f}"
                    f"{res['sustained']:>12.0f}{res['cpu_us']:>11.1f}{res['service_us']:>11.1f}"
                    f"{res['p50']:>9.1f}"
                    f"{res['p99']:>9.1f}{res['max']:>9.1f}{res['pending_at_end']:>8}"
                    f"{res['cycles']:>8}{res['biggest']:>8}{res['board']:>10.2f}"
                    + "".join(f"{res['phases'].get(p, 0.0):>11.2f}" for p in PHASES)
                    + f"{res['loop_cpu']:>11.1f}{res['pg_cpu']:>9.1f}"
                    + f"{res['submitter_cpu']:>9.1f}{100 * res['busy']:>7.0f}"
                    + f"{load_average():>17}"
                )
            best, median = best_median([-x for x in achieved])
            best_s, median_s = best_median([-x for x in sustained])
            best_c, median_c = best_median(cpus)
            b99, m99 = best_median(p99s)
            print(
                f"{rate}/s asked: admitted/s best {-best:.0f}, median {-median:.0f}; "
                f"sustained/s best {-best_s:.0f}, median {-median_s:.0f}; "
                f"loop CPU per admission best {best_c:.1f} us, median {median_c:.1f} us; "
                f"p99 best {b99:.1f} ms, median {m99:.1f} ms"
            )


if __name__ == "__main__":
    main()
