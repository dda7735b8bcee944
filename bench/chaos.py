"""Chaos: 1,000 gangs through two ``queuemgr serve`` replicas under kill -9, SIGSTOP and
Postgres restarts, checked against the truth rebuilt from an audit trigger.

Why it exists: issue 14 asks for one run that mixes every fault the service claims to
survive. tests/integration/service has one test per fault (test_crash.py kills one serve
process, test_failover.py stops or kills the leader of two, test_outage.py restarts
Postgres under one); this runs them all, one after another at moments a seeded RNG picks,
against two replicas, on a cluster where quota matters: three ClusterQueues in a cohort
whose nominal quotas add up to the cluster, each allowed to borrow a little, and (unless
``--no-preemption``) reclaiming their nominal quota from borrowers, so evictions, claims
and requeues happen under the faults too.

What it starts: an embedded Postgres of its own (a fresh temporary data directory, with
``track_commit_timestamp`` on; removed at the end), ``queuemgr db upgrade``, and two
``queuemgr serve`` replicas with the simulated backend (tests/integration/service/
processes.py), 1 s safety cycles and gangs that run 0.3 to 2 s. A submitter thread sends
``--gangs`` multi-pod gangs in batches over about ``--submit-seconds`` (retrying a batch
an outage refused). A chaos thread, every ``--interval`` seconds or so, picks one fault:

- ``kill``: kill -9 of the current leader, which is started again 0.2 to 2 s later;
- ``stop``: SIGSTOP of the leader for the lease's TTL plus 2 to 5 s, then SIGCONT;
- ``pg-restart``: Postgres stopped (``pg_ctl stop -m fast``), down 1 to 4 s, started;
- ``pg-crash``: SIGQUIT to the postmaster (an immediate stop: no checkpoint, crash
  recovery at the next start), down 1 to 4 s, started.

``serve`` exits 1 when Postgres is unusable at its start (docs/operations.md), which a
replica restarted after a kill -9 may meet; like a supervisor (kubelet, systemd), the
script starts again a replica that exited by itself, and counts it. Chaos stops once every
gang has finished (or after ``--faults``); the run then drains for at most ``--drain``
seconds and the replicas are stopped with SIGTERM.

How the truth is rebuilt: triggers the benchmark installs on its own database (not a
migration) log every change of a workload's state or admission (old and new state,
``admitted_at``, ClusterQueue, flavor, reason), every placement row written or deleted
(workload, node, pods) and every update of the lease row, each with its transaction id.
Afterwards each transaction is given its commit time (``pg_xact_commit_timestamp``) and
the log is replayed in commit order, transaction by transaction. Rolled-back
transactions leave no trace, so the replay sees exactly what was committed. It counts:

- lost: submitted gangs not Finished at the end, or whose row vanished;
- double-running: two admissions of one workload whose runs overlap. A run starts at its
  admission's commit and ends at its Finished or Evicted transition (as the issue puts
  it), or, strictly, once an evicted gang's pods are gone (its requeue);
- overcommits: transactions after whose commit a node's placements hold more GPUs than
  it has; strictly, an evicted gang's placements still count until its requeue. A
  checker thread also asks Postgres live, four times a second, as test_crash.py does;
- quota breaches: transactions after whose commit a ClusterQueue's admitted GPUs exceed
  its nominal quota plus its borrowing limit, or the cohort's exceed the sum of the
  nominal quotas (strictly: Evicted gangs still count until their requeue).

It also prints the wall time, the faults of each kind, the time from each fault to the
next lease epoch and to the next admission, the leader changes (new lease epochs), the
longest time with no live leader (the longest gap between two updates of the lease row: a
live leader renews it every second), the longest admission stall (workloads pending,
nothing admitted) and the most admissions of one workload. Exit 0 when the four checks
read 0 (and the log is consistent, every gang finished within the drain, a leader was
always found), else 1; with ``--strict`` the strict readings count too. ``--timeout``
bounds the whole run.

    python bench/chaos.py                          # 1,000 gangs, seed 1, a fault every ~6 s
    python bench/chaos.py --seed 2 --interval 4 --kinds kill,pg-crash
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from datetime import datetime
from functools import partial
from pathlib import Path
from types import FrameType

import sqlalchemy as sa
import yaml
from servicebench import load_average, server_description
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queuemgr.core.model import Workload  # noqa: E402
from queuemgr.store.database import create_engine  # noqa: E402
from queuemgr.store.embedded import EmbeddedPostgres  # noqa: E402
from queuemgr.store.leadership import LEASE_TTL  # noqa: E402
from tests.integration.controller.helpers import wait_for  # noqa: E402
from tests.integration.service.processes import (  # noqa: E402
    ServeProcess,
    StoreChecker,
    Submitter,
    admissions_per_workload,
    install_admission_log,
    job,
    logs,
    state_counts,
    write_config,
)

GPUS_PER_NODE = 8
# ClusterQueue: (nominal GPUs, borrowing limit) per 8 nodes; scaled with --nodes.
TEAMS = {"team-a": (24, 16), "team-b": (24, 16), "team-c": (16, 16)}
# (pods, GPUs per pod, weight): every workload is a gang of 2 to 4 pods, 2 to 32 GPUs.
SHAPES = ((2, 1, 25), (4, 1, 15), (2, 2, 20), (2, 4, 15), (3, 4, 10), (2, 8, 10), (4, 8, 5))
KINDS = {"kill": 35, "stop": 25, "pg-restart": 20, "pg-crash": 20}
QUEUED = {"Pending", "Inadmissible"}


class Timeout(Exception):
    """The global --timeout ran out."""


# -- the cluster --------------------------------------------------------------------------


def cluster_file(nodes: int, preemption: bool) -> str:
    scale = nodes / 8

    def quota(gpus: float) -> dict[str, object]:  # a node's CPU and memory per GPU
        n = round(gpus * scale)
        return {"nvidia.com/gpu": n, "cpu": 12 * n, "memory": f"{128 * n}Gi"}

    queues = []
    for team, (nominal, borrow) in TEAMS.items():
        q: dict[str, object] = {
            "name": team,
            "cohort": "research",
            "namespaces": [team],
            "resources": [
                {
                    "flavor": "h100",
                    "nominal": quota(nominal),
                    "borrowing_limit": quota(borrow),
                }
            ],
        }
        if preemption:
            q["preemption"] = {"reclaim_within_cohort": "Any", "within_cluster_queue": "Never"}
        queues.append(q)
    return yaml.safe_dump(
        {
            "flavors": [{"name": "h100", "node_labels": {"gpu": "h100"}}],
            "nodes": [
                {
                    "name": "node",
                    "count": nodes,
                    "flavor": "h100",
                    "allocatable": {"nvidia.com/gpu": GPUS_PER_NODE, "cpu": 96, "memory": "1Ti"},
                }
            ],
            "cohorts": [{"name": "research"}],
            "cluster_queues": queues,
            "local_queues": [
                {"namespace": t, "name": "default", "cluster_queue": t} for t in TEAMS
            ],
        },
        sort_keys=False,
    )


def gang_maker(seed: int, made: list[str]) -> Callable[[int], Workload]:
    """The ``i``th gang of the run (its id appended to ``made``)."""
    rng = random.Random(f"gangs-{seed}")
    teams = list(TEAMS)

    def make(i: int) -> Workload:
        pods, gpus, _ = rng.choices(SHAPES, weights=[s[2] for s in SHAPES])[0]
        runtime = round(rng.uniform(0.3, 2.0), 3)
        w = job(f"g{i:04d}", pods=pods, gpus=gpus, runtime=runtime, created_at=time.time())
        w = dataclasses.replace(w, namespace=rng.choice(teams))
        made.append(w.id)
        return w

    return make


# -- the audit trigger ----------------------------------------------------------------------

# Names are schema-qualified: the trigger also fires inside queuemgr_submit, a SECURITY
# DEFINER function with a search path of its own.
AUDIT = """
CREATE SEQUENCE chaos_seq;
CREATE TABLE chaos_transitions (
  seq bigint PRIMARY KEY DEFAULT nextval('chaos_seq'),
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  workload_id bigint NOT NULL, namespace text NOT NULL, name text NOT NULL,
  old_state text, new_state text, admitted_at timestamptz, cluster_queue text,
  flavor text, reason text);
CREATE TABLE chaos_placements (
  seq bigint PRIMARY KEY DEFAULT nextval('chaos_seq'),
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  workload_id bigint NOT NULL, pod_set text NOT NULL, node text NOT NULL,
  pods integer NOT NULL, added boolean NOT NULL);
CREATE TABLE chaos_lease (
  seq bigint PRIMARY KEY DEFAULT nextval('chaos_seq'),
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  epoch bigint, replica text, holder_pid integer);

CREATE FUNCTION chaos_log_workload() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO public.chaos_transitions (workload_id, namespace, name, old_state, new_state)
    VALUES (OLD.id, OLD.namespace, OLD.name, OLD.state::text, NULL);
    RETURN OLD;
  END IF;
  INSERT INTO public.chaos_transitions
    (workload_id, namespace, name, old_state, new_state, admitted_at, cluster_queue,
     flavor, reason)
  VALUES (NEW.id, NEW.namespace, NEW.name,
          CASE WHEN TG_OP = 'UPDATE' THEN OLD.state::text END, NEW.state::text,
          NEW.admitted_at, NEW.cluster_queue, NEW.flavor, NEW.reason);
  RETURN NEW;
END $$;
CREATE TRIGGER chaos_workload_row AFTER INSERT OR DELETE ON workloads
  FOR EACH ROW EXECUTE FUNCTION chaos_log_workload();
CREATE TRIGGER chaos_workload_move AFTER UPDATE ON workloads FOR EACH ROW
  WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.admitted_at IS DISTINCT FROM NEW.admitted_at)
  EXECUTE FUNCTION chaos_log_workload();

CREATE FUNCTION chaos_log_placement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('DELETE', 'UPDATE') THEN
    INSERT INTO public.chaos_placements (workload_id, pod_set, node, pods, added)
    VALUES (OLD.workload_id, OLD.pod_set, OLD.node, OLD.count, false);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO public.chaos_placements (workload_id, pod_set, node, pods, added)
    VALUES (NEW.workload_id, NEW.pod_set, NEW.node, NEW.count, true);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER chaos_placement AFTER INSERT OR UPDATE OR DELETE ON placements
  FOR EACH ROW EXECUTE FUNCTION chaos_log_placement();

CREATE FUNCTION chaos_log_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.chaos_lease (epoch, replica, holder_pid)
  VALUES (NEW.epoch, NEW.replica, NEW.holder_pid);
  RETURN NULL;
END $$;
CREATE TRIGGER chaos_lease AFTER UPDATE ON scheduler_lease
  FOR EACH ROW EXECUTE FUNCTION chaos_log_lease();
"""

# The commit time of the transaction that wrote each row (xid8 -> xid: a fresh cluster
# is still in its first xid epoch). NULL would mean commit timestamps were off.
_COMMITTED = "pg_xact_commit_timestamp(xid::text::xid)"


# -- faults ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Fault:
    kind: str
    target: str  # the replica, or "postgres"
    start: float
    end: float = 0.0


class Chaos(threading.Thread):
    """Injects one fault at a time, ``interval`` seconds apart on average, until stopped."""

    def __init__(
        self,
        replicas: Sequence[ServeProcess],
        server: EmbeddedPostgres,
        *,
        rng: random.Random,
        interval: float,
        kinds: Sequence[str],
        max_faults: int | None,
        finished: Callable[[], bool],
        clock: Callable[[], str],
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.replicas = replicas
        self.server = server
        self.rng = rng
        self.interval = interval
        self.kinds = list(kinds)
        self.max_faults = max_faults
        self.finished = finished
        self.clock = clock
        self.stop = threading.Event()
        self.faults: list[Fault] = []
        self.no_leader = 0  # times no single leader showed up within 60 s
        self.exits: list[tuple[str, int, str]] = []  # replica, exit code, its last words
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self.max_faults is None or len(self.faults) < self.max_faults:
                if self.pause(self.rng.uniform(0.5, 1.5) * self.interval):
                    return
                if self.finished():
                    return
                kind = self.rng.choices(self.kinds, weights=[KINDS[k] for k in self.kinds])[0]
                self.inject(kind)
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds``, restarting replicas that exit meanwhile; True if stopped."""
        deadline = time.monotonic() + seconds
        while True:
            self.revive()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.stop.wait(min(0.25, left)):
                return True

    def revive(self) -> None:
        """Start again a replica that exited by itself, as a supervisor would (kubelet, systemd).

        ``serve`` exits 1 when the database is unusable at its start (docs/operations.md):
        a replica restarted after a kill -9 may meet the next Postgres restart there.
        """
        for p in self.replicas:
            if p.proc is None or p.proc.poll() is None:
                continue
            lines = [ln for ln in p.log().splitlines() if ln.strip()]
            last = next((ln for ln in reversed(lines) if ln.startswith("error")), lines[-1:])
            self.exits.append((p.replica, p.proc.returncode, str(last)[:160]))
            self.say(f"replica {p.replica} exited {p.proc.returncode} ({last}); started again")
            p.start()

    def leader(self) -> ServeProcess | None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self.stop.is_set():
            self.revive()
            leading = [p for p in self.replicas if p.alive and p.leads()]
            if len(leading) == 1:
                return leading[0]
            time.sleep(0.1)
        return None

    def inject(self, kind: str) -> None:
        n = len(self.faults) + 1
        if kind in ("kill", "stop"):
            p = self.leader()
            if p is None:
                self.no_leader += 1
                print(f"{self.clock()} no single leader within 60 s; no fault", flush=True)
                return
            assert p.proc is not None
            fault = Fault(kind, p.replica, time.time())
            if kind == "kill":
                down = self.rng.uniform(0.2, 2.0)
                self.say(f"fault {n}: kill -9 of leader {p.replica}, restarted after {down:.1f} s")
                p.kill9()
                time.sleep(down)
                p.start()
            else:
                paused = LEASE_TTL + self.rng.uniform(2.0, 5.0)
                self.say(f"fault {n}: SIGSTOP of leader {p.replica} for {paused:.1f} s")
                p.proc.send_signal(signal.SIGSTOP)
                try:
                    time.sleep(paused)
                finally:
                    p.proc.send_signal(signal.SIGCONT)
        else:
            fault = Fault(kind, "postgres", time.time())
            down = self.rng.uniform(1.0, 4.0)
            if kind == "pg-crash":
                self.say(
                    f"fault {n}: Postgres crash (SIGQUIT to the postmaster), down {down:.1f} s"
                )
                postmaster = int((self.server.pgdata / "postmaster.pid").read_text().split()[0])
                os.kill(postmaster, signal.SIGQUIT)  # immediate shutdown: no checkpoint
                wait_for(lambda: not _pid_alive(postmaster), timeout=30, step=0.05)
            else:
                self.say(f"fault {n}: Postgres stopped (fast), down {down:.1f} s")
            self.server.restart(down_for=down)  # a crashed server is only started
        fault.end = time.time()
        self.faults.append(fault)

    def say(self, what: str) -> None:
        print(f"{self.clock()} {what}", flush=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- the truth ----------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """One admission of a workload, from its commit to its end (commit times, seconds)."""

    workload: int
    start: float
    cluster_queue: str
    gpus: int
    evicted: float | None = None  # Admitted -> Evicted
    end: float | None = None  # Finished, or requeued (pods gone) after an eviction

    def interval(self, strict: bool) -> tuple[float, float]:
        end = self.end if strict or self.evicted is None else self.evicted
        return self.start, math.inf if end is None else end


@dataclasses.dataclass
class Breach:
    at: float
    what: str
    used: int
    limit: int
    strict: bool


@dataclasses.dataclass
class Truth:
    """What the audit log says happened, replayed in commit order."""

    names: dict[int, str] = dataclasses.field(default_factory=dict)
    final: dict[int, str | None] = dataclasses.field(default_factory=dict)  # None: deleted
    runs: dict[int, list[Run]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    overcommits: list[Breach] = dataclasses.field(default_factory=list)
    quota_breaches: list[Breach] = dataclasses.field(default_factory=list)
    inconsistent: list[str] = dataclasses.field(default_factory=list)
    finish_reasons: Counter[str] = dataclasses.field(default_factory=Counter)
    evictions: int = 0
    transactions: int = 0
    no_commit_time: int = 0
    stall: tuple[float, float, float] = (0.0, 0.0, 0.0)  # seconds, from, to
    admissions: list[float] = dataclasses.field(default_factory=list)

    def double_running(self, strict: bool) -> list[tuple[str, Run, Run]]:
        found = []
        for wid, runs in self.runs.items():
            ordered = sorted(runs, key=lambda r: r.start)
            for a, b in itertools.pairwise(ordered):
                if b.start < a.interval(strict)[1]:
                    found.append((self.names[wid], a, b))
        return found


def _seconds(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def rebuild(engine: Engine) -> Truth:
    with engine.connect() as conn:
        q = conn.execute
        capacity = {
            r.name: int(r.gpus)
            for r in q(
                sa.text("SELECT name, (allocatable->>'nvidia.com/gpu')::bigint AS gpus FROM nodes")
            )
        }
        pod_sets = list(
            q(
                sa.text(
                    "SELECT workload_id, name, count AS pods, "
                    "(requests->>'nvidia.com/gpu')::bigint AS gpus FROM pod_sets"
                )
            )
        )
        quotas = list(
            q(
                sa.text("""
                SELECT q.cluster_queue, c.cohort,
                       sum((q.nominal->>'nvidia.com/gpu')::bigint) AS nominal,
                       sum((q.borrowing_limit->>'nvidia.com/gpu')::bigint) AS borrow
                FROM cluster_queue_quotas q JOIN cluster_queues c ON c.name = q.cluster_queue
                GROUP BY 1, 2""")
            )
        )
        transitions = list(
            q(sa.text(f"SELECT *, {_COMMITTED} AS committed FROM chaos_transitions"))
        )
        placements = list(q(sa.text(f"SELECT *, {_COMMITTED} AS committed FROM chaos_placements")))
    per_pod = {(int(r.workload_id), r.name): int(r.gpus or 0) for r in pod_sets}
    totals: dict[int, int] = defaultdict(int)
    for r in pod_sets:
        totals[int(r.workload_id)] += int(r.pods) * int(r.gpus or 0)
    limit = {
        r.cluster_queue: int(r.nominal) + (math.inf if r.borrow is None else int(r.borrow))
        for r in quotas
    }
    cohort_of: dict[str, str] = {r.cluster_queue: r.cohort for r in quotas if r.cohort}
    cohort_nominal: dict[str, int] = defaultdict(int)
    for r in quotas:
        if r.cohort is not None:
            cohort_nominal[r.cohort] += int(r.nominal)

    truth = Truth()
    events: list[tuple[float, int, int, str, sa.Row[object]]] = []
    for kind, rows in (("w", transitions), ("p", placements)):
        for r in rows:
            t = _seconds(r.committed)
            if t is None:
                truth.no_commit_time += 1
                t = r.at.timestamp()
            events.append((t, int(str(r.xid)), int(r.seq), kind, r))
    events.sort(key=lambda e: (e[0], e[1], e[2]))

    state: dict[int, str] = {}
    current: dict[int, Run] = {}
    node_used = {False: Counter[str](), True: Counter[str]()}  # strict -> node -> GPUs
    cq_used = {False: Counter[str](), True: Counter[str]()}
    held: dict[int, list[tuple[str, int]]] = defaultdict(list)  # evicted gangs' placements
    queued: set[int] = set()
    queued_since: float | None = None
    last_admission = 0.0
    for (t, _xid), group_iter in itertools.groupby(events, key=lambda e: (e[0], e[1])):
        group = list(group_iter)
        truth.transactions += 1
        nodes: set[str] = set()
        queues: set[str] = set()
        admitted_here = False
        for _, _, _, kind, r in group:  # the state moves first, then their placements
            if kind != "w":
                continue
            wid = int(r.workload_id)
            truth.names[wid] = f"{r.namespace}/{r.name}"
            old, new = r.old_state, r.new_state
            if old != state.get(wid):
                truth.inconsistent.append(
                    f"{r.name}: logged {old}->{new}, replay had {state.get(wid)}"
                )
            run = current.get(wid)
            if new == "Admitted":
                admitted_here = True
                truth.admissions.append(t)
                if run is not None:  # a second admission over a live run: double-running
                    truth.inconsistent.append(f"{r.name}: admitted again while {old}")
                run = Run(wid, t, r.cluster_queue or "", totals.get(wid, 0))
                truth.runs[wid].append(run)
                current[wid] = run
                cq_used[False][run.cluster_queue] += run.gpus
                cq_used[True][run.cluster_queue] += run.gpus
                queues.add(run.cluster_queue)
            elif run is not None and old == "Admitted":
                cq_used[False][run.cluster_queue] -= run.gpus
                queues.add(run.cluster_queue)
                if new == "Evicted":
                    run.evicted = t
                    truth.evictions += 1
                else:
                    run.end = t
                    cq_used[True][run.cluster_queue] -= run.gpus
                    del current[wid]
            elif run is not None and old == "Evicted":
                run.end = t
                cq_used[True][run.cluster_queue] -= run.gpus
                queues.add(run.cluster_queue)
                del current[wid]
                for node, gpus in held.pop(wid, []):
                    node_used[True][node] -= gpus
                    nodes.add(node)
            if new == "Finished":
                truth.finish_reasons[r.reason] += 1
            if new in QUEUED:
                queued.add(wid)
            else:
                queued.discard(wid)
            if new is None:
                state.pop(wid, None)
            else:
                state[wid] = new
            truth.final[wid] = new
        for _, _, _, kind, r in group:
            if kind != "p":
                continue
            wid = int(r.workload_id)
            gpus = int(r.pods) * per_pod.get((wid, r.pod_set), 0)
            nodes.add(r.node)
            if r.added:
                node_used[False][r.node] += gpus
                node_used[True][r.node] += gpus
                continue
            node_used[False][r.node] -= gpus
            if state.get(wid) == "Evicted":  # its pods may still run until its requeue
                held[wid].append((r.node, gpus))
            else:
                node_used[True][r.node] -= gpus
        for strict in (False, True):
            for node in nodes:
                used = node_used[strict][node]
                if used > capacity.get(node, 0):
                    truth.overcommits.append(Breach(t, node, used, capacity.get(node, 0), strict))
            for cq in queues:
                used = cq_used[strict][cq]
                if used > limit.get(cq, 0):
                    truth.quota_breaches.append(Breach(t, cq, used, int(limit[cq]), strict))
            for cohort in {cohort_of[cq] for cq in queues if cq in cohort_of}:
                used = sum(u for cq, u in cq_used[strict].items() if cohort_of.get(cq) == cohort)
                if used > cohort_nominal[cohort]:
                    truth.quota_breaches.append(
                        Breach(t, f"cohort {cohort}", used, cohort_nominal[cohort], strict)
                    )
        if admitted_here and queued_since is not None:
            gap = t - max(last_admission, queued_since)
            if gap > truth.stall[0]:
                truth.stall = (gap, max(last_admission, queued_since), t)
        if admitted_here:
            last_admission = t
        if not queued:
            queued_since = None
        elif queued_since is None:
            queued_since = t
    return truth


# -- the lease ------------------------------------------------------------------------------


@dataclasses.dataclass
class Takeover:
    at: float
    epoch: int
    replica: str
    previous: str | None


@dataclasses.dataclass
class Lease:
    """The lease row's history: each new epoch, and the longest silence of its holders."""

    takeovers: list[Takeover]
    silence: tuple[float, float, float]  # seconds, from, to


def lease_history(engine: Engine) -> Lease:
    """A live leader renews every second: a longer gap between two updates of the lease
    row (renewals, takeovers, releases) is a time when nobody was seen leading."""
    with engine.connect() as conn:
        rows = list(
            conn.execute(
                sa.text(
                    f"SELECT epoch, replica, holder_pid, {_COMMITTED} AS committed, at "
                    "FROM chaos_lease ORDER BY committed, seq"
                )
            )
        )
    takeovers: list[Takeover] = []
    silence = (0.0, 0.0, 0.0)
    epoch: int | None = None
    replica: str | None = None
    last: float | None = None
    for r in rows:
        t = _seconds(r.committed) or r.at.timestamp()
        if last is not None and t - last > silence[0]:
            silence = (t - last, last, t)
        last = t
        if r.holder_pid is not None and int(r.epoch) != epoch:
            takeovers.append(Takeover(t, int(r.epoch), r.replica, replica))
            epoch, replica = int(r.epoch), r.replica
    return Lease(takeovers, silence)


# -- the run -------------------------------------------------------------------------------


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Timeout()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gangs", type=int, default=1000, help="gangs to submit (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="seeds the gangs and the faults")
    p.add_argument(
        "--interval",
        type=float,
        default=6.0,
        help="mean seconds between one fault's end and the next (default 6)",
    )
    p.add_argument(
        "--faults",
        type=int,
        default=None,
        help="stop injecting after this many (default: until every gang finished)",
    )
    p.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated fault kinds among {', '.join(KINDS)} (default all)",
    )
    p.add_argument("--nodes", type=int, default=8, help="8-GPU nodes (default 8)")
    p.add_argument(
        "--submit-seconds",
        type=float,
        default=120.0,
        help="spread the submissions over about this long (default 120)",
    )
    p.add_argument(
        "--no-preemption",
        action="store_true",
        help="ClusterQueues do not reclaim their nominal quota from borrowers",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=300.0,
        help="seconds to wait, after the chaos, for every gang to finish",
    )
    p.add_argument("--timeout", type=int, default=1800, help="seconds for the whole run")
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail as well when an evicted gang's room or quota went to another gang "
        "before its pods stopped (printed either way)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary directory (database, serve logs) and say where",
    )
    args = p.parse_args(argv)
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = set(args.kinds) - set(KINDS)
    if unknown or not args.kinds:
        p.error(f"--kinds: unknown {sorted(unknown)}; choose among {', '.join(KINDS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(args.timeout)
    workdir = Path(tempfile.mkdtemp(prefix="queuemgr-chaos-"))
    try:
        with ExitStack() as stack:
            return run(args, workdir, stack)
    except Timeout:
        print(f"TIMEOUT: the run did not end within --timeout {args.timeout} s", flush=True)
        return 1
    finally:
        signal.alarm(0)
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, workdir: Path, stack: ExitStack) -> int:
    t0 = time.time()

    def clock() -> str:
        return f"[{time.time() - t0:6.1f} s]"

    server = EmbeddedPostgres(workdir / "pg")
    url = server.acquire()
    stack.callback(server.release)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:  # commit times order the log; needs a restart
        conn.execute(sa.text("ALTER SYSTEM SET track_commit_timestamp = on"))
    admin.dispose()
    server.restart()
    subprocess.run(
        [sys.executable, "-m", "queuemgr", "db", "upgrade"],
        env={**os.environ, "QUEUEMGR_DATABASE_URL": url},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    engine = create_engine(url)
    stack.callback(engine.dispose)
    with engine.begin() as conn:
        conn.exec_driver_sql(AUDIT)
    install_admission_log(engine)  # test_crash's independent count of admissions
    print(server_description(url), f"| load average before: {load_average()}")
    preemption = not args.no_preemption
    write_config(
        workdir,
        cluster_file(args.nodes, preemption),
        cycle_interval=1,
        default_runtime=1,
        scheduler={"requeue_backoff_base": 1, "requeue_backoff_max": 8},
    )
    teams = ", ".join(
        f"{t} {round(n * args.nodes / 8)}+{round(b * args.nodes / 8)}"
        for t, (n, b) in TEAMS.items()
    )
    print(
        f"{args.nodes} nodes x {GPUS_PER_NODE} GPUs; cohort of 3 ClusterQueues (nominal+borrowing "
        f"GPUs: {teams}); reclaim within cohort: {'Any' if preemption else 'Never'}; "
        f"{args.gangs} gangs of 2 to 4 pods, 0.3 to 2 s; seed {args.seed}; "
        f"faults {','.join(args.kinds)} every ~{args.interval:g} s",
        flush=True,
    )

    replicas = [ServeProcess(workdir, database_url=url, replica=r) for r in ("a", "b")]

    def stop_replicas() -> None:
        for p in replicas:
            if p.alive:
                assert p.proc is not None
                p.proc.send_signal(signal.SIGCONT)
                p.kill9()

    stack.callback(stop_replicas)
    for p in replicas:
        p.start()
    wait_for(lambda: all(p.role() is not None for p in replicas), timeout=120, step=0.1)

    checker = StoreChecker(engine)
    checker.start()
    stack.callback(checker.stop.set)
    batch = 10
    pause = args.submit_seconds / max(1, math.ceil(args.gangs / batch))
    pace = random.Random(f"pace-{args.seed}")
    made: list[str] = []
    submitter = Submitter(
        engine,
        args.gangs,
        batch=batch,
        make=gang_maker(args.seed, made),
        pause=lambda: pace.uniform(0.5, 1.5) * pause,
        retry=True,
        skip_stored=True,
    )

    def all_finished() -> bool:
        try:
            return submitter.done.is_set() and (
                state_counts(engine).get("Finished", 0) >= args.gangs
            )
        except SQLAlchemyError:
            return False

    chaos = Chaos(
        replicas,
        server,
        rng=random.Random(f"chaos-{args.seed}"),
        interval=args.interval,
        kinds=args.kinds,
        max_faults=args.faults,
        finished=all_finished,
        clock=clock,
    )
    started = time.time()
    submitter.start()
    chaos.start()
    stack.callback(chaos.stop.set)
    next_status = time.monotonic() + 20

    def watch(done: Callable[[], bool], timeout: float) -> bool:
        """Wait for ``done()``, printing the states every 20 s; once the chaos thread is over,
        restart replicas that exit here. False after ``timeout`` or if the submitter died."""
        nonlocal next_status
        deadline = time.monotonic() + timeout
        while not done():
            if not submitter.is_alive() and not submitter.done.is_set():
                print(f"{clock()} the submitter thread died", flush=True)
                return False
            if time.monotonic() > deadline:
                return False
            if not chaos.is_alive():
                chaos.revive()
            time.sleep(0.5)
            if time.monotonic() >= next_status:
                next_status += 20
                _status(engine, clock)
        return True

    watch(lambda: not chaos.is_alive(), math.inf)
    chaos.stop.set()
    chaos.join()
    chaos_ended = time.time()
    if chaos.error is not None:
        raise chaos.error
    print(f"{clock()} chaos over; draining", flush=True)
    drained = watch(submitter.done.is_set, math.inf) and watch(all_finished, args.drain)
    if not drained:
        print(f"{clock()} not every gang finished within --drain {args.drain:g} s", flush=True)
    wall = time.time() - started
    checker.stop.set()
    checker.join(timeout=5)
    chaos.revive()
    exits = {}
    for p in replicas:
        if p.alive:
            with suppress(AssertionError):  # SIGTERM's clean stop is set up once it runs
                wait_for(partial(_ready, p), timeout=30, step=0.1)
            exits[p.replica] = p.terminate()
    truth = rebuild(engine)
    lease = lease_history(engine)
    counts = admissions_per_workload(engine)
    return report(
        args,
        truth=truth,
        lease=lease,
        counts=counts,
        chaos=chaos,
        checker=checker,
        submitter=submitter,
        wall=wall,
        drain=time.time() - chaos_ended,
        drained=drained,
        exits=exits,
        final_states=state_counts(engine),
        submitted=made,
        t0=t0,
        replica_logs=lambda: logs(replicas),
    )


def _ready(p: ServeProcess) -> bool:
    return p.role() is not None


def _status(engine: Engine, clock: Callable[[], str]) -> None:
    try:
        counts = state_counts(engine)
    except SQLAlchemyError:
        print(f"{clock()} (database unavailable)", flush=True)
        return
    print(f"{clock()} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)


def _median_max(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.1f} s, max {max(values):.1f} s"


def report(
    args: argparse.Namespace,
    *,
    truth: Truth,
    lease: Lease,
    counts: dict[str, int],
    chaos: Chaos,
    checker: StoreChecker,
    submitter: Submitter,
    wall: float,
    drain: float,
    drained: bool,
    exits: dict[str, int],
    final_states: dict[str, int],
    submitted: list[str],
    t0: float,
    replica_logs: Callable[[], str],
) -> int:
    by_name = {name: wid for wid, name in truth.names.items()}
    lost = sorted(
        name
        for name in submitted
        if name not in by_name or truth.final.get(by_name[name]) != "Finished"
    )
    double = truth.double_running(strict=False)
    double_strict = truth.double_running(strict=True)
    over = [b for b in truth.overcommits if not b.strict]
    over_strict = [b for b in truth.overcommits if b.strict]
    breach = [b for b in truth.quota_breaches if not b.strict]
    breach_strict = [b for b in truth.quota_breaches if b.strict]
    faults = Counter(f.kind for f in chaos.faults)
    print()
    print(
        f"wall time: {wall:.1f} s (first submission to the end of the drain; drain {drain:.1f} s)"
    )
    print(
        f"faults: {len(chaos.faults)} ("
        + ", ".join(f"{k} {faults[k]}" for k in KINDS if k in args.kinds)
        + f"); no single leader to pick: {chaos.no_leader}"
    )
    leaders = lease.takeovers
    by_kind: dict[str, list[float]] = defaultdict(list)
    to_admission: dict[str, list[float]] = defaultdict(list)
    for f in chaos.faults:
        nxt = next((tk.at for tk in leaders if tk.at >= f.start), None)
        if nxt is not None:
            by_kind[f.kind].append(nxt - f.start)
        adm = next((a for a in sorted(truth.admissions) if a >= f.start), None)
        if adm is not None:
            to_admission[f.kind].append(adm - f.start)
    for k in KINDS:
        if faults[k]:
            print(
                f"  {k:10s} fault start -> next lease epoch: {_median_max(by_kind[k])}; "
                f"-> next admission: {_median_max(to_admission[k])}"
            )
    moves = Counter(f"{tk.previous}->{tk.replica}" for tk in leaders[1:])
    print(
        f"leader changes: {len(leaders) - 1} (epochs {leaders[0].epoch if leaders else '-'} to "
        f"{leaders[-1].epoch if leaders else '-'}"
        + "".join(f", {m} {n}" for m, n in sorted(moves.items()))
        + ")"
    )
    gap, frm, to = lease.silence
    print(
        f"longest time with no live leader (no renewal of the lease): {gap:.1f} s "
        f"(+{frm - t0:.1f} s to +{to - t0:.1f} s)"
    )
    gap, frm, to = truth.stall
    if gap:
        print(
            f"longest admission stall (workloads pending, none admitted): {gap:.1f} s "
            f"(+{frm - t0:.1f} s to +{to - t0:.1f} s)"
        )
    most = max(counts.values(), default=0)
    most_log = max((len(r) for r in truth.runs.values()), default=0)
    print(
        f"admissions: {len(truth.admissions)} of {len(submitted)} gangs; most of one gang "
        f"{most_log} (test_admissions says {most}); evictions {truth.evictions}; finishes "
        + ", ".join(f"{r} {n}" for r, n in sorted(truth.finish_reasons.items()))
    )
    print(
        f"final states: {final_states}; submitter refused {len(submitter.refused)} times, "
        f"{submitter.skipped} of a refused batch were in fact stored"
    )
    print(
        f"audit log: {truth.transactions} transactions replayed"
        + (f", {truth.no_commit_time} rows without a commit time" if truth.no_commit_time else "")
        + f"; live checks {checker.checks} ({checker.unanswered} unanswered in outages)"
    )
    print(
        f"replicas that exited by themselves (and were started again): {len(chaos.exits)}"
        + "".join(f"\n  {r} exit {code}: {last}" for r, code, last in chaos.exits)
    )
    print(f"replicas' exit codes at SIGTERM: {exits}")
    print()

    def instants(bs: list[Breach]) -> tuple[int, str]:
        """Transactions after which something was over, and the first few of them."""
        first = sorted(bs, key=lambda b: b.at)[:3]
        return len({b.at for b in bs}), ", ".join(
            f"{b.what} {b.used}/{b.limit} at +{b.at - t0:.1f} s" for b in first
        )

    def overlaps(found: list[tuple[str, Run, Run]]) -> tuple[int, str]:
        return len(found), ", ".join(
            f"{name} admitted at +{a.start - t0:.1f} s and +{b.start - t0:.1f} s"
            for name, a, b in found[:3]
        )

    live = checker.violations
    checks = [
        ("lost", (len(lost), ", ".join(lost[:5]))),
        ("double-running", overlaps(double)),
        ("overcommits", instants(over)),
        ("overcommits seen live", (len(live), ", ".join(map(str, live[:3])))),
        ("quota breaches", instants(breach)),
        ("rows vanished", (len(checker.fell), ", ".join(checker.fell[:3]))),
        ("log inconsistent", (len(truth.inconsistent), "; ".join(truth.inconsistent[:3]))),
    ]
    # An evicted gang's pods run until the backend has stopped them (its requeue): counted
    # until then, its room and quota must not have been given to anyone else meanwhile.
    strict = [
        ("double-running, strict", overlaps(double_strict)),
        ("overcommits, strict", instants(over_strict)),
        ("quota breaches, strict", instants(breach_strict)),
    ]
    width = max(len(c[0]) for c in checks + strict)
    for name, (n, example) in checks:
        print(f"{name:{width}s}  {n}" + (f"   e.g. {example}" if n else ""))
    print(
        "counting an evicted gang until its pods stopped (its requeue)"
        + ("" if args.strict else " (not part of the verdict without --strict)")
        + ":"
    )
    for name, (n, example) in strict:
        print(f"{name:{width}s}  {n}" + (f"   e.g. {example}" if n else ""))
    counted = checks + (strict if args.strict else [])
    ok = all(n == 0 for _, (n, _) in counted) and drained and not chaos.no_leader
    print("PASS" if ok else "FAIL")
    if not ok:
        print(replica_logs())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
