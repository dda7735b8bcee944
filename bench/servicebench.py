"""Shared pieces of the service benchmarks (``bench/service_*.py``).

Why it exists: the service benchmarks run the real service (``Service`` from
``queuemgr.service.app``: loop, LISTEN thread, leader election, simulated
backend) against a real Postgres. Each needs a scratch database, a cluster
file, a fast way to submit thousands of workloads and a record of when each
admission committed. This module holds them once.

What must stay true:

- the Postgres is ``QUEUEMGR_DATABASE_URL`` when set, else the embedded one;
  each run creates, migrates and finally drops a database of its own;
- workloads are written with plain SQL and the service is driven only through
  ``Service`` and ``CycleReport``, so the same script also measures an older
  checkout (``PYTHONPATH=<worktree> python bench/...``);
- the admission log is a row-level trigger in the scratch database,
  not part of queuemgr: it costs one INSERT and one NOTIFY per admitted row.
"""

from __future__ import annotations

import functools
import json
import math
import os
import resource
import signal
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from queuemgr.core.model import PodSet, Workload
from queuemgr.service.app import Service
from queuemgr.service.settings import ServiceConfig
from queuemgr.store import codec, migrate
from queuemgr.store.arrays import literal
from queuemgr.store.database import create_engine, resolve_url

GPU, CPU, MEMORY = "nvidia.com/gpu", "cpu", "memory"
PHASES = ("finish", "load", "safety", "schedule", "commit", "apply", "observe", "heap")
GIB = 2**30


def with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The URL without SQLAlchemy's driver suffix, for ``psycopg.connect``."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: the scratch database is still dropped


@contextmanager
def scratch_database(tag: str) -> Iterator[str]:
    """A freshly migrated database on the configured Postgres, dropped afterwards."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server = resolve_url()
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    name = f"queuemgr_bench_{tag}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        url = with_database(server, name)
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def server_description(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("SHOW server_version")).scalar_one()
            sync = conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()
    finally:
        engine.dispose()
    where = "QUEUEMGR_DATABASE_URL" if os.environ.get("QUEUEMGR_DATABASE_URL") else "embedded"
    return f"Postgres {version} ({where}, synchronous_commit={sync})"


# -- the cluster -----------------------------------------------------------------


def gpu_cluster(
    *, queues: int, nodes: int, gpus_per_node: int = 8, cohort_size: int = 10
) -> dict[str, Any]:
    """A cluster file: ``nodes`` H100 nodes, ``queues`` ClusterQueues in cohorts.

    Each queue's nominal quota is an equal share of the cluster and it may
    borrow up to its cohort's total; LocalQueue ``default`` in ``ns-NNNN``.
    """
    share = max(1, nodes * gpus_per_node // queues)
    cqs, lqs = [], []
    for q in range(queues):
        cq = f"cq-{q:04d}"
        nominal = {GPU: share, CPU: share * 12, MEMORY: f"{share * 128}Gi"}
        cqs.append(
            {
                "name": cq,
                "cohort": f"cohort-{q // cohort_size}",
                "resources": [
                    {
                        "flavor": "h100",
                        "nominal": nominal,
                        "borrowing_limit": {GPU: share * cohort_size},
                    }
                ],
            }
        )
        lqs.append({"namespace": f"ns-{q:04d}", "name": "default", "cluster_queue": cq})
    return {
        "flavors": [{"name": "h100", "node_labels": {"gpu": "h100"}}],
        "nodes": [
            {
                "name": "node",
                "count": nodes,
                "flavor": "h100",
                "allocatable": {
                    GPU: gpus_per_node,
                    CPU: 12 * gpus_per_node,
                    MEMORY: f"{128 * gpus_per_node}Gi",
                },
            }
        ],
        "cohorts": [{"name": f"cohort-{c}"} for c in range((queues - 1) // cohort_size + 1)],
        "cluster_queues": cqs,
        "local_queues": lqs,
    }


def gpu_job(
    ns: str,
    name: str,
    *,
    gpus: int,
    pods: int = 1,
    runtime: float,
    created_at: float,
    priority: int = 0,
) -> Workload:
    return Workload(
        namespace=ns,
        name=name,
        queue="default",
        priority=priority,
        created_at=created_at,
        max_runtime=runtime,  # the simulated backend runs a gang for its max_runtime
        pod_sets=(_gpu_pod_set(gpus, pods),),
    )


@functools.lru_cache(maxsize=256)
def _gpu_pod_set(gpus: int, pods: int) -> PodSet:
    """One shared (immutable) pod set per size: a paced submitter makes thousands a second."""
    requests = {GPU: gpus, CPU: 12_000 * gpus, MEMORY: 128 * GIB * gpus}
    return PodSet(name="main", count=pods, requests=requests)


# -- submitting in bulk ------------------------------------------------------------

_INSERT_WORKLOADS = sa.text("""
INSERT INTO workloads (namespace, name, local_queue, priority, created_at, max_runtime)
SELECT d.ns, d.name, d.queue, d.priority, to_timestamp(d.created), d.runtime
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:queues AS text[]),
            CAST(:priorities AS int[]), CAST(:created AS float8[]),
            CAST(:runtimes AS float8[]))
     AS d(ns, name, queue, priority, created, runtime)
RETURNING id, namespace, name
""")
_INSERT_POD_SETS = sa.text("""
INSERT INTO pod_sets (workload_id, position, name, count, requests, node_selector,
                      tolerations, topology_required, topology_preferred, min_count)
SELECT d.id, d.pos, d.name, d.count, CAST(d.requests AS jsonb), CAST(d.selector AS jsonb),
       CAST(d.tolerations AS jsonb), d.treq, d.tpref, d.min_count
FROM unnest(CAST(:ids AS bigint[]), CAST(:pos AS int[]), CAST(:names AS text[]),
            CAST(:counts AS int[]), CAST(:requests AS text[]), CAST(:selectors AS text[]),
            CAST(:tolerations AS text[]), CAST(:treq AS text[]), CAST(:tpref AS text[]),
            CAST(:min_counts AS int[]))
     AS d(id, pos, name, count, requests, selector, tolerations, treq, tpref, min_count)
""")


def bulk_submit(conn: sa.Connection, ws: Sequence[Workload], *, notify: bool = True) -> None:
    """Insert ``ws`` as Pending with two statements, then NOTIFY as a submission does.

    Columns go as array literals and each distinct pod set is encoded once: the
    submitter shares the machine with the service it measures, so its own CPU
    is kept small.
    """
    if not ws:
        return
    rows = conn.execute(
        _INSERT_WORKLOADS,
        {
            "ns": literal([w.namespace for w in ws]),
            "names": literal([w.name for w in ws]),
            "queues": literal([w.queue for w in ws]),
            "priorities": literal([w.priority for w in ws]),
            "created": literal([float(w.created_at) for w in ws]),
            "runtimes": literal([w.max_runtime for w in ws]),
        },
    ).all()
    ids = {f"{ns}/{name}": i for i, ns, name in rows}
    names = ("ids", "pos", "names", "counts", "requests", "selectors", "tolerations")
    more = ("treq", "tpref", "min_counts")
    cols: dict[str, list[object]] = {k: [] for k in names + more}
    encoded: dict[int, tuple[object, ...]] = {}  # id(pod set) -> its columns
    for w in ws:
        for i, ps in enumerate(w.pod_sets):
            row = encoded.get(id(ps))
            if row is None:
                j = codec.pod_set(ps)
                row = encoded[id(ps)] = (
                    ps.name,
                    ps.count,
                    json.dumps(j["requests"]),
                    json.dumps(j["node_selector"]),
                    json.dumps(j["tolerations"]),
                    ps.topology_required,
                    ps.topology_preferred,
                    ps.min_count,
                )
            cols["ids"].append(ids[w.id])
            cols["pos"].append(i)
            for key, value in zip(names[2:] + more, row, strict=True):
                cols[key].append(value)
    conn.execute(_INSERT_POD_SETS, {k: literal(v) for k, v in cols.items()})
    if notify:
        conn.execute(sa.text("SELECT pg_notify('queuemgr', 'submitted')"))


# -- when each admission committed ---------------------------------------------------

ADMITTED_CHANNEL = "bench_admitted"
_ADMISSION_LOG = """
CREATE TABLE bench_admissions (workload_id bigint, workload text, at timestamptz);
CREATE FUNCTION bench_log_admission() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_admissions
    VALUES (NEW.id, NEW.namespace || '/' || NEW.name, clock_timestamp());
    IF current_setting('bench.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('bench_admitted', NEW.namespace || '/' || NEW.name);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_log_admission AFTER UPDATE OF state ON workloads
FOR EACH ROW WHEN (NEW.state = 'Admitted' AND OLD.state <> 'Admitted')
EXECUTE FUNCTION bench_log_admission();
"""
# A row trigger, not a statement trigger joining its transition tables: plpgsql
# keeps the join's plan from its first call (a one-row admission, so a nested
# loop), which made a cycle of n admissions cost n^2 in the instrument alone.


def install_admission_log(engine: Engine, *, notify: bool = True) -> None:
    """Log every admission with the database's clock and NOTIFY ``bench_admitted``.

    The notification is delivered when the admission commits, so a listener
    sees the commit, not the UPDATE. Without ``notify`` only the log is written:
    every notification passes through the queue that the service's own LISTEN
    connection reads, so a script that does not listen should not pay for it.
    """
    with engine.begin() as conn:
        conn.exec_driver_sql(_ADMISSION_LOG)
        if not notify:
            database = conn.exec_driver_sql("SELECT current_database()").scalar_one()
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET bench.notify = off')


# -- the service in this process -------------------------------------------------------


@dataclass
class CycleLog:
    """Every cycle the loop ran: its report, and when (time.monotonic) it ended."""

    reports: list[Any] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admitted(self) -> int:
        return sum(len(r.admitted) for r in self.reports)

    def phases(self, start: int = 0, kind: str = "phases") -> dict[str, float]:
        """Summed seconds per phase over cycles[start:]: wall (``phases``) or loop CPU (``cpu``).

        Empty for an older checkout whose reports carry no phases.
        """
        out: dict[str, float] = {}
        for r in self.reports[start:]:
            for name, seconds in (getattr(r, kind, None) or {}).items():
                out[name] = out.get(name, 0.0) + seconds
        return out


def start_service(
    url: str,
    cluster_file: Path,
    *,
    cycle_interval: float = 5.0,
    default_runtime: float = 60.0,
    first_cycle_timeout: float = 120,
) -> tuple[Service, CycleLog]:
    """The real service (simulated backend), started and leading, with its cycles logged."""
    config = ServiceConfig(
        database_url=url,
        cluster_file=cluster_file,
        cycle_interval=cycle_interval,
        default_runtime=default_runtime,
        http_port=0,
        replica="bench",
    )
    service = Service(config)
    log = CycleLog()
    run_once: Callable[[], Any] = service.loop.run_once

    def logged() -> Any:
        report = run_once()
        if report is not None:
            with log.lock:
                log.reports.append(report)
                log.ended.append(time.monotonic())
        return report

    service.loop.run_once = logged  # type: ignore[method-assign]
    service.start()
    wait_until(lambda: bool(log.reports), first_cycle_timeout, "the service's first cycle")
    return service, log


def wait_until(check: Callable[[], bool], timeout: float, what: str, step: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def count_states(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT state::text, count(*) FROM workloads GROUP BY 1"))
        return {r[0]: int(r[1]) for r in rows}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def machine_busy() -> tuple[float, float]:
    """The machine's (busy, all) CPU seconds since boot, every core summed (/proc/stat)."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


def postgres_cpu() -> float:
    """CPU seconds used so far by the processes named ``postgres`` alive now."""
    hz, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
        except OSError:  # gone meanwhile
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "postgres":
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / hz


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def best_median(values: Sequence[float]) -> tuple[float, float]:
    return min(values), statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]
