"""What one scheduling cycle reads from the store, as the core's own inputs.

Why it exists: the service's cycle is "load, ``schedule``, persist, apply";
:class:`StoredState` is what the load returns, to the loop, to ``why`` and to
the CLI's views alike (``repository.load_state``, ``mirror.StateMirror``).

What must stay true: pending workloads of a stopped ClusterQueue are withheld
from ``pending``, while its admitted ones keep holding quota; so are queued
workloads still backing off at the load's ``now``, listed apart in
``backing_off``; the snapshot carries the stored claims of the pending
workloads (each on the very pending object) and the evicted, not yet
requeued, workloads as ``stopping``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from queuemgr.core.claims import Claim
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, Workload, WorkloadId
from queuemgr.core.snapshot import Config, Snapshot, build_snapshot


@dataclass(frozen=True, kw_only=True)
class StoredState:
    config: Config
    pending: tuple[Workload, ...]
    admitted: tuple[AdmittedWorkload, ...]
    stopped: frozenset[ClusterQueueName] = frozenset()
    # Stored (state, reason, message) of the queued workloads: persist_decisions'
    # ``previous``, so a cycle writes only the statuses it changed.
    statuses: Mapping[WorkloadId, tuple[WorkloadState, str, str]] = field(default_factory=dict)
    # Stored claims of the ``pending`` workloads (core.claims).
    claims: Mapping[WorkloadId, Claim] = field(default_factory=dict)
    # Evicted workloads whose pods may still run (not requeued yet).
    stopping: frozenset[WorkloadId] = frozenset()
    # Queued workloads left out of ``pending`` while they back off: when each is due.
    backing_off: Mapping[WorkloadId, float] = field(default_factory=dict)
    backing_off_workloads: tuple[Workload, ...] = ()  # the same, as workloads (for gauges)
    # The snapshot already built from these (``store.mirror`` keeps one up to date).
    prebuilt: Snapshot | None = field(default=None, compare=False, repr=False)

    def snapshot(self) -> Snapshot:
        if self.prebuilt is not None:
            return self.prebuilt
        snapshot = build_snapshot(self.config, admitted=self.admitted, pending=self.pending)
        return with_claims(snapshot, self.claims, self.stopping)

    def next_requeue(self) -> float | None:
        """When the first backing-off workload is due, if any."""
        return min(self.backing_off.values(), default=None)


def with_claims(
    snapshot: Snapshot, claims: Mapping[WorkloadId, Claim], stopping: frozenset[WorkloadId]
) -> Snapshot:
    if not claims and not stopping:
        return snapshot
    return dataclasses.replace(snapshot, claims=dict(claims), stopping=stopping)
