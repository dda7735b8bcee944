"""What one scheduling cycle reads from the store, as the core's own inputs.

Why it exists: the service's cycle is "load, ``schedule``, persist, apply";
:func:`load_state` is the load, and its result builds the snapshot with
:func:`queuemgr.core.snapshot.build_snapshot`, exactly as the simulator does.

What must stay true: the config and the workloads are read in one
REPEATABLE READ transaction, so a cycle never sees a queue's new quota with
the old set of admitted workloads (or the other way round); pending workloads
of a stopped ClusterQueue are withheld from the core, while its admitted ones
keep holding quota; so are queued workloads still backing off at ``now``
(``requeue_at``), listed apart in ``backing_off``; the snapshot carries the
stored claims of the pending workloads (each on the very pending object) and
the evicted, not yet requeued, workloads as ``stopping``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Engine

from queuemgr.core.claims import Claim
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, Workload, WorkloadId
from queuemgr.core.snapshot import Config, Snapshot, build_snapshot
from queuemgr.store.config import load_config
from queuemgr.store.live import load_workloads
from queuemgr.store.tenant_view import read_as_tenant


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


def load_state(engine: Engine, *, now: float | None = None, as_tenant: bool = False) -> StoredState:
    """Config plus queued and admitted workloads, read from one consistent snapshot.

    ``now`` (the wall clock when not given) decides which workloads still back off.
    ``as_tenant`` reads the tenant views (``store.tenant_view``): every live
    workload, other namespaces' under tokens, where row security would show a
    tenant its own alone.
    """
    now = time.time() if now is None else now
    connection = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    with connection as conn, conn.begin():
        if as_tenant:
            read_as_tenant(conn)
        config, stopped = load_config(conn)
        loaded = load_workloads(conn, now=now)
    pending = loaded.pending
    claims = loaded.claims
    if stopped:
        pending = tuple(w for w in pending if config.route(w) not in stopped)
        claims = {w.id: claims[w.id] for w in pending if w.id in claims}
    return StoredState(
        config=config,
        pending=pending,
        admitted=loaded.admitted,
        stopped=stopped,
        statuses=loaded.statuses,
        claims=claims,
        stopping=loaded.stopping,
        backing_off=loaded.backing_off,
        backing_off_workloads=loaded.backing_off_workloads,
    )
