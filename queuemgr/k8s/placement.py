"""An admission as a job sees it, and a job's end as Kubernetes reports it.

Why it exists: :meth:`~queuemgr.k8s.jobframework.GenericJob.run_with` needs the
flavor's node labels and tolerations and, per pod set, the topology domain the
scheduler pinned it to; :class:`Placement` carries exactly that (and the nodes,
which are only recorded in an annotation for people to read).

What must stay true: value objects are frozen and keyword-only; a pod set is
pinned to a topology domain only when all its pods landed in that one domain;
the recorded placement is deterministic JSON (keys sorted) so that re-applying
the same admission patches nothing; it names the admission's time, which the
job's completion reports so that only that run is finished. A toleration is
written as the API server keeps it (:func:`toleration_json`: no empty key,
value or effect), so a pod template read back compares equal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from queuemgr.core.model import Admission, NodeName, PodSet, ResourceFlavor, Toleration


@dataclass(frozen=True, kw_only=True, slots=True)
class PodSetAssignment:
    """Where one pod set of an admitted gang runs."""

    pod_set: str
    nodes: Mapping[str, int] = field(default_factory=dict)  # node -> pods (recorded only)
    # Pods admitted; below the pod set's count only under partial admission.
    pods: int = 0
    topology: tuple[str, str] | None = None  # (node label key, domain value) it is pinned to


@dataclass(frozen=True, kw_only=True, slots=True)
class Placement:
    """An admission as the job sees it: the flavor's node labels and tolerations, per pod
    set details."""

    cluster_queue: str
    flavor: str
    node_labels: Mapping[str, str]
    pod_sets: tuple[PodSetAssignment, ...] = ()
    # The admission's time: the job's completion names the run it ends by it.
    admitted_at: float | None = None
    # The flavor's tolerations, added to every pod template the admission pins.
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def of(
        cls,
        admission: Admission,
        flavor: ResourceFlavor,
        pod_sets: Sequence[PodSet],
        node_labels: Mapping[NodeName, Mapping[str, str]],
        *,
        admitted_at: float | None = None,
    ) -> Placement:
        """From a core admission; a pod set with a topology whose pods all landed in one
        domain of it is pinned to that domain."""
        assignments = []
        for ps in pod_sets:
            nodes = {p.node: p.count for p in admission.placements if p.pod_set == ps.name}
            topology = None
            if ps.topology is not None and nodes:
                values = {node_labels.get(n, {}).get(ps.topology) for n in nodes}
                if len(values) == 1 and (value := values.pop()) is not None:
                    topology = (ps.topology, value)
            assignments.append(
                PodSetAssignment(
                    pod_set=ps.name,
                    nodes=dict(sorted(nodes.items())),
                    pods=sum(nodes.values()),
                    topology=topology,
                )
            )
        return cls(
            cluster_queue=admission.cluster_queue,
            flavor=flavor.name,
            node_labels=dict(flavor.node_labels),
            pod_sets=tuple(assignments),
            admitted_at=admitted_at,
            tolerations=flavor.tolerations,
        )

    def assignment(self, pod_set: str) -> PodSetAssignment | None:
        return next((a for a in self.pod_sets if a.pod_set == pod_set), None)

    def record(self) -> str:
        """The placement annotation's value: compact JSON, keys sorted."""
        body: dict[str, object] = {
            "clusterQueue": self.cluster_queue,
            "flavor": self.flavor,
            "podSets": {
                a.pod_set: {
                    "nodes": dict(a.nodes),
                    **({"topology": {a.topology[0]: a.topology[1]}} if a.topology else {}),
                }
                for a in self.pod_sets
            },
        }
        if self.admitted_at is not None:
            body["admittedAt"] = self.admitted_at
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


def toleration_json(t: Toleration) -> dict[str, str]:
    """A toleration as a pod spec holds it, and as the API server gives it back: the
    operator always, the key, value and effect only when set (an effect of None
    tolerates every effect)."""
    out = {"key": t.key} if t.key else {}
    out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect is not None:
        out["effect"] = t.effect.value
    return out


def recorded_admission(record: str | None) -> float | None:
    """The admission time a placement annotation names; None when absent or unreadable."""
    if not record:
        return None
    try:
        value = json.loads(record).get("admittedAt")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Finished:
    """A job's terminal condition: the result and what Kubernetes said about it."""

    succeeded: bool
    reason: str = ""
    message: str = ""
