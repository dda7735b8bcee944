"""The scheduler loop: load, ``schedule``, commit in one transaction, then apply.

Why it exists: this is the service. Each cycle (only on the leader):

1. finishes reported by the backend are marked finished in the store;
2. one consistent snapshot is loaded: ``store.mirror`` keeps the leader's
   copy of the live workloads and reads only the rows whose version moved;
3. ``schedule(snapshot, now)`` decides, with the configured policy, whose
   ``preemptor_admission`` is ``after_victims_stop``: a preemptor claims the
   room its victims free (core.claims) and is admitted there in a later
   cycle, once its victims' pods are gone (they are ``stopping`` while
   Evicted); the snapshot carries the stored claims, so a new leader holds
   them too, and leaves out workloads still backing off after a preemption;
4. every decision of the cycle (admissions, pending reasons, claims made and
   ended, evictions) is committed in ONE fenced transaction; a lost leader
   commits nothing;
5. only then are the decisions applied to the backend (stop victims, start
   admitted gangs, concurrently where the backend allows; ``controller.applier``),
   retried with backoff until they succeed; stopped victims are requeued, with
   the policy's requeue backoff, which wakes the next cycle for their preemptor.

It runs when woken (a NOTIFY, a finish the backend expects, the end of a
requeue backoff, a new leadership) and on the periodic safety cycle, which
also samples usage and stops gangs past their ``max_runtime``.

What must stay true: nothing reaches the backend before it is committed, so a
crash between the two steps loses nothing (a new leader re-starts admitted
gangs the backend does not run); the backend is told to start a gang once
per admission; one thread runs cycles, and a cycle's backend calls end before
the next cycle begins (its starts overlap only each other, each of a different
workload).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial

from queuemgr.controller.applier import Applier
from queuemgr.controller.board import BoardChange, BoardKeeper
from queuemgr.controller.eta import EtaTracker
from queuemgr.controller.heap import HeapKeeper
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.ports import Clock, ClusterBackend
from queuemgr.controller.report import CycleReport, Phases
from queuemgr.controller.writer import CycleWriter
from queuemgr.core.cycle import schedule
from queuemgr.core.fairshare import LocalQueueKey, UsageTracker, decayed
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, WorkloadId
from queuemgr.core.policy import OverrunPolicy, PreemptorAdmission, SchedulerPolicy
from queuemgr.core.reasons import Decisions
from queuemgr.core.resources import ResourceName, add
from queuemgr.core.snapshot import admitted_requests
from queuemgr.metrics import SchedulerMetrics
from queuemgr.metrics.pacer import GaugePacer
from queuemgr.store.decisions import Persisted
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderToken, NotLeader, fence
from queuemgr.store.mirror import StateMirror
from queuemgr.store.notify import evicted_workloads
from queuemgr.store.state import StoredState
from queuemgr.store.transitions import finish_many, requeue_workload
from queuemgr.store.usage import load_queue_usage, sample_usage, save_queue_usage
from queuemgr.store.workloads import StateConflict

log = logging.getLogger(__name__)
# The default policy: what ``queuemgr simulate`` runs unless a scenario says otherwise.
SERVICE_POLICY = SchedulerPolicy()


def _held_by_queue(
    admitted: tuple[AdmittedWorkload, ...],
    held: Mapping[LocalQueueKey, Mapping[ResourceName, int]] | None = None,
) -> dict[LocalQueueKey, Mapping[ResourceName, int]]:
    """What each LocalQueue holds: ``held`` plus what ``admitted`` holds."""
    out = dict(held or {})
    for a in admitted:
        key = (a.workload.namespace, a.workload.queue)
        out[key] = add(out.get(key, {}), admitted_requests(a))
    return out


class SchedulerLoop:
    def __init__(
        self,
        *,
        db: Database,
        backend: ClusterBackend,
        clock: Clock,
        elector: LeaderElector,
        metrics: SchedulerMetrics,
        policy: SchedulerPolicy = SERVICE_POLICY,
        safety_interval: float = 5.0,
        on_cycle: Callable[[Decisions, float], None] | None = None,
        freeze_heap: bool = False,
    ) -> None:
        if policy.preemptor_admission is not PreemptorAdmission.AFTER_VICTIMS_STOP:
            raise ValueError("the service admits a preemptor only after its victims stopped")
        if policy.victim_stop_delay:
            raise ValueError("victim_stop_delay is the simulator's: the service waits for pods")
        self._db = db
        self._backend = backend
        self._clock = clock
        self._elector = elector
        self._metrics = metrics
        self._policy = policy
        self._safety_interval = safety_interval
        self._on_cycle = on_cycle  # after each applied cycle (the Kubernetes status write-back)
        # The service's own process: its long-lived rows kept out of full collections.
        self._heap = HeapKeeper() if freeze_heap else None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._safety_due = True
        self._last_sample: float | None = None
        self._adopted: LeaderToken | None = None
        self._unreported: list[RunEnd] = []  # finished, not yet written to the store
        self._gauges = GaugePacer()
        self._applier = Applier(
            backend=backend,
            leadership=lambda: elector.token,
            clock=clock,
            metrics=metrics,
            stopping=self._stopping,
        )
        self._eta = EtaTracker()  # the first ETA each pending workload was given
        self._mirror = StateMirror()  # the live workloads, as of the last cycle
        self._board = BoardKeeper()  # what the status board holds
        self._writer = CycleWriter(db, self._mirror, self._board)
        # Decayed usage per LocalQueue (ordering by usage); seeded from the store on adoption.
        self._usage = UsageTracker(
            half_life=policy.usage_half_life, weights=policy.usage_resource_weights
        )
        self._next_requeue: float | None = None  # when the first backoff ends
        self._thread: threading.Thread | None = None
        self.cycles = 0
        self.last_error: str | None = None
        # Monotonic time of the first failure of the current run of failed cycles
        # (None after a cycle that worked): readiness fails once it lasts (failing_for).
        self._failing_since: float | None = None

    # -- triggers --------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def request_safety_cycle(self) -> None:
        self._safety_due = True
        self._wake.set()

    # -- one cycle ---------------------------------------------------------------
    def run_once(self) -> CycleReport | None:
        """One cycle if this replica leads (else None); raises on database errors."""
        token = self._elector.token
        if token is None:
            return None
        if token != self._adopted:
            self._adopt(token)
        now = self._clock.now()
        phases = Phases()
        finished = self._record_finished(token, now)
        phases.done("finish")
        state = self._mirror.refresh(self._db, now=now)
        self._next_requeue = state.next_requeue()
        self._usage.advance(now)
        held = self._mirror.held_by_queue()  # what _held_by_queue(state.admitted) gives
        self._usage.set_held(held)
        snapshot = dataclasses.replace(
            state.snapshot(), policy=self._policy, queue_usage=self._usage.usage()
        )
        phases.done("load")
        safety, self._safety_due = self._safety_due, False
        if safety:
            self._safety(token, state, now)
            phases.done("safety")
        decisions = schedule(snapshot, now)
        phases.done("schedule")
        duration = phases.wall["schedule"]
        # Every pending workload's reason and message, and its place on the status board,
        # are compared with what the store holds; only what changed is written.
        persisted, board = self._commit(token, decisions, state, now)  # and folded in
        phases.done("commit")
        # Charged from now on: the next cycle's advance bills this holding.
        self._usage.set_held(_held_by_queue(decisions.admitted, held))
        victims = [e.victim.workload.id for e in decisions.evicted]
        self._apply(token, list(decisions.admitted), victims)
        phases.done("apply")
        if self._on_cycle is not None:
            self._on_cycle(decisions, now)
        # After the starts: gauges cost O(pending) and must not delay a gang, nor,
        # with a deep backlog, the next submission (the pacer spaces them out).
        self._metrics.count_cycle(snapshot, decisions, duration, now)
        if self._gauges.due():
            started = self._gauges.now()
            self._metrics.set_gauges(snapshot, decisions, state.backing_off_workloads)
            self._gauges.refreshed(started)
        for predicted, actual in self._eta.observe(
            decisions.admitted, board.etas, board.queues, now
        ):
            self._metrics.observe_eta_error(predicted, actual)
        phases.done("observe")
        if self._heap is not None and self._heap.after_cycle(
            self._mirror.rows_read, now, self._mirror.live
        ):
            phases.done("heap")
        self._metrics.observe_phases(phases.wall)
        if finished or victims:
            self._wake.set()  # freed capacity or requeued victims: schedule again now
        self.cycles += 1
        return CycleReport(
            admitted=tuple(a.workload.id for a in decisions.admitted),
            evicted=tuple(victims),
            finished=tuple(finished),
            # Counted from the queues: len(decisions.pending) would index every position.
            pending=sum(map(len, snapshot.pending.values()))
            + len(snapshot.unroutable)
            - len(decisions.admitted),
            duration_s=duration,
            statuses_written=persisted.statuses_written,
            board_written=len(board.changed)
            + len(board.gone)
            + len(board.classes)
            + len(board.classes_gone),
            phases=phases.wall,
            cpu=phases.cpu,
        )

    def _commit(
        self,
        token: LeaderToken,
        d: Decisions,
        state: StoredState,
        now: float,
    ) -> tuple[Persisted, BoardChange]:
        """Commit the cycle and fold it into the mirror, the two overlapping (``writer``)."""
        return self._writer.commit(token, d, state, now)

    def _record_finished(self, token: LeaderToken, now: float) -> list[WorkloadId]:
        self._unreported.extend(self._backend.poll_finished(now))
        if not self._unreported:
            return []
        with self._db.write() as conn:  # all of them, or (on an error) none, kept for later
            # Fenced like every write of a leader: one that lost its lock while paused
            # would otherwise finish a workload its successor has admitted again.
            fence(conn, token)
            done = finish_many(conn, self._unreported, now=now, ids=self._mirror.row_ids())
        # A set: a busy cycle reports thousands of ends, and a list made this n^2.
        finished = set(done)
        for end in self._unreported:
            if end.workload not in finished:
                log.info("a run of %s ended, but not the run the store has", end.workload)
        if done:
            self._metrics.observe_finished("Succeeded", len(done))
        self._unreported.clear()
        return done

    def _safety(self, token: LeaderToken, state: StoredState, now: float) -> None:
        with self._db.write() as conn:
            fence(conn, token)
            # A sample stands for the time since this leader's previous one; the first
            # after an election for one interval (the gap before it is not billed).
            last, self._last_sample = self._last_sample, now
            period = self._safety_interval if last is None else min(now - last, 60.0)
            sample_usage(conn, state.config, state.admitted, now=now, period=period)
            save_queue_usage(conn, self._usage.usage(), now=now)
        with self._db.read() as conn:
            orphans = evicted_workloads(conn)
        # Evicted outside a cycle (`quota set --preempt`) or before a crash: stop, requeue.
        self._apply(token, [], orphans)
        grace = self._safety_interval
        evict = self._policy.overrun_policy is OverrunPolicy.EVICT
        for a in state.admitted:
            limit = a.workload.max_runtime
            if evict and limit is not None and now - a.admitted_at > limit + grace:
                self._applier.stop(token, a.workload.id)
                try:
                    with self._db.write() as conn:
                        fence(conn, token)
                        run = RunEnd(workload=a.workload.id, admitted_at=a.admitted_at)
                        done = finish_many(conn, [run], now=now, reason="MaxRuntimeExceeded")
                    if done:
                        self._metrics.observe_finished("MaxRuntimeExceeded")
                except StateConflict:
                    pass

    def _apply(
        self, token: LeaderToken, starts: list[AdmittedWorkload], stops: list[WorkloadId]
    ) -> None:
        for wid in stops:
            if self._applier.stop(token, wid):
                self._requeue(token, wid)
        self._applier.start_all(token, starts)

    def _requeue(self, token: LeaderToken, wid: WorkloadId) -> None:
        """Its pods are gone: Pending again, after the policy's backoff for its evictions."""
        try:
            with self._db.write() as conn:
                fence(conn, token)
                until = requeue_workload(
                    conn, wid, now=self._clock.now(), backoff=self._policy.requeue_delay
                )
        except StateConflict:
            log.info("victim %s was no longer evicted", wid)
            return
        if until is not None:
            log.info("victim %s requeued; it backs off until %.3f", wid, until)
            nxt = self._next_requeue
            self._next_requeue = until if nxt is None else min(nxt, until)

    def _adopt(self, token: LeaderToken) -> None:
        """New leadership: run what the store says is admitted, finish what it evicted."""
        if self._heap is not None:
            self._heap.pause()  # until the first cycle's freeze: every row is read now
        try:
            self._take_over(token)
        except BaseException:
            if self._heap is not None:
                self._heap.release()  # no cycle follows to freeze: collect as usual again
            raise

    def _take_over(self, token: LeaderToken) -> None:
        self._seed_usage()
        self._last_sample = None
        self._mirror.reset()  # whatever was known before may have changed meanwhile
        self._board.reset()
        state = self._mirror.refresh(self._db, now=self._clock.now())
        with self._db.read() as conn:
            victims = evicted_workloads(conn)
        # Stops first, as a cycle's apply does: an admitted gang may be placed on the
        # room of a victim whose pods have not gone yet.
        for wid in victims:
            if self._applier.stop(token, wid):
                self._requeue(token, wid)
        running = self._backend.running()
        for a in state.admitted:
            if a.workload.id not in running:
                self._applier.retry(token, partial(self._backend.start, a))
        self._adopted = token

    def _seed_usage(self) -> None:
        # Nothing is charged for the gap since the last leader saved: seconds
        # against a half-life of days.
        now = self._clock.now()
        with self._db.read() as conn:
            saved = load_queue_usage(conn)
        self._usage = UsageTracker(
            half_life=self._policy.usage_half_life, weights=self._policy.usage_resource_weights
        )
        self._usage.advance(now)
        for key, (usage, at) in saved.items():
            self._usage.seed(key, decayed(usage, 0.0, now - at, self._policy.usage_half_life))

    # -- the thread ----------------------------------------------------------------
    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="queuemgr-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._applier.shutdown()
        self._writer.shutdown()
        if self._heap is not None:
            self._heap.release()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            self._wake.wait(self._timeout())
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                self.run_once()
                self.last_error = None
                self._failing_since = None
                backoff = 0.1
            except NotLeader as exc:
                log.warning("%s", exc)
            except StateConflict as exc:  # lost a race; the next cycle sees the new rows
                log.warning("cycle rolled back: %s", exc)
                self._wake.set()
            except StoreError as exc:
                self._failed(str(exc).splitlines()[0])
                log.warning("cycle failed, database unavailable? retrying in %.1fs", backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                self._wake.set()
            except Exception as exc:  # keep scheduling; /readyz shows the error meanwhile
                self._failed(f"{type(exc).__name__}: {exc}")
                self._mirror.reset()  # start again from what the store holds
                self._board.reset()
                log.exception("cycle failed")
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                self._wake.set()

    def _failed(self, error: str) -> None:
        self.last_error = error
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def failing_for(self) -> float:
        """Seconds since the first of the cycles that have failed in a row (0: none failed)."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

    def _timeout(self) -> float:
        # Sleep until the backend's next expected finish or the first requeue backoff's
        # end, else until the safety job wakes us.
        due = [t for t in (self._backend.next_finish(), self._next_requeue) if t is not None]
        cap = max(self._safety_interval, 1.0) * 2
        if not due:
            return cap
        return min(cap, max(0.0, min(due) - self._clock.now()) + 0.001)
