"""Gang node fit: find a node for every pod of a workload, or say why not.

Why it exists: quota alone lets a gang in that the nodes cannot hold (Kueue's
fragmentation complaint). Admission here needs a concrete placement.

What must stay true: a placement puts every pod of every pod set on a
schedulable node of the chosen flavor that matches the pod set's node
selector and whose taints (the node's and the flavor's) it tolerates, by its
own tolerations or the flavor's, and no node's free capacity goes below zero.
A gang is placed whole or not at all. Among equal choices the result is
deterministic: best fit (least free first), then node name.

Speed: the node classes and free-capacity groups of core.node_topology make a
fit test cost one division per distinct free vector rather than one per node. Node
selectors are checked per node, and only for pod sets that have one, since
labels such as a rack or a hostname would split classes into single nodes.

Topology: a pod set that requires (or prefers) a label key such as ``rack``
is placed on the nodes of one value of that label (a domain), the smallest
domain that holds it; a preferred one spans as few domains as it can. Only
such pod sets take that slower path; the others never look at domains.
Which domains is core.domains' choice; filling their nodes is done here.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from queuemgr.core.domains import DomainRule, plan_domains
from queuemgr.core.domains import dominant as dominant_resource
from queuemgr.core.model import FlavorName, NodeName, PodSet, PodSetPlacement
from queuemgr.core.node_topology import FreeIndex, NodeClass, NodeTopology, free_key
from queuemgr.core.resources import GPU, ResourceName, Resources, format_quantity, how_many


@dataclass(frozen=True, kw_only=True, slots=True)
class FitFailure:
    pod_set: str
    needed: int  # pods of that pod set
    placeable: int  # how many of them the free nodes could take
    per_pod: Resources
    largest_free: Resources  # the node with the most free of the dominant resource
    # Set when a required topology failed: no single domain of label ``topology`` holds
    # the pod set. ``domain`` is the one with the most free ``dominant`` resource (None
    # when no node carries the label), with that much free and room for that many pods.
    topology: str | None = None
    dominant: ResourceName | None = None
    domain: str | None = None
    domain_free: int = 0
    domain_pods: int = 0

    def describe_topology(self, flavor: FlavorName) -> str:
        """``needs 32 nvidia.com/gpu in one rack on h100 ...; the largest rack has 24 free``."""
        key = self.topology
        if self.domain is None:
            return (
                f"pod set {self.pod_set!r} requires topology {key!r}, but no node of {flavor} "
                f"that it may use carries that label"
            )
        r = self.dominant or ResourceName("")
        need = self.per_pod.get(r, 0) * self.needed
        return (
            f"needs {format_quantity(r, need)} {r} in one {key} on {flavor} for pod set "
            f"{self.pod_set!r} ({self.needed} pods); the largest {key} ({self.domain}) has "
            f"{format_quantity(r, self.domain_free)} free and holds {self.domain_pods} such pods"
        )


class NodePool:
    """Free capacity per node as a cycle overlay, indexed by free vector per class."""

    def __init__(
        self,
        topology: NodeTopology,
        free: Mapping[NodeName, Resources],
        index: FreeIndex | None = None,
        rules: Sequence[DomainRule] = (),
    ) -> None:
        self.topology = topology
        self._rules = {r.label: r for r in rules}
        self._base = free
        self._base_index = index
        self._own: dict[NodeName, dict[ResourceName, int]] = {}
        self._groups: dict[int, dict[tuple[int, ...], list[NodeName]]] = {}
        self._keys: dict[int, list[tuple[int, ...]]] = {}
        self.last_failure: FitFailure | None = None

    def free(self, node: NodeName) -> Resources:
        own = self._own.get(node)
        return own if own is not None else self._base.get(node, {})

    def _key(self, cls: NodeClass, node: NodeName) -> tuple[int, ...]:
        return free_key(cls, self.free(node))

    def _index(self, cls: NodeClass) -> dict[tuple[int, ...], list[NodeName]]:
        groups = self._groups.get(cls.index)
        if groups is None:
            if self._base_index is not None:
                groups = {k: list(v) for k, v in self._base_index[cls.index].items()}
            else:
                groups = {}
                for node in cls.nodes:  # nodes are in name order, so each group is too
                    groups.setdefault(self._key(cls, node), []).append(node)
            self._groups[cls.index] = groups
            self._keys[cls.index] = sorted(groups)
        return groups

    def place(
        self, flavor: FlavorName, pod_sets: tuple[PodSet, ...], *, virtual: bool = False
    ) -> tuple[PodSetPlacement, ...] | None:
        """A placement for the whole gang on ``flavor``, or None (see ``last_failure``).

        With ``virtual`` (a ClusterQueue with an admission check that provisions them),
        the flavor's virtual nodes may take what its existing nodes cannot."""
        for ps in pod_sets:
            if ps.topology_required is not None or ps.topology_preferred is not None:
                return self._place_by_topology(flavor, pod_sets, virtual)
        topo = self.topology
        taken: dict[NodeName, dict[ResourceName, int]] = {}
        out: list[PodSetPlacement] = []
        # Biggest pods first: they have the fewest places to go.
        order = sorted(
            pod_sets, key=lambda ps: (tuple(-ps.node_requests.get(r, 0) for r in (GPU,)), ps.name)
        )
        for ps in order:
            remaining = ps.count
            placeable = 0
            per_node_selector = bool(ps.node_selector)
            for cls in topo.candidates(flavor, ps, virtual=virtual):
                if remaining <= 0:
                    break
                req = tuple(ps.node_requests.get(r, 0) for r in cls.resources)
                if any(v > 0 and r not in cls.resources for r, v in ps.node_requests.items()):
                    continue
                groups = self._index(cls)
                for key in self._keys[cls.index]:
                    per_node = how_many_tuple(req, key)
                    if per_node <= 0:
                        continue
                    for node in groups[key]:
                        if per_node_selector and not topo.node_matches(node, ps):
                            continue
                        n = per_node
                        if node in taken:
                            n = how_many(ps.node_requests, _minus(self.free(node), taken[node]))
                            if n <= 0:
                                continue
                        use = min(n, remaining)
                        placeable += n
                        if use > 0:
                            out.append(PodSetPlacement(pod_set=ps.name, node=node, count=use))
                            t = taken.setdefault(node, {})
                            for r, v in ps.node_requests.items():
                                t[r] = t.get(r, 0) + v * use
                            remaining -= use
                        if remaining <= 0:
                            break
                    if remaining <= 0:
                        break
            if remaining > 0:
                self.last_failure = FitFailure(
                    pod_set=ps.name,
                    needed=ps.count,
                    placeable=placeable,
                    per_pod=ps.node_requests,
                    largest_free=self._largest_free(flavor),
                )
                return None
        return tuple(out)

    def _place_by_topology(
        self, flavor: FlavorName, pod_sets: tuple[PodSet, ...], virtual: bool = False
    ) -> tuple[PodSetPlacement, ...] | None:
        """``place`` for a gang with a topology pod set: each such pod set picks its domains."""
        taken: dict[NodeName, dict[ResourceName, int]] = {}
        out: list[PodSetPlacement] = []
        order = sorted(pod_sets, key=lambda ps: (-ps.node_requests.get(GPU, 0), ps.name))
        for ps in order:
            key = ps.topology
            remaining = ps.count
            if key is not None:
                domain_of = self.topology.domain_of(flavor, key)
                dominant = dominant_resource(ps)
                room, free = self._domains(flavor, ps, taken, domain_of, dominant, virtual)
                plan = plan_domains(
                    ps.count,
                    room,
                    free,
                    spill=ps.topology_required is None,
                    rule=self._rules.get(key),
                )
                if plan is None:
                    largest = min(free, key=lambda v: (-free[v], v), default=None)
                    self.last_failure = FitFailure(
                        pod_set=ps.name,
                        needed=ps.count,
                        placeable=max(room.values(), default=0),
                        per_pod=ps.node_requests,
                        largest_free=self._largest_free(flavor),
                        topology=key,
                        dominant=dominant,
                        domain=largest,
                        domain_free=0 if largest is None else free[largest],
                        domain_pods=0 if largest is None else room[largest],
                    )
                    return None
                for value in plan:
                    remaining = self._fill(
                        flavor, ps, remaining, taken, out, domain_of, value, virtual
                    )
            if remaining > 0 and ps.topology_required is None:
                # No topology, or a preferred one that its domains cannot hold.
                remaining = self._fill(flavor, ps, remaining, taken, out, None, None, virtual)
            if remaining > 0:
                self.last_failure = FitFailure(
                    pod_set=ps.name,
                    needed=ps.count,
                    placeable=ps.count - remaining,
                    per_pod=ps.node_requests,
                    largest_free=self._largest_free(flavor),
                )
                return None
        return tuple(out)

    def _eligible(
        self, flavor: FlavorName, ps: PodSet, virtual: bool = False
    ) -> Iterator[tuple[NodeClass, int, NodeName]]:
        """The nodes ``ps`` may use, best fit first, each with how many pods fit its free."""
        topo = self.topology
        for cls in topo.candidates(flavor, ps, virtual=virtual):
            if any(v > 0 and r not in cls.resources for r, v in ps.node_requests.items()):
                continue
            req = tuple(ps.node_requests.get(r, 0) for r in cls.resources)
            groups = self._index(cls)
            for key in self._keys[cls.index]:
                per_node = how_many_tuple(req, key)
                for node in groups[key]:
                    if ps.node_selector and not topo.node_matches(node, ps):
                        continue
                    yield cls, per_node, node

    def _domains(
        self,
        flavor: FlavorName,
        ps: PodSet,
        taken: Mapping[NodeName, Resources],
        domain_of: Mapping[NodeName, str],
        dominant: ResourceName | None,
        virtual: bool = False,
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Per domain: how many pods of ``ps`` it holds now, and its free ``dominant``."""
        room: dict[str, int] = {}
        free: dict[str, int] = {}
        for _cls, per_node, node in self._eligible(flavor, ps, virtual):
            value = domain_of.get(node)
            if value is None:
                continue
            left = self.free(node)
            if node in taken:
                left = _minus(left, taken[node])
                per_node = how_many(ps.node_requests, left)
            room[value] = room.get(value, 0) + max(0, per_node)
            have = max(0, left.get(dominant, 0)) if dominant is not None else 0
            free[value] = free.get(value, 0) + have
        return room, free

    def _fill(
        self,
        flavor: FlavorName,
        ps: PodSet,
        remaining: int,
        taken: dict[NodeName, dict[ResourceName, int]],
        out: list[PodSetPlacement],
        domain_of: Mapping[NodeName, str] | None,
        value: str | None,
        virtual: bool = False,
    ) -> int:
        """Put up to ``remaining`` pods best fit (in one domain if given); return what is left."""
        for _cls, per_node, node in self._eligible(flavor, ps, virtual):
            if remaining <= 0:
                break
            if domain_of is not None and domain_of.get(node) != value:
                continue
            n = per_node
            if node in taken:
                n = how_many(ps.node_requests, _minus(self.free(node), taken[node]))
            use = min(n, remaining)
            if use <= 0:
                continue
            out.append(PodSetPlacement(pod_set=ps.name, node=node, count=use))
            t = taken.setdefault(node, {})
            for r, v in ps.node_requests.items():
                t[r] = t.get(r, 0) + v * use
            remaining -= use
        return remaining

    def room_at_most(
        self,
        flavor: FlavorName,
        ps: PodSet,
        released: Mapping[NodeName, Mapping[ResourceName, int]],
        enough: int,
    ) -> int:
        """At least as many pods of ``ps`` as ``place`` could put on ``flavor`` if the
        ``released`` capacity were freed too; counting stops once it reaches ``enough``.

        An upper bound, never less than the truth: node selectors and topology are
        left out, each node counted on its own. So a result below a pod set's count
        proves that no placement exists, with or without any part of ``released``.
        """
        total = 0
        classes: set[int] = set()
        for cls in self.topology.candidates(flavor, ps):
            if any(v > 0 and r not in cls.resources for r, v in ps.node_requests.items()):
                continue
            classes.add(cls.index)
            req = tuple(ps.node_requests.get(r, 0) for r in cls.resources)
            groups = self._index(cls)
            for key in self._keys[cls.index]:
                per_node = how_many_tuple(req, key)
                if per_node > 0:
                    total += per_node * len(groups[key])
                    if total >= enough:
                        return total
        for node, extra in released.items():
            home = self.topology.class_of.get(node)
            if home is None or home.index not in classes:
                continue
            free = self.free(node)
            more = {r: free.get(r, 0) + extra.get(r, 0) for r in home.resources}
            total += how_many(ps.node_requests, more) - how_many(ps.node_requests, free)
            if total >= enough:
                return total
        return total

    def _largest_free(self, flavor: FlavorName) -> Resources:
        best: Resources = {}
        best_key: tuple[int, ...] = ()
        for cls in self.topology.by_flavor.get(flavor, ()):
            keys = self._keys.get(cls.index)
            if keys is None:
                self._index(cls)
                keys = self._keys[cls.index]
            if keys and keys[-1] > best_key:
                best_key = keys[-1]
                best = dict(zip(cls.resources, best_key, strict=True))
        return best

    def take(self, placements: tuple[PodSetPlacement, ...], pod_sets: tuple[PodSet, ...]) -> None:
        """Hold the capacity of an admitted placement for the rest of the cycle."""
        self._change(placements, pod_sets, 1)

    def release(
        self, placements: tuple[PodSetPlacement, ...], pod_sets: tuple[PodSet, ...]
    ) -> None:
        """Free the capacity of an evicted placement for the rest of the cycle."""
        self._change(placements, pod_sets, -1)

    def _change(
        self, placements: tuple[PodSetPlacement, ...], pod_sets: tuple[PodSet, ...], sign: int
    ) -> None:
        per_pod = {ps.name: ps.node_requests for ps in pod_sets}
        for p in placements:
            node = p.node
            cls = self.topology.class_of.get(node)
            if cls is not None:
                # Group first, so the groups built from the snapshot match the overlay.
                self._index(cls)
            old_key = self._key(cls, node) if cls is not None else None
            vec = self._own.get(node)
            if vec is None:
                vec = dict(self._base.get(node, {}))
                self._own[node] = vec
            for r, v in per_pod[p.pod_set].items():
                vec[r] = vec.get(r, 0) - sign * v * p.count
            if cls is not None and old_key is not None:
                self._move(cls, node, old_key, self._key(cls, node))

    def _move(
        self, cls: NodeClass, node: NodeName, old: tuple[int, ...], new: tuple[int, ...]
    ) -> None:
        if old == new:
            return
        groups = self._groups[cls.index]
        keys = self._keys[cls.index]
        members = groups[old]
        del members[bisect.bisect_left(members, node)]  # groups are sorted by name
        if not members:
            del groups[old]
            keys.pop(bisect.bisect_left(keys, old))
        target = groups.get(new)
        if target is None:
            groups[new] = [node]
            bisect.insort(keys, new)
        else:
            bisect.insort(target, node)


def how_many_tuple(req: tuple[int, ...], free: tuple[int, ...]) -> int:
    """Pods of ``req`` that ``free`` holds: never negative (an overcommitted node holds
    none), unbounded when nothing is requested."""
    best: int | None = None
    for need, have in zip(req, free, strict=True):
        if need > 0:
            n = have // need
            if best is None or n < best:
                best = n
    return 1 << 30 if best is None else max(0, best)


def _minus(a: Resources, b: Resources) -> dict[ResourceName, int]:
    return {r: a.get(r, 0) - b.get(r, 0) for r in set(a) | set(b)}


def fits_empty(
    topology: NodeTopology,
    flavor: FlavorName,
    shape: object,
    pod_sets: tuple[PodSet, ...],
    *,
    virtual: bool = False,
) -> bool:
    """Could the gang fit on this flavor's nodes (with ``virtual``, its virtual nodes
    too) if they were all empty?"""
    key = (flavor, shape, virtual)
    hit = topology.empty_fit.get(key)
    if hit is None:
        nodes = topology.nodes
        empty = NodePool(topology, {n: nodes[n].allocatable for n in topology.class_of})
        hit = empty.place(flavor, pod_sets, virtual=virtual) is not None
        topology.empty_fit[key] = hit
    return hit
