"""What the admission webhook needs to know from the system of record: a narrow port.

Why it exists: the webhook judges a job against the queues (does the
LocalQueue exist, which ClusterQueue it feeds, which namespaces that admits,
what its flavors' nodes can hold) and, on an update, against what the store
has admitted. ``queuemgr.k8s`` may not import the store, so it asks through
:class:`QueueDirectory`; the implementation over Postgres lives in the
service layer (``queuemgr.service.k8s_directory``), and
:class:`~queuemgr.k8s.fakes.InMemoryDirectory` serves tests.

What must stay true: answers are read-only views (frozen, keyword-only, exact
integer quantities); a directory that cannot answer now raises
:class:`DirectoryUnavailable`, never returns a guess; a node counts for every
flavor whose labels it carries and only while schedulable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from queuemgr.core.model import PodSet
from queuemgr.core.resources import Resources


class DirectoryUnavailable(RuntimeError):
    """The system of record cannot be read now (the webhook decides what that means)."""


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


class QueueDirectory(Protocol):
    def local_queue(self, namespace: str, name: str) -> str | None:
        """The ClusterQueue the LocalQueue ``namespace/name`` feeds; None if there is none."""
        ...

    def local_queues(self, namespace: str) -> list[str]:
        """The names of the LocalQueues in ``namespace``, sorted."""
        ...

    def cluster_queue(self, name: str) -> ClusterQueueView | None: ...

    def admitted(self, namespace: str, name: str) -> AdmittedView | None:
        """The workload ``namespace/name`` if the store holds it as admitted now."""
        ...
