"""Workload rows: submit, load for a cycle, and persist a cycle's decisions.

Why it exists: the service's loop is "load, ``schedule``, persist, apply"; this
module is the load and the persist (moves outside a cycle are in ``transitions``).

What must stay true:

- a cycle's decisions are written in ONE transaction: every admission with
  its placements and every changed pending reason, or nothing at all;
- every state change is a conditional UPDATE on the states it may leave
  (``queuemgr.core.lifecycle``) that bumps ``version``. Postgres re-checks the
  condition after waiting for a concurrent writer's row lock, so of two
  writers admitting one workload exactly one wins; the other gets
  :class:`StateConflict` and its whole transaction rolls back;
- placements are live occupancy: written on admission, deleted on finish or
  eviction, so ``placements`` answers "what runs on this node".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import Connection, bindparam, insert, select, text
from sqlalchemy.exc import IntegrityError

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSet,
    PodSetPlacement,
    Workload,
    WorkloadId,
)
from queuemgr.core.reasons import Decisions, PendingReason
from queuemgr.store import codec
from queuemgr.store.models import PlacementRow, PodSetRow, WorkloadRow


class StateConflict(RuntimeError):
    """A workload was not in a state the write expected (e.g. already admitted)."""

    def __init__(self, action: str, workloads: Sequence[str]) -> None:
        shown = ", ".join(sorted(workloads)[:10])
        super().__init__(f"cannot {action}: not in an expected state (or missing): {shown}")
        self.workloads = list(workloads)


class WorkloadExists(RuntimeError):
    pass


@contextmanager
def atomic(conn: Connection) -> Iterator[None]:
    """This block commits whole or not at all (a savepoint inside a caller's transaction)."""
    if conn.in_transaction():
        with conn.begin_nested():
            yield
    else:
        with conn.begin():
            yield


def insert_workload(conn: Connection, w: Workload) -> int:
    """Submit ``w`` as Pending; returns its row id. Raises WorkloadExists for a duplicate."""
    try:
        with atomic(conn):
            wid = conn.execute(
                insert(WorkloadRow)
                .values(
                    namespace=w.namespace,
                    name=w.name,
                    local_queue=w.queue,
                    priority=w.priority,
                    created_at=codec.timestamp(w.created_at),
                    max_runtime=w.max_runtime,
                )
                .returning(WorkloadRow.id)
            ).scalar_one()
            conn.execute(
                insert(PodSetRow),
                [
                    {"workload_id": wid, "position": i, **codec.pod_set(ps)}
                    for i, ps in enumerate(w.pod_sets)
                ],
            )
    except IntegrityError as exc:
        raise WorkloadExists(f"workload {w.id} already exists") from exc
    return wid


@dataclass(frozen=True, kw_only=True)
class Workloads:
    """The workloads a cycle needs, and the pending reasons last written for them."""

    pending: tuple[Workload, ...]
    admitted: tuple[AdmittedWorkload, ...]
    # (state, reason, message) as stored, for writing only what a cycle changes.
    statuses: Mapping[WorkloadId, tuple[WorkloadState, str, str]] = field(default_factory=dict)


_LIVE = (WorkloadState.PENDING, WorkloadState.INADMISSIBLE, WorkloadState.ADMITTED)


def load_workloads(conn: Connection) -> Workloads:
    """Queued (Pending, Inadmissible) and Admitted workloads, with pod sets and placements."""
    # Rows come back as mappings: a Core connection yields columns, not ORM objects.
    rows = (
        conn.execute(
            select(WorkloadRow.__table__)
            .where(WorkloadRow.state.in_(_LIVE))
            .order_by(WorkloadRow.id)
        )
        .mappings()
        .all()
    )
    ids = [r["id"] for r in rows]
    pod_sets: dict[int, list[PodSet]] = {}
    for ps in conn.execute(
        select(PodSetRow.__table__)
        .where(PodSetRow.workload_id.in_(bindparam("ids", ids, expanding=True)))
        .order_by(PodSetRow.workload_id, PodSetRow.position)
    ).mappings():
        pod_sets.setdefault(ps["workload_id"], []).append(
            PodSet(
                name=ps["name"],
                count=ps["count"],
                requests=codec.resources(ps["requests"]),
                node_selector=dict(ps["node_selector"]),
                tolerations=codec.tolerations_of(ps["tolerations"]),
                topology_required=ps["topology_required"],
                topology_preferred=ps["topology_preferred"],
                min_count=ps["min_count"],
            )
        )
    admitted_ids = [r["id"] for r in rows if r["state"] is WorkloadState.ADMITTED]
    placements: dict[int, list[PodSetPlacement]] = {}
    for p in conn.execute(
        select(PlacementRow.__table__)
        .where(PlacementRow.workload_id.in_(bindparam("ids", admitted_ids, expanding=True)))
        .order_by(PlacementRow.workload_id, PlacementRow.pod_set, PlacementRow.node)
    ).mappings():
        placements.setdefault(p["workload_id"], []).append(
            PodSetPlacement(pod_set=p["pod_set"], node=NodeName(p["node"]), count=p["count"])
        )
    pending: list[Workload] = []
    admitted: list[AdmittedWorkload] = []
    statuses: dict[WorkloadId, tuple[WorkloadState, str, str]] = {}
    for r in rows:
        w = Workload(
            namespace=r["namespace"],
            name=r["name"],
            queue=r["local_queue"],
            pod_sets=tuple(pod_sets.get(r["id"], ())),
            priority=r["priority"],
            created_at=codec.seconds(r["created_at"]),
            max_runtime=r["max_runtime"],
        )
        if r["state"] is WorkloadState.ADMITTED:
            admission = Admission(
                workload=w.id,
                cluster_queue=ClusterQueueName(r["cluster_queue"]),
                flavor=FlavorName(r["flavor"]),
                placements=tuple(placements.get(r["id"], ())),
                borrowing=r["borrowing"],
            )
            at = codec.seconds(r["admitted_at"])
            admitted.append(AdmittedWorkload(workload=w, admission=admission, admitted_at=at))
        else:
            pending.append(w)
            statuses[w.id] = (r["state"], r["reason"], r["message"])
    return Workloads(pending=tuple(pending), admitted=tuple(admitted), statuses=statuses)


# One statement per kind of write, whatever the number of workloads: arrays
# unnested into a join. The state condition is what makes admission safe.
_ADMIT = text("""
UPDATE workloads AS w
SET state = 'Admitted', reason = 'Admitted', message = '', state_since = :now,
    admitted_at = :now, cluster_queue = d.cq, flavor = d.flavor, borrowing = d.borrowing,
    version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:cqs AS text[]),
            CAST(:flavors AS text[]), CAST(:borrowing AS boolean[]))
     AS d(ns, name, cq, flavor, borrowing)
WHERE w.namespace = d.ns AND w.name = d.name AND w.state IN ('Pending', 'Inadmissible')
RETURNING w.id, w.namespace, w.name
""")

_REQUEUE_STATUS = text("""
UPDATE workloads AS w
SET state = CAST(d.state AS workload_state), reason = d.reason, message = d.message,
    state_since = CASE WHEN w.state = CAST(d.state AS workload_state) THEN w.state_since
                       ELSE :now END,
    version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:states AS text[]),
            CAST(:reasons AS text[]), CAST(:messages AS text[]))
     AS d(ns, name, state, reason, message)
WHERE w.namespace = d.ns AND w.name = d.name AND w.state IN ('Pending', 'Inadmissible')
""")


@dataclass(frozen=True, kw_only=True, slots=True)
class Persisted:
    admitted: int
    statuses_written: int


def persist_decisions(
    conn: Connection,
    decisions: Decisions,
    *,
    now: float,
    previous: Mapping[WorkloadId, tuple[WorkloadState, str, str]] | None = None,
) -> Persisted:
    """Write one cycle's decisions atomically; StateConflict if any admission lost a race.

    ``previous`` (from :func:`load_workloads`) limits the status writes to the
    workloads whose state, reason or message changed; without it all are written.
    """
    at = codec.timestamp(now)
    with atomic(conn):
        admitted = _admit(conn, decisions.admitted, at)
        written = _write_statuses(conn, decisions, at, previous)
    return Persisted(admitted=admitted, statuses_written=written)


def _admit(conn: Connection, admissions: tuple[AdmittedWorkload, ...], at: object) -> int:
    if not admissions:
        return 0
    adm: list[Admission] = [a.admission for a in admissions]
    ws = [a.workload for a in admissions]
    rows = conn.execute(
        _ADMIT,
        {
            "now": at,
            "ns": [w.namespace for w in ws],
            "names": [w.name for w in ws],
            "cqs": [str(a.cluster_queue) for a in adm],
            "flavors": [str(a.flavor) for a in adm],
            "borrowing": [a.borrowing for a in adm],
        },
    ).all()
    row_ids = {f"{r.namespace}/{r.name}": r.id for r in rows}
    missing = [w.id for w in ws if w.id not in row_ids]
    if missing or len(rows) != len(ws):
        raise StateConflict("admit", missing)
    conn.execute(
        insert(PlacementRow),
        [
            {
                "workload_id": row_ids[a.workload],
                "pod_set": p.pod_set,
                "node": p.node,
                "count": p.count,
            }
            for a in adm
            for p in a.placements
        ],
    )
    return len(rows)


def _write_statuses(
    conn: Connection,
    decisions: Decisions,
    at: object,
    previous: Mapping[WorkloadId, tuple[WorkloadState, str, str]] | None,
) -> int:
    changed: list[tuple[str, str, str, str, str]] = []
    for wid, status in decisions.pending.items():
        inadmissible = status.reason is PendingReason.INADMISSIBLE
        state = WorkloadState.INADMISSIBLE if inadmissible else WorkloadState.PENDING
        new = (state, status.reason.value, status.message)
        if previous is not None and previous.get(wid) == new:
            continue
        ns, _, name = wid.partition("/")
        changed.append((ns, name, state.value, status.reason.value, status.message))
    if changed:
        cols = list(zip(*changed, strict=True))
        conn.execute(
            _REQUEUE_STATUS,
            {
                "now": at,
                "ns": list(cols[0]),
                "names": list(cols[1]),
                "states": list(cols[2]),
                "reasons": list(cols[3]),
                "messages": list(cols[4]),
            },
        )
    return len(changed)
