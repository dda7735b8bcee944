"""When the running workloads end, and how many pods of a gang the nodes hold meanwhile.

Why it exists: reservation planning (core.reservations) asks, for a blocked gang,
at which expected end of the running workloads it first fits. Building a full
quota and node overlay at every candidate time made planning the slowest part
of a cycle; these helpers answer the same question incrementally.

What must stay true:

- ``Timeline`` lists the running workloads with a known end (admission +
  ``max_runtime``, not yet past) sorted by (end, id), and the ids of the others,
  exactly as the planner defines them;
- ``PodCounter`` applies only to a gang of one pod set without topology, whose
  greedy placer (core.placement) succeeds exactly when the eligible nodes hold
  ``count`` pods in sum; its count and its ``placement`` match what
  ``NodePool.place`` gives on the same free capacity, node for node, so that
  using it never changes a decision.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from queuemgr.core.model import (
    AdmittedWorkload,
    FlavorName,
    NodeName,
    PodSet,
    PodSetPlacement,
    WorkloadId,
)
from queuemgr.core.node_topology import NodeClass, free_key
from queuemgr.core.placement import how_many_tuple
from queuemgr.core.resources import ResourceName, how_many
from queuemgr.core.snapshot import Snapshot


def expected_end(a: AdmittedWorkload, now: float) -> float | None:
    """When ``a`` is expected to end: admission + max_runtime, unknown without one.

    A run already past its max_runtime (overrun policy ``extend``) has no known end
    any more, so it counts as unknown rather than as ended.
    """
    limit = a.workload.max_runtime
    if limit is None or a.admitted_at + limit < now:
        return None
    return a.admitted_at + limit


# What runs take from each node (negative) or give back (positive), summed per node
# and resource. It depends on the runs alone, not on the shape or flavor counted, so
# one group of releases is summed once and every counter walking it applies the sum.
NodeDeltas = Mapping[NodeName, Mapping[ResourceName, int]]


def node_deltas(
    changes: Iterable[tuple[AdmittedWorkload, int]],
) -> dict[NodeName, dict[ResourceName, int]]:
    """What each node's free capacity moves by as each workload of ``changes`` starts
    (sign 1: it takes its pods' requests) or ends (sign -1: it gives them back)."""
    moved: dict[NodeName, dict[ResourceName, int]] = {}
    for a, sign in changes:
        pod_sets = a.workload.pod_sets
        single = pod_sets[0].node_requests if len(pod_sets) == 1 else None
        per_pod = {p.name: p.node_requests for p in pod_sets} if single is None else {}
        for p in a.admission.placements:
            delta = moved.get(p.node)
            if delta is None:
                delta = moved[p.node] = {}
            pods = sign * p.count
            for r, v in (single if single is not None else per_pod[p.pod_set]).items():
                delta[r] = delta.get(r, 0) - v * pods
    return moved


class Timeline:
    """Running workloads with a known end, sorted by (end, id); the ids of the others."""

    __slots__ = ("ends", "known", "rows", "unknown")

    def __init__(
        self, rows: list[tuple[float, WorkloadId, AdmittedWorkload]], unknown: list[WorkloadId]
    ) -> None:
        rows.sort(key=lambda row: (row[0], row[1]))
        unknown.sort()
        self.rows = rows
        self.known = [a for _, _, a in rows]
        self.ends = [end for end, _, _ in rows]
        self.unknown = tuple(unknown)

    @staticmethod
    def of(
        admitted: Iterable[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> Timeline:
        rows: list[tuple[float, WorkloadId, AdmittedWorkload]] = []
        unknown: list[WorkloadId] = []
        for a in admitted:
            wid = a.workload.id
            if wid in evicted:
                continue
            end = expected_end(a, now)
            if end is None:
                unknown.append(wid)
            else:
                rows.append((end, wid, a))
        return Timeline(rows, unknown)

    def plus(self, admitted: Iterable[AdmittedWorkload], now: float) -> Timeline:
        """This timeline with ``admitted`` added (a copy; few are added to many)."""
        extra = Timeline.of(admitted, {}, now)
        if not extra.rows and not extra.unknown:
            return self
        out = Timeline.__new__(Timeline)
        out.rows, out.known, out.ends = list(self.rows), list(self.known), list(self.ends)
        for row in extra.rows:
            at = bisect.bisect_right(out.rows, (row[0], row[1]))  # ids are unique
            out.rows.insert(at, row)
            out.known.insert(at, row[2])
            out.ends.insert(at, row[0])
        out.unknown = tuple(sorted([*self.unknown, *extra.unknown]))
        return out


class PodCounter:
    """How many pods of a one-pod-set gang the eligible nodes of a flavor hold.

    Starts from a snapshot's free capacity (its node index, when it has one, counts
    a whole group of equal nodes at once) and follows admissions and releases.
    """

    __slots__ = (
        "_base",
        "_classes",
        "_count",
        "_free",
        "_needed",
        "_ps",
        "_req",
        "_snapshot",
        "_topology",
        "_total",
    )

    def __init__(self, snapshot: Snapshot, flavor: FlavorName, ps: PodSet) -> None:
        topo = self._topology = snapshot.config.node_topology
        self._snapshot = snapshot
        self._ps = ps
        self._needed = ps.count
        self._base = snapshot.node_free
        self._free: dict[NodeName, dict[ResourceName, int]] = {}  # nodes changed since
        self._count: dict[NodeName, int] = {}
        self._total = 0
        # Eligible classes, in the placer's order: position by class index.
        self._classes: dict[int, int] = {}
        self._req: dict[int, tuple[int, ...]] = {}
        index = snapshot.node_index
        for cls in topo.candidates(flavor, ps):
            if any(v > 0 and r not in cls.resources for r, v in ps.node_requests.items()):
                continue
            self._classes[cls.index] = len(self._classes)
            req = self._req[cls.index] = tuple(ps.node_requests.get(r, 0) for r in cls.resources)
            if index is not None and not ps.node_selector:
                for key, nodes in index[cls.index].items():
                    self._total += how_many_tuple(req, key) * len(nodes)
            else:
                for node in self._nodes(cls):
                    self._total += self.count(node)

    @staticmethod
    def of(
        snapshot: Snapshot, flavor: FlavorName, pod_sets: tuple[PodSet, ...]
    ) -> PodCounter | None:
        """A counter for a gang of one pod set placed without topology, else None."""
        if len(pod_sets) != 1 or pod_sets[0].topology is not None:
            return None
        return PodCounter(snapshot, flavor, pod_sets[0])

    def _nodes(self, cls: NodeClass) -> Iterable[NodeName]:
        topo, ps = self._topology, self._ps
        for node in cls.nodes:
            if not ps.node_selector or topo.node_matches(node, ps):
                yield node

    def free(self, node: NodeName) -> Mapping[ResourceName, int]:
        own = self._free.get(node)
        return own if own is not None else self._base.get(node, {})

    def count(self, node: NodeName) -> int:
        n = self._count.get(node)
        if n is None:
            n = max(0, how_many(self._ps.node_requests, self.free(node)))
        return n

    def enough(self) -> bool:
        return self._total >= self._needed

    def change(self, workloads: Iterable[AdmittedWorkload], sign: int) -> None:
        """``workloads`` now hold their capacity (sign 1) or have released it (sign -1)."""
        self.apply(node_deltas((a, sign) for a in workloads))

    def apply(self, moved: NodeDeltas) -> None:
        """Each node's free capacity moved by its delta (``node_deltas``).

        A node's count depends only on its final free capacity, so each node changed
        is counted once. Called for every group of runs a walk passes, for every shape,
        so the lookups are inlined: a node counts if its class is eligible and it
        matches the pod set's selector.
        """
        topo, ps = self._topology, self._ps
        class_of, classes, selector = topo.class_of, self._classes, ps.node_selector
        wanted, frees, counts = ps.node_requests, self._free, self._count
        for node, delta in moved.items():
            cls = class_of.get(node)
            if cls is None or cls.index not in classes:
                continue
            if selector and not topo.node_matches(node, ps):
                continue
            free = frees.get(node)
            if free is None:  # first change of the node: its count is the snapshot's
                free = frees[node] = dict(self._base.get(node, {}))
                old = max(0, how_many(wanted, free))
            else:
                old = counts[node]
            for r, v in delta.items():
                free[r] = free.get(r, 0) + v
            n = counts[node] = max(0, how_many(wanted, free))
            self._total += n - old

    def placement(self) -> tuple[PodSetPlacement, ...] | None:
        """Where ``NodePool.place`` puts the gang: best fit (least free first), then name."""
        topo, ps, index = self._topology, self._ps, self._snapshot.node_index
        found: list[tuple[int, tuple[int, ...], NodeName, int]] = []
        for cls_index, pos in self._classes.items():
            cls = topo.classes[cls_index]
            req = self._req[cls_index]
            if index is not None and not ps.node_selector:
                for key, nodes in index[cls_index].items():
                    per_node = how_many_tuple(req, key)
                    if per_node <= 0:
                        continue
                    found.extend(
                        (pos, key, node, per_node) for node in nodes if node not in self._free
                    )
            else:
                for node in self._nodes(cls):
                    if node not in self._free and (n := self.count(node)) > 0:
                        found.append((pos, free_key(cls, self.free(node)), node, n))
        for node, free in self._free.items():
            n = self._count[node]
            if n > 0:
                cls = topo.class_of[node]
                found.append((self._classes[cls.index], free_key(cls, free), node, n))
        found.sort()
        out: list[PodSetPlacement] = []
        remaining = ps.count
        for _pos, _key, node, n in found:
            use = min(n, remaining)
            out.append(PodSetPlacement(pod_set=ps.name, node=node, count=use))
            remaining -= use
            if remaining <= 0:
                return tuple(out)
        return None
