"""``serve`` decides what ``simulate`` decides: same admissions and evictions, same order.

Each scenario of bench/scenarios/ (and docs/examples/quickstart.yaml) is run twice:

1. by the simulator, ``queuemgr.sim.engine.Engine(config, workloads, emit=...,
   policy=scenario.policy)``, exactly as ``queuemgr simulate`` runs it; its
   ``admitted`` and ``evicted`` events are recorded in emission order;
2. by the service's loop (``SchedulerLoop.run_once``) on a migrated Postgres
   database, with the scenario's objects upserted the way ``queuemgr serve
   --backend simulated --cluster FILE`` does at start (``service.app._seed_cluster``
   on the scenario minus its workloads; the configuration the store then holds
   must be the scenario's), the scenario's policy, a manual clock and a
   :class:`SimulatedBackend` whose gangs run for their scenario ``runtime``.
   It is driven as the engine drives the core: at each event time (the next
   arrival, the backend's next finish, the loop's next requeue-backoff end) the
   clock is set, the workloads arriving then are submitted through the store
   (``submit_workload``, created_at = their submit time) and one cycle runs;
   while a cycle evicted, another runs at the same instant (the simulator does
   so when ``victim_stop_delay`` is 0; the loop wakes itself once its victims
   stopped). The loop's next wake-up for a backoff must not be later than the
   first ``requeue_at`` stored. Admissions and evictions are recorded from each
   cycle's ``Decisions.log`` (the ``on_cycle`` callback), in decision order.

The two sequences must be equal: time, workload, and for an admission its
ClusterQueue, flavor, pods per node, borrowing and (partial) pods; for an
eviction its preemptor and reason. The first difference is printed with the
events around it.

Scenarios too large for a test (kueue-baseline: 15,000 workloads,
gang-starvation: 2,001) are cut to their first ``LIMITS[name]`` workloads by
submit time (ties by id, the engine's arrival order), on BOTH sides; a scenario
with no workloads (philly-160x8, a trace's cluster) still runs a cycle and both
sides must admit nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy import Engine

from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.loop import SchedulerLoop
from queuemgr.controller.simulated import SimulatedBackend
from queuemgr.core.model import AdmittedWorkload, Node, WorkloadId
from queuemgr.core.policy import OverrunPolicy
from queuemgr.core.reasons import Decisions, Eviction
from queuemgr.core.snapshot import Config
from queuemgr.metrics import SchedulerMetrics
from queuemgr.service.app import _seed_cluster
from queuemgr.service.settings import ServiceConfig
from queuemgr.sim.engine import Engine as SimEngine
from queuemgr.sim.engine import Event
from queuemgr.spec.scenario import Scenario, SimWorkload, load_scenario
from queuemgr.store.config_objects import load_config
from queuemgr.store.handle import Database
from queuemgr.store.transitions import submit_workload

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = [
    *sorted((ROOT / "bench" / "scenarios").glob("*.yaml")),
    ROOT / "docs" / "examples" / "quickstart.yaml",
]
# Workloads kept (the first by submit time) where the whole scenario would take minutes.
LIMITS = {"kueue-baseline.yaml": 3000, "gang-starvation.yaml": 800}

# One recorded decision: (t, kind, workload, details...).
Record = tuple[object, ...]


class ManualClock:
    """The service's clock, set to each event time (never accumulated: t is exact)."""

    def __init__(self, now: float = 0.0) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    def set(self, now: float) -> None:
        assert now >= self._now, f"the clock went back from {self._now} to {now}"
        self._now = now


class ScenarioBackend(SimulatedBackend):
    """The simulated backend, each gang running for its scenario ``runtime``
    (cut at ``max_runtime`` under overrun_policy evict, as the engine cuts it)."""

    def __init__(
        self,
        nodes: list[Node],
        scenario: Scenario,
        workloads: Sequence[SimWorkload],
        clock: ManualClock,
    ) -> None:
        super().__init__(nodes, clock, default_runtime=0.0)
        evict = scenario.policy.overrun_policy is OverrunPolicy.EVICT
        self._runtimes: dict[WorkloadId, float] = {}
        for sw in workloads:
            limit = sw.workload.max_runtime
            cut = evict and limit is not None and sw.runtime > limit
            self._runtimes[sw.workload.id] = limit if cut and limit is not None else sw.runtime

    def runtime_of(self, admitted: AdmittedWorkload) -> float:
        return self._runtimes[admitted.workload.id]


def _admission(t: float, a: AdmittedWorkload) -> Record:
    adm = a.admission
    partial = a.workload.partial_pod_set is not None and a.partial
    pods = tuple(sorted(a.pods.items())) if partial else None
    placement = tuple(sorted(adm.pods_per_node.items()))
    return (
        t,
        "admitted",
        a.workload.id,
        adm.cluster_queue,
        adm.flavor,
        placement,
        adm.borrowing,
        pods,
    )


def _eviction(t: float, e: Eviction) -> Record:
    return (t, "evicted", e.victim.workload.id, e.preemptor, e.message)


def _selected(scenario: Scenario, name: str) -> list[SimWorkload]:
    ordered = sorted(scenario.workloads, key=lambda s: (s.workload.created_at, s.workload.id))
    limit = LIMITS.get(name)
    return ordered if limit is None else ordered[:limit]


def simulate(scenario: Scenario, workloads: Sequence[SimWorkload]) -> list[Record]:
    """What ``queuemgr simulate`` decides, from its events."""
    out: list[Record] = []

    def emit(ev: Event) -> None:
        t, kind, wid = ev["t"], ev["event"], ev["workload"]
        if kind == "admitted":
            placement = ev["placement"]
            assert isinstance(placement, dict)
            pods = ev.get("pods")
            pods = tuple(sorted(pods.items())) if isinstance(pods, dict) else None
            out.append(
                (
                    t,
                    kind,
                    wid,
                    ev["cluster_queue"],
                    ev["flavor"],
                    tuple(sorted(placement.items())),
                    ev["borrowing"],
                    pods,
                )
            )
        elif kind == "evicted":
            out.append((t, kind, wid, ev["preemptor"], ev["reason"]))

    engine = SimEngine(scenario.config, workloads, emit=emit, policy=scenario.policy)
    result = engine.run()
    assert not result.invariant_violations, result.invariant_violations[:5]
    return out


def _cluster_file(path: Path, tmp_path: Path) -> Path:
    """The scenario without its workloads and policy: what a cluster file may hold.

    The scenario's ``scheduler:`` knobs are the loop's policy instead, as the service
    configuration's ``scheduler:`` key would give them.
    """
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw.pop("workloads", None)
    raw.pop("scheduler", None)
    out = tmp_path / f"cluster-{path.name}"
    out.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return out


def _stored_next_requeue(engine: Engine, now: float) -> float | None:
    with engine.connect() as conn:
        at = conn.execute(
            sa.text(
                "SELECT min(requeue_at) FROM workloads"
                " WHERE state IN ('Pending', 'Inadmissible') AND requeue_at > to_timestamp(:now)"
            ),
            {"now": now},
        ).scalar_one()
    return None if at is None else at.timestamp()


def serve(
    engine: Engine,
    path: Path,
    scenario: Scenario,
    workloads: Sequence[SimWorkload],
    tmp_path: Path,
    *,
    settle: bool = False,
) -> list[Record]:
    """What the service's loop decides on the same input, driven event by event.

    With ``settle``, cycles run at each instant until one decides nothing (the
    real loop also wakes itself after finishes and on every NOTIFY).
    """
    nodes = _seed_cluster(
        Database(engine), ServiceConfig(cluster_file=_cluster_file(path, tmp_path))
    )
    assert {n.name for n in nodes} == set(scenario.config.nodes)
    with engine.connect() as conn:
        stored, _stopped = load_config(conn)
    diff = _config_diff(stored, scenario.config)
    assert not diff, (
        "the store's configuration after `serve --cluster` is not the scenario's:\n" + diff
    )
    out: list[Record] = []

    def on_cycle(d: Decisions, now: float) -> None:
        for item in d.log:
            out.append(
                _eviction(now, item) if isinstance(item, Eviction) else _admission(now, item)
            )

    clock = ManualClock(0.0)
    backend = ScenarioBackend(nodes, scenario, workloads, clock)
    metrics = SchedulerMetrics()
    db = Database(engine)
    elector = LeaderElector(db, replica="a", metrics=metrics, retry_interval=0.2)
    loop = SchedulerLoop(
        db=db,
        backend=backend,
        clock=clock,
        elector=elector,
        metrics=metrics,
        policy=scenario.policy,
        safety_interval=3600.0,  # no safety job here: cycles run only at events
        on_cycle=on_cycle,
    )
    arrivals = sorted(workloads, key=lambda s: (s.workload.created_at, s.workload.id))
    assert elector.step()
    try:
        i, last = 0, None
        while True:
            requeue = getattr(loop, "_next_requeue", None)  # the loop's own wake-up time
            if last is not None:
                stored_requeue = _stored_next_requeue(engine, last)
                assert stored_requeue is None or (
                    requeue is not None and requeue <= stored_requeue
                ), f"at t={last}: a backoff ends at {stored_requeue}, the loop wakes at {requeue}"
            due = [
                t
                for t in (
                    arrivals[i].workload.created_at if i < len(arrivals) else None,
                    backend.next_finish(),
                    requeue,
                )
                if t is not None
            ]
            if not due:
                if last is None:  # no workload at all: the first cycle still runs
                    due = [0.0]
                else:
                    break
            now = min(due)
            assert last is None or now > last, f"no progress at t={now} (last cycle at {last})"
            clock.set(now)
            with engine.begin() as conn:
                while i < len(arrivals) and arrivals[i].workload.created_at == now:
                    submit_workload(conn, arrivals[i].workload)
                    i += 1
            report = loop.run_once()
            assert report is not None
            while report.evicted or (settle and report.admitted):
                # Victims stopped at once: the next cycle follows.
                report = loop.run_once()
                assert report is not None
            last = now
    finally:
        loop.stop()
        elector.stop()
    return out


def _config_diff(stored: Config, wanted: Config) -> str:
    """Each part of the configuration that differs (Config itself compares by identity)."""
    lines = []
    for part in ("flavors", "nodes", "cohorts", "cluster_queues", "local_queues"):
        a, b = getattr(stored, part), getattr(wanted, part)
        for key in sorted(a.keys() | b.keys(), key=str):
            if a.get(key) != b.get(key):
                lines.append(
                    f"  {part}[{key}]:\n    store:    {a.get(key)!r}\n    scenario: {b.get(key)!r}"
                )
        if list(a) != list(b) and a == b:
            lines.append(f"  {part}: in another order: store {list(a)}, scenario {list(b)}")
    return "\n".join(lines)


def _first_difference(sim: list[Record], svc: list[Record]) -> str:
    k = next(
        (j for j, (a, b) in enumerate(zip(sim, svc, strict=False)) if a != b),
        min(len(sim), len(svc)),
    )

    def show(events: list[Record]) -> str:
        return "\n".join(
            f"    [{j}] {events[j]}" for j in range(max(0, k - 3), min(len(events), k + 4))
        )

    return (
        f"simulate recorded {len(sim)} decisions, serve {len(svc)}; first difference at "
        f"#{k}:\n  simulate: {sim[k] if k < len(sim) else '(none)'}\n"
        f"  serve:    {svc[k] if k < len(svc) else '(none)'}\n"
        f"  simulate around it:\n{show(sim)}\n  serve around it:\n{show(svc)}"
    )


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_serve_decides_what_simulate_decides(engine: Engine, path: Path, tmp_path: Path) -> None:
    scenario = load_scenario(path)
    workloads = _selected(scenario, path.name)
    started = time.perf_counter()
    sim = simulate(scenario, workloads)
    svc = serve(engine, path, scenario, workloads, tmp_path)
    took = time.perf_counter() - started
    admitted = sum(1 for r in sim if r[1] == "admitted")
    evicted = sum(1 for r in sim if r[1] == "evicted")
    print(
        f"{path.name}: {len(workloads)} workloads, {admitted} admissions, {evicted} evictions, "
        f"{took:.1f}s"
    )
    if not workloads:
        assert sim == [] and svc == []
    assert sim == svc, _first_difference(sim, svc)


SMALL = [p for p in SCENARIOS if p.name not in LIMITS]

# A higher-priority borrower and a lower-priority in-nominal job of one ClusterQueue
# arrive together on an idle cluster. The first pass admits the in-nominal one; the
# borrower, taken in the second pass, does not fit and may not preempt what this very
# cycle admitted; the next cycle preempts it (InClusterQueue). The service runs that
# next cycle at once (it wakes on the submissions' NOTIFY, after finishes, and on its
# safety cycle), the simulator only at its next event (here t=1000).
TWO_PASS = """
flavors:
  - {name: h100, node_labels: {gpu.product: H100}}
nodes:
  - {name: node, count: 2, flavor: h100, allocatable: {nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}}
cohorts:
  - {name: c}
cluster_queues:
  - name: q0
    cohort: c
    namespaces: [ns0]
    resources:
      - {flavor: h100, nominal: {nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}}
    preemption: {within_cluster_queue: LowerPriority}
  - name: q1
    cohort: c
    namespaces: [ns1]
    resources:
      - {flavor: h100, nominal: {nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}}
local_queues:
  - {namespace: ns0, name: default, cluster_queue: q0}
  - {namespace: ns1, name: default, cluster_queue: q1}
workloads:
  - {name: low, namespace: ns0, queue: default, priority: 0, runtime: 1000,
     pod_sets: [{name: w, count: 1, requests: {nvidia.com/gpu: 8, cpu: 8, memory: 8Gi}}]}
  - {name: high, namespace: ns0, queue: default, priority: 2, runtime: 100,
     pod_sets: [{name: w, count: 2, requests: {nvidia.com/gpu: 8, cpu: 8, memory: 8Gi}}]}
"""
SETTLING = [
    *(pytest.param(p, id=p.stem) for p in SMALL),
    # The first pass once admitted `low` ahead of `high`, which evicted it at once.
    pytest.param("two-pass", id="two-pass"),
]


@pytest.mark.parametrize("path", SETTLING)
def test_more_cycles_at_one_instant_change_nothing(
    engine: Engine, path: Path | str, tmp_path: Path
) -> None:
    """The real loop also wakes itself after finishes, on every NOTIFY (a submission, a
    requeue) and on its safety cycle, so it may run several cycles at one instant: once
    a cycle admitted and evicted nothing more, another at the same instant must not
    either, or serve decides at once what simulate decides only at its next event. Here
    cycles run at each instant until one decides nothing; the decisions must stay the
    simulator's. (The two scenarios cut in the test above are left out: this doubles
    their cycles.)"""
    if isinstance(path, str):
        written = tmp_path / f"{path}.yaml"
        written.write_text(TWO_PASS, encoding="utf-8")
        path = written
    scenario = load_scenario(path)
    workloads = _selected(scenario, path.name)
    sim = simulate(scenario, workloads)
    svc = serve(engine, path, scenario, workloads, tmp_path, settle=True)
    assert sim == svc, _first_difference(sim, svc)
