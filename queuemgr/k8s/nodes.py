"""Kubernetes Node objects as the core's nodes: the capacity the scheduler may place on.

Why it exists: quota alone ignores fragmentation; queuemgr places every gang
on real nodes, so it must see each node's allocatable resources, labels
(flavors and topology domains come from them), taints and whether it takes
new pods at all.

What must stay true: capacity is the node's *allocatable* (what the kubelet
offers pods), never its raw capacity, in the core's exact integer units; a
cordoned node (``spec.unschedulable``) or one whose Ready condition is not
True is unschedulable, so it contributes no free capacity; only resources a
pod can request by name count (cpu, memory and extended resources such as
``nvidia.com/gpu``), not ``pods`` or ``ephemeral-storage``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from queuemgr.core.model import Node, NodeName, Taint, TaintEffect
from queuemgr.core.resources import QuantityError, ResourceName, parse_quantity

log = logging.getLogger(__name__)
_COUNTED = frozenset({"cpu", "memory"})


class NodeError(ValueError):
    """A Node object queuemgr cannot read; the message names the node and the field."""


def _counted(resource: str) -> bool:
    return resource in _COUNTED or "/" in resource  # extended resources are domain-prefixed


def _ready(status: Mapping[str, Any]) -> bool:
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def node_from_k8s(obj: Mapping[str, Any]) -> Node:
    """The core node for a Node object (a dict as the API serves it)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise NodeError("metadata.name: a node without a name")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable: dict[ResourceName, int] = {}
    for resource, quantity in (status.get("allocatable") or {}).items():
        if not _counted(resource):
            continue
        field = f"node {name}: status.allocatable.{resource}"
        try:
            allocatable[ResourceName(resource)] = parse_quantity(
                quantity, resource=resource, field=field
            )
        except QuantityError as exc:
            raise NodeError(str(exc)) from None
    taints = []
    for i, t in enumerate(spec.get("taints") or ()):
        try:
            effect = TaintEffect(t.get("effect", "NoSchedule"))
        except ValueError:
            raise NodeError(f"node {name}: spec.taints[{i}].effect: {t.get('effect')!r}") from None
        taints.append(
            Taint(key=str(t.get("key", "")), value=str(t.get("value") or ""), effect=effect)
        )
    return Node(
        name=NodeName(name),
        labels=dict(meta.get("labels") or {}),
        allocatable=allocatable,
        taints=tuple(taints),
        schedulable=not spec.get("unschedulable", False) and _ready(status),
    )


def nodes_from_k8s(objs: Iterable[Mapping[str, Any]]) -> list[Node]:
    """The core nodes of ``objs``; a Node queuemgr cannot read is skipped, with a warning
    naming it and the field (one bad Node must not hide the rest of the cluster)."""
    out = []
    for obj in objs:
        try:
            out.append(node_from_k8s(obj))
        except NodeError as error:
            log.warning("skipping a node: %s", error)
    return out
