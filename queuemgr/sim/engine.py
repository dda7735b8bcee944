"""The discrete-event simulator: virtual time, the core cache, and nothing else.

Why it exists: to replay scenarios and traces through the very scheduler the
service runs. The engine advances a virtual clock, feeds arrivals and
finishes into a ``queuemgr.core`` :class:`Cache`, calls
``schedule(cache.snapshot(), now)`` and applies the decisions verbatim.

What must stay true:

- the engine decides nothing: who is admitted, where and with which flavor
  comes only from ``Decisions``; the engine only knows how long a job runs;
- at one timestamp, finishes are applied first, then victims that stop,
  then requeues after their backoff, then arrivals, then one scheduling cycle
  (skipped only when nothing is pending, when it could admit nothing); when
  that cycle evicts and ``victim_stop_delay`` is 0, the victims stop at once
  and the cycle is followed by another at the same timestamp, as the service
  runs its next cycle once the victims' stop returns;
- preemption follows the service: victims leave the cluster at eviction (their
  room is their preemptor's claim, core.claims), stop ``victim_stop_delay``
  later, and queue again after ``policy.requeue_delay`` of their evictions;
- GPU-seconds of a run count as delivered only when it finishes; a preempted
  run's are lost, and counted apart;
- every workload ends in exactly one bucket: finished, running, pending or
  not yet submitted (``--until``); none is dropped;
- per-workload bookkeeping is O(1) (dicts keyed by workload id, a heap of
  finish times, a sorted arrival list walked by an index);
- ``run(until=T)`` stops before the first event after T and a later ``run``
  resumes there, also on a pickled and restored engine (``emit`` and
  ``observer`` set again): the decisions are those of one uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from queuemgr.core.cache import Cache
from queuemgr.core.claims import Claim
from queuemgr.core.cycle import schedule
from queuemgr.core.fairshare import UsageTracker
from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, Workload, WorkloadId
from queuemgr.core.policy import Ordering, OverrunPolicy, SchedulerPolicy
from queuemgr.core.reasons import Decisions, Eviction, PreemptionReason
from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import Config, Snapshot, admitted_requests
from queuemgr.core.tally import PreemptionTally
from queuemgr.sim.invariants import InvariantChecker
from queuemgr.spec.checks import InputError
from queuemgr.spec.scenario import SimWorkload

Event = dict[str, object]
Emit = Callable[[Event], None]
# Optional, read-only: called after each cycle's decisions are applied with
# (now, the cycle's snapshot, its decisions, seconds schedule() took). It sees
# what the cycle saw and decided and cannot change it (e.g. a metrics exporter).
Observer = Callable[[float, Snapshot, Decisions, float], None]

# Scenarios below this size get the invariant check after every cycle; larger
# ones every CHECK_EVERY cycles (and always at the end), to keep replay fast.
FULL_CHECK_BELOW = 5000
CHECK_EVERY = 200


@dataclass(kw_only=True, slots=True)
class QueueStats:
    admitted: int = 0
    waits: list[float] = field(default_factory=list)
    gpu_seconds: float = 0.0  # of runs that finished
    borrowed_gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0  # of runs that were preempted


@dataclass(kw_only=True)
class SimResult:
    """What a run produced; ``report`` turns it into the summary."""

    workloads: int
    admitted: int = 0
    finished: int = 0
    inadmissible: int = 0
    evictions: int = 0
    # A victim admitted again while the preemptor it made room for still waited.
    wasted_preemptions: int = 0
    max_preemptions_per_workload: int = 0
    lost_by_reason: dict[str, float] = field(default_factory=dict)  # GPU-s by reason
    pending_at_end: int = 0
    running_at_end: int = 0
    not_submitted: int = 0
    cycles: int = 0
    first_submit: float | None = None
    last_finish: float | None = None
    end_time: float = 0.0
    queues: dict[ClusterQueueName, QueueStats] = field(default_factory=dict)
    invariant_checks: int = 0
    invariant_violations: list[str] = field(default_factory=list)
    wall_time_s: float = 0.0


@dataclass(slots=True)
class _Running:
    admitted: AdmittedWorkload
    gpus: int
    limited: bool  # stopped by max_runtime rather than finishing by itself


class Engine:
    def __init__(
        self,
        config: Config,
        workloads: Sequence[SimWorkload],
        *,
        emit: Emit | None = None,
        check_every: int | None = None,
        observer: Observer | None = None,
        policy: SchedulerPolicy | None = None,
    ) -> None:
        self.config = config
        self.cache = Cache(config, policy)
        policy = policy or SchedulerPolicy()
        self.policy = policy
        # Decayed usage per LocalQueue, kept only when the ordering reads it.
        self.usage: UsageTracker | None = None
        orderings = {o for pair in config.orderings.values() for o in pair}
        if policy.ordering is Ordering.USAGE or Ordering.USAGE in orderings:
            self.usage = UsageTracker(
                half_life=policy.usage_half_life, weights=policy.usage_resource_weights
            )
        self.emit = emit
        self.observer = observer
        self.checker = InvariantChecker(config)
        ids: set[WorkloadId] = set()
        for sw in workloads:
            if sw.workload.id in ids:
                raise InputError(f"workload {sw.workload.id} is defined twice")
            ids.add(sw.workload.id)
        self._arrivals = sorted(workloads, key=lambda s: (s.workload.created_at, s.workload.id))
        self._next_arrival = 0  # index into _arrivals; kept between run() calls
        # Run time once admitted, and whether max_runtime cut it short.
        self._runtime: dict[WorkloadId, tuple[float, bool]] = {}
        self._spec: dict[WorkloadId, tuple[float, bool]] = {}  # kept for requeues
        self._finish_at: dict[WorkloadId, float] = {}  # a run's finish; stale entries skip
        self._route: dict[WorkloadId, ClusterQueueName | None] = {}  # while pending
        self._running: dict[WorkloadId, _Running] = {}
        self._finishes: list[tuple[float, WorkloadId]] = []
        # Victims on their way out, then back: (time, kind, id), kind "stop" or "requeue".
        self._timers: list[tuple[float, str, WorkloadId]] = []
        self._stopping: dict[WorkloadId, Workload] = {}
        self._backing_off: dict[WorkloadId, Workload] = {}
        self._claims: dict[WorkloadId, Claim] = {}
        self.tally = PreemptionTally()
        self._reported: set[WorkloadId] = set()  # inadmissible events already emitted
        if check_every is None:
            check_every = 1 if len(workloads) < FULL_CHECK_BELOW else CHECK_EVERY
        self.check_every = check_every
        self.result = SimResult(
            workloads=len(workloads),
            queues={name: QueueStats() for name in sorted(config.cluster_queues)},
        )

    def run(self, until: float | None = None) -> SimResult:
        started = time.perf_counter()
        res = self.result
        arrivals, finishes, timers = self._arrivals, self._finishes, self._timers
        i = self._next_arrival
        self._drop_stale()
        while i < len(arrivals) or finishes or timers:
            now = min(
                finishes[0][0] if finishes else float("inf"),
                timers[0][0] if timers else float("inf"),
                arrivals[i].workload.created_at if i < len(arrivals) else float("inf"),
            )
            if until is not None and now > until:
                break
            res.end_time = now
            if self.usage is not None:
                self.usage.advance(now)
            while finishes and finishes[0][0] == now:
                wid = heapq.heappop(finishes)[1]
                if self._finish_at.get(wid) == now:  # else that run was evicted
                    self._finish(now, wid)
            self._fire_timers(now)
            while i < len(arrivals) and arrivals[i].workload.created_at == now:
                self._submit(now, arrivals[i])
                i += 1
            self._next_arrival = i
            while next(iter(self.cache.pending()), None) is not None:
                evicted = self._cycle(now)
                if not evicted or self.policy.victim_stop_delay > 0:
                    break
                self._fire_timers(now)  # stopped at once: the next cycle follows
            self._drop_stale()
        else:
            until = None  # ran out of events before the limit
        if until is not None:
            res.end_time = until
        res.not_submitted = len(arrivals) - i
        res.running_at_end = len(self._running)
        res.pending_at_end = (
            sum(1 for _ in self.cache.pending()) + len(self._stopping) + len(self._backing_off)
        )
        self.checker.check_state(self.cache.admitted(), self.cache.snapshot())
        res.wasted_preemptions = self.tally.wasted
        res.max_preemptions_per_workload = self.tally.most_per_workload
        res.lost_by_reason = {
            reason.value: self.tally.lost_by_reason.get(reason, 0.0)
            for reason in PreemptionReason
            if reason in self.tally.lost_by_reason
        }
        res.invariant_checks = self.checker.checks
        res.invariant_violations = self.checker.violations
        res.wall_time_s += time.perf_counter() - started  # summed over resumed runs
        return res

    @property
    def done(self) -> bool:
        """Whether every event has happened: a further ``run`` would do nothing."""
        return self._next_arrival >= len(self._arrivals) and not self._finishes and not self._timers

    def _drop_stale(self) -> None:
        """Forget the finishes of evicted runs: nothing happens then (nor in the service)."""
        finishes = self._finishes
        while finishes and self._finish_at.get(finishes[0][1]) != finishes[0][0]:
            heapq.heappop(finishes)

    def _fire_timers(self, now: float) -> None:
        """Victims due to stop stop; those due back after their backoff queue again."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, kind, wid = heapq.heappop(timers)
            if kind == "stop":
                w = self._stopping.pop(wid)
                delay = self.policy.requeue_delay(w.evictions)
                if delay > 0:
                    self._backing_off[wid] = w
                    heapq.heappush(timers, (now + delay, "requeue", wid))
                    continue
            else:
                w = self._backing_off.pop(wid)
            self.cache.add_pending(w)

    def _submit(self, now: float, sw: SimWorkload) -> None:
        w = sw.workload
        self.cache.add_pending(w)
        # Under overrun_policy evict, a declared max_runtime stops the job at that limit.
        evict = self.policy.overrun_policy is OverrunPolicy.EVICT
        if evict and w.max_runtime is not None and sw.runtime > w.max_runtime:
            self._runtime[w.id] = (w.max_runtime, True)
        else:
            self._runtime[w.id] = (sw.runtime, False)
        self._spec[w.id] = self._runtime[w.id]
        res = self.result
        if res.first_submit is None:
            res.first_submit = now
        cq = self.config.route(w)
        self._route[w.id] = cq if cq in self.config.cluster_queues else None
        if self.emit is not None:
            self.emit(self._event(now, "submitted", w.id, self._route[w.id]))

    def _cycle(self, now: float) -> bool:
        """Run one cycle and apply its decisions, in their order; True if it evicted."""
        res = self.result
        snapshot = dataclasses.replace(
            self.cache.snapshot(), claims=dict(self._claims), stopping=frozenset(self._stopping)
        )
        if self.usage is not None:
            snapshot = dataclasses.replace(snapshot, queue_usage=self.usage.usage())
        started = time.perf_counter()
        decisions = schedule(snapshot, now)
        took = time.perf_counter() - started
        res.cycles += 1
        victims: dict[WorkloadId, list[WorkloadId]] = {}
        for e in decisions.evicted:
            victims.setdefault(e.preemptor, []).append(e.victim.workload.id)
        for wid in decisions.released_claims:
            self._claims.pop(wid, None)
        for c in decisions.claims:
            self._claims[c.workload.id] = c
        for item in decisions.log:
            if isinstance(item, Eviction):
                self._evict(now, item)
            else:
                claim = self._claims.pop(item.workload.id, None)
                self._admit(
                    now,
                    item,
                    victims.get(item.workload.id)
                    or (list(claim.victims) if claim is not None else None),
                )
        # ``decisions.inadmissible`` lists them without making the core build
        # every pending status (positions cost O(pending) per cycle).
        for wid in decisions.inadmissible:
            if wid in self._reported:
                continue
            self._reported.add(wid)
            res.inadmissible += 1
            if self.emit is not None:
                verdict = decisions.pending.verdict(wid)
                event = self._event(now, "inadmissible", wid, self._route[wid])
                event["reason"] = None if verdict is None else verdict.message
                self.emit(event)
        if res.cycles % self.check_every == 0:
            self.checker.check_state(self.cache.admitted(), self.cache.snapshot())
        if self.observer is not None:
            self.observer(now, snapshot, decisions, took)
        return bool(decisions.evicted)

    def _admit(self, now: float, a: AdmittedWorkload, victims: list[WorkloadId] | None) -> None:
        res = self.result
        self.cache.admit(a)
        self.checker.check_admission(a)
        wid, adm = a.workload.id, a.admission
        self.tally.admitted(wid)
        runtime, limited = self._runtime.pop(wid)
        del self._route[wid]
        partial = a.workload.partial_pod_set is not None and a.partial
        gpus = admitted_requests(a).get(GPU, 0) if partial else a.workload.gpus
        self._running[wid] = _Running(admitted=a, gpus=gpus, limited=limited)
        if self.usage is not None:
            self.usage.hold((a.workload.namespace, a.workload.queue), admitted_requests(a), 1)
        heapq.heappush(self._finishes, (now + runtime, wid))
        self._finish_at[wid] = now + runtime
        res.admitted += 1
        stats = res.queues[adm.cluster_queue]
        stats.admitted += 1
        # From its submission or its last eviction (Workload.queued_at), as Kueue's admission
        # wait time does, not from the creation time a victim keeps for its queue place.
        stats.waits.append(now - a.workload.queued_since)
        if self.emit is not None:
            event = self._event(now, "admitted", wid, adm.cluster_queue)
            event["flavor"] = adm.flavor
            event["placement"] = dict(sorted(adm.pods_per_node.items()))
            event["borrowing"] = adm.borrowing
            if partial:
                event["pods"] = a.pods
            if victims:
                event["victims"] = victims
            self.emit(event)

    def _evict(self, now: float, e: Eviction) -> None:
        """Stop a preempted run; it queues again, with its original creation time,
        once its pods have stopped and its backoff is over."""
        wid = e.victim.workload.id
        run = self._stop(now, wid, finished=False)
        del self._finish_at[wid]
        res = self.result
        self.tally.evicted(e, now)
        count = self.tally.by_workload[wid]
        self._stopping[wid] = dataclasses.replace(
            run.admitted.workload, evictions=count, queued_at=now
        )
        heapq.heappush(self._timers, (now + self.policy.victim_stop_delay, "stop", wid))
        self._runtime[wid] = self._spec[wid]  # it starts over when admitted again
        self._route[wid] = e.victim.admission.cluster_queue
        res.evictions += 1
        if self.emit is not None:
            event = self._event(now, "evicted", wid, e.victim.admission.cluster_queue)
            event["reason"] = e.message
            event["preemptor"] = e.preemptor
            self.emit(event)

    def _stop(self, now: float, wid: WorkloadId, *, finished: bool) -> _Running:
        """Take a run off the cluster and account its GPU-seconds, delivered or lost."""
        run = self._running.pop(wid)
        self.cache.remove_admitted(wid)
        if self.usage is not None:
            w = run.admitted.workload
            self.usage.hold((w.namespace, w.queue), admitted_requests(run.admitted), -1)
        self.checker.forget(wid)
        a = run.admitted
        stats = self.result.queues[a.admission.cluster_queue]
        gpu_s = run.gpus * (now - a.admitted_at)
        if not finished:
            stats.lost_gpu_seconds += gpu_s
            return run
        stats.gpu_seconds += gpu_s
        if a.admission.borrowing:
            stats.borrowed_gpu_seconds += gpu_s
        return run

    def _finish(self, now: float, wid: WorkloadId) -> None:
        del self._finish_at[wid]
        run = self._stop(now, wid, finished=True)
        a = run.admitted
        res = self.result
        res.finished += 1
        res.last_finish = now
        if self.emit is not None:
            event = self._event(now, "finished", wid, a.admission.cluster_queue)
            event["reason"] = "MaxRuntimeExceeded" if run.limited else None
            self.emit(event)

    @staticmethod
    def _event(t: float, kind: str, wid: WorkloadId, cq: ClusterQueueName | None) -> Event:
        return {"t": t, "event": kind, "workload": wid, "cluster_queue": cq, "reason": None}
