"""What the admission webhook reads of the queues: one read model, from the store to the port.

Why it exists: the webhook (``queuemgr.k8s``) judges a job against a LocalQueue's
ClusterQueue, its flavors' quota and node shapes, and, on an update, against
what the store holds as admitted; ``queuemgr.store.webhook_lookups`` reads exactly
these from Postgres. Both sides speak these values, so nothing is copied
field by field between a store record and a webhook view.

What must stay true: frozen, keyword-only values with exact integer
quantities; a node shape counts only schedulable nodes carrying the flavor's
labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from queuemgr.core.model import PodSet
from queuemgr.core.resources import Resources


@dataclass(frozen=True, kw_only=True, slots=True)
class FlavorCapacity:
    """One flavor of a ClusterQueue: its quota there and the shapes of its nodes."""

    flavor: str
    nominal: Resources
    # Distinct allocatable vectors of the schedulable nodes carrying the flavor's labels.
    node_shapes: tuple[Resources, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterQueueView:
    name: str
    namespaces: frozenset[str] | None  # None: every namespace
    flavors: tuple[FlavorCapacity, ...]

    def admits_namespace(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


@dataclass(frozen=True, kw_only=True, slots=True)
class AdmittedView:
    """A workload the store holds as admitted: the queue it came through and its gang."""

    queue: str
    cluster_queue: str
    flavor: str
    pod_sets: tuple[PodSet, ...]
