"""What the Kubernetes controller reads and writes in the store besides a cycle's decisions.

Why it exists: the controller keeps workload rows in step with jobs (it
must know, for a batch of jobs at once, which have a row and in which
state), resolves a flavor's node labels when it starts a gang, and holds
gangs evicted for not getting their pods ready for a backoff before they
queue again. These are narrow, indexed reads, and one write: the moment a
gang's pods were first all ready (so a new leader knows it was). Its
submissions and moves of rows go through ``store.transitions``.

What must stay true: reads never lock; the readiness mark touches no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import FlavorName, ResourceFlavor, WorkloadId
from queuemgr.store import codec
from queuemgr.store.models import Flavor


@dataclass(frozen=True, kw_only=True, slots=True)
class RowState:
    state: WorkloadState
    reason: str
    created_at: float
    since: float  # when it entered ``state``
    admitted_at: float | None
    # Every pod of the current admission was ready at this time (None: not yet seen).
    pods_ready_at: float | None = None

    @property
    def was_ready(self) -> bool:
        return (
            self.pods_ready_at is not None
            and self.admitted_at is not None
            and self.pods_ready_at >= self.admitted_at
        )


_BY_NAME = text("""
SELECT w.namespace, w.name, w.state::text AS state, w.reason, w.created_at, w.state_since,
       w.admitted_at, w.pods_ready_at
FROM workloads w
JOIN unnest(CAST(:ns AS text[]), CAST(:names AS text[])) AS d(ns, name)
  ON w.namespace = d.ns AND w.name = d.name
""")


def _state(r: Any) -> RowState:
    admitted, ready = r.admitted_at, r.pods_ready_at
    return RowState(
        state=WorkloadState(r.state),
        reason=r.reason,
        created_at=codec.seconds(r.created_at),
        since=codec.seconds(r.state_since),
        admitted_at=None if admitted is None else codec.seconds(admitted),
        pods_ready_at=None if ready is None else codec.seconds(ready),
    )


def _names(wids: Sequence[str]) -> dict[str, list[str]]:
    """``namespace/name`` ids as the two arrays the ``unnest`` queries join on."""
    parts = [w.partition("/") for w in wids]
    return {"ns": [p[0] for p in parts], "names": [p[2] for p in parts]}


def row_states(conn: Connection, wids: Sequence[str]) -> dict[WorkloadId, RowState]:
    """The rows of these workloads (``namespace/name``), by id; absent ones are left out."""
    if not wids:
        return {}
    rows = conn.execute(_BY_NAME, _names(wids))
    return {WorkloadId(f"{r.namespace}/{r.name}"): _state(r) for r in rows}


def unfinished(
    conn: Connection, states: Sequence[WorkloadState] | None = None
) -> dict[WorkloadId, RowState]:
    """Every workload not finished yet (or only those in ``states``), by id."""
    wanted = [s.value for s in states] if states is not None else None
    rows = conn.execute(
        text(
            "SELECT namespace, name, state::text AS state, reason, created_at, state_since,"
            " admitted_at, pods_ready_at FROM workloads WHERE state <> 'Finished'"
            + ("" if wanted is None else " AND state = ANY(CAST(:states AS workload_state[]))")
        ),
        {} if wanted is None else {"states": wanted},
    )
    return {WorkloadId(f"{r.namespace}/{r.name}"): _state(r) for r in rows}


def mark_pods_ready(conn: Connection, ready: Sequence[tuple[str, float]], *, now: float) -> int:
    """Record that these (workload, admitted at) gangs have every pod ready, as of ``now``.

    Only a row still Admitted under that same admission is marked, and only once.
    """
    if not ready:
        return 0
    result = conn.execute(
        text(
            "UPDATE workloads w SET pods_ready_at = :now"
            " FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:at AS timestamptz[]))"
            " AS d(ns, name, at)"
            # A float's microseconds may round either way: the same admission within 1 ms.
            " WHERE w.namespace = d.ns AND w.name = d.name"
            " AND w.admitted_at BETWEEN d.at - interval '1 ms' AND d.at + interval '1 ms'"
            " AND w.state = 'Admitted'"
            " AND (w.pods_ready_at IS NULL OR w.pods_ready_at < w.admitted_at)"
        ),
        {
            "now": codec.timestamp(now),
            **_names([wid for wid, _ in ready]),
            "at": [codec.timestamp(at) for _, at in ready],
        },
    )
    return int(result.rowcount)


def flavor(conn: Connection, name: str) -> ResourceFlavor | None:
    row = conn.execute(select(Flavor.__table__).where(Flavor.name == name)).mappings().first()
    if row is None:
        return None
    return ResourceFlavor(
        name=FlavorName(row["name"]),
        node_labels=dict(row["node_labels"]),
        taints=codec.taints_of(row["taints"]),
        tolerations=codec.tolerations_of(row["tolerations"]),
        autoscale=codec.autoscale_of(row["autoscale"]),
    )
