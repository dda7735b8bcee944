"""The scheduler's running picture of the cluster, kept up to date event by event.

Why it exists: rebuilding usage, free capacity and sorted queues from scratch
for every cycle costs O(everything); the simulator runs hundreds of thousands
of cycles and the service one per event. The cache applies each event once
and hands out snapshots cheaply.

What must stay true: ``cache.snapshot()`` equals ``build_snapshot`` over the
same objects (a property test checks it); a snapshot handed out is never
changed afterwards, because the cache copies an inner vector on its first
change after a snapshot and changes only its own copies in place (the property
test keeps every snapshot and checks it at the end); a workload is in exactly
one of pending or admitted.
"""

from __future__ import annotations

from collections.abc import Iterable

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    Workload,
    WorkloadId,
)
from queuemgr.core.node_topology import FreeIndex, build_free_index, reindex
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.queues import QueueBook
from queuemgr.core.resources import ResourceName, Resources
from queuemgr.core.snapshot import (
    Config,
    CycleMemo,
    MutableUsage,
    Snapshot,
)

_Admitted = dict[WorkloadId, AdmittedWorkload]


class CacheError(KeyError):
    pass


class Cache:
    def __init__(self, config: Config, policy: SchedulerPolicy | None = None) -> None:
        self._config = config
        self._policy = policy or SchedulerPolicy()
        self._usage: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
        self._free: dict[NodeName, dict[ResourceName, int]] = {
            name: dict(n.allocatable) for name, n in config.all_nodes.items()
        }
        self._index = build_free_index(config.node_topology, self._free)
        # Nodes whose free capacity changed since the index was last brought up to date,
        # with the free the index still files them under: the index is regrouped once
        # per snapshot, not once per placement.
        self._filed: dict[NodeName, Resources] = {}
        # The queues' usage maps (by queue) and vectors (by queue and flavor), and the
        # nodes' free vectors, made since the last snapshot, which no snapshot shares:
        # changed in place.
        self._owned_usage: set[object] = set()
        self._owned_free: set[NodeName] = set()
        # Copies handed to snapshots, reused until the admitted set changes.
        self._frozen: tuple[MutableUsage, dict[NodeName, Resources], _Admitted, FreeIndex] | None
        self._frozen = None
        self._memo = CycleMemo()  # handed to every snapshot (set_config makes a new one)
        self._admitted: dict[WorkloadId, AdmittedWorkload] = {}
        self._pending: dict[WorkloadId, Workload] = {}
        # None holds the workloads no ClusterQueue takes (see Config.queue_for).
        self._queues: dict[ClusterQueueName | None, QueueBook] = {}

    @property
    def config(self) -> Config:
        return self._config

    def set_config(self, config: Config) -> None:
        """Swap the configuration (quotas, queues, nodes) and re-derive from scratch."""
        pending = list(self._pending.values())
        admitted = list(self._admitted.values())
        self.__init__(config, self._policy)  # type: ignore[misc]
        for a in admitted:
            self.add_admitted(a)
        for w in pending:
            self.add_pending(w)

    # -- pending ----------------------------------------------------------
    def add_pending(self, w: Workload) -> None:
        if w.id in self._pending or w.id in self._admitted:
            raise CacheError(f"workload {w.id} is already known")
        self._pending[w.id] = w
        book = self._queues.get(self._route(w))
        if book is None:
            book = self._queues[self._route(w)] = QueueBook()
        book.add(w)

    def remove_pending(self, wid: WorkloadId) -> Workload:
        w = self._pending.pop(wid, None)
        if w is None:
            raise CacheError(f"workload {wid} is not pending")
        self._queues[self._route(w)].remove(w)
        return w

    def _route(self, w: Workload) -> ClusterQueueName | None:
        return self._config.queue_for(w)

    # -- admitted ---------------------------------------------------------
    def add_admitted(self, a: AdmittedWorkload) -> None:
        wid = a.workload.id
        if wid in self._admitted:
            raise CacheError(f"workload {wid} is already admitted")
        self._admitted[wid] = a
        self._apply(a, +1)

    def admit(self, a: AdmittedWorkload) -> None:
        """Move a pending workload to admitted, as a cycle decided."""
        self.remove_pending(a.workload.id)
        self.add_admitted(a)

    def remove_admitted(self, wid: WorkloadId) -> AdmittedWorkload:
        a = self._admitted.pop(wid, None)
        if a is None:
            raise CacheError(f"workload {wid} is not admitted")
        self._apply(a, -1)
        return a

    def _apply(self, a: AdmittedWorkload, sign: int) -> None:
        self._frozen = None
        cq, flavor = a.admission.cluster_queue, a.admission.flavor
        # Copied on the first change after a snapshot (which shares them), then changed
        # in place until the next one: a busy cycle changes a vector many times.
        owned = self._owned_usage
        per_flavor = self._usage.get(cq)
        if per_flavor is None or cq not in owned:
            per_flavor = self._usage[cq] = dict(per_flavor or {})
            owned.add(cq)
        vec = per_flavor.get(flavor)
        if vec is None or (cq, flavor) not in owned:
            vec = per_flavor[flavor] = dict(vec or {})
            owned.add((cq, flavor))
        for r, v in a.held.items():
            vec[r] = vec.get(r, 0) + sign * v
        per_pod = {ps.name: ps.node_requests for ps in a.workload.pod_sets}
        class_of = self._config.node_topology.class_of
        for p in a.admission.placements:
            node = p.node
            new = self._free.get(node)
            if new is None:
                continue
            if node not in self._owned_free:
                old, new = new, dict(new)
                self._free[node] = new
                self._owned_free.add(node)
                if node in class_of:
                    self._filed.setdefault(node, old)
            for r, v in per_pod[p.pod_set].items():
                new[r] = new.get(r, 0) - sign * v * p.count

    # -- reading ----------------------------------------------------------
    def pending(self) -> Iterable[Workload]:
        return self._pending.values()

    def admitted(self) -> Iterable[AdmittedWorkload]:
        return self._admitted.values()

    def is_pending(self, wid: WorkloadId) -> bool:
        return wid in self._pending

    def snapshot(self) -> Snapshot:
        pending = {
            cq: book.view()
            for cq, book in sorted(self._queues.items(), key=lambda kv: kv[0] or "")
            if cq is not None and book
        }
        unroutable = self._queues.get(None)
        if self._frozen is None:
            if self._filed:
                class_of = self._config.node_topology.class_of
                moved = {n: (class_of[n], old, self._free[n]) for n, old in self._filed.items()}
                reindex(self._index, moved)
                self._filed = {}
            # What the copies below share is not to change any more.
            self._owned_usage.clear()
            self._owned_free.clear()
            self._frozen = (
                dict(self._usage),
                dict(self._free),
                dict(self._admitted),
                dict(self._index),
            )
        usage, free, admitted, index = self._frozen
        return Snapshot(
            config=self._config,
            usage=usage,
            node_free=free,
            admitted=admitted,
            pending=pending,
            unroutable=list(unroutable.view()) if unroutable is not None else [],
            node_index=index,
            policy=self._policy,
            memo=self._memo,
        )
