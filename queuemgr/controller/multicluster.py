"""Multi-cluster dispatch: which worker cluster a gang goes to, and which workers are live.

Why it exists: with ``kubernetes.worker_clusters`` one queuemgr (the manager)
holds the queues and the quota of several worker clusters and runs each
admitted Job as a copy on one of them (docs/kubernetes.md, "Multi-cluster
dispatch"). Two decisions are kept here, free of I/O so that they are tested
alone: :func:`choose_cluster`, the dispatch policy, and :class:`Fleet`, the
state machine of the workers (live or lost) and of the copies (which workload
runs where).

What must stay true (the "no double run" rule): a workload is dispatched to
at most one cluster at a time, and only to a live one; a cluster becomes live
(on first contact, or again after a loss) only once it holds no copy of a
workload that is not dispatched to it: those stale copies are deleted first;
a cluster that has not answered for ``timeout`` seconds is lost, and every
workload dispatched to it is released at that moment (the caller evicts and
requeues them), so a copy on a lost cluster is never counted as running and
never prevents a new dispatch, but is deleted before the cluster is used again.
A copy the manager cannot be sure is gone keeps its workload dispatched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from queuemgr.controller.kube_section import FIRST_FIT as FIRST_FIT
from queuemgr.controller.kube_section import MOST_FREE
from queuemgr.core.model import Workload, WorkloadId
from queuemgr.core.resources import GPU, ResourceName, Resources
from queuemgr.k8s.cluster import Topic
from queuemgr.k8s.reflector import Change, Obj, key_of
from queuemgr.k8s.remote import CLUSTER_LABEL, node_name


def fits(need: Resources, free: Resources) -> bool:
    return all(free.get(r, 0) >= v for r, v in need.items() if v > 0)


def _dominant(need: Resources) -> ResourceName | None:
    if need.get(GPU, 0) > 0:
        return GPU
    return min((r for r, v in need.items() if v > 0), default=None)


def choose_cluster(
    policy: str, order: Sequence[str], free: Mapping[str, Resources], need: Resources
) -> str | None:
    """The cluster a gang needing ``need`` in all goes to, of those in ``free`` (the live
    ones, with their free capacity); None when none holds it.

    ``first-fit``: the first in ``order`` (the configuration's) that holds it.
    ``most-free``: of those that hold it, the one with the most free dominant
    resource (GPUs if asked for, else the first resource asked for by name);
    ties go to the earlier in ``order``.
    """
    candidates = [c for c in order if c in free and fits(need, free[c])]
    if not candidates:
        return None
    if policy == MOST_FREE:
        key = _dominant(need)
        if key is None:
            return candidates[0]
        return max(candidates, key=lambda c: (free[c].get(key, 0), -order.index(c)))
    return candidates[0]


NodeListener = Callable[[Topic, Change, Obj], None]


@dataclass
class _Cluster:
    name: str
    live: bool = False
    # Answered, or found lost, once in this process: until every cluster is, the
    # manager cannot tell what runs where (the backend refuses to act).
    settled: bool = False
    last_ok: float | None = None
    nodes: dict[str, Obj] = field(default_factory=dict)  # by the manager's name
    copies: dict[WorkloadId, Obj] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """What an answer of a worker asks the caller to do."""

    stale: tuple[WorkloadId, ...] = ()  # copies to delete before the cluster is live
    returned: bool = False  # the cluster just became live
    # Dispatched here before the listing began, yet not listed: the copy was never made
    # (its create failed) or was deleted on the worker; released now (the caller evicts).
    vanished: tuple[WorkloadId, ...] = ()


class Fleet:
    """The workers' state and where each workload runs; thread-safe, clock-free (the
    caller passes ``now``)."""

    def __init__(
        self, names: Sequence[str], *, timeout: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.order = tuple(names)
        self.timeout = timeout
        self.now = clock  # monotonic seconds: liveness and the age of a dispatch
        self._lock = threading.RLock()
        self._clusters = {n: _Cluster(n) for n in names}
        self._dispatched: dict[WorkloadId, str] = {}
        self._since: dict[WorkloadId, float] = {}  # when each was dispatched
        self._listeners: list[NodeListener] = []

    # -- nodes, as the job sync reads them ------------------------------------------------
    def add_listener(self, listener: NodeListener) -> None:
        self._listeners.append(listener)

    def _emit(self, change: Change, obj: Obj) -> None:
        for listener in self._listeners:
            listener(Topic.NODE, change, obj)

    def nodes(self) -> list[Obj]:
        """The nodes of the live clusters, named and labelled as the manager sees them."""
        with self._lock:
            return [n for c in self._clusters.values() if c.live for n in c.nodes.values()]

    def node(self, name: str) -> Obj | None:
        with self._lock:
            for c in self._clusters.values():
                if c.live and name in c.nodes:
                    return c.nodes[name]
        return None

    def cluster_of_node(self, name: str) -> str | None:
        with self._lock:
            for c in self._clusters.values():
                if name in c.nodes:
                    return c.name
        return None

    @staticmethod
    def _renamed(cluster: str, obj: Obj) -> Obj:
        meta = dict(obj.get("metadata") or {})
        meta["name"] = node_name(cluster, str(meta["name"]))
        meta["labels"] = {**(meta.get("labels") or {}), CLUSTER_LABEL: cluster}
        return {**obj, "metadata": meta}

    # -- the state machine ------------------------------------------------------------------
    def settled(self) -> bool:
        """Whether every cluster has answered, or been found lost, once."""
        with self._lock:
            return all(c.settled for c in self._clusters.values())

    def live(self, cluster: str) -> bool:
        with self._lock:
            return self._clusters[cluster].live

    def live_clusters(self) -> list[str]:
        with self._lock:
            return [n for n in self.order if self._clusters[n].live]

    def observe(
        self, cluster: str, listed_at: float, nodes: Sequence[Obj], copies: Sequence[Obj]
    ) -> Observation:
        """``cluster`` answered with its Nodes and the copies it holds, as listed from
        ``listed_at`` (this fleet's clock) on."""
        events: list[tuple[Change, Obj]] = []
        with self._lock:
            c = self._clusters[cluster]
            c.last_ok = self.now()
            c.copies = {WorkloadId(key_of(o)): o for o in copies}
            if not c.settled:
                # First contact: a copy of a workload dispatched nowhere is adopted (the
                # manager restarted while it ran); the store decides whether it still should.
                # A cluster first found lost adopts nothing when it answers later.
                c.settled = True
                for wid in c.copies:
                    if wid not in self._dispatched:
                        self._dispatched[wid] = cluster
                        self._since[wid] = listed_at
            stale = tuple(sorted(w for w in c.copies if self._dispatched.get(w) != cluster))
            vanished = tuple(
                sorted(
                    w
                    for w, where in self._dispatched.items()
                    if where == cluster and w not in c.copies and self._since[w] < listed_at
                )
            )
            for wid in vanished:
                del self._dispatched[wid]
            renamed = {key_of(r): r for r in (self._renamed(cluster, n) for n in nodes)}
            returned = False
            if not c.live and not stale:
                c.live = returned = True
            if c.live:
                for name, obj in renamed.items():
                    if c.nodes.get(name) != obj or returned:
                        events.append((Change.ADDED if returned else Change.MODIFIED, obj))
                for name in c.nodes.keys() - renamed.keys():
                    events.append((Change.DELETED, c.nodes[name]))
            c.nodes = renamed
        for change, obj in events:
            self._emit(change, obj)
        return Observation(stale=stale, returned=returned, vanished=vanished)

    def failed(self, cluster: str) -> list[WorkloadId] | None:
        """``cluster`` did not answer; when that makes it lost, the workloads that were
        dispatched to it (released now: the caller evicts them), else None."""
        events: list[Obj] = []
        now = self.now()
        with self._lock:
            c = self._clusters[cluster]
            if c.last_ok is None:
                c.last_ok = now  # the timeout counts from the first try
            if now - c.last_ok < self.timeout:
                return None
            c.settled = True
            if not c.live:
                return None
            c.live = False
            events = list(c.nodes.values())
            lost = sorted(w for w, n in self._dispatched.items() if n == cluster)
            for wid in lost:
                del self._dispatched[wid]
        for obj in events:
            self._emit(Change.DELETED, obj)
        return lost

    def deleted(self, cluster: str, wid: WorkloadId) -> None:
        """A stale copy was deleted from ``cluster``."""
        with self._lock:
            self._clusters[cluster].copies.pop(wid, None)

    def dispatch(self, wid: WorkloadId, cluster: str) -> None:
        """Record ``wid`` as running on ``cluster`` (before its copy is created)."""
        with self._lock:
            if not self._clusters[cluster].live:
                raise ValueError(f"cluster {cluster} is not live")
            where = self._dispatched.get(wid)
            if where is not None and where != cluster:
                raise ValueError(f"{wid} is dispatched to {where} already")
            self._dispatched[wid] = cluster
            self._since[wid] = self.now()

    def where(self, wid: WorkloadId) -> str | None:
        with self._lock:
            return self._dispatched.get(wid)

    def release(self, wid: WorkloadId, cluster: str) -> None:
        """``wid``'s copy on ``cluster`` is gone (or the cluster is lost): dispatched nowhere."""
        with self._lock:
            if self._dispatched.get(wid) == cluster:
                del self._dispatched[wid]

    def dispatched(self) -> dict[WorkloadId, str]:
        with self._lock:
            return dict(self._dispatched)

    def copies(self, cluster: str) -> dict[WorkloadId, Obj]:
        with self._lock:
            return dict(self._clusters[cluster].copies)


def keep_in_one_cluster(workload: Workload) -> Workload:
    """The workload with each pod set lacking a topology required to stay on one
    cluster's nodes (a required topology on :data:`CLUSTER_LABEL`)."""
    if all(ps.topology is not None for ps in workload.pod_sets):
        return workload
    pod_sets = tuple(
        ps if ps.topology is not None else replace(ps, topology_required=CLUSTER_LABEL)
        for ps in workload.pod_sets
    )
    return replace(workload, pod_sets=pod_sets)
