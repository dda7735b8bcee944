"""The scheduler's running picture of the cluster, kept up to date event by event.

Why it exists: rebuilding usage, free capacity and sorted queues from scratch
for every cycle costs O(everything); the simulator runs hundreds of thousands
of cycles and the service one per event. The cache applies each event once
and hands out snapshots cheaply.

What must stay true: ``cache.snapshot()`` equals ``build_snapshot`` over the
same objects (a property test checks it); a snapshot handed out is never
changed afterwards, because the cache replaces inner vectors rather than
mutating them; a workload is in exactly one of pending or admitted.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import build_free_index, reindex
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Config, Snapshot, admitted_requests, queue_order_key

_Entry = tuple[tuple[int, float, str], Workload]


class CacheError(KeyError):
    pass


class Cache:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._usage: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
        self._free: dict[NodeName, dict[ResourceName, int]] = {
            name: dict(n.allocatable) for name, n in config.nodes.items()
        }
        self._index = build_free_index(config.node_topology, self._free)
        self._admitted: dict[WorkloadId, AdmittedWorkload] = {}
        self._pending: dict[WorkloadId, Workload] = {}
        self._queues: dict[
            ClusterQueueName | None, list[tuple[tuple[int, float, str], Workload]]
        ] = {}

    @property
    def config(self) -> Config:
        return self._config

    def set_config(self, config: Config) -> None:
        """Swap the configuration (quotas, queues, nodes) and re-derive from scratch."""
        pending = list(self._pending.values())
        admitted = list(self._admitted.values())
        self.__init__(config)  # type: ignore[misc]
        for a in admitted:
            self.add_admitted(a)
        for w in pending:
            self.add_pending(w)

    # -- pending ----------------------------------------------------------
    def add_pending(self, w: Workload) -> None:
        if w.id in self._pending or w.id in self._admitted:
            raise CacheError(f"workload {w.id} is already known")
        self._pending[w.id] = w
        queue = self._queues.setdefault(self._route(w), [])
        bisect.insort(queue, (queue_order_key(w), w), key=lambda e: e[0])

    def remove_pending(self, wid: WorkloadId) -> Workload:
        w = self._pending.pop(wid, None)
        if w is None:
            raise CacheError(f"workload {wid} is not pending")
        queue = self._queues[self._route(w)]
        key = queue_order_key(w)
        i = bisect.bisect_left(queue, key, key=lambda e: e[0])
        assert queue[i][1] is w
        del queue[i]
        return w

    def _route(self, w: Workload) -> ClusterQueueName | None:
        cq = self._config.route(w)
        return cq if cq in self._config.cluster_queues else None

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
        cq, flavor = a.admission.cluster_queue, a.admission.flavor
        per_flavor = dict(self._usage.get(cq, {}))
        vec = dict(per_flavor.get(flavor, {}))
        for r, v in admitted_requests(a).items():
            vec[r] = vec.get(r, 0) + sign * v
        per_flavor[flavor] = vec
        self._usage[cq] = per_flavor
        per_pod = {ps.name: ps.requests for ps in a.workload.pod_sets}
        class_of = self._config.node_topology.class_of
        for p in a.admission.placements:
            old = self._free.get(p.node)
            if old is None:
                continue
            new = dict(old)
            for r, v in per_pod[p.pod_set].items():
                new[r] = new.get(r, 0) - sign * v * p.count
            self._free[p.node] = new
            cls = class_of.get(p.node)
            if cls is not None:
                reindex(self._index, cls, p.node, old, new)

    # -- reading ----------------------------------------------------------
    def pending(self) -> Iterable[Workload]:
        return self._pending.values()

    def admitted(self) -> Iterable[AdmittedWorkload]:
        return self._admitted.values()

    def is_pending(self, wid: WorkloadId) -> bool:
        return wid in self._pending

    def snapshot(self) -> Snapshot:
        pending = {
            cq: [w for _, w in entries]
            for cq, entries in sorted(self._queues.items(), key=lambda kv: kv[0] or "")
            if cq is not None and entries
        }
        return Snapshot(
            config=self._config,
            usage=dict(self._usage),
            node_free=dict(self._free),
            admitted=dict(self._admitted),
            pending=pending,
            unroutable=[w for _, w in self._queues.get(None, [])],
            node_index=dict(self._index),
        )
