"""An independent check that the scheduler's admissions respect capacity and quota.

Why it exists: the simulator is how the scheduler is trusted at scale, so it
must not take the scheduler's word for it. This checker recomputes, from the
admitted set alone and with its own arithmetic (none of ``quota`` or
``placement``), what the cluster holds, and compares that with the limits
and with the cache's incremental state.

What must stay true: the checker only reads; it never changes what the
engine does, and a violation is counted, never repaired. Rules checked:

- per admission: the workload went to its LocalQueue's ClusterQueue, which
  admits its namespace; every pod set is placed exactly ``count`` times (the gang is
  whole; a pod set with ``min_count`` at least that many times), all on nodes of one
  value of its required topology label, if any, on schedulable nodes of the admitted
  flavor that match the pod set's node selector and whose hard taints, and the
  flavor's, it tolerates (by its own tolerations or the flavor's);
- per node: the admitted pods' requests never exceed its allocatable, and
  the cache's free vector equals allocatable minus those requests;
- per ClusterQueue and flavor: usage equals the cache's; without a cohort it
  stays within nominal; with a borrowing limit, within nominal + limit; a
  resource without nominal quota is never used;
- per cohort: pool use ``sum max(0, usage - guaranteed)`` stays within the
  pool ``sum (nominal - guaranteed)``, where ``guaranteed`` is
  ``nominal - lending_limit`` if a lending limit is set, else 0;
- per ClusterQueue with a ``borrowing_max_runtime``, flavor and resource: what its
  workloads that may not borrow (no declared ``max_runtime``, or a longer one) hold
  stays within nominal. Each was admitted within nominal on top of all the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorQuota,
    NodeName,
    WorkloadId,
)
from queuemgr.core.node_topology import tolerated
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Config, Snapshot

_Vec = dict[ResourceName, int]
_Usage = Mapping[tuple[ClusterQueueName, FlavorName], _Vec]
_Key = tuple[FlavorName, ResourceName]
_Items = tuple[tuple[ResourceName, int], ...]
_NodeItems = tuple[tuple[tuple[NodeName, ResourceName], int], ...]


class InvariantChecker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.violations: list[str] = []
        self.checks = 0
        self._contrib: dict[WorkloadId, tuple[AdmittedWorkload, _NodeItems, _Items]] = {}

    @property
    def count(self) -> int:
        return len(self.violations)

    def _fail(self, message: str) -> None:
        self.violations.append(message)

    def check_admission(self, a: AdmittedWorkload) -> None:
        """The gang is whole and every pod sits on a node it may use."""
        cfg = self.config
        wid, flavor_name = a.workload.id, a.admission.flavor
        flavor = cfg.flavors.get(flavor_name)
        cq = cfg.cluster_queues.get(a.admission.cluster_queue)
        if cq is None or cfg.route(a.workload) != cq.name:
            self._fail(f"{wid}: admitted to {a.admission.cluster_queue}, not its LocalQueue's")
        elif not cq.admits_namespace(a.workload.namespace):
            self._fail(f"{wid}: namespace may not use ClusterQueue {cq.name}")
        placed: dict[str, int] = {}
        pod_sets = {ps.name: ps for ps in a.workload.pod_sets}
        for p in a.admission.placements:
            ps = pod_sets.get(p.pod_set)
            node = cfg.all_nodes.get(p.node)
            if ps is None or node is None or flavor is None or p.count <= 0:
                self._fail(f"{wid}: placement {p} names an unknown pod set, node or flavor")
                continue
            placed[ps.name] = placed.get(ps.name, 0) + p.count
            if not node.schedulable or not flavor.selects(node.labels):
                self._fail(f"{wid}: node {p.node} is unschedulable or not of flavor {flavor_name}")
            if any(node.labels.get(k) != v for k, v in ps.node_selector.items()):
                self._fail(f"{wid}: node {p.node} does not match pod set {ps.name}'s selector")
            # A flavor's taints hold on all its nodes (Kueue's nodeTaints).
            # And a pod admitted on a flavor carries the flavor's tolerations.
            if not tolerated(node.taints + flavor.taints, ps.tolerations + flavor.tolerations):
                self._fail(f"{wid}: pod set {ps.name} does not tolerate node {p.node}'s taints")
        for ps in a.workload.pod_sets:
            # Whole, or (partial admission) between min_count and count.
            low = ps.count if ps.min_count is None else ps.min_count
            if not low <= placed.get(ps.name, 0) <= ps.count:
                self._fail(
                    f"{wid}: pod set {ps.name} placed {placed.get(ps.name, 0)} of {ps.count} pods"
                )
            key = ps.topology_required
            if key is not None:
                values = {
                    cfg.all_nodes[p.node].labels.get(key)
                    for p in a.admission.placements
                    if p.pod_set == ps.name and p.node in cfg.all_nodes
                }
                if len(values) != 1 or None in values:
                    self._fail(f"{wid}: pod set {ps.name} requires one {key}, placed on {values}")

    def check_state(self, admitted: Iterable[AdmittedWorkload], snapshot: Snapshot) -> None:
        """Recompute node and quota use from ``admitted``; compare with limits and cache."""
        self.checks += 1
        node_used: dict[tuple[NodeName, ResourceName], int] = {}
        usage: dict[tuple[ClusterQueueName, FlavorName], _Vec] = {}
        unlent: dict[tuple[ClusterQueueName, FlavorName], _Vec] = {}  # held by non-borrowers
        queues = self.config.cluster_queues
        for a in admitted:
            per_node, total = self._contribution(a)
            for key, v in per_node:
                node_used[key] = node_used.get(key, 0) + v
            at = (a.admission.cluster_queue, a.admission.flavor)
            q = usage.setdefault(at, {})
            for r, v in total:
                q[r] = q.get(r, 0) + v
            cq = queues.get(a.admission.cluster_queue)
            limit = None if cq is None else cq.borrowing_max_runtime
            declared = a.workload.max_runtime
            if limit is not None and (declared is None or declared > limit):
                own = unlent.setdefault(at, {})
                for r, v in total:
                    own[r] = own.get(r, 0) + v
        self._check_nodes(node_used, snapshot)
        self._check_quota(usage, snapshot)
        for (cq_name, flavor), vec in unlent.items():
            fq = queues[cq_name].quota(flavor)
            for r, v in vec.items():
                nominal = 0 if fq is None else fq.nominal.get(r, 0)
                if v > nominal:
                    self._fail(
                        f"ClusterQueue {cq_name} flavor {flavor}: workloads that may not "
                        f"borrow hold {v} {r}, beyond nominal {nominal}"
                    )

    def forget(self, wid: WorkloadId) -> None:
        """Drop the memo of a workload that is no longer admitted."""
        self._contrib.pop(wid, None)

    def _contribution(self, a: AdmittedWorkload) -> tuple[_NodeItems, _Items]:
        # What one admission holds, per (node, resource) and in total, as flat
        # tuples: an admission never changes, so this is computed once for it.
        hit = self._contrib.get(a.workload.id)
        if hit is not None and hit[0] is a:
            return hit[1], hit[2]
        sets = {ps.name: ps for ps in a.workload.pod_sets}
        per_node: dict[tuple[NodeName, ResourceName], int] = {}
        total: _Vec = {}
        for p in a.admission.placements:
            ps = sets.get(p.pod_set)
            if ps is None:
                continue
            for r, v in ps.requests.items():
                total[r] = total.get(r, 0) + v * p.count
            for r, v in ps.node_requests.items():  # quota-only devices take no node room
                per_node[(p.node, r)] = per_node.get((p.node, r), 0) + v * p.count
        entry = (a, tuple(per_node.items()), tuple(total.items()))
        self._contrib[a.workload.id] = entry
        return entry[1], entry[2]

    def _check_nodes(
        self, node_used: Mapping[tuple[NodeName, ResourceName], int], snapshot: Snapshot
    ) -> None:
        nodes = self.config.all_nodes  # the virtual nodes too (core.node_topology)
        for (name, r), v in node_used.items():
            node = nodes.get(name)
            if node is None:
                self._fail(f"node {name}: pods placed on a node that does not exist")
                continue
            free = node.allocatable.get(r, 0) - v
            if free < 0:
                self._fail(f"node {name}: {r} over-committed by {-free}")
            if snapshot.node_free.get(name, {}).get(r, 0) != free:
                self._fail(f"node {name}: cache's free {r} differs from a recount")
        for name, node in nodes.items():
            cached = snapshot.node_free.get(name, {})
            for r in {*cached, *node.allocatable}:
                if (name, r) in node_used:
                    continue
                if cached.get(r, 0) != node.allocatable.get(r, 0):
                    self._fail(f"node {name}: cache's free {r} differs from a recount")

    def _check_quota(self, usage: _Usage, snapshot: Snapshot) -> None:
        for cq_name, per_flavor in snapshot.usage.items():
            for flavor, cached in per_flavor.items():
                if _differs(cached, usage.get((cq_name, flavor), {})):
                    self._fail(f"{cq_name}/{flavor}: cache's usage differs from a recount")
        for (cq_name, flavor), vec in usage.items():
            if _differs(snapshot.usage.get(cq_name, {}).get(flavor, {}), vec):
                self._fail(f"{cq_name}/{flavor}: cache's usage differs from a recount")
        for cq in self.config.cluster_queues.values():
            for fq in cq.flavors:
                used = usage.get((cq.name, fq.flavor), {})
                where = f"ClusterQueue {cq.name} flavor {fq.flavor}"
                for r, v in used.items():
                    if v > 0 and r not in fq.nominal:
                        self._fail(f"{where}: uses {v} {r} without nominal quota")
                for r, nominal in fq.nominal.items():
                    v = used.get(r, 0)
                    if cq.cohort is None and v > nominal:
                        self._fail(f"{where}: {r} {v} exceeds nominal {nominal} (no cohort)")
                    limit = fq.borrowing_limit.get(r)
                    if limit is not None and v > nominal + limit:
                        self._fail(f"{where}: {r} {v} exceeds nominal + borrowing limit")
        for (cq_name, flavor), vec in usage.items():
            owner = self.config.cluster_queues.get(cq_name)
            if (owner is None or owner.quota(flavor) is None) and any(vec.values()):
                self._fail(f"ClusterQueue {cq_name}: uses flavor {flavor} it has no quota on")
        self._check_cohorts(usage)

    def _check_cohorts(self, usage: _Usage) -> None:
        """Every cohort's pool, recomputed from the config alone, level by level.

        A cohort's pool is its own nominal quota plus what each child does not keep
        (subtree less guarantee); its use is what each child holds beyond its guarantee.
        A root never uses more than its pool, and a cohort with a borrowing limit never
        takes more than that from its parent beyond what it lends it.
        """
        cohorts = dict(self.config.cohorts)
        children: dict[CohortName, list[CohortName]] = {}
        for c in cohorts.values():
            if c.parent is not None:
                children.setdefault(c.parent, []).append(c.name)
        members: dict[CohortName, list[ClusterQueue]] = {}
        for cq in self.config.cluster_queues.values():
            if cq.cohort is not None:
                members.setdefault(cq.cohort, []).append(cq)
        pools: dict[CohortName, tuple[dict[_Key, int], dict[_Key, int]]] = {}

        def walk(name: CohortName) -> tuple[dict[_Key, int], dict[_Key, int]]:
            if name in pools:
                return pools[name]
            pool: dict[_Key, int] = {}
            used: dict[_Key, int] = {}
            own = cohorts[name].flavors if name in cohorts else ()
            for fq in own:
                for r, v in fq.nominal.items():
                    pool[(fq.flavor, r)] = pool.get((fq.flavor, r), 0) + v
            for cq in members.get(name, []):
                for fq in cq.flavors:
                    held = usage.get((cq.name, fq.flavor), {})
                    for r, nominal in fq.nominal.items():
                        lend = fq.lending_limit.get(r)
                        g = 0 if lend is None else max(0, nominal - lend)
                        key = (fq.flavor, r)
                        pool[key] = pool.get(key, 0) + nominal - g
                        used[key] = used.get(key, 0) + max(0, held.get(r, 0) - g)
            for child in children.get(name, []):
                sub, sub_used = walk(child)
                lends = _limits(cohorts[child].flavors, "lending_limit")
                borrows = _limits(cohorts[child].flavors, "borrowing_limit")
                for key in {*sub, *sub_used}:
                    lend = lends.get(key)
                    g = 0 if lend is None else max(0, sub.get(key, 0) - lend)
                    lifted = max(0, sub_used.get(key, 0) - g)
                    limit = borrows.get(key)
                    if limit is not None and lifted > sub.get(key, 0) - g + limit:
                        flavor, r = key
                        self._fail(
                            f"cohort {child} flavor {flavor}: takes {lifted - sub.get(key, 0) + g}"
                            f" {r} from its parent, beyond its borrowing limit {limit}"
                        )
                    pool[key] = pool.get(key, 0) + sub.get(key, 0) - g
                    used[key] = used.get(key, 0) + lifted
            pools[name] = (pool, used)
            return pool, used

        roots = {c for c in {*cohorts, *members} if c not in cohorts or cohorts[c].parent is None}
        for root in sorted(roots):
            pool, used = walk(root)
            for key, amount in sorted(used.items()):
                if amount > pool.get(key, 0):
                    flavor, r = key
                    self._fail(
                        f"cohort {root} flavor {flavor}: pool use {amount} {r} "
                        f"exceeds the pool {pool.get(key, 0)}"
                    )


def _limits(flavors: Iterable[FlavorQuota], which: str) -> dict[_Key, int]:
    out: dict[_Key, int] = {}
    for fq in flavors:
        for r, v in getattr(fq, which).items():
            out[(fq.flavor, r)] = v
    return out


def _differs(a: Mapping[ResourceName, int], b: Mapping[ResourceName, int]) -> bool:
    """Vectors differ in some amount (an absent resource counts as zero)."""
    return any(a.get(r, 0) != b.get(r, 0) for r in {*a, *b})
