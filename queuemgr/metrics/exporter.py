"""Prometheus metrics for the scheduler: queue depth, quota, usage, waits, leadership.

Why it exists: admins watch queues and GPUs in Grafana, and existing Kueue
dashboards and alerts should carry over, so the names follow Kueue's
(``queuemgr_`` instead of ``kueue_``). This layer turns the core's objects
(a :class:`Snapshot` and the :class:`Decisions` made from it) into metric
values; the service, and the simulator through its ``observer`` hook, call it.

What must stay true:

- each :class:`SchedulerMetrics` owns its registry, so tests and replicas
  never share series through the process-global one;
- cardinality is bounded by configuration, never by traffic: labels carry
  queue, namespace, flavor, resource and reason names and bounded codes,
  never a workload name; free-form codes from callers fall into ``Other``;
- quantities leave in base units: cpu in cores, memory in bytes, anything
  else (GPUs) as a count (:func:`base_units`);
- gauges describe the state *after* a cycle's admissions, and a series
  whose object disappeared (a deleted queue) is removed, not left stale;
- a preemption a cycle decides is counted once per view, from the one
  :class:`~queuemgr.core.reasons.Eviction` (:meth:`observe_preemption`): as an
  eviction, by the preempting queue (Kueue's), and by the victim's queue with
  the GPU-seconds its run loses;
- counters and histograms are fed every cycle (:meth:`count_cycle`); the
  O(pending) gauges may be refreshed less often (:meth:`set_gauges`, paced by
  the service with :class:`~queuemgr.metrics.pacer.GaugePacer`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import Histogram, generate_latest
from prometheus_client.exposition import start_http_server

from queuemgr.core.model import ClusterQueueName, FlavorName, NodeName, Workload
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.reasons import Decisions, Eviction, PreemptionReason
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.shapes import ShapeId
from queuemgr.core.snapshot import Snapshot, admitted_requests
from queuemgr.core.verdicts import BACKING_OFF, PendingReason
from queuemgr.metrics.families import MetricFamilies
from queuemgr.metrics.shape import (
    EVICTION_REASONS,
    FINISH_RESULTS,
    PREEMPTION_REASONS,
    base_units,
    bounded,
    node_free_after,
    pending_flavor,
    priority_label,
)


class SchedulerMetrics(MetricFamilies):
    """The metric families, fed from core objects: a snapshot, decisions, and events."""

    # -- per cycle ----------------------------------------------------------
    def observe_cycle(
        self, snapshot: Snapshot, decisions: Decisions, duration_s: float, now: float
    ) -> None:
        """Update every gauge to the state after ``decisions``, and count the cycle."""
        self.count_cycle(snapshot, decisions, duration_s, now)
        self.set_gauges(snapshot, decisions)

    def count_cycle(
        self, snapshot: Snapshot, decisions: Decisions, duration_s: float, now: float
    ) -> None:
        """The counters and histograms of one cycle: exact, O(decisions)."""
        self.cycle.observe(duration_s)
        self.attempts.labels(result="success" if decisions.admitted else "inadmissible").inc()
        self.admitted_total.inc(len(decisions.admitted))
        self._preemption_series(snapshot.config.cluster_queues)
        for e in decisions.evicted:
            self.observe_preemption(e, now)
        # One series per (queue, priority): looked up once per cycle, not per admission.
        series: dict[tuple[str, int], Histogram] = {}
        for a in decisions.admitted:
            key = (a.admission.cluster_queue, a.workload.priority)
            child = series.get(key)
            if child is None:
                label = priority_label(key[1], self._priority_classes)
                child = series[key] = self.wait.labels(cluster_queue=key[0], priority_class=label)
            # From its last eviction if it had one: the time a victim ran before it is
            # no wait (Kueue's admission wait time counts from the requeue).
            child.observe(max(0.0, now - a.workload.queued_since))

    def observe_phases(self, wall: Mapping[str, float]) -> None:
        """Add one cycle's wall seconds per phase (a bounded set of names, the loop's)."""
        for phase, seconds in wall.items():
            self.cycle_phase.labels(phase=phase).inc(seconds)

    def observe_start(self, seconds: float) -> None:
        """One admitted gang's start was accepted ``seconds`` after its admission."""
        self.start_latency.observe(max(0.0, seconds))

    def _preemption_series(self, queues: Iterable[str]) -> None:
        """Export every configured queue's preemption series at 0 before its first preemption.

        ``rate()`` needs a sample before an increase to see it: a series born at 1
        would hide the first preemption of each queue and reason from the dashboard,
        and preemptions are rare enough for that to be most of them. O(queues).
        """
        new = set(queues) - self._preemption_queues
        for cq in new:
            for reason in PreemptionReason:
                self.preemptions_total.labels(cluster_queue=cq, reason=reason.value)
            self.preempted_gpu_seconds.labels(cluster_queue=cq)
        self._preemption_queues |= new

    def set_gauges(
        self, snapshot: Snapshot, decisions: Decisions, backing_off: Iterable[Workload] = ()
    ) -> None:
        """Every gauge to the state after ``decisions``: O(pending + nodes).

        ``backing_off``: queued workloads held out of the snapshot until their requeue
        time; they are pending all the same, with reason ``BackingOff``.
        """
        config = snapshot.config
        frames = self._frames
        usage: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {
            cq: {f: dict(v) for f, v in per.items()} for cq, per in snapshot.usage.items()
        }
        active: dict[str, int] = dict.fromkeys(config.cluster_queues, 0)
        for a in snapshot.admitted.values():
            active[a.admission.cluster_queue] = active.get(a.admission.cluster_queue, 0) + 1
        # Victims release what they held; they count as pending from the next cycle on.
        changes = [(e.victim, -1) for e in decisions.evicted]
        changes += [(a, 1) for a in decisions.admitted]
        for a, sign in changes:
            cq = a.admission.cluster_queue
            active[cq] = active.get(cq, 0) + sign
            vec = usage.setdefault(cq, {}).setdefault(a.admission.flavor, {})
            for res, v in admitted_requests(a).items():
                vec[res] = vec.get(res, 0) + sign * v
        for name, n in active.items():
            frames[self.admitted_active].set(n, name)
        self._quota(snapshot, usage)
        self._pending(snapshot, decisions, backing_off)
        self._nodes(snapshot, decisions)
        for frame in frames.values():
            frame.commit()

    def _quota(
        self,
        snapshot: Snapshot,
        usage: Mapping[ClusterQueueName, Mapping[FlavorName, Mapping[ResourceName, int]]],
    ) -> None:
        f = self._frames
        config = snapshot.config
        for name, cq in config.cluster_queues.items():
            for fq in cq.flavors:
                for series, vec in (
                    (self.nominal, fq.nominal),
                    (self.borrowing_limit, fq.borrowing_limit),
                    (self.lending_limit, fq.lending_limit),
                ):
                    for res, v in vec.items():
                        f[series].set(base_units(res, v), name, fq.flavor, res)
                used = usage.get(name, {}).get(fq.flavor, {})
                for res in fq.nominal.keys() | used.keys():
                    f[self.usage].set(base_units(res, used.get(res, 0)), name, fq.flavor, res)
        ledger = QuotaLedger(config.quota_topology, usage)
        for name in config.cluster_queues:
            infinite, exact = ledger.share(name)
            f[self.share].set(math.inf if infinite else float(exact), name)
        self._cohorts(snapshot, usage, ledger)

    def _cohorts(
        self,
        snapshot: Snapshot,
        usage: Mapping[ClusterQueueName, Mapping[FlavorName, Mapping[ResourceName, int]]],
        ledger: QuotaLedger,
    ) -> None:
        """Each cohort's subtree quota, usage and share, labelled by its path: O(cohorts
        times depth plus queues)."""
        f = self._frames
        config = snapshot.config
        topo = config.quota_topology
        tree = topo.tree
        paths = {c: tree.path(c) for c in config.cohorts}
        quota: dict[str, dict[tuple[FlavorName, ResourceName], int]] = {c: {} for c in paths}
        held: dict[str, dict[tuple[FlavorName, ResourceName], int]] = {c: {} for c in paths}
        for c, cohort in config.cohorts.items():
            for fq in cohort.flavors:
                for c_up in tree.chain[c]:
                    _add(quota[c_up], fq.flavor, fq.nominal)
        for name, cq in config.cluster_queues.items():
            f[self.cluster_queue_info].set(1, name, "" if cq.cohort is None else paths[cq.cohort])
            if cq.cohort is None:
                continue
            for c_up in tree.chain[cq.cohort]:
                for fq in cq.flavors:
                    _add(quota[c_up], fq.flavor, fq.nominal)
                for flavor, vec in usage.get(name, {}).items():
                    _add(held[c_up], flavor, vec)
        for c, path in paths.items():
            parent = config.cohorts[c].parent
            up = "" if parent is None else paths[parent]
            for (flavor, res), v in quota[c].items():
                f[self.cohort_quota].set(base_units(res, v), path, up, flavor, res)
            for (flavor, res), v in held[c].items():
                f[self.cohort_usage].set(base_units(res, v), path, up, flavor, res)
        for name in config.cluster_queues:
            below = topo.below_root.get(name, ())
            for c, (infinite, exact) in zip(below, ledger.path_share(name), strict=False):
                parent = config.cohorts[c].parent
                up = "" if parent is None else paths[parent]
                f[self.cohort_share].set(math.inf if infinite else float(exact), paths[c], up)

    def _pending(
        self, snapshot: Snapshot, decisions: Decisions, backing_off: Iterable[Workload]
    ) -> None:
        config = snapshot.config
        frame = self._frames[self.pending]
        demand = self._frames[self.resource_pending]
        # Every configured local queue shows every reason (0 when none), so graphs
        # stay continuous; only verdicts are looked up, never the lazy messages.
        for (ns, lq), q in config.local_queues.items():
            for code in (*(reason.value for reason in PendingReason), BACKING_OFF):
                frame.set(0, q.cluster_queue, lq, ns, code)
        for name, queue in config.cluster_queues.items():
            for fq in queue.flavors:
                for res in fq.nominal:
                    demand.set(0, name, fq.flavor, res)
        admitted = decisions.admitted_ids()
        verdict = decisions.pending.verdict_in
        routed = ((cq, w) for cq, queue in snapshot.pending.items() for w in queue)
        unroutable = ((None, w) for w in snapshot.unroutable)
        # Counted per series first: a deep backlog is a few shapes in a few queues, and
        # a workload's demand is its shape's (equal shapes request the same).
        counts: dict[tuple[str, str, str, str], int] = {}
        shapes: dict[tuple[str, ShapeId], tuple[int, Mapping[ResourceName, int]]] = {}
        for cq, w in (*routed, *unroutable):
            if w.id in admitted:
                continue
            code = verdict(w, cq).reason.value
            label = cq or ""  # unroutable: no ClusterQueue, an empty label
            key = (label, w.queue, w.namespace, code)
            counts[key] = counts.get(key, 0) + 1
            of_shape = (label, w.shape)
            n, total = shapes.get(of_shape, (0, w.total_requests))
            shapes[of_shape] = (n + 1, total)
        for key, n in counts.items():
            frame.add(n, *key)
        for (cq_name, _), (n, total) in shapes.items():
            target = config.cluster_queues.get(ClusterQueueName(cq_name))
            flavor = pending_flavor(target, total) if target is not None else None
            if flavor is not None:
                for res, v in total.items():
                    demand.add(base_units(res, v * n), cq_name, flavor, res)
        for w in backing_off:
            routed_to = config.queue_for(w)
            frame.add(1, routed_to or "", w.queue, w.namespace, BACKING_OFF)

    def _nodes(self, snapshot: Snapshot, decisions: Decisions) -> None:
        topo = snapshot.config.node_topology
        victims = (e.victim for e in decisions.evicted)
        free = node_free_after(snapshot.node_free, decisions.admitted, released=victims)
        total, largest = self._frames[self.node_free], self._frames[self.node_largest_free]
        for node, flavor in topo.flavor_of.items():
            vec = free.get(NodeName(node), {})
            for res in topo.nodes[node].allocatable:
                v = base_units(res, max(0, vec.get(res, 0)))
                total.add(v, flavor, res)
                largest.maximum(v, flavor, res)

    # -- events between cycles -----------------------------------------------
    def observe_finished(self, result: str, count: int = 1) -> None:
        """``count`` workloads finished; ``result`` is one of :data:`FINISH_RESULTS`, else Other."""
        self.finished_total.labels(result=bounded(result, FINISH_RESULTS)).inc(count)

    def observe_eviction(self, reason: str, preemptor_cq: str | None = None) -> None:
        """A workload was evicted, for one of :data:`EVICTION_REASONS`.

        With ``preemptor_cq`` it was preempted by that ClusterQueue: ``reason`` is
        then a preemption reason (:data:`PREEMPTION_REASONS`, e.g.
        ``InCohortReclamation``) and the eviction counts as ``Preempted``, as in Kueue.
        Not knowing the victim, it leaves the per-victim series alone: a cycle's
        evictions go through :meth:`observe_preemption` instead.
        """
        if preemptor_cq is None:
            self.evicted_total.labels(reason=bounded(reason, EVICTION_REASONS)).inc()
            return
        self._preempted(bounded(reason, PREEMPTION_REASONS), preemptor_cq)

    def observe_preemption(self, eviction: Eviction, now: float) -> None:
        """An eviction a cycle at ``now`` decided: every preemption series, from one object.

        Besides what :meth:`observe_eviction` counts, the victim's ClusterQueue gets
        the preemption and the GPU-seconds of the run it loses: its placed GPUs
        (partial admissions hold fewer) times the seconds since it was admitted.
        """
        victim = eviction.victim
        why = bounded(eviction.reason.value, PREEMPTION_REASONS)
        self._preempted(why, eviction.preemptor_cluster_queue)
        cq = victim.admission.cluster_queue
        self.preemptions_total.labels(cluster_queue=cq, reason=why).inc()
        gpus = admitted_requests(victim).get(GPU, 0)
        # Clamped: admitted_at may come from another replica's clock, slightly ahead of
        # this one, and a counter cannot go down.
        ran_s = max(0.0, now - victim.admitted_at)
        self.preempted_gpu_seconds.labels(cluster_queue=cq).inc(base_units(GPU, gpus) * ran_s)

    def _preempted(self, reason: str, preemptor_cq: str) -> None:
        self.evicted_total.labels(reason="Preempted").inc()
        self.preempted_total.labels(preemptor_cluster_queue=preemptor_cq, reason=reason).inc()

    def observe_eta_error(self, predicted_start: float, actual_start: float) -> None:
        self.eta_error.observe(abs(actual_start - predicted_start))

    def set_leader(self, replica: str, is_leader: bool) -> None:
        self.leader.labels(replica=replica).set(1 if is_leader else 0)

    def render(self) -> bytes:
        """The registry in Prometheus's text exposition format."""
        return generate_latest(self.registry)


def serve(
    metrics: SchedulerMetrics, port: int = 0, host: str = "127.0.0.1"
) -> tuple[WSGIServer, Thread]:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; port 0 picks a free one.

    Loopback by default: exposing it further is the deployment's choice.
    Stop with ``server.shutdown(); server.server_close()``.
    """
    return start_http_server(port, addr=host, registry=metrics.registry)


def label_values(metrics: SchedulerMetrics) -> Iterable[tuple[str, str]]:
    """Every (label name, value) pair the registry exports; tests scan it for leaks."""
    for family in metrics.registry.collect():
        for sample in family.samples:
            yield from sample.labels.items()


def _add(
    into: dict[tuple[FlavorName, ResourceName], int],
    flavor: FlavorName,
    vec: Mapping[ResourceName, int],
) -> None:
    for res, v in vec.items():
        into[(flavor, res)] = into.get((flavor, res), 0) + v
