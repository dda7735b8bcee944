"""Core value objects to JSON-ready values and back, for the JSONB columns and the audit log.

Why it exists: the store keeps resource vectors, taints, tolerations and whole
config objects as JSON; one pair of functions per type keeps the spelling in
one place, so what is written is always what is read.

What must stay true: decode(encode(x)) == x for every value object; quantities
stay JSON integers (a float, or a bool, is refused on the way in and out);
timestamps are UTC and round-trip at microsecond precision, the precision of
``timestamptz``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from queuemgr.core.claims import Claim
from queuemgr.core.model import (
    Admission,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    FlavorAutoscale,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    Node,
    NodeName,
    NodeTemplate,
    Ordering,
    PodSet,
    PodSetPlacement,
    ResourceFlavor,
    Taint,
    TaintEffect,
    Toleration,
    Workload,
    WorkloadId,
)
from queuemgr.core.resources import ResourceName, Resources
from queuemgr.core.weights import ResourceWeight

Json = dict[str, Any]


def vector(v: Resources) -> dict[str, int]:
    out: dict[str, int] = {}
    for r, q in v.items():
        if type(q) is not int:  # bool is an int subclass; floats lose exactness
            raise TypeError(f"quantity of {r} must be an int, got {q!r}")
        out[str(r)] = q
    return out


def resources(raw: Mapping[str, Any]) -> dict[ResourceName, int]:
    out: dict[ResourceName, int] = {}
    for r, q in raw.items():
        if type(q) is not int:
            raise TypeError(f"stored quantity of {r} is not an integer: {q!r}")
        out[ResourceName(r)] = q
    return out


def taints(ts: tuple[Taint, ...]) -> list[Json]:
    return [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in ts]


def taints_of(raw: list[Json]) -> tuple[Taint, ...]:
    return tuple(
        Taint(key=t["key"], value=t["value"], effect=TaintEffect(t["effect"])) for t in raw
    )


def tolerations(ts: tuple[Toleration, ...]) -> list[Json]:
    return [
        {
            "key": t.key,
            "operator": t.operator,
            "value": t.value,
            "effect": None if t.effect is None else t.effect.value,
        }
        for t in ts
    ]


def tolerations_of(raw: list[Json]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t["key"],
            operator=t["operator"],
            value=t["value"],
            effect=None if t["effect"] is None else TaintEffect(t["effect"]),
        )
        for t in raw
    )


def pod_set(ps: PodSet) -> Json:
    return {
        "name": ps.name,
        "count": ps.count,
        "requests": vector(ps.requests),
        "node_selector": dict(ps.node_selector),
        "tolerations": tolerations(ps.tolerations),
        "topology_required": ps.topology_required,
        "topology_preferred": ps.topology_preferred,
        "min_count": ps.min_count,
        "quota_only": sorted(ps.quota_only),
    }


def resource_names(raw: object) -> frozenset[ResourceName]:
    """A stored list of resource names (a pod set's ``quota_only``); other items are dropped."""
    items = raw if isinstance(raw, list) else []
    return frozenset(ResourceName(r) for r in items if isinstance(r, str))


def weight(w: Fraction) -> str:
    return str(w)  # "1", "3/2": exact, and Fraction() parses it back


def resource_weights(ws: tuple[ResourceWeight, ...]) -> list[Json]:
    """A ClusterQueue's resource weights, in order; the terms stay JSON integers."""
    return [
        {
            "resource": str(w.resource),
            "numerator": w.numerator,
            "denominator": w.denominator,
            "counts_as": str(w.counts_as),
        }
        for w in ws
    ]


def resource_weights_of(raw: list[Json]) -> tuple[ResourceWeight, ...]:
    """The stored resource weights; a term that is not an integer is refused."""
    out: list[ResourceWeight] = []
    for w in raw:
        for term in ("numerator", "denominator"):
            if type(w[term]) is not int:
                raise TypeError(f"stored {term} of {w['resource']} is not an integer: {w[term]!r}")
        out.append(
            ResourceWeight(
                resource=ResourceName(w["resource"]),
                numerator=w["numerator"],
                denominator=w["denominator"],
                counts_as=ResourceName(w["counts_as"]),
            )
        )
    return tuple(out)


def timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def seconds(at: datetime) -> float:
    return at.timestamp()


def as_stored(seconds_: float) -> float:
    """``seconds_`` as the store gives it back (its timestamps keep microseconds)."""
    return seconds(timestamp(seconds_))


# -- whole objects, as the audit log shows them ---------------------------------


def flavor_json(f: ResourceFlavor) -> Json:
    return {
        "name": f.name,
        "node_labels": dict(f.node_labels),
        "taints": taints(f.taints),
        "tolerations": tolerations(f.tolerations),
        "autoscale": autoscale(f.autoscale),
    }


def autoscale(a: FlavorAutoscale | None) -> Json | None:
    if a is None:
        return None
    return {
        "max_nodes": a.max_nodes,
        "node": {"allocatable": vector(a.node.allocatable), "labels": dict(a.node.labels)},
    }


def autoscale_of(raw: Mapping[str, Any] | None) -> FlavorAutoscale | None:
    if raw is None:
        return None
    node = raw["node"]
    return FlavorAutoscale(
        max_nodes=int(raw["max_nodes"]),
        node=NodeTemplate(
            allocatable=resources(node["allocatable"]), labels=dict(node.get("labels") or {})
        ),
    )


def node_json(n: Node) -> Json:
    return {
        "name": n.name,
        "labels": dict(n.labels),
        "allocatable": vector(n.allocatable),
        "taints": taints(n.taints),
        "schedulable": n.schedulable,
    }


QUOTA_FIELDS = ("flavor", "nominal", "borrowing_limit", "lending_limit")


def quota_of(row: Mapping[Any, Any]) -> FlavorQuota:
    """A flavor quota row (a ClusterQueue's or a cohort's) as the core's ``FlavorQuota``."""
    return FlavorQuota(
        flavor=FlavorName(row["flavor"]),
        nominal=resources(row["nominal"]),
        borrowing_limit=resources(row["borrowing_limit"]),
        lending_limit=resources(row["lending_limit"]),
    )


def quota_json(q: FlavorQuota) -> Json:
    return {
        "flavor": q.flavor,
        "nominal": vector(q.nominal),
        "borrowing_limit": vector(q.borrowing_limit),
        "lending_limit": vector(q.lending_limit),
    }


def cluster_queue_json(cq: ClusterQueue, *, stopped: bool = False) -> Json:
    return {
        "name": cq.name,
        "cohort": cq.cohort,
        "weight": weight(cq.weight),
        "queueing_strategy": cq.queueing_strategy.value,
        "namespaces": None if cq.namespaces is None else sorted(cq.namespaces),
        "within_cluster_queue": cq.preemption.within_cluster_queue.value,
        "reclaim_within_cohort": cq.preemption.reclaim_within_cohort.value,
        "preemption_min_runtime": float(cq.preemption.min_runtime),
        "borrowing_max_runtime": (
            None if cq.borrowing_max_runtime is None else float(cq.borrowing_max_runtime)
        ),
        "stopped": stopped,
        "ordering": None if cq.ordering is None else cq.ordering.value,
        "resource_weights": resource_weights(cq.resource_weights),
        "admission_checks": list(cq.admission_checks),
        "flavors": [quota_json(q) for q in cq.flavors],
    }


def cohort_json(c: Cohort) -> Json:
    return {
        "name": c.name,
        "fair_sharing": c.fair_sharing,
        "ordering": None if c.ordering is None else c.ordering.value,
        "parent": c.parent,
        "weight": weight(c.weight),
        "flavors": [quota_json(q) for q in c.flavors],
    }


def ordering_of(raw: str | None) -> Ordering | None:
    return None if raw is None else Ordering(raw)


def local_queue_json(lq: LocalQueue) -> Json:
    return {"namespace": lq.namespace, "name": lq.name, "cluster_queue": lq.cluster_queue}


# -- claims (workloads.claim) ------------------------------------------------------


def claim_json(c: Claim) -> Json:
    """A claim as ``workloads.claim`` keeps it; the workload is the row's own."""
    adm = c.admission
    return {
        "cluster_queue": adm.cluster_queue,
        "flavor": adm.flavor,
        "placements": [
            {"pod_set": p.pod_set, "node": p.node, "count": p.count} for p in adm.placements
        ],
        "borrowing": adm.borrowing,
        "victims": list(c.victims),
        "made_at": timestamp(c.made_at).isoformat(),
    }


def claim_of(raw: Mapping[str, Any], w: Workload) -> Claim:
    """The claim of ``w`` (the very object the cycle sees pending) from its stored JSON."""
    admission = Admission(
        workload=w.id,
        cluster_queue=ClusterQueueName(raw["cluster_queue"]),
        flavor=FlavorName(raw["flavor"]),
        placements=tuple(
            PodSetPlacement(pod_set=p["pod_set"], node=NodeName(p["node"]), count=p["count"])
            for p in raw["placements"]
        ),
        borrowing=bool(raw["borrowing"]),
    )
    return Claim(
        workload=w,
        admission=admission,
        victims=tuple(WorkloadId(v) for v in raw["victims"]),
        made_at=seconds(datetime.fromisoformat(raw["made_at"])),
    )
