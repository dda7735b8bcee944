"""The schedulable nodes of each flavor, in classes, and their free capacity by group.

Why it exists: placement (core.placement) and reservation planning
(core.timeline, core.reservations) walk nodes many times per cycle. Nodes of
one flavor with the same taints form a class, and within a class nodes with
the same free capacity form one group, so a fit test costs one division per
distinct free vector rather than one per node. This module builds the classes
once per configuration and keeps the groups (the free index) up to date.

What must stay true: a node belongs to the first flavor, by name, whose
labels it carries, and only if it is schedulable; a flavor's taints count as
its nodes' own, and a pod set placed on a flavor tolerates what it tolerates
itself and what the flavor's tolerations do; a class's resources are in
key order (GPUs first, then by name), so comparing free vectors compares GPUs
first; every group is sorted by node name; an index handed to a snapshot is
never mutated (``reindex`` replaces groups, it does not edit them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

from queuemgr.core.model import (
    FlavorName,
    Node,
    NodeName,
    PodSet,
    ResourceFlavor,
    Taint,
    TaintEffect,
    Toleration,
)
from queuemgr.core.resources import GPU, ResourceName, Resources


def tolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> bool:
    """True when every hard taint (NoSchedule, NoExecute) is tolerated."""
    for taint in taints:
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeClass:
    index: int
    flavor: FlavorName
    taints: tuple[Taint, ...]
    resources: tuple[ResourceName, ...]  # key order: GPUs first, then by name
    nodes: tuple[NodeName, ...]
    virtual: bool = False  # nodes an autoscaler may add (see virtual_nodes)


# A virtual node's name: ``~`` is in no Kubernetes object name, so none is a real node's.
VIRTUAL_MARK = "~"


def virtual_nodes(
    flavors: Mapping[FlavorName, ResourceFlavor], nodes: Mapping[NodeName, Node]
) -> dict[NodeName, tuple[FlavorName, Node]]:
    """The nodes each autoscaled flavor may still grow by, with their flavor.

    A flavor with ``autoscale`` has ``max_nodes`` minus its existing (schedulable)
    nodes of them, named ``<flavor>~<i>`` (1, 2, ...), each with the template's
    allocatable and labels and the flavor's ``node_labels``. Deterministic: the same
    flavors and nodes give the same names.
    """
    scaled = sorted(f for f, rf in flavors.items() if rf.autoscale is not None)
    if not scaled:
        return {}
    flavor_names = sorted(flavors)
    existing: dict[FlavorName, int] = {}
    for node in nodes.values():
        if not node.schedulable:
            continue
        match = next((f for f in flavor_names if flavors[f].selects(node.labels)), None)
        if match is not None:
            existing[match] = existing.get(match, 0) + 1
    out: dict[NodeName, tuple[FlavorName, Node]] = {}
    for f in scaled:
        rf = flavors[f]
        auto = rf.autoscale
        assert auto is not None
        labels = {**auto.node.labels, **rf.node_labels}
        for i in range(1, auto.max_nodes - existing.get(f, 0) + 1):
            name = NodeName(f"{f}{VIRTUAL_MARK}{i}")
            out[name] = (
                f,
                Node(name=name, labels=labels, allocatable=dict(auto.node.allocatable)),
            )
    return out


class NodeTopology:
    """Schedulable nodes by flavor and class; built once per configuration.

    ``virtual`` names the nodes that do not exist yet (:func:`virtual_nodes`) with
    their flavor; they are in ``nodes`` and ``class_of`` (their free capacity is
    tracked as any node's) but in classes of their own, out of ``by_flavor`` and
    ``flavor_of``: only :meth:`candidates` with ``virtual=True`` offers them.
    """

    def __init__(
        self,
        flavors: Mapping[FlavorName, ResourceFlavor],
        nodes: Mapping[NodeName, Node],
        virtual: Mapping[NodeName, FlavorName] | None = None,
    ) -> None:
        self.nodes = nodes
        virtual = virtual or {}
        # What a pod set placed on a flavor tolerates beside its own tolerations.
        self.tolerations = {name: f.tolerations for name, f in flavors.items()}
        self.flavor_of: dict[NodeName, FlavorName] = {}
        groups: dict[tuple[FlavorName, tuple[Taint, ...], bool], list[Node]] = {}
        flavor_names = sorted(flavors)
        for name in sorted(nodes):
            node = nodes[name]
            is_virtual = name in virtual
            if is_virtual:
                match: FlavorName | None = virtual[name]
            else:
                match = next((f for f in flavor_names if flavors[f].selects(node.labels)), None)
            if match is None or not node.schedulable:
                continue
            if not is_virtual:
                self.flavor_of[name] = match
            # A flavor's taints hold on all its nodes, as in Kueue's nodeTaints.
            extra = tuple(t for t in flavors[match].taints if t not in node.taints)
            groups.setdefault((match, node.taints + extra, is_virtual), []).append(node)
        self.classes: list[NodeClass] = []
        self.class_of: dict[NodeName, NodeClass] = {}
        self.by_flavor: dict[FlavorName, list[NodeClass]] = {}
        self.virtual_by_flavor: dict[FlavorName, list[NodeClass]] = {}
        for (flavor, taints, is_virtual), members in sorted(
            groups.items(), key=lambda item: item[0][2]
        ):
            names: set[ResourceName] = set()
            for n in members:
                names.update(n.allocatable)
            ordered = tuple(sorted(names, key=lambda r: (r != GPU, r)))
            cls = NodeClass(
                index=len(self.classes),
                flavor=flavor,
                taints=taints,
                resources=ordered,
                nodes=tuple(n.name for n in members),
                virtual=is_virtual,
            )
            self.classes.append(cls)
            for n in members:
                self.class_of[n.name] = cls
            home = self.virtual_by_flavor if is_virtual else self.by_flavor
            home.setdefault(cls.flavor, []).append(cls)
        # (flavor, shape, virtual) -> whether the gang fits the flavor's empty nodes
        # (core.placement)
        self.empty_fit: dict[tuple[FlavorName, object, bool], bool] = {}
        self._candidates: dict[tuple[object, ...], list[NodeClass]] = {}
        self._domains: dict[tuple[FlavorName, str], dict[NodeName, str]] = {}

    def domain_of(self, flavor: FlavorName, key: str) -> Mapping[NodeName, str]:
        """The value of label ``key`` of each of the flavor's nodes that carries it."""
        hit = self._domains.get((flavor, key))
        if hit is None:
            hit = {}
            for cls in self.by_flavor.get(flavor, ()):
                for name in cls.nodes:
                    value = self.nodes[name].labels.get(key)
                    if value is not None:
                        hit[name] = value
            self._domains[(flavor, key)] = hit
        return hit

    def candidates(
        self, flavor: FlavorName, pod_set: PodSet, *, virtual: bool = False
    ) -> list[NodeClass]:
        """The classes ``pod_set`` may use on ``flavor``; with ``virtual``, the virtual
        ones too, after the existing ones (existing nodes are filled first)."""
        key = (flavor, tuple(sorted(pod_set.node_selector.items())), pod_set.tolerations)
        hit = self._candidates.get(key)
        if hit is None:
            hit = self._candidates[key] = self._match(self.by_flavor, flavor, pod_set)
        if virtual and flavor in self.virtual_by_flavor:
            vkey = (*key, "virtual")
            more = self._candidates.get(vkey)
            if more is None:
                more = self._match(self.virtual_by_flavor, flavor, pod_set)
                more = self._candidates[vkey] = hit + more
            return more
        return hit

    def _match(
        self,
        classes: Mapping[FlavorName, list[NodeClass]],
        flavor: FlavorName,
        pod_set: PodSet,
    ) -> list[NodeClass]:
        # A pod admitted on a flavor carries the flavor's tolerations too (Kueue's).
        tolerations = pod_set.tolerations + self.tolerations.get(flavor, ())
        return [cls for cls in classes.get(flavor, ()) if tolerated(cls.taints, tolerations)]

    def node_matches(self, name: NodeName, pod_set: PodSet) -> bool:
        labels = self.nodes[name].labels
        return all(labels.get(k) == v for k, v in pod_set.node_selector.items())


# class index -> free vector -> the class's nodes with that much free, by name
FreeIndex = Mapping[int, Mapping[tuple[int, ...], Sequence[NodeName]]]
MutableIndex = dict[int, dict[tuple[int, ...], tuple[NodeName, ...]]]


def free_key(cls: NodeClass, free: Resources) -> tuple[int, ...]:
    # free.get(r, 0) for each of the class's resources, without a generator's overhead:
    # the placer and the planners ask for hundreds of thousands of keys in a busy cycle.
    return tuple(map(free.get, cls.resources, repeat(0)))


def build_free_index(topology: NodeTopology, free: Mapping[NodeName, Resources]) -> MutableIndex:
    out: MutableIndex = {}
    for cls in topology.classes:
        groups: dict[tuple[int, ...], list[NodeName]] = {}
        for node in cls.nodes:  # nodes are in name order, so each group is too
            groups.setdefault(free_key(cls, free.get(node, {})), []).append(node)
        out[cls.index] = {k: tuple(v) for k, v in groups.items()}
    return out


def reindex(
    index: MutableIndex, moved: Mapping[NodeName, tuple[NodeClass, Resources, Resources]]
) -> None:
    """Move each node of ``moved`` (node -> its class, old free, new free) between groups.

    Batched: each group that changes is rebuilt once, however many of its nodes moved,
    so a cycle of thousands of placements costs the groups it touched, not a copy of a
    group per placement. Replaces (never mutates) what snapshots may hold."""
    out: dict[int, dict[tuple[int, ...], set[NodeName]]] = {}  # class -> key -> leaving
    into: dict[int, dict[tuple[int, ...], list[NodeName]]] = {}  # class -> key -> arriving
    for node, (cls, old, new) in moved.items():
        old_key, new_key = free_key(cls, old), free_key(cls, new)
        if old_key != new_key:
            out.setdefault(cls.index, {}).setdefault(old_key, set()).add(node)
            into.setdefault(cls.index, {}).setdefault(new_key, []).append(node)
    for c in out.keys() | into.keys():
        groups = dict(index[c])
        leaving, arriving = out.get(c, {}), into.get(c, {})
        for key in leaving.keys() | arriving.keys():
            gone = leaving.get(key)
            members = [n for n in groups.get(key, ()) if not gone or n not in gone]
            members.extend(arriving.get(key, ()))
            if key in arriving:
                members.sort()  # groups are sorted by name
            if members:
                groups[key] = tuple(members)
            else:
                groups.pop(key, None)
        index[c] = groups
