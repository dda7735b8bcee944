"""Preemption is stable: random small cohorts never waste, repeat or reverse an eviction.

Each example is one small world run end to end through the simulator under both
``preemptor_admission`` policies: 2-3 ClusterQueues of one cohort (fair sharing on or
off) whose nominal quotas add up to the cluster (2-4 nodes of 8 GPUs), borrowing allowed,
reclaim ``Any``/``LowerPriority`` and within-queue ``LowerPriority``/``Never``; single
pods of 1-8 GPUs and gangs of 2-3 whole nodes (often a head that cannot get quota, so it
gets a reservation and the backfill guard is active), priorities 0-2, staggered
submissions (a job may come as a stream of up to 4 copies, which keeps cycles coming
while a victim runs), runtimes of 10-500 s and often a ``max_runtime`` (at least the
runtime, or less). Every workload fits the empty cluster, so every run ends with all of
them finished: a preemptor that is never admitted is a failure, not a run cut short.
The search is steered (``target``) towards many evictions and long-waiting preemptors.

The properties, one test each so that each can fail on its own (the cycle's decisions
are read through the engine's observer, one record per cycle):

1. no wasted preemption: once V is evicted for P, V is not admitted again before P is
   (the same cycle counts as "not before");
2. no repeated eviction: the pair (victim V, preemptor P) occurs in at most one eviction
   per pending spell of P, i.e. over the whole run unless P was itself evicted in
   between (and so queued afresh, a new claim). A preemptor that never lost its place
   evicts a given victim at most once. A repeat implies a wasted preemption (1); it is
   a test of its own because it is the reported symptom, evictions that pile up;
3. no A->B->A reversal: if A (queue X) evicted B (queue Y), B does not later evict A
   unless the situation that let A take from B changed in B's favour: between the two
   cycles (both included) X admitted a workload other than A, or a workload of Y other
   than B stopped (finished or was evicted). Without either, the rules cannot allow
   both: after a reclaim, X is within nominal with A and cannot borrow again without
   another admission; after fair sharing, X's share with A was at most Y's without B,
   so B's share with it exceeds X's share without A unless Y shrank or X grew. Without
   that exception the statement is false under the rules: X reclaims from Y at t=48,
   X's peer jobs end and Y admits more, and at t=69 X's job takes Y's back by fair
   sharing. Per pair of ClusterQueues it would be false too: a borrower may rightly be
   reclaimed from and later reclaim back, as usage moves. Unlike 1, 2 and 4 it holds on
   the code the stability issue was filed against (562d4ec): a reversal takes a wrong
   preemption rule, not a wrong cycle, and that code's rules were right. It fails on the
   two mistakes it guards against (each tried by editing core/preemption.py): with the
   fair-sharing check dropped (``q0/w1-0`` takes ``q1/w0`` at t=5, which takes it back
   at t=65), and with the preemptor's share taken before its own admission rather than
   after it (the same reversal, between ``q0/w3`` and ``q1/w0-1``);
4. a preemptor within its nominal quota (reason ``InCohortReclamation``) is admitted by
   the second cycle after its victims stop: at the eviction under ``same_cycle`` (it is
   then admitted in that very cycle), ``victim_stop_delay`` seconds after it under
   ``after_victims_stop`` (0 where the policy has no such knob).

Every test also asserts that the run ended by itself (no livelock: at most MAX_CYCLES
cycles) and that the simulator's own invariant checker found nothing. All are
derandomized and use no example database, so a run is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, event, given, settings, target

from queuemgr.core.policy import Ordering, PreemptorAdmission, SchedulerPolicy
from queuemgr.core.reasons import Decisions
from queuemgr.core.snapshot import Config, Snapshot
from queuemgr.sim.engine import Engine, SimResult
from queuemgr.spec.scenario import SimWorkload
from tests.builders import World, make_cq, make_nodes, make_workload
from tests.worlds import Spec, build, specs

STABILITY = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    report_multiple_bugs=False,  # one failure, shrunk; not every distinct one
)
ADMISSIONS = pytest.mark.parametrize(
    "admission",
    [
        pytest.param(
            SchedulerPolicy(preemptor_admission=PreemptorAdmission.SAME_CYCLE), id="same-cycle"
        ),
        pytest.param(
            SchedulerPolicy(preemptor_admission=PreemptorAdmission.AFTER_VICTIMS_STOP),
            id="after-victims-stop",
        ),
        # Victims that take a while to stop: cycles run while the claim is held.
        pytest.param(SchedulerPolicy(victim_stop_delay=7.0), id="after-victims-stop-7s"),
        # The policy replay's best: a queue admits past its head and its reservations while
        # a claim is held, and the largest pending gang is tried first.
        pytest.param(
            SchedulerPolicy(
                reservation_depth=4,
                ordering=Ordering.USAGE,
                largest_reservations=1,
                largest_min_gpus=9,
            ),
            id="reservations-usage-largest",
        ),
    ],
)
RECLAIM = "InCohortReclamation"
# A run of a few dozen workloads takes tens of cycles; this many is a livelock.
MAX_CYCLES = 1000


# -- the worlds ------------------------------------------------------------------------


# -- running a world and reading what each cycle decided -------------------------------


class Evicted(NamedTuple):
    victim: str
    victim_cq: str
    preemptor: str
    preemptor_cq: str
    reason: str


@dataclass
class Cycle:
    index: int
    now: float
    admitted: dict[str, str]  # workload -> ClusterQueue
    evicted: list[Evicted]
    finished: dict[str, str]  # finished since the previous cycle: workload -> ClusterQueue


class Livelock(Exception):
    """The run went on for more than MAX_CYCLES cycles."""


@dataclass
class Trace:
    policy: SchedulerPolicy
    result: SimResult | None  # None: cut short, a livelock
    cycles: list[Cycle]

    @property
    def stop_delay(self) -> float:
        """Seconds a victim takes to stop after its eviction (the lead's knob, if any)."""
        if self.policy.preemptor_admission is PreemptorAdmission.SAME_CYCLE:
            return 0.0
        return float(getattr(self.policy, "victim_stop_delay", 0.0))

    def evictions(self) -> list[tuple[Cycle, Evicted]]:
        return [(c, e) for c in self.cycles for e in c.evicted]

    def first_admission(self, wid: str, since: int) -> Cycle | None:
        """The first cycle at or after index ``since`` that admits ``wid``."""
        return next((c for c in self.cycles[since:] if wid in c.admitted), None)

    def waiting(self) -> int:
        """Cycles, summed over the preemptions, before their preemptor was admitted."""
        total = 0
        for c in self.cycles:
            for p in {e.preemptor for e in c.evicted}:
                got_in = self.first_admission(p, c.index)
                total += (len(self.cycles) if got_in is None else got_in.index) - c.index
        return total

    def log(self, limit: int = 60) -> str:
        """The run, cycle by cycle (its first ``limit`` lines), for failure messages."""
        lines: list[str] = []
        for c in self.cycles:
            parts = [f"finished {sorted(c.finished)}"] if c.finished else []
            parts += [f"evict {e.victim} for {e.preemptor} ({e.reason})" for e in c.evicted]
            parts += [f"admit {w}" for w in c.admitted]
            if parts:
                lines.append(f"  cycle {c.index} t={c.now:g}: " + "; ".join(parts))
        if len(lines) > limit:
            lines[limit:] = [f"  ... {len(lines) - limit} more"]
        return "\n".join(lines)


def simulate(spec: Spec, admission: SchedulerPolicy) -> Trace:
    config, workloads = build(spec)
    trace = run_world(config, workloads, admission)
    n = len(trace.evictions())
    event(f"evictions: {'0' if n == 0 else '1-2' if n <= 2 else '3+'}")
    # Steer the search towards runs with many evictions and preemptors that wait long.
    target(float(n), label="evictions")
    target(float(trace.waiting()), label="cycles preemptors waited")
    return trace


def run_world(config: Config, workloads: Sequence[SimWorkload], policy: SchedulerPolicy) -> Trace:
    cycles: list[Cycle] = []
    finished: dict[str, str] = {}

    def emit(e: dict[str, object]) -> None:
        if e["event"] == "finished":
            finished[str(e["workload"])] = str(e["cluster_queue"])

    def observe(now: float, _snapshot: Snapshot, decisions: Decisions, _took: float) -> None:
        if len(cycles) >= MAX_CYCLES:
            raise Livelock
        cycles.append(
            Cycle(
                index=len(cycles),
                now=now,
                admitted={a.workload.id: a.admission.cluster_queue for a in decisions.admitted},
                evicted=[
                    Evicted(
                        victim=e.victim.workload.id,
                        victim_cq=e.victim.admission.cluster_queue,
                        preemptor=e.preemptor,
                        preemptor_cq=e.preemptor_cluster_queue,
                        reason=e.reason.value,
                    )
                    for e in decisions.evicted
                ],
                finished=dict(finished),
            )
        )
        finished.clear()

    engine = Engine(config, workloads, emit=emit, observer=observe, policy=policy)
    try:
        result: SimResult | None = engine.run()
    except Livelock:
        result = None
    return Trace(policy=policy, result=result, cycles=cycles)


def check_run(trace: Trace) -> None:
    """The run ended by itself, and the simulator's invariant checker found nothing."""
    assert trace.result is not None, (
        f"livelock: still going after {MAX_CYCLES} cycles\n{trace.log()}"
    )
    assert trace.result.invariant_violations == [], trace.result.invariant_violations


# -- the properties, as checks on one trace --------------------------------------------


def wasted_preemptions(trace: Trace) -> list[str]:
    """Victims admitted again while the preemptor that evicted them still waits."""
    out = []
    for c, e in trace.evictions():
        back = next((d for d in trace.cycles[c.index + 1 :] if e.victim in d.admitted), None)
        if back is None:
            continue
        got_in = trace.first_admission(e.preemptor, c.index)
        if got_in is None or got_in.index > back.index:
            out.append(
                f"{e.victim} evicted at t={c.now:g} for {e.preemptor}, admitted again at "
                f"t={back.now:g} while {e.preemptor} still waited"
                + ("" if got_in is None else f" (admitted at t={got_in.now:g})")
            )
    return out


def repeated_evictions(trace: Trace) -> list[str]:
    """Evictions of the same victim for the same preemptor within one pending spell of it."""
    out = []
    last: dict[tuple[str, str], Cycle] = {}
    for c, e in trace.evictions():
        pair = (e.victim, e.preemptor)
        before = last.get(pair)
        if before is not None:
            requeued = any(
                x.victim == e.preemptor
                for d in trace.cycles[before.index + 1 : c.index]
                for x in d.evicted
            )
            if not requeued:
                out.append(
                    f"{e.victim} evicted for {e.preemptor} at t={before.now:g} and again "
                    f"at t={c.now:g}, {e.preemptor} never evicted in between"
                )
        last[pair] = c
    return out


def reversals(trace: Trace) -> list[str]:
    """B evicting A after A evicted B, with nothing changed in B's favour in between."""
    out = []
    evictions = trace.evictions()
    for i, (c1, first) in enumerate(evictions):
        a, b = first.preemptor, first.victim
        x, y = first.preemptor_cq, first.victim_cq
        for c2, second in evictions[i + 1 :]:
            if (second.preemptor, second.victim) != (b, a) or c2.index <= c1.index:
                continue
            window = trace.cycles[c1.index : c2.index + 1]
            grew = any(w != a and cq == x for d in window for w, cq in d.admitted.items())
            shrank = any(
                (w != b and cq == y)
                for d in window
                for w, cq in [*d.finished.items(), *((v.victim, v.victim_cq) for v in d.evicted)]
            )
            if not grew and not shrank:
                out.append(
                    f"{a} ({x}) evicted {b} ({y}) at t={c1.now:g} ({first.reason}), then {b} "
                    f"evicted {a} at t={c2.now:g} ({second.reason}); meanwhile {x} admitted "
                    f"nothing else and nothing else of {y} stopped"
                )
    return out


def slow_reclaims(trace: Trace) -> list[str]:
    """In-nominal preemptors not admitted by the second cycle after their victims stop."""
    out = []
    seen: set[tuple[str, int]] = set()
    same = trace.policy.preemptor_admission is PreemptorAdmission.SAME_CYCLE
    for c, e in trace.evictions():
        if e.reason != RECLAIM or (e.preemptor, c.index) in seen:
            continue
        seen.add((e.preemptor, c.index))
        stop = c.now + trace.stop_delay
        after = [d for d in trace.cycles[c.index + 1 :] if d.now >= stop]
        allowed = ([c] if same else []) + after[:2]
        got_in = trace.first_admission(e.preemptor, c.index)
        if got_in is not None and (not allowed or got_in.index <= allowed[-1].index):
            continue
        if got_in is None:
            late = "never admitted"
        else:
            nth = sum(1 for d in after if d.index <= got_in.index)
            late = f"admitted at t={got_in.now:g}, cycle {nth} after the stop"
        out.append(
            f"{e.preemptor} reclaimed from {e.victim} at t={c.now:g} (victims stop at "
            f"t={stop:g}) and was {late}"
        )
    return out


def _assert(trace: Trace, check: Callable[[Trace], list[str]]) -> None:
    found = check(trace)
    assert not found, "\n".join([*found, "the run:", trace.log()])
    check_run(trace)


# -- the tests ---------------------------------------------------------------------------


@ADMISSIONS
@STABILITY
@given(spec=specs())
def test_no_wasted_preemption(admission: SchedulerPolicy, spec: Spec) -> None:
    _assert(simulate(spec, admission), wasted_preemptions)


@ADMISSIONS
@STABILITY
@given(spec=specs())
def test_no_workload_is_evicted_twice_for_the_same_preemptor(
    admission: SchedulerPolicy, spec: Spec
) -> None:
    _assert(simulate(spec, admission), repeated_evictions)


@ADMISSIONS
@STABILITY
@given(spec=specs())
def test_no_preemption_is_reversed(admission: SchedulerPolicy, spec: Spec) -> None:
    _assert(simulate(spec, admission), reversals)


@ADMISSIONS
@STABILITY
@given(spec=specs())
def test_an_in_nominal_preemptor_is_admitted_within_two_cycles_of_its_victims_stopping(
    admission: SchedulerPolicy, spec: Spec
) -> None:
    trace = simulate(spec, admission)
    _assert(trace, slow_reclaims)
    # Every workload fits the empty cluster: nothing may be left waiting or running.
    res = trace.result
    assert res is not None
    assert (res.pending_at_end, res.running_at_end, res.not_submitted) == (0, 0, 0), trace.log()
    assert res.finished == res.workloads


# -- the reported case -------------------------------------------------------------------


def _reported_case() -> tuple[Config, list[SimWorkload]]:
    """Two 8-GPU queues of one cohort on two nodes.

    team-b runs b-long within its nominal quota and borrows the other node for a stream
    of short jobs (one submitted every 10 s, each with a max_runtime). team-a's head is
    a 2x8 gang that cannot get quota, so it gets a reservation (from b-long's end);
    behind it a-one (8 GPUs, no max_runtime) is within team-a's nominal quota and
    reclaims the borrowed node from b-short-0.
    """
    world = World().cq(
        make_cq("team-a").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
        make_cq("team-b").cohort("c").nominal(gpu=8, cpu="96").preempt(reclaim="Any"),
    )
    world.node(make_nodes("n", 2))

    def job(
        name: str, ns: str, at: float, runtime: float, limit: float | None, pods: int = 1
    ) -> SimWorkload:
        w = make_workload(name).ns(ns).gang(pods).gpus(8).cpu(1).at(at).max_runtime(limit)
        return SimWorkload(workload=w.build(), runtime=runtime)

    workloads = [
        job("b-long", "team-b", 0, 500, 500),
        *(job(f"b-short-{k}", "team-b", 1 + 10 * k, 100, 110) for k in range(10)),
        job("a-gang", "team-a", 10, 100, 100, pods=2),
        job("a-one", "team-a", 11, 100, None),
    ]
    return world.config(), workloads


@ADMISSIONS
def test_a_reclaim_behind_a_reserved_gang_evicts_once(admission: SchedulerPolicy) -> None:
    # On the code this was written against, after_victims_stop went: a-one evicts
    # b-short-0 (t=11); next cycle the backfill guard of a-gang's reservation refuses
    # a-one (no max_runtime), b-short-0 backfills again (its max_runtime ends before the
    # reservation) and is evicted again at the next cycle: 9 evictions, a-one admitted
    # at t=1100.
    config, workloads = _reported_case()
    trace = run_world(config, workloads, admission)
    found = [*repeated_evictions(trace), *wasted_preemptions(trace), *slow_reclaims(trace)]
    assert not found, "\n".join([*found, "the run:", trace.log()])
    check_run(trace)
    assert trace.result is not None
    assert trace.result.evictions <= 1, trace.log()
    assert trace.result.finished == len(workloads), trace.log()
