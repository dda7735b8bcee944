"""The engine of ``queuemgr demo``: the real service, a burst on time, and what it shows.

Why it exists: on a fresh machine, one command should show what queuemgr
does: tenants borrowing idle GPUs, reclaiming them by preemption, gangs
admitted whole. Nothing here simulates the scheduler: :class:`Demo` runs the
composition root (:class:`~queuemgr.service.app.Service`: loop, NOTIFY, leader
election, simulated backend) on the cluster file ``demo_cluster.yaml``,
submits the seeded burst of :mod:`queuemgr.demo.burst` on time, and reads
what happened back from the database for the view and the summary
(:mod:`queuemgr.demo.demo_figures`). The database it runs on comes from
:func:`queuemgr.demo.demo_database.prepare_database`.

What must stay true: the summary's counts, waits and utilization are computed
from the workload rows (:mod:`queuemgr.store.readouts`); admissions and
preemptions are the service's own counters of committed decisions, since a
row keeps only its latest admission. Every read of the view checks that no
node holds more GPUs than it has, and a violation is reported, never hidden.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import NodeName
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import Config
from queuemgr.demo.burst import Submission, horizon, plan
from queuemgr.demo.demo_database import DemoDatabase
from queuemgr.demo.demo_figures import (
    Event,
    Frame,
    NodeLine,
    QueueLine,
    Summary,
    summarize_rows,
)
from queuemgr.metrics import SchedulerMetrics
from queuemgr.service.app import Service
from queuemgr.service.settings import ServiceConfig
from queuemgr.store.config_objects import load_config
from queuemgr.store.handle import Database
from queuemgr.store.readouts import WorkloadProgress, workload_progress
from queuemgr.store.transitions import submit_workload

CLUSTER_FILE = "demo_cluster.yaml"
TICK = 0.25  # seconds between two reads of the database (the view's refresh)
QUEUED = (WorkloadState.PENDING, WorkloadState.INADMISSIBLE, WorkloadState.EVICTED)


def _gpus(v: Mapping[Any, int]) -> int:
    return int(v.get(GPU, 0))


def _counter(metrics: SchedulerMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A counter's samples by their sorted labels."""
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in metrics.registry.collect():
        if family.name != name:
            continue
        for s in family.samples:
            if s.name == f"{name}_total":
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


# -- the run -------------------------------------------------------------------------


@dataclass
class _Seen:
    state: WorkloadState
    admitted_at: float | None
    borrowing: bool


@dataclass
class _Tally:
    previous: dict[str, _Seen] = field(default_factory=dict)
    preemptions_seen: int = 0
    preempted: list[str] = field(default_factory=list)  # in the order seen
    busy_gpu_seconds: float = 0.0
    sampled_s: float = 0.0
    last_sample: float | None = None
    last_used: int = 0
    violations: list[str] = field(default_factory=list)


def _requeued(*, borrowing: bool) -> str:
    return "requeued (was borrowing)" if borrowing else "requeued"


@contextmanager
def _cluster_file() -> Iterator[Path]:
    with resources.as_file(resources.files(__package__).joinpath(CLUSTER_FILE)) as path:
        yield path


# The demo's jobs run for seconds where real ones run for hours, so its requeue backoff
# is shortened as well (Kueue's 60 s would outlast the whole burst); ``speed`` then
# compresses it like every other duration of the demo.
DEMO_BACKOFF_BASE = 5.0
DEMO_BACKOFF_MAX = 40.0


def demo_policy(speed: float) -> SchedulerPolicy:
    """The service's default policy, with the backoff on the demo's time scale."""
    return dataclasses.replace(
        SchedulerPolicy(),
        requeue_backoff_base=DEMO_BACKOFF_BASE / speed,
        requeue_backoff_max=DEMO_BACKOFF_MAX / speed,
    )


class Demo:
    """One demo run: build with :func:`prepare_database`'s result, then :meth:`run`."""

    def __init__(
        self,
        database: DemoDatabase,
        *,
        jobs: int,
        seed: int,
        speed: float,
    ) -> None:
        self.database = database
        self.seed = seed
        self.speed = speed
        self.plan: tuple[Submission, ...] = plan(jobs, seed, speed)
        self._clock = time.time
        with _cluster_file() as cluster:
            config = ServiceConfig(
                database_url=database.url,
                cluster_file=cluster,
                cycle_interval=1.0,
                http_host="127.0.0.1",
                http_port=0,
                replica=f"demo-{os.getpid()}",
                policy=demo_policy(speed),
            )
            self.service = Service(config)
        self.db = Database.open(database.url)
        with self.db.read() as conn:
            self.config: Config = load_config(conn)[0]
        self._next = 0  # index of the next submission in the plan
        self._tally = _Tally()
        self.started: float | None = None
        self._stopped = False
        self.waiting: list[str] = []  # queued workloads at the summary, oldest first

    # -- facts about the cluster -----------------------------------------------------
    @property
    def gpu_capacity(self) -> int:
        return sum(_gpus(n.allocatable) for n in self.config.nodes.values() if n.schedulable)

    @property
    def metrics_url(self) -> str:
        host, port = self.service.http.address
        return f"http://{host}:{port}/metrics"

    def timeout(self) -> float:
        """Seconds after which an unfinished run is given up: generous, the machine is shared."""
        return 4 * horizon(self.plan) + 60.0

    # -- running --------------------------------------------------------------------
    def start(self) -> None:
        self.service.start()
        self.started = self._clock()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # A cycle cut short by the shutdown warns that it lost the leader's lease:
        # expected here, and noise at the end of the demo's output.
        quiet = [logging.getLogger(name) for name in ("queuemgr.service", "queuemgr.controller")]
        levels = [logger.level for logger in quiet]
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        try:
            self.service.stop()
        finally:
            for logger, level in zip(quiet, levels, strict=True):
                logger.setLevel(level)

    def run(self, on_frame: Callable[[Frame], None], stop: threading.Event) -> str:
        """Submit on time and report a frame per tick until done, stopped or timed out."""
        if self.started is None:
            self.start()
        assert self.started is not None
        deadline = self.started + self.timeout()
        while True:
            frame = self.step()
            on_frame(frame)
            if frame.done:
                return "finished"
            now = self._clock()
            if now > deadline:
                return "timed out"
            wake = now + TICK
            if self._next < len(self.plan):
                wake = min(wake, self.started + self.plan[self._next].at)
            if stop.wait(max(0.0, wake - now)):
                return "interrupted"

    def step(self) -> Frame:
        """Submit what is due, read the database once, and describe what changed."""
        assert self.started is not None
        self._submit_due(self._clock())
        rows = workload_progress(self.db)
        return self._frame(rows, self._clock())

    def _submit_due(self, now: float) -> None:
        due: list[Submission] = []
        started = self.started
        assert started is not None
        while self._next < len(self.plan) and started + self.plan[self._next].at <= now:
            due.append(self.plan[self._next])
            self._next += 1
        if due:
            with self.db.write() as conn:
                for s in due:
                    submit_workload(conn, s.workload(created_at=self._clock()))

    # -- reading ---------------------------------------------------------------------
    def _frame(self, rows: list[WorkloadProgress], now: float) -> Frame:
        assert self.started is not None
        t = self._tally
        events = self._events(rows)
        nodes = self._nodes(rows)
        used = sum(n.used for n in nodes)
        if t.last_sample is not None:
            dt = now - t.last_sample
            t.busy_gpu_seconds += t.last_used * dt
            t.sampled_s += dt
        t.last_sample, t.last_used = now, used
        counters = self._counters()
        return Frame(
            elapsed=now - self.started,
            queues=self._queues(rows),
            nodes=nodes,
            events=tuple(events),
            planned=len(self.plan),
            submitted=len(rows),
            finished=sum(1 for r in rows if r.state is WorkloadState.FINISHED),
            admissions=counters[0],
            preemptions=counters[1],
            leader=self.service.elector.is_leader,
        )

    def _counters(self) -> tuple[int, int]:
        metrics = self.service.metrics
        admissions = sum(_counter(metrics, "queuemgr_admitted_workloads").values())
        preemptions = sum(_counter(metrics, "queuemgr_preempted_workloads").values())
        return int(admissions), int(preemptions)

    def _events(self, rows: list[WorkloadProgress]) -> list[Event]:
        assert self.started is not None
        t0 = self.started
        out: list[tuple[float, int, Event]] = []

        def add(at: float, order: int, kind: str, r: WorkloadProgress, detail: str = "") -> None:
            e = Event(at=at - t0, kind=kind, workload=r.id, gpus=r.gpus, detail=detail)
            out.append((at, order, e))

        for r in rows:
            before = self._tally.previous.get(r.id)
            if before is None:
                add(r.created_at, 0, "submitted", r)
            prior_admission = None if before is None else before.admitted_at
            readmitted = r.admitted_at is not None and r.admitted_at != prior_admission
            running_now = r.state in (WorkloadState.ADMITTED, WorkloadState.FINISHED)
            was_running = before is not None and before.state is WorkloadState.ADMITTED
            if was_running and (readmitted or not running_now):
                at = r.admitted_at if readmitted and r.admitted_at else r.state_since
                assert before is not None
                add(at, 1, "preempted", r, _requeued(borrowing=before.borrowing))
                self._seen_preempted(r.id)
            if readmitted and r.admitted_at is not None:
                where = " ".join(f"{n}:{g}" for n, g in sorted(r.nodes.items()))
                borrowing = " borrowing" if r.borrowing else ""
                add(r.admitted_at, 2, "admitted", r, f"{where}{borrowing}".strip())
                if not running_now:  # admitted and preempted between two reads
                    add(r.state_since, 3, "preempted", r, _requeued(borrowing=r.borrowing))
                    self._seen_preempted(r.id)
            if r.state is WorkloadState.FINISHED and (
                before is None or before.state is not WorkloadState.FINISHED
            ):
                assert r.finished_at is not None
                add(r.finished_at, 4, "finished", r, r.reason)
            self._tally.previous[r.id] = _Seen(
                state=r.state, admitted_at=r.admitted_at, borrowing=r.borrowing
            )
        out.sort(key=lambda x: (x[0], x[1]))
        return [e for _, _, e in out]

    def _seen_preempted(self, wid: str) -> None:
        self._tally.preemptions_seen += 1
        if wid not in self._tally.preempted:
            self._tally.preempted.append(wid)

    @property
    def preempted(self) -> list[str]:
        """The workloads the view saw preempted, first seen first."""
        return list(self._tally.preempted)

    def _nodes(self, rows: list[WorkloadProgress]) -> tuple[NodeLine, ...]:
        held: dict[str, dict[str, int]] = {name: {} for name in self.config.nodes}
        for r in rows:
            for node, gpus in r.nodes.items():
                per = held.setdefault(node, {})
                per[r.namespace] = per.get(r.namespace, 0) + gpus
        lines = []
        for name in sorted(held):
            spec = self.config.nodes.get(NodeName(name))
            capacity = 0 if spec is None else _gpus(spec.allocatable)
            line = NodeLine(name=name, capacity=capacity, held=held[name])
            if line.used > capacity:
                self._tally.violations.append(
                    f"node {name} held {line.used} GPUs of {capacity} "
                    f"at {self._clock() - (self.started or 0):.1f}s"
                )
            lines.append(line)
        return tuple(lines)

    def _queues(self, rows: list[WorkloadProgress]) -> tuple[QueueLine, ...]:
        routes = {key: lq.cluster_queue for key, lq in self.config.local_queues.items()}
        lines = []
        for name, cq in sorted(self.config.cluster_queues.items()):
            nominal = sum(_gpus(fq.nominal) for fq in cq.flavors)
            mine = [r for r in rows if routes.get((r.namespace, r.local_queue)) == name]
            running = [r for r in mine if r.state is WorkloadState.ADMITTED]
            pending = [r for r in mine if r.state in QUEUED]
            reasons: dict[str, int] = {}
            for r in pending:
                reasons[r.reason] = reasons.get(r.reason, 0) + 1
            lines.append(
                QueueLine(
                    cluster_queue=name,
                    nominal=nominal,
                    used=sum(r.gpus for r in running),
                    pending=len(pending),
                    running=len(running),
                    finished=sum(1 for r in mine if r.state is WorkloadState.FINISHED),
                    reasons=reasons,
                )
            )
        return tuple(lines)

    # -- the end -------------------------------------------------------------------------
    def summary(self, outcome: str) -> Summary:
        """The run's figures from the database rows (and the service's decision counters)."""
        now = self._clock()
        rows = workload_progress(self.db)
        self.waiting = [r.id for r in rows if r.state in QUEUED]
        tenants, span, utilization = summarize_rows(rows, capacity=self.gpu_capacity, now=now)
        admissions, preemptions = self._counters()
        by: dict[str, int] = {}
        for labels, value in _counter(self.service.metrics, "queuemgr_preempted_workloads").items():
            cq = dict(labels).get("preemptor_cluster_queue", "")
            by[cq] = by.get(cq, 0) + int(value)
        t = self._tally
        return Summary(
            outcome=outcome,
            seed=self.seed,
            speed=self.speed,
            planned=len(self.plan),
            submitted=len(rows),
            finished=sum(1 for r in rows if r.state is WorkloadState.FINISHED),
            admitted=sum(1 for r in rows if r.admitted_at is not None),
            admissions=admissions,
            preemptions=preemptions,
            preemptions_by=dict(sorted(by.items())),
            preemptions_seen=t.preemptions_seen,
            max_preemptions_per_workload=self.service.preemptions.most_per_workload,
            wasted_preemptions=self.service.preemptions.wasted,
            lost_gpu_seconds=self.service.preemptions.lost_gpu_seconds,
            tenants=tenants,
            gpu_capacity=self.gpu_capacity,
            span_s=span,
            gpu_utilization=utilization,
            gpu_busy=(
                t.busy_gpu_seconds / (self.gpu_capacity * t.sampled_s)
                if t.sampled_s > 0 and self.gpu_capacity
                else None
            ),
            node_violations=tuple(t.violations),
            elapsed_s=now - (self.started or now),
        )

    def close(self) -> None:
        self.stop()
        self.db.dispose()
