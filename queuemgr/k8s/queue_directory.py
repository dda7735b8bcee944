"""What the admission webhook needs to know from the system of record: a narrow port.

Why it exists: the webhook judges a job against the queues (does the
LocalQueue exist, which ClusterQueue it feeds, which namespaces that admits,
what its flavors' nodes can hold) and, on an update, against what the store
has admitted. ``queuemgr.k8s`` may not import the store, so it asks through
:class:`QueueDirectory`; the implementation over Postgres lives in the
controller layer (``queuemgr.controller.store_directory``), and
:class:`~queuemgr.k8s.testing.InMemoryDirectory` serves tests.

What must stay true: answers are the read-only views of ``queuemgr.core.directory``
(the store builds the same values); a directory that cannot answer now raises
:class:`DirectoryUnavailable`, never returns a guess; a node counts for every
flavor whose labels it carries and only while schedulable.
"""

from __future__ import annotations

from typing import Protocol

from queuemgr.core.directory import AdmittedView, ClusterQueueView


class DirectoryUnavailable(RuntimeError):
    """The system of record cannot be read now (the webhook decides what that means)."""


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
