"""ETAs for every pending (queue, shape) pair of a cycle, from one timeline of releases.

Why it exists: a pending workload's status carries an ETA, the earliest time at which
the running workloads' declared ends leave room for its shape: the start that
``Planner.reserve`` would give it. Asked pair by pair, each ETA built its own quota
and node state and walked every release in the cluster: at 1,000 ClusterQueues and
10,000 nodes that was 105 ms a pair, and a big cluster holds thousands of pairs. The
question splits in two. Whether the nodes hold the gang depends on the flavor and the
shape alone, not on the queue; whether the quota fits depends on the queue, the shape's
total requests, and the releases of the queue's cohort alone. Both only get easier as
runs end, so the ETA is the later of the first release at which each side fits, and
each side is worked out once where it is shared: the nodes per (flavor, shape), for
every queue; the quota per (queue, flavor, shape, whether it may borrow), walking only
its cohort's releases.

The service keeps every pending workload's ETA current, so it asks for all of them
every cycle, and most cycles change nothing the ETAs depend on. Both sides' answers are
positions on the timeline of releases, not times, so they stay true as the clock moves
until a run passes its declared end; they are carried to the next cycle of the same
cache (``Snapshot.memo``) and reused when that cycle's inputs are the very same objects:
config, usage, free capacity and admitted set (the cache hands out the same ones until
something is admitted or released), the same admissions and evictions of the cycle, the
same claims and stopping victims, and a timeline of the same runs.

What must stay true: ``Etas.start(cq, w)`` equals ``Planner.reserve(cq, w, ...).start``
on the same cycle state, for every pending pair (tests/unit/core/test_eta.py checks it on
random worlds), whether or not the answers were carried from an earlier cycle; a gang
the pod counter cannot follow (several pod sets, topology) is planned by
``Planner.reserve`` itself, never carried.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Mapping, Sequence

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    Workload,
    WorkloadId,
)
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.reservations import Planner
from queuemgr.core.shapes import ShapeId
from queuemgr.core.snapshot import Snapshot
from queuemgr.core.timeline import NodeDeltas, PodCounter, Timeline, node_deltas

# Releases are grouped by the quota they touch: a cohort's, or a queue's of no cohort.
_Pool = tuple[CohortName | None, ClusterQueueName | None, FlavorName]
_QuotaKey = tuple[ClusterQueueName, FlavorName, ShapeId, bool]
_NodesKey = tuple[FlavorName, ShapeId]


class _Carried:
    """The node side's answers of one cycle, with everything they were computed from."""

    __slots__ = ("inputs", "known", "nodes", "rest", "unknown")

    def __init__(
        self, inputs: tuple[object, ...], rest: tuple[object, ...], line: Timeline
    ) -> None:
        self.inputs = inputs  # held, so that no other object can take their ids
        self.rest = rest
        self.known = line.known
        self.unknown = line.unknown
        self.nodes: dict[_NodesKey, int | None] = {}

    def holds_for(
        self, inputs: tuple[object, ...], rest: tuple[object, ...], line: Timeline
    ) -> bool:
        return (
            all(map(operator.is_, self.inputs, inputs))
            and self.rest == rest
            and self.unknown == line.unknown
            and len(self.known) == len(line.known)
            and all(map(operator.is_, self.known, line.known))
        )


class _PoolAnswers:
    """The quota side's answers for one pool, with the runs they were computed from.

    Whether a shape fits a queue's quota, and after which release, depends on the
    config and on the runs that hold the pool's quota: those with a known end, in
    timeline order, then those without, by id. A cycle that admits or releases in
    one cohort leaves every other cohort's answers standing. An answer is a time:
    the end of the release after which it fits (-inf: it fits now), so it does
    not move when other pools' releases move the timeline's indices.
    """

    __slots__ = ("quota", "runs")

    def __init__(self, runs: tuple[list[AdmittedWorkload], int]) -> None:
        self.runs = runs  # held, so that no other object can take their ids
        self.quota: dict[_QuotaKey, float | None] = {}

    def holds_for(self, runs: tuple[list[AdmittedWorkload], int]) -> bool:
        (mine, known), (theirs, also) = self.runs, runs
        # A run past its declared end moves from known to unknown: the same list.
        return known == also and len(mine) == len(theirs) and all(map(operator.is_, mine, theirs))


class _EtaMemo:
    """What one cycle carries to the next: the node side whole, the quota side per pool."""

    __slots__ = ("config", "nodes", "pools")

    def __init__(self, config: object) -> None:
        self.config = config
        self.nodes: _Carried | None = None
        self.pools: dict[_Pool, _PoolAnswers] = {}


class Etas:
    """The ETA of each (queue, shape) pair on one cycle's state, each side memoised."""

    def __init__(
        self,
        planner: Planner,
        snapshot: Snapshot,
        admitted_now: Sequence[AdmittedWorkload],
        evicted: Mapping[WorkloadId, AdmittedWorkload],
        now: float,
    ) -> None:
        self._planner = planner
        self._snapshot = snapshot
        self._admitted_now = admitted_now
        self._evicted = evicted
        self._now = now
        line = planner.timeline(admitted_now, evicted, now)
        self._known, self._ends = line.known, line.ends
        self._group_end_list: list[int] | None = None
        # Per node, what this cycle's admissions and evictions moved, and what each group
        # of releases gives back (by its first index): summed once, applied per shape.
        self._cycle_deltas: NodeDeltas | None = None
        self._group_deltas: dict[int, NodeDeltas] = {}
        self._pools: dict[_Pool, list[int]] | None = None
        self._ledger: QuotaLedger | None = None
        self._starts: dict[tuple[ClusterQueueName, ShapeId, bool], float | None] = {}
        s = snapshot
        inputs = (s.config, s.usage, s.node_free, s.admitted, s.node_index)
        rest = (
            tuple(a.workload.id for a in admitted_now),
            frozenset(evicted),
            s.stopping,
            dict(s.claims),
        )
        memo = None if s.memo is None else s.memo.etas
        if not isinstance(memo, _EtaMemo) or memo.config is not s.config:
            memo = _EtaMemo(s.config)
            if s.memo is not None:
                s.memo.etas = memo
        carried = memo.nodes
        if carried is None or not carried.holds_for(inputs, rest, line):
            carried = memo.nodes = _Carried(inputs, rest, line)
        self._nodes = carried.nodes
        self._memo = memo
        self._unknown = line.unknown
        self._pool_runs: dict[_Pool, tuple[list[AdmittedWorkload], int]] | None = None
        self._checked: set[_Pool] = set()  # pools whose carried answers were checked

    def start(self, cq: ClusterQueue, w: Workload) -> float | None:
        """When ``w``'s shape first fits ``cq``'s quota and the nodes, None if never known."""
        key = (cq.name, w.shape, cq.may_borrow(w))
        if key in self._starts:
            return self._starts[key]
        if len(w.pod_sets) != 1 or w.pod_sets[0].topology is not None:
            found = self._planner.reserve(
                cq, w, admitted_now=self._admitted_now, evicted=self._evicted, now=self._now
            ).start
        else:
            found = None
            for fq in cq.flavors:
                quota = self._quota_at(cq, w, fq.flavor)
                if quota is None:
                    continue
                nodes = self._nodes_first(w, fq.flavor)
                if nodes is None:
                    continue
                # Ends are sorted: the later of the two boundaries is the later end.
                at = max(self._now, quota, self._ends[nodes - 1] if nodes else -math.inf)
                if found is None or at < found:
                    found = at
        self._starts[key] = found
        return found

    def _quota_at(self, cq: ClusterQueue, w: Workload, flavor: FlavorName) -> float | None:
        """The end after which ``w`` fits ``cq``'s quota on ``flavor`` (-inf: now)."""
        key = (cq.name, flavor, w.shape, cq.may_borrow(w))
        cohort = self._snapshot.config.quota_topology.root_of.get(cq.name)
        pool = (cohort, None if cohort is not None else cq.name, flavor)
        answers = self._memo.pools.get(pool)
        # The runs of a pool are fixed for this object's cycle: checked once, not per pair
        # (a pool of a whole tree holds thousands of runs).
        if pool not in self._checked:
            if answers is None or not answers.holds_for(self._runs_of(pool)):
                answers = self._memo.pools[pool] = _PoolAnswers(self._runs_of(pool))
            self._checked.add(pool)
        assert answers is not None
        if key in answers.quota:
            return answers.quota[key]
        k = self._quota_first(cq, w, flavor, pool)
        at = None if k is None else (self._ends[k - 1] if k else -math.inf)
        answers.quota[key] = at
        return at

    def _quota_first(
        self, cq: ClusterQueue, w: Workload, flavor: FlavorName, pool: _Pool
    ) -> int | None:
        """The first group boundary at which ``w`` fits ``cq``'s quota on ``flavor``."""
        if self._ledger is None:
            # The usage once this cycle's admissions and evictions are counted. A watch
            # reads the ledger only when it is made, so one ledger serves every pair.
            state = self._planner.state(self._admitted_now, self._evicted.values(), ())
            self._ledger = state.ledger
        watch = self._ledger.watch(cq, flavor, w)
        found: int | None = None
        if watch.covered:
            if watch.fits():
                found = 0
            else:
                known, group_end = self._known, self._group_end
                for i in self._releases().get(pool, []):
                    a = known[i]
                    watch.change(a.admission.cluster_queue, flavor, a.held, -1)
                    # Fitting only gets easier as runs end, so fitting part-way through a
                    # group of equal ends is fitting at the group's end, and not before.
                    if watch.fits():
                        found = group_end[i]
                        break
        return found

    def _nodes_first(self, w: Workload, flavor: FlavorName) -> int | None:
        """The first group boundary at which the nodes of ``flavor`` hold ``w``'s pods."""
        key = (flavor, w.shape)
        if key in self._nodes:
            return self._nodes[key]
        counter = PodCounter(self._snapshot, flavor, w.pod_sets[0])
        if self._cycle_deltas is None:
            self._cycle_deltas = node_deltas(
                [*((a, 1) for a in self._admitted_now), *((a, -1) for a in self._evicted.values())]
            )
        counter.apply(self._cycle_deltas)
        known, group_end, groups = self._known, self._group_end, self._group_deltas
        k: int | None = 0
        while not counter.enough():
            assert k is not None
            if k >= len(known):
                k = None
                break
            nxt = group_end[k]
            released = groups.get(k)
            if released is None:
                released = groups[k] = node_deltas((a, -1) for a in known[k:nxt])
            counter.apply(released)
            k = nxt
        self._nodes[key] = k
        return k

    @property
    def _group_end(self) -> list[int]:
        """For each release, the index just past its group of equal ends: the planner
        looks again only once a whole group has gone. Made when first walked."""
        if self._group_end_list is None:
            ends = self._ends
            self._group_end_list = [bisect.bisect_right(ends, end) for end in ends]
        return self._group_end_list

    def _runs_of(self, pool: _Pool) -> tuple[list[AdmittedWorkload], int]:
        """The runs holding ``pool``'s quota: known ends in timeline order, then the others
        by id (the timeline keeps those sorted); and how many have a known end."""
        if self._pool_runs is None:
            known = self._known
            runs: dict[_Pool, tuple[list[AdmittedWorkload], int]] = {
                p: ([known[i] for i in indices], len(indices))
                for p, indices in self._releases().items()
            }
            admitted, now = self._snapshot.admitted, {a.workload.id: a for a in self._admitted_now}
            for wid in self._unknown:
                a = admitted.get(wid) or now[wid]
                runs.setdefault(self._pool_of(a), ([], 0))[0].append(a)
            self._pool_runs = runs
        return self._pool_runs.get(pool, ([], 0))

    def _pool_of(self, a: AdmittedWorkload) -> _Pool:
        name = a.admission.cluster_queue
        cohort = self._snapshot.config.quota_topology.root_of.get(name)
        return (cohort, None if cohort is not None else name, a.admission.flavor)

    def _releases(self) -> dict[_Pool, list[int]]:
        """The timeline's indices, per quota pool they release into, in order."""
        if self._pools is None:
            pools: dict[_Pool, list[int]] = {}
            for i, a in enumerate(self._known):
                pools.setdefault(self._pool_of(a), []).append(i)
            self._pools = pools
        return self._pools
