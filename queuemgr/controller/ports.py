"""The ports the service's loop talks through: the cluster backend and the clock.

Why it exists: the loop must not know whether admitted gangs run on Kubernetes
or in the simulated backend, nor read the wall clock itself (tests drive time).
Each port is a narrow ``typing.Protocol``; implementations live beside it
(:mod:`queuemgr.controller.testing`, :mod:`queuemgr.controller.simulated`).

What must stay true: the store is the system of record, the backend only
executes. ``start`` and ``stop`` are idempotent (the loop retries them until
they succeed, and re-issues ``start`` for admitted workloads a new leader finds
not running); ``poll_finished`` reports each finished workload once, and the
loop marks it finished in the store.
"""

from __future__ import annotations

import time
from typing import Protocol

from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, Node, WorkloadId


class BackendError(RuntimeError):
    """The backend could not carry out a request now; the loop retries it."""


class StaleObject(BackendError):
    """The object changed since the copy a request was built on (another writer got
    there first): routine under concurrent writers, retried on the new version."""


class ClusterBackend(Protocol):
    # How many ``start`` calls the loop may run at once: 1 for an in-memory backend,
    # more for one whose start is a network round trip (the Kubernetes API).
    start_concurrency: int

    def nodes(self) -> list[Node]:
        """The nodes the backend offers (the service upserts them into the store at start)."""
        ...

    def start(self, admitted: AdmittedWorkload) -> None:
        """Run an admitted gang on its placements; a no-op if it already runs."""
        ...

    def stop(self, workload_id: WorkloadId) -> None:
        """Stop a gang's pods and return once they are gone; a no-op if it is not running."""
        ...

    def running(self) -> set[WorkloadId]:
        """The gangs the backend is running now."""
        ...

    def poll_finished(self, now: float) -> list[RunEnd]:
        """Runs that ended since the last poll (each reported once), naming their admission."""
        ...

    def next_finish(self) -> float | None:
        """When the backend expects the next finish (clock seconds), if it can tell.

        The loop wakes then; a backend that learns of finishes by watching
        (Kubernetes) returns None and wakes the loop itself.
        """
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch: the store's timestamps and the core's ``now``."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()
